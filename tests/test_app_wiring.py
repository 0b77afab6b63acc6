"""wire() walks the page's panels (app.wiring.PANELS) and keeps the order Gradio 6.31's page dispatches in:
each Stop is enabled by a listener added before its job's, the page load's listeners read the link before
the model is warmed, and nothing the app itself updates (a Markdown's text, the settings inputs it fills
in) has a listener that would send a request from an idle page."""

import pytest

from app import build_demo, wiring
from app.wiring import ENABLE_STOP_JS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def listeners():
    """{(elem_id or 'page', event): [handler names, in the order added]} of the built page."""
    demo = build_demo()
    out = {}
    for fn in demo.fns.values():
        for block_id, event in fn.targets:
            block = demo.blocks.get(block_id)
            name = "page" if block is None or block is demo else (block.elem_id or type(block).__name__)
            out.setdefault((name, event), []).append(fn.name if fn.fn is not None or fn.js != ENABLE_STOP_JS
                                                     else "enable-stop (in the page)")
    return out


def test_each_stop_is_enabled_before_the_job_it_stops_starts(listeners):
    for starts in wiring.STOP_STARTS.values():
        for start in starts:
            event = "submit" if start == "prompt" else "click"
            handlers = listeners[(start.replace("_", "-"), event)]
            assert handlers[0] == "enable-stop (in the page)" and len(handlers) >= 2, (start, handlers)


def test_the_page_load_reads_the_link_then_warms_the_model(listeners):
    ours = ("on_load", "open_canvas_link", "warm_model")         # beside Gradio's own (a gr.State's factory)
    assert [name for name in listeners[("page", "load")] if name in ours] == list(ours)


def test_only_the_visitor_s_own_changes_send_requests(listeners):
    from app.serving.session import SETTING_NAMES
    for name in SETTING_NAMES:
        elem = name.replace("_", "-")
        assert (elem, "change") not in listeners, name           # filled in by the app: no listener
        assert listeners[(elem, "input")] == [f"touch_{name}"]  # typed or picked by the visitor
    assert not [key for key in listeners if key[0] in ("model-info", "denoise-model") and key[1] == "change"]


def test_every_panel_wires_itself_in_a_few_lines():
    import inspect
    assert len(wiring.PANELS) == len(set(wiring.PANELS))
    for panel in wiring.PANELS:
        assert len(inspect.getsource(panel.wire).splitlines()) <= 30, panel.__name__
    assert len(inspect.getsource(wiring.wire).splitlines()) <= 15


def test_the_session_is_the_page_s_from_its_first_load_listener():
    """The session a shared link sets up on load (its settings as the visitor's, its DiffusionGemma folder) is
    the one every later event reads: the session State is no factory, whose own load event Gradio would run
    after the page's listeners, replacing it with a fresh one; the first load listener hands it back, so
    Gradio times its time-to-live (and ends it with the page) from then."""
    demo = build_demo()
    session = next(fn for fn in demo.fns.values() if fn.name == "warm_model").inputs[0]
    assert type(session).__name__ == "State" and not callable(session.value)
    setters = [fn.name for fn in demo.fns.values() if session in fn.outputs]
    assert setters == ["on_load"]


def test_events_with_hidden_progress_name_no_progress_target():
    """app.serving.progress.no_hidden_progress: Gradio's page hands every progress target it has seen its loading state
    again on each status message of any event, deep-copying its props; an event whose progress shows nothing
    names none (Run's included), and those whose progress shows keep their outputs."""
    config = build_demo().get_config_file()
    deps = {d.get("api_name"): d for d in config["dependencies"]}
    hidden = [d for d in config["dependencies"] if d.get("show_progress") == "hidden"]
    assert len(hidden) > 50 and all(d["show_progress_on"] == [] for d in hidden)
    assert deps["run"]["show_progress_on"] == [] and deps["new_tour_state"]["show_progress_on"] == []
    assert deps["warm_model"]["show_progress"] == "full" and deps["warm_model"]["show_progress_on"] is None


def test_an_idle_queue_sleeps_quietly(monkeypatch):
    """app.serving.queue.quiet_queue: Gradio's queue, with no job to start and none running, sleeps QUEUE_POLL_S and
    PROGRESS_POLL_S between looks (Gradio's 0.001 s and 0.01 s woke an idle server 1,100 times a second)."""
    import asyncio

    import gradio.queueing

    from app.serving.queue import PROGRESS_POLL_S, QUEUE_POLL_S
    queue = build_demo()._queue
    asked = []
    real_sleep = asyncio.sleep

    async def sleep(seconds, *args):
        asked.append(seconds)
        if len(asked) >= 20:
            queue.stopped = True
        await real_sleep(0)

    monkeypatch.setattr(gradio.queueing.asyncio, "sleep", sleep)

    async def look():
        await asyncio.gather(queue.start_processing(), queue.start_progress_updates())
    asyncio.run(asyncio.wait_for(look(), 30))                               # a hang guard
    assert QUEUE_POLL_S in asked and PROGRESS_POLL_S in asked
    assert min(asked) >= QUEUE_POLL_S >= 0.01
