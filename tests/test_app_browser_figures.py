"""A Run's figures in a real browser (Playwright + Debian's Chromium): a page's Run ends without drawing
its three figures (app/panels/round_view/views.py draw_figures); the page asks for them once one of them is on the screen
(app/panels/round_view/__init__.py PAGE_ASKS_JS): at once when the window shows them, when the visitor scrolls to them otherwise.
Skips when /usr/bin/chromium is absent. Every wait has a timeout; none is a speed assertion."""

import pytest
from servers import needs_chromium

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.timeout(900)]          # a hang guard

WAIT_MS = 180_000           # hang guards only
PROMPT = "Tom has 23 apples. He gives 7 to Ann. Then he buys 12 more and eats 3. How many apples does Tom have now?"
FIGURES = ("#heatmap", "#rank-lanes", "#tokens-chart")
# Counts the page's requests that draw the figures (the hidden button's event).
COUNT_DRAWS = """() => { window.__draws = 0;
  document.querySelector('#draw-figures').addEventListener('click', () => { window.__draws += 1; }, true); }"""
IN_VIEW = """(id) => { const r = document.querySelector(id).getBoundingClientRect();
  return r.bottom > 0 && r.top < innerHeight; }"""
CHART_ROUNDS = ("Math.max(0, ...document.querySelector('#tokens-chart .js-plotly-plot').data"
                ".map((trace) => (trace.x || []).length))")
MARK = "document.querySelector('#counters .lopa-counters')?.dataset.figures"



def open_page(browser, url: str, height: int):
    page = browser.new_page(viewport={"width": 1366, "height": height})
    page.set_default_timeout(WAIT_MS)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#tokens-chart .js-plotly-plot")            # the page has loaded
    page.evaluate(COUNT_DRAWS)
    return page


def run(page) -> None:
    page.locator("#prompt textarea").fill(PROMPT)
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")


def chart_rounds(page) -> int:
    """The rounds the tokens-per-round chart shows (its longest trace): none before a run."""
    return page.evaluate(CHART_ROUNDS)


def test_figures_below_the_screen_wait_for_the_visitor_to_scroll_to_them(browser, url):
    page = open_page(browser, url, height=768)
    run(page)
    page.wait_for_timeout(1_500)                       # time enough for a draw, were one asked
    assert not any(page.evaluate(IN_VIEW, f) for f in FIGURES), "the figures are on the laptop's first screen"
    assert page.evaluate(MARK) == "stale"
    assert page.evaluate("window.__draws") == 0
    rounds = page.evaluate("Number(document.querySelector('#counters .lopa-counters').dataset.rounds)")
    # an empty chart, or a round the Run streamed through (a Run of over a second refreshes its figures live)
    assert chart_rounds(page) < rounds
    page.locator("#tokens-chart").scroll_into_view_if_needed()
    page.wait_for_function(f"{MARK} === 'drawn'")
    page.wait_for_function(f"{CHART_ROUNDS} >= {rounds}")
    page.wait_for_selector("#heatmap .gtitle")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)
    page.locator("#heatmap").scroll_into_view_if_needed()   # drawn already: scrolling again asks for nothing
    page.wait_for_timeout(1_000)
    assert page.evaluate("window.__draws") == 1
    assert not page.errors
    page.close()


def test_figures_on_the_screen_are_drawn_at_the_end_of_the_run(browser, url):
    page = open_page(browser, url, height=6_000)        # a window that shows the whole round view
    run(page)
    assert all(page.evaluate(IN_VIEW, f) for f in FIGURES)
    page.wait_for_function(f"{MARK} === 'drawn'")
    assert page.evaluate("window.__draws") == 1
    rounds = page.evaluate("Number(document.querySelector('#counters .lopa-counters').dataset.rounds)")
    assert chart_rounds(page) >= rounds
    assert not page.errors
    page.close()
