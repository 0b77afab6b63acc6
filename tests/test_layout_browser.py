"""The page read by a newcomer, at a laptop's 1366x768 and a phone's 390x844 (Playwright + Debian's
Chromium): Run with the prompt and the examples within a screen of the arrival comparison, the decode
settings closed with a title that counts what differs, every Stop disabled while nothing runs, the
glossary and the counters' gloss in visible text, study plots without a literal <br> or None, Escape
closing the tour, and Next-then-Close at once leaving it closed. No timing assertions.
"""


import pytest
from servers import WIDTHS, needs_chromium, open_accordion, open_page, type_value

pytestmark = [needs_chromium,
              pytest.mark.browser, pytest.mark.timeout(900)]

WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test
STOPS = ("#stop", "#compare-stop", "#best-order-stop", "#study-stop")



@pytest.fixture(params=list(WIDTHS))
def page(request, browser, url):
    yield from open_page(browser, url, WIDTHS[request.param], WAIT_MS)


def box(page, selector: str) -> dict:
    """The element's box in page coordinates (scroll included)."""
    return page.evaluate("s => { const b = document.querySelector(s).getBoundingClientRect(); "
                         "return {top: b.top + scrollY, bottom: b.bottom + scrollY, left: b.left, right: b.right}; }",
                         selector)


def test_run_sits_with_the_prompt_and_examples_within_a_screen_of_the_comparison(page):
    screen = page.viewport_size["height"]
    arrival, prompt, run = box(page, "#arrival"), box(page, "#prompt"), box(page, "#run")
    example = box(page, "#inputs-column button.example, #inputs-column .gallery-item, #inputs-column table button")
    assert run["bottom"] - arrival["bottom"] <= screen, (arrival, run)       # one screen below the comparison
    assert prompt["bottom"] <= run["top"] and run["bottom"] <= example["top"] <= run["bottom"] + screen
    assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")
    # both runs of the comparison are on the page's first screen and a half, the LoPA one included
    assert box(page, "#arrival .lopa-story-side[data-run='lopa']")["top"] < 1.5 * screen


def test_the_tour_and_run_are_on_the_first_screen_and_run_brings_its_rounds_into_view(page):
    screen = page.viewport_size["height"]
    for button in ("#tour-start", "#arrival-run"):
        assert box(page, button)["bottom"] <= screen, (button, box(page, button))
    page.click("#arrival-run")                                        # presses the prompt's Run
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    top = page.evaluate("scrollY")
    counters, cells = box(page, "#counters"), box(page, "#canvas .lopa-block-cells")
    assert top <= counters["top"] and cells["top"] < top + screen, (top, counters, cells)
    assert page.locator("#status").inner_text().startswith("Done")


def test_a_first_run_faster_than_the_page_draws_shows_its_rounds_arriving(page, monkeypatch):
    from app.panels.round_view import views
    monkeypatch.setattr(views, "REPLAY_UNDER_S", 1e9)          # whatever this machine's speed: the Run counts as fast
    page.evaluate("""() => { const seen = window.__seen = [];
        new MutationObserver(() => { const c = document.querySelector('#canvas .lopa-canvas');
            if (c && seen[seen.length - 1] !== c.dataset.round) seen.push(c.dataset.round); })
        .observe(document.querySelector('#canvas'), {subtree: true, childList: true}); }""")
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    n = int(page.locator("#counters .lopa-counters").get_attribute("data-rounds"))
    page.wait_for_function(f"window.__seen.slice(-{n}).join() === [...Array({n}).keys()].join()")
    assert page.locator("#round-slider input[type=range]").input_value() == str(n - 1)
    # Once a session: a second Run sends its own request and nothing else (the page asks for a replay only
    # when the counters say one is due: app.panels.round_view.PAGE_ASKS_JS).
    sent = []
    page.on("request", lambda r: sent.append(r.post_data_json.get("fn_index")) if "/queue/join" in r.url else None)
    page.click("#run")
    page.wait_for_function("document.querySelector('#counters .lopa-counters[data-status=\"done\"]') && "
                           "!document.querySelector('#counters .lopa-counters').dataset.replay")
    page.wait_for_timeout(1000)
    assert len(sent) == 1, sent


def test_settings_are_closed_and_name_those_the_visitor_set(page):
    title = page.locator("#settings").inner_text().split("\n")[0]
    assert title.startswith("Decoding settings:") and ("all at the defaults" in title or "set by you" in title)
    assert not page.locator("#k").is_visible()                              # closed: k is inside
    open_accordion(page, "#settings", "#k")
    type_value(page, "#k", "2")
    page.wait_for_function("document.querySelector('#settings')?.innerText.includes('set by you (k)')")
    assert "k" in page.locator("#settings").inner_text().split("\n")[0]


