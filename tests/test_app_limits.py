"""The app's bounds: a session's run list and saved states are capped, an expired session is
freed, and uploads are limited to the trace size the schema accepts."""

from types import SimpleNamespace

from app import LAUNCH_KWARGS
from app.runs import MAX_RUNS, RunTree
from app.session import Session, end_session
from lopa.read_budget import MAX_TRACE_BYTES


def fake_run():
    return SimpleNamespace(records=[1], text="", stopped=False)


def test_the_run_list_is_bounded_and_keeps_the_newest_run_and_its_ancestors():
    tree = RunTree()
    for i in range(3 * MAX_RUNS):
        tree.add(f"run {i}", run=fake_run())
    assert len(tree.entries) == MAX_RUNS
    oldest = next(iter(tree.entries))                               # the oldest surviving original run
    fork = tree.add("a fork of the oldest run", parent=oldest, run=fake_run())
    assert len(tree.entries) <= MAX_RUNS and {oldest, fork.id} <= set(tree.entries)   # the newest line survives


def test_an_expired_session_is_freed():
    session = Session()
    session.runs.add("a run", run=fake_run())
    end_session(session)
    assert not session.runs.entries and session.run is None and session.live is None


def test_uploads_are_capped_at_the_trace_limit():
    assert LAUNCH_KWARGS["max_file_size"] == MAX_TRACE_BYTES


def test_gradio_keeps_a_bounded_number_of_sessions():
    """Gradio's SessionState outlives the gr.State TTL; only its capacity bounds it (README "Limits")."""
    assert 0 < LAUNCH_KWARGS["state_session_capacity"] <= 64
