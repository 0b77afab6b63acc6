"""Helpers for tests that launch the app on a local port and drive it in Debian's Chromium."""

import socket
import time
from pathlib import Path

import pytest

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:                  # the browser tests skip without Playwright
    PlaywrightTimeout = TimeoutError

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SETTLE_MS = 500            # what a freshly opened accordion's inputs get to mount (open_accordion)
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


SERVED: dict = {}          # url -> the gr.Blocks serve_app serves there (a test may look at its sessions)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_app(tmp_path_factory, note: str = "", cold: bool = False):
    """Yield the URL of the app served in this process on a free port, on the bundled default model, or
    on a tiny random one where the bundled model does not load right now (it may be mid re-export);
    close it and restore the default after. For a module-scoped fixture: `yield from serve_app(...)`.
    `cold`: the page is built with no model loaded, as on a server just started (the model panel says
    "not loaded yet" until a page's warm-up loads it)."""
    from tiny import save_tiny_model_dir

    from app import LAUNCH_KWARGS, build_demo
    from app.serving.model_cache import MODELS
    saved = MODELS.default
    try:
        MODELS.get()
    except Exception:
        MODELS.default = save_tiny_model_dir(tmp_path_factory.mktemp("model") / "tiny-dllm")
    if cold:
        MODELS.clear()
    demo = build_demo()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    url = f"http://127.0.0.1:{port}/"
    SERVED[url] = demo
    try:
        yield url
    finally:
        SERVED.pop(url, None)
        demo.close()
        MODELS.default = saved


def serve_demo():
    """Yield the URL of a fresh build_demo() served in this process on a free port (no launch settings: the
    bare app, as an API client sees it); close it after. For a module-scoped fixture: `yield from`."""
    from app import build_demo
    demo = build_demo()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def plain(out):
    """A UI endpoint's answer through gradio_client with Gradio's update dicts read as their values
    (app/serving/updates.as_updates wraps every value in one)."""
    one = (lambda v: v.get("value") if isinstance(v, dict) and v.get("__type__") == "update" else v)
    return tuple(one(v) for v in out) if isinstance(out, (tuple, list)) else one(out)


def paced(stream, seconds: float):
    """`stream` (a generator function: a decode's or a search's) with `seconds` between its items, so that
    the job is still running when a test looks, or the page draws each item however fast the machine."""
    def slow(*args, **kwargs):
        inner = stream(*args, **kwargs)
        try:
            for item in inner:
                time.sleep(seconds)
                yield item
        finally:
            inner.close()
    return slow


def open_browser(timeout_ms: int):
    """Yield Debian's Chromium for a module-scoped fixture (`yield from`); skips without Playwright."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p, timeout_ms)
        yield browser
        browser.close()


def launch_chromium(playwright, timeout_ms: int):
    """Debian's Chromium through Playwright (`playwright install` cannot download browsers here)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=timeout_ms)


# The two window sizes a newcomer's page is measured at: a laptop and a phone.
WIDTHS = {"laptop": {"width": 1366, "height": 768}, "phone": {"width": 390, "height": 844}}


CONTEXTS: dict = {}       # browser -> the context its pages share (shared_context)


def shared_context(browser):
    """One browser context for the pages a module opens: they keep their own Gradio session each (one per page
    load) but share the HTTP and compiled-script caches, so a page loads in about 2.3 s instead of 2.8 s
    here. A test of a first visit (nothing cached) makes a context of its own (tests/test_tour_browser.py)."""
    if browser not in CONTEXTS or not browser.is_connected():
        CONTEXTS[browser] = browser.new_context()
    return CONTEXTS[browser]


def open_page(browser, url: str, size: dict, timeout_ms: int, scheme: str = "light"):
    """Yield a new page of `size` with the app loaded (the arrival view and the first figure drawn), then
    close it, asserting the page raised no script error. `scheme`: the colour scheme the browser says the
    system prefers. For a fixture: `yield from open_page(...)`."""
    page = shared_context(browser).new_page()
    page.set_viewport_size(size)
    page.emulate_media(color_scheme=scheme)
    page.set_default_timeout(timeout_ms)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(url, timeout=timeout_ms)
    page.wait_for_selector("#arrival .lopa-story-side[data-run='lopa'] .lopa-tok")
    page.wait_for_selector("#tokens-chart .js-plotly-plot")            # the page has loaded
    yield page
    assert not page.errors
    page.close()


def open_accordion(page, selector: str, inside: str, timeout_s: float = 180) -> None:
    """Open the accordion `selector` until `inside` (an element in it) shows, then let its inputs settle.
    A click while the page still mounts can be lost, so it is repeated (only while `inside` is hidden:
    a second click on an open accordion would close it). Gradio mounts a closed accordion's inputs when
    it opens; a value typed into a slider in the same instant can be put back by the mount (Gradio 6.31:
    the slider then sends its old value to the server again and again), so the inputs get SETTLE_MS first."""
    deadline = time.monotonic() + timeout_s
    while not page.locator(inside).first.is_visible():
        page.locator(f"{selector} > button, {selector} .label-wrap").first.click()
        try:
            page.locator(inside).first.wait_for(timeout=30_000)
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise
    page.wait_for_timeout(SETTLE_MS)


def type_value(page, selector: str, text: str, timeout_s: float = 180) -> None:
    """Type `text` into the number box of the input `selector` (a slider's or a number's) and tab out; type it
    again while the box does not read `text` a moment later (see open_accordion: a mount can put a value back)."""
    box = page.locator(f"{selector} input[type=number]").first
    deadline = time.monotonic() + timeout_s
    while True:
        box.fill(text)
        box.press("Tab")
        page.wait_for_timeout(SETTLE_MS)
        if box.input_value() == text or time.monotonic() > deadline:
            return
