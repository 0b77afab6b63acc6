"""The page read on a phone (390x844) and a laptop (1366x768), after a Run and a Compare (Playwright + Debian's
Chromium): every text at WCAG AA contrast, every plot at least 240 px tall with its title whole and no toolbar
over it, numbers in tables on one line (the table scrolls sideways instead), and the tour's step on the filling
order showing both maps above its dock. No timing assertions.
"""

import re

import pytest
from readability import CONTRAST_JS, PLOTS_JS
from servers import WIDTHS, needs_chromium, open_accordion, open_page

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.timeout(900)]

WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test
MIN_PLOT_PX = 240
AA, AA_LARGE = 4.5, 3.0    # WCAG 2 contrast, 1.4.3: normal text, and text >= 24 px or bold >= 18.66 px
# The cases a newcomer named, each measured on its own so that a test cannot pass by not finding them.
NAMED = {"round numbers on the arrival view": "#arrival .lopa-tok sub",
         "help text of the settings": "#settings .info-text",
         "cell numbers of the TFO maps": "#lopa-tfo .textpoint, #base-tfo .textpoint"}



# Each width with a system that prefers light; the laptop's with one that prefers dark too (app/serving/scheme.py: the
# page keeps its light colours, drawn for them).
SCREENS = [*((width, "light") for width in WIDTHS), ("laptop", "dark")]


@pytest.fixture(params=SCREENS, ids="-".join)
def page(request, browser, url):
    width, scheme = request.param
    yield from open_page(browser, url, WIDTHS[width], WAIT_MS, scheme)


@pytest.fixture(scope="module", params=SCREENS, ids="-".join)
def drawn(request, browser, url):
    """A page of each screen with everything drawn (run_and_compare), once: the tests that read it (contrast,
    plots, tables) only look at it (a hover at most), so they share it instead of drawing it three times."""
    width, scheme = request.param
    for page in open_page(browser, url, WIDTHS[width], WAIT_MS, scheme):
        run_and_compare(page)
        yield page


def run_and_compare(page) -> None:
    """The page with everything drawn: a Run (its heatmap at the last round with branches), a Compare (both TFO maps,
    the summary table), the settings open and the study's interactive plot."""
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    # the final round's heatmap stands for the last round that had branches (visualizations.timeline.detail_round);
    # a Run's figures are drawn once the page shows them (app.panels.round_view.views.draw_figures)
    page.locator("#heatmap").scroll_into_view_if_needed()
    page.wait_for_selector("#counters .lopa-counters[data-figures='drawn']")
    page.wait_for_selector("#heatmap .gtitle")
    page.click("#compare")
    page.wait_for_selector("#lopa-counters .lopa-counters[data-status='done']")
    page.wait_for_selector("#compare-summary table")
    for side in ("#base-tfo", "#lopa-tfo"):
        page.wait_for_selector(f"{side} .gtitle")
        page.wait_for_selector(f"{side} .textpoint")                # the cells' round numbers
    open_accordion(page, "#settings", "#k")
    page.click("#study-interactive")
    page.wait_for_function("document.querySelector('#study-plot .gtitle')?.textContent.length > 0")


def test_every_text_meets_wcag_aa(drawn):
    page = drawn
    assert not page.evaluate("document.body.classList.contains('dark')"), "the page took Gradio's dark theme"
    page.mouse.move(0, 0)                         # no hover state
    result = page.evaluate(CONTRAST_JS, NAMED)
    assert result["checked"] > 200, result["checked"]
    offenders = "\n".join(f"{b['where']} {b['text']!r}: {b.get('ratio')} < {b.get('need')} ({b.get('fg')} on {b.get('bg')}, "
                          f"{b.get('size')} px)" for b in result["bad"][:40])
    assert not result["bad"], f"{len(result['bad'])} texts below WCAG AA:\n{offenders}"
    for label, ratio in result["found"].items():
        assert ratio is not None, f"no {label} on the page to measure"
        assert ratio >= AA, (label, ratio)


