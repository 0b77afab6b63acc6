"""scripts/bench_crowd.py end to end: both sections in the smallest crowd (the server alone with two and three
API callers at once, then one idle page and one visitor who runs and steps); that it ends by
itself, killing its server, when its deadline passes first. Its figures are not checked (a benchmark prints
them: a busy machine must not fail a test), only that every one is measured and printed."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from servers import needs_chromium

pytestmark = pytest.mark.timeout(600)           # a hang guard

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_crowd.py"
SERVER_GOALS = {"later_of_two_ratio", "eight_callers_rate_ratio"}
PAGE_GOALS = {"idle_requests", "run_final_ratio", "rss_after_close_mb"}


def bench(*flags: str, timeout_s: float) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *flags], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    return proc, json.loads(lines[-1])             # the last line is the JSON one


def server_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def check_goals(proc, result: dict, names: set, unmeasured: set = frozenset()) -> None:
    """Every goal of `names` has its figure and a verdict, printed; those of `unmeasured` say so."""
    assert result["goals"].keys() == names
    for name, goal in result["goals"].items():
        if name in unmeasured:
            assert goal["value"] is None and goal["pass"] is None, (name, goal)
            assert re.search(rf"^goal {name} .*not measured$", proc.stdout, flags=re.M), proc.stdout[-2000:]
            continue
        assert goal["value"] is not None and isinstance(goal["pass"], bool), (name, goal)
        assert re.search(rf"^goal {name} .*(PASS|FAIL)$", proc.stdout, flags=re.M), proc.stdout[-2000:]


def check_server_alone(alone: dict, callers: list[int], runs: int) -> None:
    """The server-alone section: one caller's Runs, then each crowd's rounds, every caller timed, with the CPU
    seconds per Run of each side; the figures the goals read."""
    assert alone["complete"] and alone["endpoint"] == "/run"
    assert len(alone["alone"]) == runs * (1 + len(callers)) and all(s > 0 for s in alone["alone"])   # one before each round
    assert alone["alone_median_s"] > 0 and alone["alone_rate"] > 0
    assert alone["alone_cpu_s"].keys() == {"server", "workers", "callers"}
    assert [c["callers"] for c in alone["crowds"]] == callers
    for crowd in alone["crowds"]:
        assert [len(r) for r in crowd["rounds"]] == [crowd["callers"]] * runs, crowd
        assert len(crowd["walls_s"]) == runs and crowd["cpu_s"].keys() == {"server", "workers", "callers"}
        assert crowd["later_ratio"] > 0 and crowd["rate"] > 0 and crowd["rate_ratio"] > 0, crowd
    assert alone["threads"]["server"] > 0 and len(alone["threads"]["workers"]) == alone["workers"]
    assert alone["server"]["tracebacks_in_log"] == 0, Path(alone["server"]["log"]).read_text()[-3000:]
    assert server_gone(alone["server"]["pid"])


# Both sections, each with a server of its own: the server alone with the decode workers a CPU Space gets and 2
# and 3 callers at once (its API callers need no browser), then the pages: 76 s in a full suite on this 2-core
# machine, over the ~90 s a test of the default selection may take near load 8, so `-m "not slow"` leaves it out.
@needs_chromium
@pytest.mark.browser
@pytest.mark.slow
def test_the_smallest_crowd_runs_end_to_end_and_prints_every_figure(tmp_path):
    pytest.importorskip("playwright.async_api")
    out = tmp_path / "crowd.json"
    proc, result = bench("--idle", "1", "--active", "1", "--watch-s", "3", "--alone", "1", "--runs", "1", "--settle-s", "3",
                         "--api-callers", "2,3", "--api-runs", "1", "--actions", "steps",
                         "--deadline-s", "480", "--json", str(out), timeout_s=560)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["complete"] and result["error"] is None, proc.stdout[-3000:]
    assert json.loads(out.read_text()) == result
    assert {"config", "machine", "server_alone", "pages", "goals", "elapsed_s"} <= set(result)
    check_goals(proc, result, SERVER_GOALS | PAGE_GOALS, unmeasured={"eight_callers_rate_ratio"})
    check_server_alone(result["server_alone"], [2, 3], 1)
    # As on a CPU Space (SPACE_ID set): decode workers wherever this machine has two cores or more.
    assert result["config"]["workers"] == "space"
    assert result["server_alone"]["workers"] >= (1 if len(os.sched_getaffinity(0)) >= 2 else 0)
    pages = result["pages"]
    assert {"warmup", "alone", "crowd", "idle", "server", "complete"} <= set(pages)
    [page] = pages["idle"]
    assert page["settled"] and page["load_requests"] > 0           # its load was seen, so requests are counted
    assert page["total"] == sum(page["during_active"].values()) + sum(page["during_watch"].values())
    [alone], [visitor] = pages["alone"], pages["crowd"]
    for run in (alone, *visitor["runs"]):
        assert 0 < run["first_round_s"] <= run["final_s"] and run["server_s"] > 0, run
    assert set(alone["cpu_s"]) >= {"server", "workers", "browsers"} and alone["cpu_s"]["browsers"] > 0
    # The page is driven as a visitor would: a failed step means the figures no longer describe the app.
    assert visitor["actions"]["steps"]["ok"], visitor["actions"]
    server = pages["server"]
    assert server["cpu_s"].keys() == {"alone", "crowd", "watch"}
    assert {"start", "peak", "end"} <= server["rss_mb"].keys()
    assert server["tracebacks_in_log"] == 0, Path(server["log"]).read_text()[-3000:]
    assert server_gone(server["pid"])
    assert proc.stdout.index("== the server alone") < proc.stdout.index("== co-located pages")   # the headline first


def test_requests_are_counted_by_path_and_handler_within_their_window():
    """A page's requests under /gradio_api/ are counted by path, a queue join or a direct call by the handler it
    runs, without the session hash, each in the window it was sent in; other requests are not counted."""
    sys.path.insert(0, str(SCRIPT.parent))
    from crowd.pages import Requests

    class Page:
        def on(self, event, handler):
            self.send = handler

    def request(path: str, body: dict | None = None):
        return SimpleNamespace(url=f"http://127.0.0.1:7860{path}", post_data=json.dumps(body) if body else None)

    page = Page()
    seen = Requests(page, {7: "follow_session_model (#model-info.change)"})
    page.send(request("/gradio_api/heartbeat/k3j2h1"))
    page.send(request("/assets/index.js"))
    time.sleep(0.01)
    start = time.monotonic()
    page.send(request("/gradio_api/queue/join", {"fn_index": 7, "session_hash": "k3j2h1"}))
    page.send(request("/gradio_api/queue/data?session_hash=k3j2h1"))
    page.send(request("/gradio_api/run/predict", {"fn_index": 7}))
    assert seen.counted(0, start) == {"heartbeat": 1}
    assert seen.counted(start) == {"queue/join follow_session_model (#model-info.change)": 1, "queue/data": 1,
                                   "run/predict follow_session_model (#model-info.change)": 1}


@needs_chromium
def test_the_callers_look_for_their_messages_often_and_keep_the_clock():
    """gradio_client looks for a job's next message in two loops that sleep 0.05 s between looks (a Run's end seen up
    to 50 ms late); the callers make those sleeps LOOK_S, every other use of the time module as it was."""
    pytest.importorskip("gradio_client")
    import inspect
    import time as real

    import gradio_client.utils as client_utils
    sys.path.insert(0, str(SCRIPT.parent))
    from crowd.callers import LOOK_S, look_often

    loops = [inspect.getsource(f) for f in (client_utils.stream_sse_v1plus, client_utils.check_for_cancel)]
    assert all("time.sleep(0.05)" in source for source in loops)        # what look_often shortens is still there
    saved = client_utils.time
    slept = []
    try:
        real_sleep, real.sleep = real.sleep, slept.append
        look_often()
        client_utils.time.sleep(0.05)
        client_utils.time.sleep(0.0001)
    finally:
        real.sleep = real_sleep
        client_utils.time = saved
    assert slept == [LOOK_S, 0.0001]


def test_a_deadline_before_the_server_answers_ends_the_run_and_kills_the_server():
    proc, result = bench("--deadline-s", "3", "--settle-s", "1", timeout_s=120)
    assert proc.returncode == 2 and not result["complete"]           # nothing could be measured
    assert "3 s" in result["error"] and "incomplete" in proc.stdout
    assert all(goal["pass"] is None for goal in result["goals"].values())
    assert result["goals"].keys() == SERVER_GOALS | PAGE_GOALS
    assert server_gone(result["server_alone"]["server"]["pid"])
    assert "server" not in result["pages"] or "pid" not in result["pages"]["server"]   # never started


def test_descendants_finds_every_process_under_a_pid_however_deep():
    """--browser-nice lowers every process under the benchmark but the server's: the browser is a grandchild (under
    Playwright's driver) and its renderers one level further, beside siblings with children of their own."""
    sys.path.insert(0, str(SCRIPT.parent))
    from crowd.procs import descendants

    # two children, each with a child of its own, one of which has a child too
    tree = subprocess.Popen(["sh", "-c", "sleep 60 & sh -c 'sleep 60 & sleep 60' & wait"])
    try:
        deadline = time.monotonic() + 30
        while len(descendants(tree.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        found = descendants(tree.pid)
        assert len(found) == 4, found                   # sleep, sh, and the inner sh's two sleeps
        assert set(found) <= set(descendants(os.getpid()))     # and all of them are under this process too
    finally:
        for pid in descendants(tree.pid):
            os.kill(pid, signal.SIGKILL)
        tree.kill()
        tree.wait()
