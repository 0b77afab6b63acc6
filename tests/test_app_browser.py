"""A real browser (Playwright + Debian's Chromium) on the app served in-process.

Run LoPA on an example and watch the round counter advance and the heatmap render; step and
scrub; run the side-by-side comparison until both sides finish; export a trace and load it
back; trigger a bad input and read the message. Screenshots go to test-artifacts/ (and, with
LOPA_UPDATE_SCREENSHOTS=1, the README's two go to assets/screenshots/).

Uses the bundled model when it loads (its answers are not checked, only the UI), otherwise a tiny
random one. Skips when /usr/bin/chromium is absent. Every wait has a timeout.
"""

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from servers import launch_chromium, needs_chromium, open_accordion, paced, serve_app, type_value

pytestmark = [needs_chromium,
              pytest.mark.browser, pytest.mark.timeout(900)]          # a hang guard

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ROOT / "assets" / "screenshots"
WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test
ROUNDS_JS = "Number(document.querySelector('#counters .lopa-counters')?.dataset.rounds ?? -1)"
# Records every value the round counter takes in the page, to check it keeps up with the server.
OBSERVE_COUNTERS = """() => {
  window.__rounds = [];
  const box = document.querySelector('#counters');
  new MutationObserver(() => {
    const el = box.querySelector('.lopa-counters');
    if (el) window.__rounds.push(Number(el.dataset.rounds));
  }).observe(box, {subtree: true, childList: true, attributes: true});
}"""
# Records the text of every status the Studies section shows (with the time), for failure messages.
OBSERVE_STUDY_STATUS = """() => {
  window.__studyStatus = [];
  const box = document.querySelector('#study-status');
  new MutationObserver(() => window.__studyStatus.push(
    `${(performance.now() / 1000).toFixed(1)}s ${box.innerText.slice(0, 90)}`
  )).observe(box, {subtree: true, childList: true, characterData: true});
}"""

# The test's own steps, in the same record.
NOTE_IN_STUDY_STATUS = "note => window.__studyStatus.push(`${(performance.now() / 1000).toFixed(1)}s (test) ${note}`)"


