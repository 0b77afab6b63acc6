"""Issue 58's words on the page itself, at 390x844 and 1366x768 (Playwright + Debian's Chromium), one page per
width: the guided tour walked step by step, each box it shows (output so far, counters, slider, canvas) holding
the tour's round; the settings labelled in plain words with the code name beside, their help in sentences and
their choices in words; the examples a newcomer picks first answered by the bundled model, the GSM8K ones folded
away for a real checkpoint. The callbacks behind these: tests/test_tour.py and tests/test_teach_words.py."""

import pytest
from servers import WIDTHS, needs_chromium, open_accordion, open_page

from app.panels.tour import callbacks as tour
from app.panels.tour.steps import tour_steps
from visualizations import canvas_text

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.timeout(600)]

WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test


@pytest.fixture(scope="module", params=list(WIDTHS))
def page(request, browser, url):
    """One page of each width, shared by this module's tests (they only read it, the tour aside, which ends closed)."""
    yield from open_page(browser, url, WIDTHS[request.param], WAIT_MS)


def test_every_box_of_the_tour_holds_its_round(page):
    data = tour.shipped()
    if isinstance(data, str):
        pytest.skip("no shipped traces: python -m app.panels.tour --record")
    steps = tour_steps(data.d2f, data.lopa, data.names)
    page.click("#tour-start")
    for i, step in enumerate(steps):
        page.wait_for_selector(f"#tour-card .lopa-tour-card[data-step='{i}']")
        if step.run is not None:
            run, r = data.runs[step.run], step.round
            page.wait_for_selector(f"#canvas .lopa-canvas[data-round='{r}']")
            page.wait_for_selector(f"#branches .lopa-branches[data-round='{r}']")
            expected = canvas_text(run, r, data.names)
            page.wait_for_function("want => document.querySelector('#answer textarea')?.value === want", arg=expected)
            if r < len(run.records) - 1:
                assert "▢" in expected or len(expected) < len(run.text)           # not the finished answer
                counters = page.locator("#counters .lopa-counters")
                assert counters.get_attribute("data-rounds") == str(r + 1)
                assert f"at round {r} of {len(run.records) - 1}" in counters.inner_text()
            assert page.locator("#round-slider input[type=number]").input_value() == str(r)
        if i < len(steps) - 1:
            page.click("#tour-next")
    page.click("#tour-end")
    page.wait_for_selector("#tour-dock", state="hidden")


def test_the_settings_speak_in_words_with_the_code_name_beside(page):
    from lopa.settings import SETTINGS
    open_accordion(page, "#settings", "#tau-conf")
    for name in ("tau_conf", "commit", "stable_js", "lookahead_depth"):
        box = page.locator(f"#{name.replace('_', '-')}")
        text = " ".join(box.inner_text().split())
        assert SETTINGS[name].title in text, (name, text)                          # "commit threshold (tau_conf)"
        assert "('" not in text and "0.6931471805599453" not in text, (name, text)
    assert SETTINGS["stable_js"].allowed() in page.locator("#stable-js").inner_text()
    # a choice shows in words, its code name beside (the menu's other choices: tests/test_app_settings.py)
    assert page.locator("#commit input").first.input_value() == SETTINGS["commit"].choice_title("threshold")


def test_the_first_examples_are_ones_the_bundled_model_answers(page):
    from app.serving.examples import checkpoint_examples, example_groups
    (_, prompts), = example_groups()
    folded = page.locator("#checkpoint-examples")
    assert folded.count() == 1 and not page.get_by_text(checkpoint_examples()[1][0][:30]).first.is_visible()
    assert page.get_by_text(prompts[0][:30]).first.is_visible() or page.get_by_text(prompts[0][:30]).count()
