"""Two visitors, two models, at the same time, in a real browser (Playwright + Debian's Chromium): one
picks `sure-gsm-dllm`, the other stays on the default `open-gsm-dllm`; both press Run and the two
decodes hold their models at once in the server; each page ends with its own model's run (the
counters, the run list, the exported trace and the tokens its model gives alone)."""

import threading
from pathlib import Path

import pytest
from servers import free_port, needs_chromium, open_accordion, open_browser

from lopa import DecodeSettings, RunResult
from lopa.models import DEFAULT_MODEL, load

pytestmark = [needs_chromium,
              pytest.mark.browser, pytest.mark.timeout(900)]
WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test


class Together:
    """MODELS.acquire that, while armed, lets no decode start until two hold their models: the two
    decodes then provably overlap in the server, however the clicks are spaced."""

    def __init__(self, models):
        self.models, self.acquire = models, models.acquire
        self.barrier, self.armed, self.most = threading.Barrier(2), False, 0

    def __call__(self, folder=None, **kwargs):
        loaded = self.acquire(folder, **kwargs)
        if self.armed:
            self.most = max(self.most, sum(1 for _, leases in self.models.held().values() if leases))
            self.barrier.wait(timeout=WAIT_MS / 1000)
            self.most = max(self.most, sum(1 for _, leases in self.models.held().values() if leases))
        return loaded


@pytest.fixture(scope="module")
def served():
    from app import LAUNCH_KWARGS, build_demo
    from app.panels import events
    from app.serving.model_cache import MODELS
    if Path(MODELS.default) != DEFAULT_MODEL:
        pytest.skip("another module moved the default model")
    try:
        MODELS.get()
    except ValueError as err:
        pytest.skip(f"the bundled model does not load right now: {err}")
    # Two model slots (the app's default is one: a CPU runs one forward well at a time), so that the
    # two visitors' decodes run in the server at the same time.
    saved = dict(events.MODEL)
    events.MODEL["concurrency_limit"] = 2
    together = Together(MODELS)
    MODELS.acquire = together
    try:
        demo = build_demo()
        port = free_port()
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
        yield f"http://127.0.0.1:{port}/", together
        demo.close()
    finally:
        events.MODEL.clear()
        events.MODEL.update(saved)
        del MODELS.acquire


@pytest.fixture(scope="module")
def browser():
    yield from open_browser(WAIT_MS)


def open_page(browser, url):
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#run")
    page.wait_for_function("document.querySelector('#model-info')?.innerText.includes('loaded from')")
    return context, page


def export(page, tmp_path, name) -> tuple[str, RunResult]:
    open_accordion(page, "#trace-panel", "#export")                # the accordion starts closed
    page.click("#export")
    link = page.locator("#export-file a").first
    link.wait_for()
    with page.expect_download() as download:
        link.click()
    path = tmp_path / f"{name}.json"
    download.value.save_as(path)
    return download.value.suggested_filename, RunResult.load(path)


def test_two_visitors_decode_two_models_at_the_same_time(served, browser, tmp_path):
    from app.serving.models import MODELS_DIR, bundled_models
    url, together = served
    (a_ctx, a), (b_ctx, b) = open_page(browser, url), open_page(browser, url)
    try:
        label = next(label for label, folder in bundled_models() if Path(folder).name == "sure-gsm-dllm")
        a.locator("#model-dir input").click()
        a.get_by_role("option", name=label.split(": ", 1)[0], exact=True).click()   # applied when picked: no other press
        a.wait_for_function("document.querySelector('#model-info')?.innerText.includes('sure-gsm-dllm')")
        assert "now decodes with sure-gsm-dllm" in a.locator("#status").inner_text()
        assert "open-gsm-dllm" in b.locator("#model-info").inner_text()     # the other visitor's page: unchanged

        together.armed = True
        try:
            a.click("#run")
            b.click("#run")
            for page in (a, b):
                page.wait_for_selector("#counters .lopa-counters[data-status='done']")
        finally:
            together.armed = False
        assert together.most == 2                                   # both models held by decodes at once

        for page, model in ((a, "sure-gsm-dllm"), (b, "open-gsm-dllm")):
            assert page.locator("#counters [data-counter='model']").get_attribute("data-value") == model
            assert f"run 1 · {model}" in page.locator("#run-list").inner_text()
            filename, run = export(page, tmp_path, model)
            assert run.spec["name"] == model and model in filename
            alone = load(MODELS_DIR / model).decoder(DecodeSettings.from_dict(run.settings)).run(run.prompt)
            assert run.tokens == alone.tokens                       # its own model's tokens
            assert not page.errors
    finally:
        a_ctx.close()
        b_ctx.close()