@pytest.fixture(scope="module", autouse=True)
def shipped_studies(tmp_path_factory):
    """The Studies section reads a fixture root: for the bundled models (and the tiny fallback when the
    default has no weights), the shipped results of the other studies (the model's own where it ships them) and a
    headroom result made here on a tiny model with one problem (not the shipped files)."""
    from tiny import save_tiny_model_dir

    from app.panels.studies import callbacks as studies
    from app.serving.model_cache import MODELS
    from lopa.study import APP_STUDIES
    from lopa.study import headroom as headroom_study
    from lopa.study.common import STUDIES_DIR
    root, made = tmp_path_factory.mktemp("studies"), tmp_path_factory.mktemp("headroom")
    tiny = save_tiny_model_dir(tmp_path_factory.mktemp("model") / "tiny-dllm")
    assert headroom_study.main(["--model", str(tiny), "--n", "1", "--random", "1", "--k", "2", "--ks", "1,2",
                                "--block-size", "8", "--max-new-tokens", "16", "--tau-conf", "0.12", "--tau-add", "0.3",
                                "--tau-act", "0.6", "--bootstrap", "20", "--out", str(made)]) == 0
    # The bundled models' folders (the page's "Shipped for ... too" names them as the product does); the
    # tiny model's only where the page will fall back to it (no bundled weights), so screenshots match the app.
    names = {Path(MODELS.default).name, *(d.name for d in STUDIES_DIR.iterdir() if d.is_dir())}
    if not (Path(MODELS.default) / "model.safetensors").is_file():
        names.add(tiny.name)
    for name in names:
        folder = root / name
        folder.mkdir()
        for path in made.glob("headroom*"):
            shutil.copy(path, folder / path.name)
        for study in (s for s in APP_STUDIES if s != "headroom"):
            source = next((d for d in [STUDIES_DIR / name, *sorted(STUDIES_DIR.iterdir())]
                           if (d / f"{study}.json").is_file()), None)
            for path in source.glob(f"{study}*") if source else ():
                shutil.copy(path, folder / path.name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(studies, "STUDIES_ROOT", root)
        yield root


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    yield from serve_app(tmp_path_factory)


@pytest.fixture(scope="module")
def page(url):
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p, WAIT_MS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        # A plotly.js exception in one figure can stop the page applying other outputs: none allowed.
        page.errors = []
        page.on("pageerror", lambda err: page.errors.append(str(err)))
        page.goto(url, timeout=WAIT_MS)
        page.wait_for_selector("#run")
        page.wait_for_function("document.querySelector('#model-info')?.innerText.includes('loaded from')")
        page.wait_for_selector("#tokens-chart .js-plotly-plot")          # plotly.js loaded: the page is ready
        yield page
        browser.close()


def page_errors(page) -> list[str]:
    return list(page.errors)


def rounds(page, counters="#counters") -> int:
    value = page.locator(f"{counters} .lopa-counters").get_attribute("data-rounds")
    return int(value)


def shot(page, name: str, selector: str | None = None, readme: bool = False) -> Path:
    path = ARTIFACTS / f"{name}.png"
    # Toasts left by earlier checks (bad input warnings) would cover the README's pictures.
    (page.locator(selector) if selector else page).screenshot(path=str(path), style=".toast-wrap { display: none !important; }")
    if readme and os.environ.get("LOPA_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / f"{name}.png")
    return path


def test_run_an_example_live(page, monkeypatch):
    from app.panels.round_view import callbacks
    from app.serving.models import example_prompts
    # Paced: the page then draws every round, where a fast decode's rounds can reach a busy browser together.
    monkeypatch.setattr(callbacks, "stream_jobs", paced(callbacks.stream_jobs, 0.2))
    example = example_prompts()[0][:24]                                  # the first example prompt
    page.locator("#prompt textarea").fill("")
    # the examples' button, not the arrival view above it, which names the same question
    page.locator("#all-controls").get_by_text(example, exact=False).first.click()
    page.wait_for_function("e => document.querySelector('#prompt textarea')?.value.startsWith(e)", arg=example)
    page.evaluate(OBSERVE_COUNTERS)
    # How fast the first round and the final state show is a benchmark's figure
    # (scripts/bench_app_latency.py), not an assertion: a busy machine must not fail this test.
    page.click("#run")
    page.wait_for_function(f"{ROUNDS_JS} >= 1")
    page.wait_for_function(f"{ROUNDS_JS} >= 3")
    page.wait_for_selector("#heatmap .js-plotly-plot")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    n = rounds(page)
    assert n >= 3 and "Done" in page.locator("#status").inner_text()
    assert page.locator("#canvas .lopa-cell").count() >= 32
    # each state's look comes from the page's stylesheet (CANVAS_CSS), not from the cell
    look = page.evaluate("""() => Object.fromEntries(['masked', 'committed', 'cached'].map(s => {
        const c = document.querySelector(`#canvas .lopa-cell[data-state='${s}']`);
        if (!c) return [s, null];
        const st = getComputedStyle(c);
        return [s, [st.borderTopStyle, st.height, st.fontFamily, st.backgroundImage.startsWith('linear-gradient')]];
    }))""")
    for state, style in look.items():
        if style:
            assert style[1] == "30px" and "monospace" in style[2], (state, style)
            assert style[0] == {"masked": "dotted"}.get(state, "solid") and style[3] == (state == "masked"), (state, style)
    assert float(page.locator("#counters [data-counter='elapsed']").get_attribute("data-value").split()[0]) > 0
    seen = page.evaluate("window.__rounds")
    assert seen == sorted(seen) and len(set(seen)) >= n // 2          # the counter moved round by round
    assert not page_errors(page)


def test_scrub_and_play_back(page):
    n = rounds(page)
    slider = page.locator("#round-slider input[type=range]")
    slider.focus()
    target = n // 3
    # A finished run rests on its last round, at the end of the slider.
    for _ in range(int(slider.input_value()) - target):
        page.keyboard.press("ArrowLeft")
    page.wait_for_selector(f"#canvas .lopa-canvas[data-round='{target}']")
    page.wait_for_selector(f"#branches .lopa-branches[data-round='{target}']")
    page.wait_for_timeout(800)                                  # let plotly finish drawing
    shot(page, "round_view", "#round-view", readme=True)
    page.click("#play")
    page.wait_for_function(f"Number(document.querySelector('#canvas .lopa-canvas')?.dataset.round) > {target}")
    page.click("#play")                                          # pause
    page.wait_for_function("document.querySelector('#play')?.innerText.includes('Play')")
    page.wait_for_timeout(700)
    paused_at = page.locator("#canvas .lopa-canvas").get_attribute("data-round")
    page.wait_for_timeout(1500)                                  # > two timer periods: nothing moves
    assert page.locator("#canvas .lopa-canvas").get_attribute("data-round") == paused_at


def test_step_advances_one_round_at_a_time(page):
    page.click("#reset")
    page.wait_for_selector("#counters .lopa-counters[data-rounds='0']")
    for expected in (1, 2):
        page.click("#step")
        page.wait_for_selector(f"#counters .lopa-counters[data-rounds='{expected}']")
    assert "Paused after round 1" in page.locator("#status").inner_text()
    page.click("#stop")
    page.wait_for_selector("#counters .lopa-counters[data-status='stopped']")


def test_side_by_side_comparison(page):
    page.locator("#compare").scroll_into_view_if_needed()
    page.click("#compare")
    # Live: the baseline's counters show it running (on a loaded machine the first frame the page
    # draws may already be the finished one).
    page.wait_for_selector("#base-counters .lopa-counters[data-status='running'], "
                           "#base-counters .lopa-counters[data-status='done']")
    page.wait_for_selector("#base-counters .lopa-counters[data-status='done']")
    page.wait_for_selector("#lopa-counters .lopa-counters[data-status='done']")
    page.wait_for_function("document.querySelector('#compare-summary')?.innerText.includes('Speed-up')")
    page.wait_for_selector("#base-tfo .js-plotly-plot")
    page.wait_for_selector("#lopa-tfo .js-plotly-plot")
    assert rounds(page, "#base-counters") > 0 and rounds(page, "#lopa-counters") > 0
    assert not page_errors(page)
    page.wait_for_timeout(800)
    shot(page, "comparison", "#compare-view", readme=True)


def test_export_then_load_a_trace(page, tmp_path):
    page.click("#run")                                           # the stepped decode is stopped: a fresh run
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    n = rounds(page)
    open_accordion(page, "#trace-panel", "#export")
    page.click("#export")
    link = page.locator("#export-file a").first
    link.wait_for()
    with page.expect_download() as download:
        link.click()
    path = tmp_path / "trace.json"
    download.value.save_as(path)
    page.click("#reset")
    page.wait_for_selector("#counters .lopa-counters[data-rounds='0']")
    page.set_input_files("#trace-upload input[type=file]", str(path))
    page.wait_for_function("document.querySelector('#status')?.innerText.includes('Replaying')")
    assert rounds(page) == n and page.locator("#counters .lopa-counters").get_attribute("data-status") == "replay"
    shot(page, "replay")
    assert not page_errors(page)


def test_bad_input_shows_a_message(page, tmp_path):
    open_accordion(page, "#settings", "#max-new-tokens")          # the decode settings start closed
    type_value(page, "#max-new-tokens", "100")
    page.click("#run")
    page.wait_for_function("document.querySelector('#status')?.innerText.includes('Error')")
    assert re.search(r"multiple of block_size", page.locator("#status").inner_text())
    shot(page, "bad_input")
    type_value(page, "#max-new-tokens", "64")
    bad = tmp_path / "foreign.json"
    bad.write_text('{"hello": 1}')
    open_accordion(page, "#trace-panel", "#export")
    page.set_input_files("#trace-upload input[type=file]", str(bad))
    page.wait_for_function("document.querySelector('#status')?.innerText.includes('not a LoPA trace')")


def _fork_shown(page, start: float, first_round: int) -> float:
    """Seconds from `start` until the page shows the fork's first own round (status and counters)."""
    page.wait_for_function("t => { const s = document.querySelector('#status')?.innerText; "
                           "return s.includes('Fork of run') && s.includes('round ' + t) || s.startsWith('Done'); }",
                           arg=str(first_round), polling=10)
    page.wait_for_function(f"{ROUNDS_JS} >= {first_round + 1}", polling=10)
    return time.monotonic() - start


def _scrub_to(page, target: int) -> None:
    slider = page.locator("#round-slider input[type=range]")
    slider.focus()
    page.keyboard.press("Home")
    for _ in range(target):
        page.keyboard.press("ArrowRight")
    page.wait_for_selector(f"#canvas .lopa-canvas[data-round='{target}']")


def _click_masked(page, which: str = "last") -> int:
    cells = page.locator("#canvas .lopa-cell[data-state='masked']")
    cell = cells.last if which == "last" else cells.first
    position = int(cell.get_attribute("data-position"))
    cell.click()
    page.wait_for_selector("#whatif-panel", state="visible")
    page.wait_for_function(f"document.querySelector('#whatif-info')?.innerText.includes('position {position}')")
    return position


def test_what_if_fill_first_and_hold_back_fork_and_compare(page):
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    n = rounds(page)
    original = page.locator("#run-list label").count()
    # Fill first at round 1 (early: the bundled model fills most answers in 2-4 rounds).
    early = 1
    _scrub_to(page, early)
    p = _click_masked(page, "last")
    assert page.locator("#whatif-token label").count() == 5
    page.locator("#whatif-token label").nth(1).click()              # the model's second choice
    page.wait_for_function("document.querySelectorAll('#whatif-token input')[1].checked")
    start = time.monotonic()
    page.click("#fill-first")
    early_s = _fork_shown(page, start, early + 1)
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    page.wait_for_function(f"document.querySelectorAll('#run-list label').length === {original + 1}")
    fork_label = page.locator("#run-list label").last.inner_text()
    assert "rounds" in fork_label and "TPF" in fork_label and "answer" in fork_label
    page.locator("#compare-runs").scroll_into_view_if_needed()
    page.click("#compare-runs")
    # the page is shared by this module's tests: wait for this comparison, not an earlier one's strip
    page.wait_for_function(f"document.querySelector('#compare-status')?.innerText.includes('with run {original}.1')")
    page.wait_for_selector("#compare-diff .lopa-diff")
    assert page.locator("#compare-diff .lopa-diff-cell[data-differs='1']").count() >= 2    # both rows of each
    assert page.locator(f"#compare-diff .lopa-diff-cell[data-position='{p}'][data-differs='1']").count() == 2
    page.wait_for_selector("#lopa-tfo .js-plotly-plot")
    page.wait_for_timeout(600)
    shot(page, "fork_compare", "#compare-view", readme=True)
    # Hold back at a late round of the original run.
    page.locator("#round-view").scroll_into_view_if_needed()
    page.locator("#run-list label").filter(has_text=f"run {original} ·").first.click()
    page.wait_for_function(f"document.querySelector('#status')?.innerText.includes('Showing run {original}')")
    late = int(page.locator("#round-slider input[type=range]").input_value()) - 1
    _scrub_to(page, late)
    q = _click_masked(page, "first")
    shot(page, "what_if", "#round-view", readme=True)
    start = time.monotonic()
    page.click("#hold-back")
    late_s = _fork_shown(page, start, late + 1)
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    page.locator("#compare-runs").scroll_into_view_if_needed()
    page.wait_for_function(f"document.querySelectorAll('#run-list label').length === {original + 2}")
    page.click("#compare-runs")
    page.wait_for_function(f"document.querySelector('#compare-status')?.innerText.includes('.2.')"
                           f" || document.querySelector('#compare-status').innerText.includes('run {original}.2')")
    held = page.locator(f"#compare-diff .lopa-diff-cell[data-position='{q}']")
    before, after = (held.nth(i).inner_text() for i in (0, 1))
    assert after == "·" or int(after) >= late + 2, (before, after)          # delayed by at least one round
    assert not page_errors(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "fork_latency.txt").write_text(f"fork_at_round_{early}_s {early_s:.3f}\nfork_at_round_{late}_s {late_s:.3f}\n"
                                               f"original_rounds {n}\n")
    print(f"fork shown {early_s:.2f} s after Fill first at round {early}; {late_s:.2f} s after Hold back at round {late} "
          f"(run of {n} rounds)")


def test_a_trace_with_script_in_every_string_field_runs_nothing(page, tmp_path):
    """A shared trace carrying markup in every free-text field: replayed and scrubbed through in
    Chromium, no script runs and no injected element appears."""
    from test_hostile_traces import hostile

    from app.serving.model_cache import MODELS
    from lopa import DecodeSettings
    run = MODELS.get().decoder(DecodeSettings(k=2, max_new_tokens=64)).run("Tom has 3 apples. He buys 4 more.")
    path = hostile(run).save(tmp_path / "hostile.json")
    open_accordion(page, "#trace-panel", "#export")
    page.set_input_files("#trace-upload input[type=file]", str(path))
    page.wait_for_function("document.querySelector('#status')?.innerText.includes('Replaying')")
    slider = page.locator("#round-slider input[type=range]")
    slider.focus()
    for key in ("Home", "ArrowRight", "ArrowRight", "End"):
        page.keyboard.press(key)
        page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned === undefined && !document.querySelector('img[src=\"x\"]')")
    assert not page_errors(page)


def test_studies_show_shipped_results_and_run_live(page):
    """The Studies section: the shipped orders results show on page load (their PNG), another study's
    replace them and open as an interactive plot, and a live run on one problem fills the progress bar
    and ends with its plot."""
    section = page.locator("#studies-view")
    section.scroll_into_view_if_needed()
    page.wait_for_selector("#study-image img")
    assert "Shipped results" in page.locator("#study-status").inner_text()
    page.locator("#study input").click()
    page.get_by_role("option", name="3. An adaptive branch budget").click()
    page.wait_for_function("document.querySelector('#study-summary')?.innerText.includes('adaptive')")
    page.wait_for_function("document.querySelector('#study-image img')?.src.includes('adaptive')")
    page.click("#study-interactive")
    page.wait_for_selector("#study-plot .js-plotly-plot")
    page.wait_for_timeout(800)                                  # let plotly finish drawing
    shot(page, "studies", "#studies-view", readme=True)
    page.locator("#study input").click()
    page.get_by_role("option", name="1. LoPA's orders against random orders").click()
    page.wait_for_function("document.querySelector('#study-summary')?.innerText.includes('random orders')")
    page.locator("#study-problems input").fill("1")
    page.locator("#study-random input").fill("2")
    page.click("#study-run")
    page.wait_for_function("document.querySelector('#study-status')?.innerText.includes('Done')", timeout=300_000)
    assert page.locator("#study-progress progress").get_attribute("value") == "5"      # 1 problem x (3 + 2) runs
    page.wait_for_selector("#study-plot .js-plotly-plot")
    assert not page_errors(page)


def choose_study(page, title: str) -> None:
    page.locator("#studies-view").scroll_into_view_if_needed()
    page.locator("#study input").click()
    page.get_by_role("option", name=title).click()


def test_headroom_study_shows_its_shipped_results_and_runs_live(page):
    """The headroom study: the fixture's results appear at once, and a live run on one problem completes
    (vanilla, LoPA at k = 1 and 4, one random order, then the search, counted rollout by rollout) with its plot
    and a full progress bar."""
    choose_study(page, "4. How far LoPA is from the best order found")
    page.wait_for_function("document.querySelector('#study-summary')?.innerText.includes('best found')")
    assert "Shipped results" in page.locator("#study-status").inner_text()
    assert "headroom" in page.locator("#study-status").inner_text()
    page.locator("#study-problems input").fill("1")
    page.locator("#study-random input").fill("1")
    page.click("#study-run")
    page.wait_for_function("document.querySelector('#study-status')?.innerText.includes('Done')", timeout=300_000)
    bar = page.locator("#study-progress progress")
    done, total = int(bar.get_attribute("value")), int(bar.get_attribute("max"))
    assert done == total >= 5         # 4 decodes (vanilla, k = 1 and 4, one random order), then each rollout of the search
    assert "stopped" not in page.locator("#study-status").inner_text()
    page.wait_for_selector("#study-plot .js-plotly-plot")
    assert "share of the vanilla -> best-found TPF gap" in page.locator("#study-summary").inner_text()
    assert not page_errors(page)


def held_after_the_first_decode(steps, seconds: float):
    """A live study's steps (app.serving.boundary.study_steps_on_gpu) that, after the first decode, report a status
    every 50 ms (the run reads Stop after each) for up to `seconds` before going on: a Stop pressed in the page
    finds the run going however slow the machine, where a real search can end before a busy page's click lands."""
    def held(*args, **kwargs):
        inner = steps(*args, **kwargs)
        try:
            for step in inner:
                yield step
                if "row" in step:
                    break
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                yield {"status": "Held after the first decode for the test's Stop"}
                time.sleep(0.05)
            yield from inner
        finally:
            inner.close()
    return held


def test_a_live_headroom_run_can_be_stopped(page, monkeypatch):
    """Stop during a live headroom run ends it within a step, with the problems complete so far or saying none
    was (here: stopped inside problem 1). Every status the page showed is recorded, for the message if it does
    not stop."""
    from app.serving import boundary
    monkeypatch.setattr(boundary, "study_steps_on_gpu", held_after_the_first_decode(boundary.study_steps_on_gpu, 240))
    choose_study(page, "4. How far LoPA is from the best order found")
    page.wait_for_function("document.querySelector('#study-summary')?.innerText.includes('best found')")
    page.evaluate(OBSERVE_STUDY_STATUS)
    page.locator("#study-problems input").fill("2")
    page.locator("#study-random input").fill("2")
    page.click("#study-run")
    page.wait_for_function("document.querySelector('#study-status')?.innerText.includes('Held after the first decode')")
    page.wait_for_function("!document.querySelector('#study-stop')?.disabled")
    page.evaluate(NOTE_IN_STUDY_STATUS, "pressing Stop")
    page.click("#study-stop")
    page.evaluate(NOTE_IN_STUDY_STATUS, "Stop pressed")
    ended = "/(^|\\n)(Done|Stopped)/.test(document.querySelector('#study-status').innerText)"
    try:
        page.wait_for_function(ended, timeout=300_000)
    except Exception as err:
        seen = page.evaluate("window.__studyStatus")
        raise AssertionError(f"the run did not end after Stop; the test's steps: {[x for x in seen if '(test)' in x]}; "
                             f"the last statuses shown: {seen[-16:]}") from err
    page.wait_for_timeout(1_000)              # nothing that arrives later (Stop's own answer) hides the end
    status = page.locator("#study-status").inner_text()
    assert "Stopped before the first problem" in status and "nothing to summarize yet" in status, \
        page.evaluate("window.__studyStatus")[-8:]
    bar = page.locator("#study-progress progress")
    done, total = int(bar.get_attribute("value")), int(bar.get_attribute("max"))
    assert 1 <= done < total                                      # stopped before all of its decodes and rollouts
    assert not page_errors(page)


def test_a_run_is_compared_with_the_best_order_found_for_its_prompt(page):
    """After a run of the first example, the search renders beside it: its status in the round view (where the
    two part, or that LoPA's order is the best found) and the comparison's summary and strip."""
    from app.serving.models import example_prompts
    page.locator("#prompt textarea").fill(example_prompts()[0])
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    page.click("#best-order")
    page.wait_for_function("['Best order found', \"LoPA's order is the best found\"].some("
                           "t => document.querySelector('#best-order-status').innerText.includes(t))", timeout=300_000)
    status = page.locator("#best-order-status").inner_text()
    page.wait_for_function("document.querySelector('#compare-summary')?.innerText.includes('Speed-up')")
    assert page.locator("#compare-diff .lopa-diff[data-first-divergence]").count() == 1
    if "Best order found" in status:
        split = page.locator("#compare-diff .lopa-diff[data-first-divergence]").get_attribute("data-first-divergence")
        assert f"round {split}" in status and "first diverge in round" in page.locator("#compare-summary").inner_text()
    else:
        assert "same decisions in every round" in page.locator("#compare-summary").inner_text()
    assert not page_errors(page)


def test_enter_in_the_prompt_box_runs(page):
    page.locator("#prompt textarea").fill("Tom has 3 apples. He buys 4 more. How many apples does Tom have now?")
    page.locator("#prompt textarea").press("Enter")
    page.wait_for_function("document.querySelector('#status')?.innerText.startsWith('Done')")
    assert rounds(page) >= 2 and not page_errors(page)


def test_a_share_link_restores_the_prompt_and_settings(page, url):
    """Last in this file: it reloads the page."""
    page.goto(url + "?prompt=Ann+has+5+pens.+She+buys+3+more.&k=2&order=random&order_seed=7", timeout=WAIT_MS)
    page.wait_for_function("document.querySelector('#prompt textarea')?.value?.startsWith('Ann has 5 pens')")
    open_accordion(page, "#settings", "#k")                       # the decode settings start closed
    page.wait_for_function("document.querySelector('#k input[type=number]')?.value === '2'")
    assert "random" in page.locator("#order input").input_value()
    page.locator("#prompt textarea").press("Enter")                       # and it runs with them
    page.wait_for_function("document.querySelector('#status')?.innerText.startsWith('Done')")
    assert not page_errors(page)


def test_every_bundled_model_is_offered_by_what_it_shows_loads_and_decodes(page):
    """The model choice lists both bundled models, labelled by what they show; each loads when picked
    (no other press) and decodes a run; the page ends on the default model again."""
    from app.serving.model_cache import MODELS
    from app.serving.models import bundled_models
    offered = bundled_models()
    assert {Path(folder).name for _, folder in offered} >= {"open-gsm-dllm", "sure-gsm-dllm"}
    default = next((pair for pair in offered if Path(pair[1]) == Path(MODELS.default)), offered[0])
    page.locator("#model-dir").scroll_into_view_if_needed()
    for label, folder in [*[p for p in offered if p != default], default]:
        page.locator("#model-dir input").click()
        page.get_by_role("option", name=Path(folder).name, exact=True).click()       # listed by name
        assert label.split(": ", 1)[-1] in page.locator("#model-choices").inner_text()  # what it shows, below
        page.wait_for_function("n => { const t = document.querySelector('#model-info')?.innerText; "
                               "return t.includes('loaded from') && t.includes(n); }", arg=Path(folder).name)
        assert f"now decodes with {Path(folder).name}" in page.locator("#status").inner_text()
        page.click("#run")
        page.wait_for_function("document.querySelector('#status')?.innerText.includes('Done')")
        page.wait_for_selector("#counters .lopa-counters[data-status='done']")
        assert rounds(page) >= 1
    assert not page_errors(page)
