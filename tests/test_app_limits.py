"""The app's bounds: a session's run list and saved states are capped, an expired session is
freed, and uploads are limited to the trace size the schema accepts."""

from types import SimpleNamespace

from app import LAUNCH_KWARGS
from app.serving.runs import MAX_RUNS, RunTree
from app.serving.session import Session, end_session
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
    """A paused decode and the states a run's forks would resume from live in app.serving.boundary's small shared
    cache (MAX_KEPT for all sessions); a session that ends (closed page, expiry) takes its own out of it."""
    from tiny import app_model

    from app.panels.round_view import callbacks as cb
    from app.serving import boundary
    from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE
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


def test_a_closed_page_ends_its_jobs_then_leaves_gradios_holder_even_when_a_job_adds_a_state_meanwhile():
    """demo.unload (app.serving.closed_pages.end_page) ends the page's jobs in Gradio's queue (each step of a stream would
    make the page's record afresh), then its States, and drops Gradio's record of the page. An event still in
    its last step may add a State to the record while the callbacks run; Gradio's own
    StateHolder.delete_state then fails ("dictionary changed size during iteration") and left the record."""
    import asyncio

    import gradio as gr
    from gradio.state_holder import StateHolder

    from app.serving.closed_pages import end_page
    happened = []
    with gr.Blocks() as demo:
        late = gr.State(None)                                         # a State no event had touched yet
        first = gr.State(None, delete_callback=lambda value: (happened.append(value), record[late._id]))
        session = gr.State(None, delete_callback=end_session)
    holder = StateHolder()
    holder.set_blocks(demo)
    record = holder["page"]
    mine = Session()
    mine.runs.add("a run", run=fake_run())
    record[first._id], record[session._id] = "first", mine

    class Queue:
        async def clean_events(self, *, session_hash=None, event_id=None):
            happened.append(("jobs ended", session_hash, "page" in holder.session_data))

    app = SimpleNamespace(state_holder=holder, get_blocks=lambda: SimpleNamespace(_queue=Queue()))
    asyncio.run(end_page(SimpleNamespace(session_hash="page", request=SimpleNamespace(app=app))))
    assert "page" not in holder.session_data and "page" not in holder.time_last_used
    assert happened == [("jobs ended", "page", True), "first"]               # the jobs first, then every State
    assert not mine.runs.entries and mine.run is None and not record.state_data
