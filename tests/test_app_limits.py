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


def test_an_ended_session_drops_its_kept_decodes(tmp_path_factory):
    """A paused decode and the states a run's forks would resume from live in app.boundary's small shared
    cache (MAX_KEPT for all sessions); a session that ends (closed page, expiry) takes its own out of it."""
    from tiny import app_model

    from app import boundary
    from app import callbacks as cb
    from app.session import APP_DEFAULTS, SETTING_NAMES, SINGLE
    prompt = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
    settings = dict(APP_DEFAULTS, k=1, block_size=8, max_new_tokens=32, temperature=0.0)
    values = [settings[n] for n in SETTING_NAMES] + [SINGLE, 2]
    with app_model(tmp_path_factory):
        boundary.forget_kept()
        other, mine = Session(), Session()
        cb.step_once(other, prompt, *values)                      # another visitor's paused decode
        cb.step_once(mine, prompt, *values)
        kept_before = len(boundary._kept)
        assert kept_before == 2
        end_session(mine)
        assert len(boundary._kept) == 1 and other.live is not None
        assert "Paused" in cb.step_once(other, prompt, *values)[0] or other.live is None   # the other one goes on
        boundary.forget_kept()