def test_every_plot_is_tall_with_its_title_whole_and_no_toolbar_over_it(drawn):
    page = drawn
    plots = page.evaluate(PLOTS_JS)
    ids = {p["id"] for p in plots}
    assert {"heatmap", "rank-lanes", "tokens-chart", "base-tfo", "lopa-tfo", "study-plot"} <= ids, ids
    for p in plots:
        page.hover(f"#{p['id']} .js-plotly-plot")  # plotly shows its toolbar on hover
        p = next(q for q in page.evaluate(PLOTS_JS) if q["id"] == p["id"])
        assert p["plot"]["height"] >= MIN_PLOT_PX, p
        assert p["plot"]["right"] <= page.viewport_size["width"] or (p["scroller"] and                    # or it
               p["scroller"]["right"] <= page.viewport_size["width"]), p                        # scrolls in a marked box
        title, svg = p["title"], p["svg"]
        assert title is not None, p
        assert (svg["left"] - 1 <= title["left"] and title["right"] <= svg["right"] + 1
                and svg["top"] - 1 <= title["top"]), p          # the title whole, not cut by the figure's edge
        bar = p["modebar"]
        assert bar is None or (bar["bottom"] <= title["top"] or bar["top"] >= title["bottom"]
                               or bar["right"] <= title["left"] or bar["left"] >= title["right"]), p
    assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")


NUMBER = re.compile(r"^[-+−]?\d[\d.,]*\s?(×|%|s|ms)?$")


def test_numbers_in_tables_stay_on_one_line(drawn):
    page = drawn
    cells = page.evaluate("""() => [...document.querySelectorAll('td, th')].filter((c) => c.offsetParent !== null)
      .map((c) => { const lines = new Set();              // the distinct line tops of the cell's text (not of a bar in it)
        const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
          const r = document.createRange(); r.selectNodeContents(n);
          [...r.getClientRects()].filter((b) => b.width > 0).forEach((b) => lines.add(Math.round(b.top)));
        }
        const table = c.closest('table').getBoundingClientRect();
        return {text: c.innerText.trim(), lines: lines.size, where: c.closest('[id]')?.id, right: table.right}; })""")
    numbers = [c for c in cells if NUMBER.match(c["text"])]
    assert any(c["where"] == "compare-summary" for c in numbers), cells[:5]
    assert not [c for c in numbers if c["lines"] > 1], [c for c in numbers if c["lines"] > 1]
    # the tables scroll inside their panel: nothing makes the page itself scroll sideways
    assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")


def test_the_tours_filling_order_step_shows_both_maps_above_its_dock(page):
    page.click("#tour-start")
    page.wait_for_selector("#tour-card .lopa-tour-card[data-step='0']")
    for step in (1, 2, 3, 4):
        page.click("#tour-next")
        page.wait_for_selector(f"#tour-card .lopa-tour-card[data-step='{step}']")
    page.wait_for_function("document.querySelector('#lopa-tfo')?.classList.contains('lopa-tour-focus')")
    for side in ("#base-tfo", "#lopa-tfo"):
        page.wait_for_selector(f"{side} .gtitle")
    page.wait_for_function("Math.abs(document.querySelector('#base-tfo')?.getBoundingClientRect().top - 15) < 20")
    dock = page.locator("#tour-dock").first.bounding_box()
    for side in ("#base-tfo", "#lopa-tfo"):
        plot = page.locator(f"{side} .js-plotly-plot").bounding_box()
        title = page.locator(f"{side} .gtitle").bounding_box()
        assert 0 <= title["y"] and title["y"] + title["height"] <= dock["y"], (side, title, dock)
        shown = min(plot["y"] + plot["height"], dock["y"]) - max(plot["y"], 0)
        assert shown >= 0.75 * plot["height"], (side, plot, dock)      # most of each map, its title whole
