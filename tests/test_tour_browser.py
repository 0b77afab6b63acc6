"""The arrival view and the guided tour in a real browser (Playwright + Debian's Chromium).

A cold page shows the recorded D2F and LoPA runs side by side (how fast: scripts/bench_app_latency.py), without horizontal scrolling
on a laptop (1366x768) or a phone-width window (390 px); the tour goes from arrival to its last step,
each step pointing at its panel (outlined, on screen) with the page in the state its words describe.
Screenshots of arrival and of every step at 1366x768 go to test-artifacts/ (and, with
LOPA_UPDATE_SCREENSHOTS=1, to assets/screenshots/).
"""

import os
import re
import shutil
from html import unescape
from pathlib import Path

import pytest
from servers import WIDTHS, launch_chromium, needs_chromium, serve_app

pytestmark = [needs_chromium,
              pytest.mark.browser, pytest.mark.timeout(900)]          # a hang guard

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ROOT / "assets" / "screenshots"
LAPTOP, PHONE = WIDTHS["laptop"], WIDTHS["phone"]
WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test


@pytest.fixture(scope="module")
def recorded():
    from app.panels.tour.callbacks import shipped
    data = shipped()
    if isinstance(data, str):
        pytest.fail(f"the app ships no tour traces: {data}")
    return data


@pytest.fixture(scope="module")
def url(tmp_path_factory, recorded):
    yield from serve_app(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p, WAIT_MS)
        yield browser
        browser.close()


def new_page(browser, viewport):
    page = browser.new_page(viewport=viewport)          # a fresh context: nothing cached
    page.set_default_timeout(WAIT_MS)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    return page


