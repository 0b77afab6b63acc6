import atexit
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest
import torch

# Each pytest-xdist worker (scripts/test.sh runs two) keeps the files libraries write during a test in
# a folder of its own, so two workers never write one file: transformers' copies of remote code and
# custom_generate/ (HF_MODULES_CACHE), gradio's uploads and downloads (GRADIO_TEMP_DIR). Set before
# either library is imported; pytest's tmp_path is per worker already.
SCRATCH = tempfile.mkdtemp(prefix=f"lopa-tests-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
os.environ.setdefault("HF_MODULES_CACHE", os.path.join(SCRATCH, "hf-modules"))
os.environ.setdefault("GRADIO_TEMP_DIR", os.path.join(SCRATCH, "gradio"))

# The app's callbacks decode in this process (app/serving/decode_pool.py's workers stay off, whatever the shell says)
# unless a test starts a pool of its own: tests/test_app_decode_pool.py.
os.environ["LOPA_DECODE_WORKERS"] = "0"

# CI machines have two cores and other work running; one thread keeps timings of tests sane.
torch.set_num_threads(1)


def patient_url_ok(url: str, within_s: float = 120.0) -> bool:
    """gradio.networking.url_ok, patient: Gradio 6.31's launch() asks the served page once per 0.5 s, 5 times,
    and gives up at the first answer slower than 3 s ("When localhost is not accessible, a shareable link must
    be created"): a page built by a busy 2-core machine can take longer. Here each ask may take 30 s, for up
    to `within_s` in all (a hang guard, not a timing)."""
    import time

    import httpx
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if httpx.head(url, timeout=30, verify=False).status_code in (200, 401, 301, 302, 303, 307, 308):
                return True
        except (httpx.ConnectError, httpx.TimeoutException):
            pass
        time.sleep(0.5)
    return False


import gradio.networking  # noqa: E402  (after GRADIO_TEMP_DIR is set above)

gradio.networking.url_ok = patient_url_ok


@pytest.fixture(scope="module")
def app_model_dir(tmp_path_factory):
    """A fresh tiny model as the app's default model for the module (tests/tiny.py app_model); its folder."""
    from tiny import app_model
    with app_model(tmp_path_factory) as path:
        yield path


@pytest.fixture
def every_round(monkeypatch):
    """A Run's stream sends every round (app.panels.round_view.callbacks.MESSAGE_S = 0), for tests that step it round by round:
    the bundled models make rounds faster than the page is sent them."""
    from app.panels.round_view import callbacks
    monkeypatch.setattr(callbacks, "MESSAGE_S", 0.0)


@pytest.fixture
def offline(monkeypatch):
    """No connection leaves this process: a harness that tried the hub would fail the test."""
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def require_bubblewrap() -> None:
    """Skip where bubblewrap is not installed; FAIL, with bwrap's own reason, where it is installed
    but cannot start (a CI that cannot run the sandbox must not go green by skipping its tests)."""
    from lopa.tasks.sandbox import isolation
    found = isolation()
    if found.bubblewrap == "not installed":
        pytest.skip("needs bubblewrap (apt-get install bubblewrap; scripts/test.sh installs it as root)")
    if not found.ready:
        pytest.fail(f"bubblewrap is installed but cannot start: {found.reason}", pytrace=False)


@pytest.fixture
def bubblewrap():
    """For tests of what runs under bubblewrap: see require_bubblewrap."""
    require_bubblewrap()


# The app served in this process and Debian's Chromium, for a browser test module (tests/servers.py); a
# module that serves the app otherwise, or needs other waits, defines its own.
@pytest.fixture(scope="module")
def url(tmp_path_factory):
    from servers import serve_app
    yield from serve_app(tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    from servers import open_browser
    yield from open_browser(180_000)          # a hang guard only


# The test files that take longest, longest first (seconds each in a full run with 3 workers: 104 down to 14),
# then the others in name order. A worker takes a file at a time (--dist loadfile) in this order
# (scripts/test.sh passes --no-loadscope-reorder: pytest-xdist would otherwise start with the files of most tests,
# the quick ones, and leave a 2-minute file for the end, with the other workers idle). Re-measure with
# `bash scripts/test.sh --junitxml=run.xml` and sum each file's times (CONTRIBUTING.md, "How long the suite takes").
LONGEST_FIRST = ("test_layout_browser", "test_bench_crowd", "test_app_browser_crowd", "test_phone_layout_browser",
                 "test_app_browser", "test_eval_tasks", "test_bad_input_cli", "test_wheel", "test_eval",
                 "test_app_decode_pool", "test_parquet_budget", "test_parallel", "test_readability_browser",
                 "test_bench_gpu", "test_tour_browser", "test_study_headroom", "test_app_denoise",
                 "test_study_figures", "test_sandbox_battery", "test_study_progress", "test_app_zerogpu",
                 "test_teach_words_browser", "test_app_browser_figures", "test_app_api")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))      # stable: each file's own order kept