def test_stop_buttons_are_disabled_while_nothing_runs(page):
    for stop in STOPS:
        assert page.locator(stop).is_disabled(), stop
    page.click("#step")                                                      # a paused decode: Stop can end it
    page.wait_for_selector("#counters .lopa-counters[data-rounds='1']")
    page.wait_for_function("!document.querySelector('#stop')?.disabled")
    page.click("#stop")
    page.wait_for_selector("#counters .lopa-counters[data-status='stopped']")
    page.wait_for_function("document.querySelector('#stop')?.disabled")


def test_every_term_is_spelled_out_in_visible_text(page):
    glossary = page.locator("#glossary")
    glossary.scroll_into_view_if_needed()
    text = glossary.inner_text()
    for term, words in (("TPF", "tokens per forward"), ("D2F", "Discrete Diffusion Forcing"),
                        ("TFO", "token filling order"), ("EOS", "end-of-sequence"), ("τ_conf", "threshold"),
                        ("Conf", "confidence"), ("AFP", "average finalization parallelism"),
                        ("verified/forward", "positions the model checks")):
        assert term in text and words in text, term
    intro = page.locator("#all-controls").evaluate("e => document.body.innerText.slice(0, 2000)")
    assert "Discrete Diffusion Forcing" in intro                              # where D2F first appears
    assert "TFO map (token filling order)" in page.locator("#compare-view").inner_text()  # above the maps
    # the counters carry their own gloss (the tour's first step fills them)
    page.click("#tour-start")
    page.wait_for_selector("#counters .lopa-counters-gloss")
    gloss = page.locator("#counters .lopa-counters-gloss").inner_text()
    assert "tokens per forward" in gloss and "end-of-sequence" in gloss
    assert page.locator("#counters .lopa-counters-gloss a[href='#term-tpf']").count() == 1


def test_study_plots_show_no_literal_br_or_none(page):
    from app.panels.studies.callbacks import titles
    page.locator("#studies-view").scroll_into_view_if_needed()
    assert "--hardware-note" not in page.locator("#study-status").inner_text()
    for title in titles().values():
        page.locator("#study input").click()
        page.get_by_role("option", name=title).click()
        page.wait_for_function("t => document.querySelector('#study')?.innerText.includes(t) || "
                               "document.querySelector('#study input').value === t", arg=title)
        page.click("#study-interactive")
        page.wait_for_function("t => document.querySelector('#study-plot .gtitle')?.textContent.length > 0 && "
                               "document.querySelector('#study input').value === t", arg=title)
        page.wait_for_function("document.querySelector('#study-status')?.innerText.includes('Shipped results') "
                               "|| document.querySelector('#study-status').innerText.includes('No shipped')")
        # plotly.js may be between two drawings of the plot (no text at all): wait for the drawn one
        words = page.wait_for_function("() => { const w = [...document.querySelectorAll('#study-plot svg text')]"
                                       ".map(t => t.textContent); return w.length ? w : null; }").json_value()
        assert words and not [w for w in words if "<br>" in w or "None" in w], title
        assert "--hardware-note" not in page.locator("#study-status").inner_text()


def test_escape_closes_the_tour(page):
    page.click("#tour-start")
    page.wait_for_selector("#tour-card .lopa-tour-card[data-step='0']")
    page.keyboard.press("Escape")
    page.wait_for_selector("#tour-dock", state="hidden")
    page.wait_for_function("!document.querySelector('#tour-card .lopa-tour-card')")     # the server closed it too
    page.wait_for_function("document.querySelectorAll('.lopa-tour-focus').length === 0")
    # the tour's recorded runs left the visitor's run list
    assert page.locator("#run-list label").filter(has_text="recorded for the tour").count() == 0


def test_next_then_close_at_once_leaves_the_tour_closed(page):
    page.click("#tour-start")
    page.wait_for_selector("#tour-card .lopa-tour-card[data-step='0']")
    page.evaluate("() => { document.querySelector('#tour-next').click(); document.querySelector('#tour-end').click(); }")
    # Close queues behind the Next on the server: once the card is empty, both have answered.
    page.wait_for_function("!document.querySelector('#tour-card .lopa-tour-card')")
    assert not page.locator("#tour-dock").first.is_visible()
    assert page.evaluate("document.querySelectorAll('.lopa-tour-focus').length") == 0
    page.click("#tour-start")                                                # and it opens again, on step 1
    page.wait_for_selector("#tour-card .lopa-tour-card[data-step='0']")
    assert page.locator("#tour-dock").first.is_visible()


def test_the_tour_step_with_the_branches_table_fits_the_width(page):
    page.click("#tour-start")
    page.wait_for_selector("#tour-card .lopa-tour-card[data-step='0']")
    for step in (1, 2):
        page.click("#tour-next")
        page.wait_for_selector(f"#tour-card .lopa-tour-card[data-step='{step}']")
    page.wait_for_function("document.querySelector('#branches')?.classList.contains('lopa-tour-focus')")
    assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")
    branches = box(page, "#branches")
    assert branches["right"] <= page.viewport_size["width"]                  # the outline encloses the table
