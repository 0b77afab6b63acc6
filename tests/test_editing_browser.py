"""Token editing in a real browser (Playwright + Debian's Chromium): a newcomer picks the editing model
(edit-gsm-dllm) in the model box and runs the first example; the canvas shows the edited cell (tagged E, its hover
naming the old and the new token and the round of the edit), the round's explanation names the edit and its
probability, and the strip under the round slider marks the round. The edit expected is the one the engine makes
in-process on the same prompt with the settings the page resolves for that model."""

import re
from pathlib import Path

import pytest
from servers import needs_chromium, open_browser, serve_app

pytestmark = [needs_chromium,
              pytest.mark.browser, pytest.mark.timeout(900)]          # a hang guard
WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test
EDIT_MODEL = "edit-gsm-dllm"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def expected():
    """(first example, the edit round's record) of the page's decode: the model's own settings as the page
    resolves them (app.serving.request.shown_settings), LoPA at the page's k."""
    import torch

    from app.serving.models import bundled_models, example_prompts
    from app.serving.request import shown_settings
    from lopa.models import load
    folder = next((f for _, f in bundled_models() if Path(f).name == EDIT_MODEL), None)
    if folder is None:
        pytest.skip(f"{EDIT_MODEL} is not bundled")
    torch.set_num_threads(1)
    loaded = load(folder, device="cpu")
    first = example_prompts()[0]
    run = loaded.decoder(shown_settings(loaded.spec)).run(first)
    edited = [rec for rec in run.records if rec.edit_positions]
    assert edited, "the first example makes no edit on the editing model (tests/test_edit_model.py)"
    return first, edited[0]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    yield from serve_app(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    yield from open_browser(WAIT_MS)


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.set_default_timeout(WAIT_MS)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#run")
    page.wait_for_function("document.querySelector('#model-info')?.innerText.includes('loaded from')")
    return page


def walk_to(page, r: int) -> None:
    """The round slider moved to round r (arrow keys, as a visitor's), until the canvas rests there: a replay of the
    rounds of a fast first Run may still be moving it."""
    slider = page.locator("#round-slider input[type=range]")
    for _ in range(60):
        value = int(slider.input_value())
        if value == r and page.locator("#canvas .lopa-canvas").get_attribute("data-round") == str(r):
            break
        if value != r:
            slider.focus()
            page.keyboard.press("ArrowLeft" if value > r else "ArrowRight")
        page.wait_for_timeout(300)
    page.wait_for_selector(f"#canvas .lopa-canvas[data-round='{r}']")


def test_the_editing_model_s_first_example_shows_its_edit_on_the_canvas_and_in_words(browser, url, expected):
    from app.serving.models import bundled_models
    first, rec = expected
    r, p, old, new, q = rec.round, rec.edit_positions[0], rec.edit_old[0], rec.edit_tokens[0], rec.edit_prob[0]
    page = open_page(browser, url)
    try:
        label = next(label for label, folder in bundled_models() if Path(folder).name == EDIT_MODEL)
        page.locator("#model-dir input").click()
        page.get_by_role("option", name=label.split(": ", 1)[0], exact=True).click()    # applied when picked
        page.wait_for_function(f"document.querySelector('#model-info')?.innerText.includes('{EDIT_MODEL}')")
        # the first example's button (not the arrival view above it, which names the same question)
        page.locator("#prompt textarea").fill("")
        page.locator("#all-controls").get_by_text(first[:24], exact=False).first.click()
        page.wait_for_function("e => document.querySelector('#prompt textarea')?.value === e", arg=first)
        page.click("#run")
        page.wait_for_selector("#counters .lopa-counters[data-status='done']")
        assert page.locator("#counters [data-counter='model']").get_attribute("data-value") == EDIT_MODEL

        # The canvas at the edit's round: a fast first Run is shown again round by round (the page asks for it).
        walk_to(page, r)
        cell = page.locator(f"#canvas .lopa-canvas[data-round='{r}'] .lopa-cell[data-position='{p}']")
        assert cell.get_attribute("data-state") == "edited" and cell.locator(".lopa-tag").inner_text() == "E"
        hover = cell.get_attribute("title")
        assert re.search(rf"edited by this round: .*\(id {old}\) → .*\(id {new}\) \(max prob {q:.3f}\)", hover), hover
        assert f"Round {r}" in page.locator("#canvas .lopa-canvas").inner_text()       # the round of the edit

        # the round's explanation names the edit and its probability (Markdown: drawn for the round shown)
        page.wait_for_function(f"document.querySelector('#explanation')?.innerText.includes('Round {r}')")
        words = " ".join(page.locator("#explanation").inner_text().split())
        assert f"Edits: the model now reads {len(rec.edit_positions)} committed token(s) otherwise" in words, words
        assert "editing threshold 0.7" in words and re.search(rf"position {p}: \S.* → \S.* \({q:.2f}\)", words), words
        # and the strip under the slider marks the round of the edit
        assert page.locator(f"#round-marks .lopa-round-edit[data-round='{r}']").count() == 1
        assert f"edits in round {r}" in page.locator("#round-marks").inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#round-view").screenshot(path=str(ARTIFACTS / "editing_round_view.png"))
        page.locator("#round-row").screenshot(path=str(ARTIFACTS / "editing_round_row.png"))
        assert not page.errors, page.errors
    finally:
        page.close()


def test_a_trace_with_post_edit_rounds_shows_them_under_the_slider(browser, url, tmp_path):
    """A run decoded with post-edit rounds (test_editing's scripted model, edit_post_steps = 2), opened as a trace:
    the strip under the slider bands them and says so, and the round's explanation says it is a post-edit round."""
    import torch
    from servers import open_accordion
    from test_editing import FLIP, decode

    from visualizations.round_marks import spans
    torch.set_num_threads(1)
    run = decode(FLIP, edit_threshold=0.9, edit_post_steps=2)
    (a, b), = spans(i for i, rec in enumerate(run.records) if rec.kind == "post")
    path = run.save(tmp_path / "post-edit.json")
    page = open_page(browser, url)
    try:
        open_accordion(page, "#trace-panel", "#export")
        page.set_input_files("#trace-upload input[type=file]", str(path))
        page.wait_for_function("document.querySelector('#status')?.innerText.includes('Replaying')")
        band = page.locator(f"#round-marks .lopa-round-post[data-rounds='{a}-{b}']")
        band.wait_for()
        assert band.bounding_box()["width"] > 0
        words = f"round {a}" if a == b else f"rounds {a}–{b}"
        assert f"{words}: post-edit (only editing, nothing filled)" in page.locator("#round-marks").inner_text()
        walk_to(page, a)
        page.wait_for_function(f"document.querySelector('#explanation')?.innerText.includes('Round {a} — post-edit round')")
        page.locator("#round-row").screenshot(path=str(ARTIFACTS / "post_edit_round_row.png"))
        assert not page.errors, page.errors
    finally:
        page.close()
