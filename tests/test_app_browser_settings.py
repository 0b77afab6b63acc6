"""In a real browser (Playwright + Debian's Chromium): the settings controls show what the session's
model asks for, a shared link's settings count as the visitor's, and picking another model moves
only the controls the visitor left alone. Skips when /usr/bin/chromium is absent."""

import json
import time

import pytest
from servers import free_port, launch_chromium, needs_chromium, open_accordion
from test_checkpoints import save_dream_dir

from lopa.settings import SETTINGS

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.timeout(600)]
WAIT_MS = 180_000           # hang guards only
SHOWN = """() => ({attention: document.querySelector('#attention input')?.value,
  block_size: document.querySelector('#block-size input[type=number]')?.value,
  k: document.querySelector('#k input[type=number]')?.value})"""


def wait_for(page, want: dict, seconds: float = 120) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        shown = page.evaluate(SHOWN)
        if all(shown[k] == v for k, v in want.items()) or time.monotonic() > deadline:
            return shown
        time.sleep(0.5)


def test_the_controls_follow_the_session_s_model_and_keep_what_the_visitor_set(tmp_path, monkeypatch):
    from playwright import sync_api

    from app import LAUNCH_KWARGS, build_demo
    from app.serving.model_cache import MODELS
    dream, _ = save_dream_dir(tmp_path / "Dream-tiny-Base", sharded=False)
    config = json.loads((dream / "config.json").read_text())
    (dream / "config.json").write_text(json.dumps({**config, "lopa": {"attention": "full", "block_size": 16}}))
    monkeypatch.setattr(MODELS, "default", dream)
    demo, port = build_demo(), free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    try:
        with sync_api.sync_playwright() as p:
            browser = launch_chromium(p, WAIT_MS)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/?k=2", timeout=WAIT_MS)
            page.wait_for_selector("#settings", timeout=WAIT_MS, state="attached")
            open_accordion(page, "#settings", "#attention", timeout_s=WAIT_MS / 1000)      # the settings accordion
            # a choice shows in words with its code name beside (lopa.settings: Setting.choice_title)
            attention = SETTINGS["attention"].choice_title
            want = {"attention": attention("full"), "block_size": "16", "k": "2"}      # the model's own; the link's k
            assert wait_for(page, want) == want
            box = page.locator("#model-dir input")
            box.fill("sure-gsm-dllm")
            box.press("Enter")
            want = {"attention": attention("block_causal"), "block_size": "32", "k": "2"}  # the new model's; k kept
            assert wait_for(page, want) == want
            browser.close()
    finally:
        demo.close()
