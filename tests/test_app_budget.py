"""Loaded traces are bounded by bytes, not counts: each is charged what it holds, a session and the
app have budgets, an upload over budget is refused with its size and the limit and changes nothing,
evicted runs give their bytes back, a read is charged to the app while it runs (so reads in several
sessions at once cannot overrun it), reading a JSON trace costs no more than read_cost says (hostile
shapes included; Parquet: tests/test_parquet_budget.py), and the schema's limits derive from the
budget."""

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from big_trace import trace_json

from app.serving import budget
from app.serving.budget import Ledger, held_bytes
from app.serving.runs import RunTree
from app.serving.session import Session
from lopa import RunResult
from lopa.read_budget import MAX_TRACE_BYTES, READ_BYTES, TRACE_MEMORY_BYTES, read_cost

ROOT = Path(__file__).resolve().parent.parent


def loaded(rounds: int, per_round: int = 50) -> RunResult:
    return RunResult.from_json(trace_json(rounds, blocks=16, per_round=per_round))


def test_a_run_is_charged_what_it_holds():
    small, large = loaded(10), loaded(40)
    assert 4 * held_bytes(small) * 0.8 < held_bytes(large) < 4 * held_bytes(small) * 1.2
    shared = [1000 + i for i in range(100)]
    assert held_bytes([shared, shared]) < held_bytes([shared, list(shared)])    # each object counted once


def test_a_session_keeps_its_loaded_traces_within_its_budget(monkeypatch):
    monkeypatch.setattr(budget, "LEDGER", Ledger(1 << 40))
    monkeypatch.setattr("app.serving.runs.LEDGER", budget.LEDGER)
    one = held_bytes(loaded(20))
    tree = RunTree(budget=int(2.5 * one))
    ids = [tree.add("loaded trace", source="replay", run=loaded(20)).id for _ in range(5)]
    assert tree.held <= tree.budget and list(tree.entries) == ids[-2:]       # the oldest went first
    assert budget.LEDGER.held == tree.held


def test_a_trace_over_the_session_budget_is_refused_and_nothing_changes():
    session = Session()
    session.replay(loaded(5), {})
    before = (dict(session.runs.entries), session.current, session.run)
    session.runs.budget = held_bytes(loaded(5)) // 2
    with pytest.raises(ValueError, match=r"takes \d+ KB in memory; a session may hold \d+ KB"):
        session.replay(loaded(5), {})
    assert (dict(session.runs.entries), session.current, session.run) == before


def test_the_app_budget_holds_across_sessions_and_evicted_runs_give_bytes_back(monkeypatch):
    one = held_bytes(loaded(20))
    ledger = Ledger(int(2.5 * one))
    monkeypatch.setattr("app.serving.runs.LEDGER", ledger)
    first, second = RunTree(), RunTree()
    first.add("loaded trace", source="replay", run=loaded(20))
    second.add("loaded trace", source="replay", run=loaded(20))
    with pytest.raises(ValueError, match=r"the app holds \d+ KB of loaded traces .* may hold \d+ KB; this trace "
                                         r"needs \d+ KB"):
        first.add("loaded trace", parent="1", source="replay", run=loaded(20))   # its own root cannot go
    assert len(first.entries) == 1 and ledger.held == first.held + second.held
    del second                                            # a session's runs dropped: their bytes come back
    assert ledger.held == first.held
    first.remove("1")
    assert ledger.held == 0


def test_the_upload_callback_says_why_a_trace_was_refused(tmp_path, monkeypatch):
    from app.panels import traces
    path = tmp_path / "trace.json"
    path.write_text(trace_json(5, blocks=16, per_round=50))
    session = Session()
    monkeypatch.setattr(session.runs, "budget", 1000)
    status = traces.load_trace(session, str(path))[0]
    assert "could not load trace.json" in status and "a session may hold" in status and not session.runs.entries


def test_the_limits_derive_from_the_budget():
    assert budget.SESSION_BUDGET_BYTES == TRACE_MEMORY_BYTES == budget.HOLD_BYTES + READ_BYTES
    assert MAX_TRACE_BYTES == READ_BYTES // 2 and Session().runs.budget == budget.HOLD_BYTES
    code = "import lopa.read_budget as s; print(s.TRACE_MEMORY_BYTES, s.READ_BYTES, s.MAX_TRACE_BYTES)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "LOPA_SESSION_MEMORY_MB": "40"}).stdout.split()
    assert [int(v) for v in out] == [40 << 20, 20 << 20, 10 << 20]


