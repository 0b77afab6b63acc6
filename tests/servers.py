"""Helpers for tests that launch the app on a local port and drive it in Debian's Chromium."""

import socket
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_app(tmp_path_factory, note: str = ""):
    """Yield the URL of the app served in this process on a free port, on the bundled default model, or
    on a tiny random one where the bundled model does not load right now (it may be mid re-export);
    close it and restore the default after. For a module-scoped fixture: `yield from serve_app(...)`."""
    from tiny import save_tiny_model_dir

    from app import LAUNCH_KWARGS, build_demo
    from app.model_cache import MODELS
    saved = MODELS.default
    try:
        MODELS.get()
    except Exception:
        MODELS.default = save_tiny_model_dir(tmp_path_factory.mktemp("model") / "tiny-dllm")
    demo = build_demo()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
        MODELS.default = saved


def launch_chromium(playwright, timeout_ms: int):
    """Debian's Chromium through Playwright (`playwright install` cannot download browsers here)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=timeout_ms)
