"""Loaded traces are bounded by bytes, not counts: each is charged what it holds, a session and the
app have budgets, an upload over budget is refused with its size and the limit and changes nothing,
evicted runs give their bytes back, and the schema's file limit derives from the budget."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from big_trace import trace_json

from app import budget
from app.budget import Ledger, held_bytes
from app.runs import RunTree
from app.session import Session
from lopa import RunResult
from lopa.schema import JSON_EXPANSION, MAX_TRACE_BYTES, TRACE_MEMORY_BYTES

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
    monkeypatch.setattr("app.runs.LEDGER", budget.LEDGER)
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
    monkeypatch.setattr("app.runs.LEDGER", ledger)
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
    from app import callbacks
    path = tmp_path / "trace.json"
    path.write_text(trace_json(5, blocks=16, per_round=50))
    session = Session()
    monkeypatch.setattr(session.runs, "budget", 1000)
    status = callbacks.load_trace(session, str(path))[0]
    assert "could not load trace.json" in status and "a session may hold" in status and not session.runs.entries


def test_the_file_limit_derives_from_the_budget():
    assert MAX_TRACE_BYTES == TRACE_MEMORY_BYTES // JSON_EXPANSION and budget.SESSION_BUDGET_BYTES == TRACE_MEMORY_BYTES
    code = "import lopa.schema as s; print(s.TRACE_MEMORY_BYTES, s.MAX_TRACE_BYTES)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "LOPA_SESSION_MEMORY_MB": "40"}).stdout.split()
    assert [int(v) for v in out] == [40 << 20, (40 << 20) // JSON_EXPANSION]


def test_json_expansion_bounds_what_a_trace_becomes():
    """The numbers that cost most once parsed (each its own int or float object), and a whole
    trace of them, stay within JSON_EXPANSION bytes of memory per byte of JSON."""
    for values in ([300 + i for i in range(10_000)], [0.5] * 10_000, [1e5] * 10_000):
        text = json.dumps(values, separators=(",", ":"))
        assert held_bytes(json.loads(text)) <= JSON_EXPANSION * len(text), values[:2]
    text = trace_json(200, blocks=16, per_round=200)
    assert held_bytes(RunResult.from_json(text)) <= JSON_EXPANSION * len(text)