def test_a_trace_that_would_cost_too_much_to_read_is_refused_before_parsing(monkeypatch):
    text = trace_json(5, blocks=16, per_round=50)
    monkeypatch.setattr("lopa.read_budget.READ_BYTES", read_cost(text) - 1)
    monkeypatch.setattr("lopa.trace.json.loads", lambda *a, **k: pytest.fail("parsed a trace over its read budget"))
    with pytest.raises(ValueError, match=r"reading this trace would take up to \d+ MB of memory; a trace may take \d+ MB"):
        RunResult.from_json(text)


def _ledger(monkeypatch, budget: int) -> Ledger:
    """A fresh app budget for the upload callback and the run lists."""
    ledger = Ledger(budget)
    monkeypatch.setattr("app.panels.traces.LEDGER", ledger)
    monkeypatch.setattr("app.serving.runs.LEDGER", ledger)
    return ledger


def _read_bound(path) -> int:
    """The most a read of `path` is charged at once (the bounds RunResult.load checks)."""
    bounds = []
    RunResult.load(path, reserve=bounds.append)
    return max(bounds)


def test_a_read_is_charged_to_the_app_while_it_runs_and_gives_it_back_after(tmp_path, monkeypatch):
    from app.panels import traces
    path = tmp_path / "trace.json"
    path.write_text(trace_json(40, blocks=16, per_round=50))
    bound = _read_bound(path)
    ledger = _ledger(monkeypatch, bound)               # exactly one read: its run takes the read's charge
    session = Session()
    with ledger.reading_trace() as other:              # another session's read, under way
        other.reserve(bound // 2)
        status = traces.load_trace(session, str(path))[0]
        assert re.search(r"reading this trace may take \d+ KB; the app holds 0 KB of loaded traces and \d+ KB for "
                         r"other reads in progress, for all visitors, and may hold \d+ KB", status), status
        assert not session.runs.entries and ledger.reading == bound // 2
    assert ledger.reading == 0
    traces.load_trace(session, str(path))
    assert len(session.runs.entries) == 1 and ledger.reading == 0 and ledger.held == session.runs.held > 0


def test_a_read_that_fails_gives_its_charge_back(tmp_path, monkeypatch):
    from app.panels import traces
    ledger = _ledger(monkeypatch, 1 << 30)
    data = json.loads(trace_json(5, blocks=16, per_round=50))
    data["records"][2]["winner"] = 99
    bad_json, bad_parquet = tmp_path / "bad.json", tmp_path / "bad.parquet"
    bad_json.write_text(json.dumps(data))
    RunResult._from_parts(data, data["records"]).save(bad_parquet)
    session = Session()
    for path in (bad_json, bad_parquet):
        assert "invalid trace: records.2" in traces.load_trace(session, str(path))[0]
        assert ledger.reading == 0 and ledger.held == 0 and not session.runs.entries


def test_two_sessions_reading_at_once_cannot_overrun_the_app(tmp_path, monkeypatch):
    """Session A's read is paused while it parses; session B's read, which the app cannot cover beside
    it, is refused; A's goes on and is kept."""
    from app.panels import traces
    path = tmp_path / "trace.json"
    path.write_text(trace_json(40, blocks=16, per_round=50))
    ledger = _ledger(monkeypatch, _read_bound(path) * 3 // 2)
    parsing, go_on, loads = threading.Event(), threading.Event(), json.loads

    def paused_loads(text, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            parsing.set()
            assert go_on.wait(30)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr("lopa.trace.json.loads", paused_loads)
    first, second, statuses = Session(), Session(), {}
    reader = threading.Thread(target=lambda: statuses.update(first=traces.load_trace(first, str(path))[0]))
    reader.start()
    assert parsing.wait(30)
    statuses["second"] = traces.load_trace(second, str(path))[0]
    assert ledger.reading > 0
    go_on.set()
    reader.join(30)
    assert "reading this trace may take" in statuses["second"] and not second.runs.entries
    assert "Replaying a trace of 40 rounds" in statuses["first"] and len(first.runs.entries) == 1
    assert ledger.reading == 0 and ledger.held == first.runs.held


def test_the_bounds_a_read_checks_are_charged_before_each_step(tmp_path):
    """RunResult.load hands each bound to `reserve` before spending it: refusing the first stops the
    read before the file is opened, for JSON and Parquet alike."""
    run = RunResult.from_json(trace_json(5, blocks=16, per_round=50))
    for suffix in ("json", "parquet"):
        path = run.save(tmp_path / f"t.{suffix}")
        bounds = []
        RunResult.load(path, reserve=bounds.append)
        assert len(bounds) == 3 and all(0 < b <= READ_BYTES for b in bounds)

        def refuse(nbytes):
            raise ValueError("no room")
        with pytest.raises(ValueError, match="no room"):
            RunResult.load(path, reserve=refuse)


def _junk(value) -> str:
    """A valid trace carrying `value` where the schema lets free-form JSON through (an ignored key)."""
    data = json.loads(trace_json(4, blocks=16, per_round=8))
    return json.dumps({**data, "junk": value}, separators=(",", ":"))


def _forced_and_extra(n: int) -> str:
    """Kept, validated shapes: many Forced models per round, and lists in a round's free-form extra."""
    data = json.loads(trace_json(4, blocks=16, per_round=8))
    for record in data["records"]:
        record["forced"] = [{"action": "hold", "position": 1} for _ in range(n)]
        record["extra"] = {"x": [[] for _ in range(n)]}
    return json.dumps(data, separators=(",", ":"))


def _bad_record(change) -> str:
    """A trace whose first round is changed by `change`: pydantic stops at its first error in it."""
    data = json.loads(trace_json(4, blocks=16, per_round=8))
    change(data["records"][0])
    return json.dumps(data, separators=(",", ":"))


N = 100_000
SHAPES = {   # what a byte of JSON can become, the costliest first: each must stay within read_cost
    "nested lists": lambda: _junk([json.loads("[" * 50 + "]" * 50)] * (N // 50)),
    "empty lists": lambda: _junk([[] for _ in range(N)]),
    "one-key dicts": lambda: _junk([{"": 0} for _ in range(N)]),
    "unique keys": lambda: _junk({f"{i:x}": 0 for i in range(N)}),
    "short strings": lambda: _junk([f"{i % 99:02}" for i in range(N)]),
    "a wide string": lambda: _junk("\U0001F600" + "a" * (4 * N)),
    "floats": lambda: _junk([1e5 + i for i in range(N)]),
    "forced and extra": lambda: _forced_and_extra(8000),          # the schema's most per round
    "unknown keys in a round": lambda: _bad_record(lambda r: r.update({f"{i:x}": 0 for i in range(N)})),
    "bad numbers in a branch": lambda: _bad_record(lambda r: r["branch_positions"][0].extend([""] * N)),
    "a real-shaped trace": lambda: trace_json(400, blocks=16, per_round=200),
}

PEAK = r"""
import gc, sys
from lopa import RunResult
def status(field):
    return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith(field + ":"))
gc.collect()
open("/proc/self/clear_refs", "w").write("5")        # VmHWM from here: the read's own peak
before = status("VmRSS")
try:
    RunResult.load(sys.argv[1])
except ValueError:                                   # a refused trace: what refusing it took
    pass
print(status("VmHWM") - before)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's peak-RSS counter")
@pytest.mark.parametrize("shape", SHAPES)
def test_reading_a_trace_never_takes_more_than_its_read_cost(tmp_path, shape):
    """Measured as the kernel sees it (peak RSS of a fresh process loading the file), so allocator
    rounding and the validated copy count; a READ_COST too small for any shape fails here."""
    text = SHAPES[shape]()
    path = tmp_path / "t.json"
    path.write_text(text)
    env = {**os.environ, "LOPA_SESSION_MEMORY_MB": "4096", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    peak = int(out.stdout)
    assert 0 < peak <= read_cost(text), f"{shape}: read took {peak} bytes, read_cost says at most {read_cost(text)}"