def shot(page, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), style=".toast-wrap { display: none !important; }")
    if os.environ.get("LOPA_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / f"{name}.png")
    return path


def plain(text: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", "", text)).split())


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")


def test_a_cold_page_shows_the_comparison(browser, url, recorded):
    from visualizations import story_sentence
    page = new_page(browser, LAPTOP)
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#arrival .lopa-story-side[data-run='lopa'] .lopa-tok")
    story = page.locator("#arrival .lopa-story")
    forwards = {run: sum(r.kind != "final" for r in recorded.runs[run].records) for run in ("d2f", "lopa")}
    assert story.get_attribute("data-d2f-forwards") == str(forwards["d2f"])
    assert story.get_attribute("data-lopa-forwards") == str(forwards["lopa"])
    assert page.locator("#arrival .lopa-story-sentence").inner_text().strip() == story_sentence(recorded.d2f,
                                                                                                recorded.lopa)
    for run in ("d2f", "lopa"):                       # every answer token drawn, with the round that filled it
        assert page.locator(f"#arrival .lopa-story-side[data-run='{run}'] .lopa-tok[data-round]").count() == \
            len(recorded.runs[run].useful_tokens)
    page.wait_for_selector("#tour-start")
    assert page.locator("#arrival").is_visible() and page.locator("#tour-start").is_visible()
    assert page.evaluate("document.querySelector('#tour-start').getBoundingClientRect().bottom <= innerHeight")
    page.wait_for_selector("#tokens-chart .js-plotly-plot")           # the rest of the page has loaded too
    page.wait_for_timeout(500)
    assert no_horizontal_scroll(page)
    shot(page, "arrival")
    assert not page.errors
    page.close()


def test_no_horizontal_scrolling_at_phone_width(browser, url):
    page = new_page(browser, PHONE)
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#arrival .lopa-story-side[data-run='lopa'] .lopa-tok")
    page.wait_for_selector("#tokens-chart .js-plotly-plot")
    page.wait_for_timeout(500)
    assert no_horizontal_scroll(page), page.evaluate("[document.scrollingElement.scrollWidth, innerWidth]")
    shot(page, "arrival_phone")
    assert not page.errors
    page.close()


def check_state(page, step, recorded) -> None:
    """The page is in the state the step's words describe."""
    f = step.facts
    if step.run is not None:
        page.wait_for_selector(f"#canvas .lopa-canvas[data-round='{step.round}']")
        page.wait_for_selector(f"#branches .lopa-branches[data-round='{step.round}']")
    if step.key == "fill":
        anchors = page.locator("#canvas .lopa-cell[data-state='anchor']")
        assert sorted(int(anchors.nth(i).get_attribute("data-position")) for i in range(anchors.count())) == f["committed"]
        assert page.locator("#canvas .lopa-cell[data-state='masked']").count() == f["masked_after"]
    elif step.key == "anchor":
        anchors = page.locator("#canvas .lopa-cell[data-state='anchor']")
        assert sorted(int(anchors.nth(i).get_attribute("data-position")) for i in range(anchors.count())) == \
            sorted(f["anchor"])
    elif step.key == "branches":
        assert page.locator("#branches tr.lopa-branch").count() == f["branches"]
    elif step.key == "winner":
        assert page.locator("#branches tr.lopa-winner").get_attribute("data-branch") == str(f["winner"])
        page.wait_for_selector("#heatmap .js-plotly-plot")
    elif step.key == "order":
        page.wait_for_function("document.querySelector('#compare-status')?.innerText.includes('Tour')")
        page.wait_for_selector("#base-tfo .js-plotly-plot")
        page.wait_for_selector("#lopa-tfo .js-plotly-plot")
        assert page.locator("#base-counters .lopa-counters").get_attribute("data-rounds") == \
            str(len(recorded.d2f.records))
    elif step.key == "try" and "position" in f:
        cell = page.locator(f"#canvas .lopa-cell[data-position='{f['position']}']")
        assert cell.get_attribute("data-state") == "masked"
        cell.click()                                  # the what-if panel opens on it (forks need the model)
        page.wait_for_selector("#whatif-panel", state="visible")
        page.wait_for_function(f"document.querySelector('#whatif-info')?.innerText.includes('position {f['position']}')")


def test_the_tour_from_arrival_to_its_last_step(browser, url, recorded):
    from app.panels.tour.steps import tour_steps
    steps = tour_steps(recorded.d2f, recorded.lopa, recorded.names)
    page = new_page(browser, LAPTOP)
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#tokens-chart .js-plotly-plot")
    page.click("#tour-start")
    for i, step in enumerate(steps):
        page.wait_for_selector(f"#tour-card .lopa-tour-card[data-step='{i}']")
        card = " ".join(page.locator("#tour-card .lopa-tour-card").inner_text().split())
        assert f"Step {i + 1} of {len(steps)}" in card and plain(step.text) in card          # the claim, as computed
        check_state(page, step, recorded)
        # the panel that matters is outlined and on screen (above the docked card)
        page.wait_for_function("sel => [...document.querySelectorAll(sel)].every(e => e.classList.contains('lopa-tour-focus'))",
                               arg=step.target)
        page.wait_for_timeout(900)                    # let plotly finish drawing before the picture
        top = page.evaluate("sel => document.querySelector(sel).getBoundingClientRect().top", step.target)
        dock = page.evaluate("document.querySelector('#tour-dock').getBoundingClientRect().top")
        assert 0 <= top < dock - 100, (step.key, top, dock)      # at least 100 px of the panel in view
        assert no_horizontal_scroll(page)
        shot(page, f"tour_{i + 1}_{step.key}")
        if i < len(steps) - 1:
            page.click("#tour-next")
    assert page.locator("#tour-next").is_disabled()
    page.click("#tour-prev")
    page.wait_for_selector(f"#tour-card .lopa-tour-card[data-step='{len(steps) - 2}']")
    page.click("#tour-end")
    page.wait_for_selector("#tour-dock", state="hidden")
    page.wait_for_function("document.querySelectorAll('.lopa-tour-focus').length === 0")
    assert not page.errors
    page.close()
