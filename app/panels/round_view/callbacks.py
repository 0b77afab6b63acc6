"""The round view's callbacks, plain functions of (session, UI values) -> output tuples: Run, Step, Stop and
Reset, a run of the list selected, the rounds scrubbed and played, and a first fast Run's rounds shown again.

Each returns (or yields) values in the order of a constant (LIVE_OUTPUTS, VIEW_OUTPUTS: views.py, which
draws them), which the wiring maps to components by name; tests call these directly, without a browser.
Errors the user can cause (bad prompt, settings, files, model directory) become a message in the status
panel and a toast (error_message); the app keeps serving.
"""

from __future__ import annotations

import time
from contextlib import closing

import gradio as gr

from ...serving.boundary import stream_jobs
from ...serving.give_way import TURNS
from ...serving.inputs import text, whole
from ...serving.model_cache import MODELS
from ...serving.request import read_request
from ...serving.session import Backend, Session, forkable
from ..status import error_message, stop_pending
from ..viz import counters_html, token_canvas
from .views import LIVE_OUTPUTS, REFRESH_S, VIEW_OUTPUTS, answer_at, describe_run, live_outputs, replay_due, view

# A round number no trace reaches (lopa.schema bounds a trace's rounds far below it): the slider's bound.
MAX_ROUND = 10**6
# While streaming, the least seconds between two messages of a Run (the counters' round): each message has
# the page update and lay out its panels again, and the engine makes a round every few milliseconds on the
# bundled models: a message per round kept a page's renderer busy for the whole Run and more (a crowd's
# pages share the server's CPU where they run on it), and each message also holds the decode on the server
# while Gradio sends it. Four a second, the canvas's own pace (REFRESH_S["html"]): each message moves it.
MESSAGE_S = REFRESH_S["html"]


def _start_or_continue(session: Session, prompt: str, values, rounds: int | None = None) -> dict:
    """The job (app/serving/boundary.py) that begins a new decode, or continues a paused one of the same
    prompt, settings and backend. `values`: the settings inputs, optionally followed by the backend
    inputs, read once (app.serving.request.read_request: what the visitor touched is the request) and resolved
    once on the session's model. `rounds`: None to the end, 1 for Step."""
    prompt = text("prompt", prompt)
    request = read_request(values, session.touched)     # every input read before any model is touched
    folder = str(MODELS.folder(session.model))      # the session's own model (pick_model)
    loaded = MODELS.get(folder)     # here, in the server process: loaded into the cache; never inside a GPU call
    settings, backend = request.resolve(loaded.spec), request.backend
    if session.matches(prompt, settings, backend) and session.live.job["model"] == folder:
        return session.resume(rounds)
    return session.begin(folder, prompt, settings, backend, forkable(loaded, backend), rounds)


def bp_fault_message(err: RuntimeError) -> str:
    """A branch-parallel fault (a rank died, a timeout, a superseded run) as a page message."""
    return error_message(f"the branch-parallel backend failed: {err}. The decode was stopped; the next Run or "
                         "Step starts the worker ranks again (or choose the single-process backend).")


def _bp_fault(session: Session, err: RuntimeError, backend: Backend) -> str:
    """Status for a RuntimeError during a branch-parallel decode; re-raises any other RuntimeError,
    so the single-process backend behaves as before."""
    if not backend.parallel:
        raise err
    session.close()          # the snapshot of the rounds before the fault stays on the page
    return bp_fault_message(err)


# -- Run / Step / Stop / Reset ------------------------------------------------------------------
def run_stream(session: Session, prompt: str, *values):
    """Stream the decode live as the engine computes it (not a replay): its start at once, then the
    counters at most every MESSAGE_S and heavy outputs by REFRESH_S, all drawn at the end."""
    yield from drain(session, lambda: _start_or_continue(session, prompt, values), "Running…",
                     on_fault=lambda err: _bp_fault(session, err, session.backend), replay=True)


def decode_stop(session):
    """The round view's Stop: enabled while the session has a decode to stop (streaming, or paused after
    Step), else disabled."""
    return gr.update(interactive=getattr(session, "live", None) is not None)


# What Run and Enter in the prompt answer: LIVE_OUTPUTS and the round view's Stop, last.
RUN_OUTPUTS = LIVE_OUTPUTS + ("stop",)


def run_with_stop(session: Session, prompt: str, *values):
    """run_stream's outputs and the round view's Stop (RUN_OUTPUTS): left as it is while the decode streams
    (the page enabled it at the click: app.wiring.ENABLE_STOP_JS), then enabled only where a decode is left to
    stop (layout.decode_stop). In the Run's own messages: a call after each Run for it was one more event, and
    every event's messages cost the page (app.serving.progress.no_hidden_progress)."""
    for outputs in run_stream(session, prompt, *values):
        yield outputs + (gr.skip() if session.streaming else decode_stop(session),)


def drain(session: Session, begin, running: str, on_fault=None, replay: bool = False):
    """Begin a live decode (`begin()` returns its job), then yield LIVE_OUTPUTS after every round
    the boundary sends back until it ends or Stop is pressed; the last yield is the final state (with
    `replay`, a page's Run, marked where its rounds may be shown again: show_rounds_arriving).
    Shared by Run and the what-if forks."""
    try:
        session.check_free()
    except ValueError as err:
        yield live_outputs(session, error_message(err))
        return
    session.start_clock()
    try:
        job = begin()
        # The plots' clock starts with the job, after begin() (a new run starts every clock afresh): a Run
        # shorter than REFRESH_S["plots"] draws its figures once, at the end, not also at its first round
        # (plotly is most of what a page spends on a Run).
        session.last_render["plots"] = time.perf_counter()
        session.stop_requested, session.streaming = False, True
        yield live_outputs(session, running, final=False)
        sent = time.perf_counter()                      # when the last message was sent: this one
        with closing(stream_jobs([job])) as chunks:     # closed: the decode stops (and can be resumed)
            for (chunk,) in chunks:
                record = session.apply(chunk)
                if session.stop_requested and session.live is not None:
                    session.cancel()
                    break
                # The counters say which round (the status stays as sent): at most one message each MESSAGE_S,
                # however many rounds the engine makes meanwhile.
                now = time.perf_counter()
                if record is not None and now - sent >= MESSAGE_S:
                    sent = now
                    yield (gr.skip(),) + live_outputs(session, running, final=False)[1:]
        status = f"Done: {describe_run(session)}"
    except ValueError as err:
        status = error_message(err)
    except RuntimeError as err:
        if on_fault is None:
            raise
        status = on_fault(err)
    finally:                         # also when the browser goes away mid-run (GeneratorExit)
        session.streaming = False
        session.moves_at_end = session.view_moves
        session.stop_clock()
    yield live_outputs(session, status, lazy=session.page, replay=replay and session.page)


def step_once(session: Session, prompt: str, *values) -> tuple:
    """Advance exactly one round (starting a decode if none is live for this prompt and settings)."""
    try:
        session.check_free()
    except ValueError as err:
        return (error_message(err),) + live_outputs(session, "")[1:]
    session.start_clock()
    record = None
    try:
        job = _start_or_continue(session, prompt, values, rounds=1)
        with closing(stream_jobs([job])) as chunks:
            for (chunk,) in chunks:
                record = session.apply(chunk) or record
    except ValueError as err:
        session.stop_clock()
        return (error_message(err),) + live_outputs(session, "")[1:]
    except RuntimeError as err:
        session.stop_clock()
        return (_bp_fault(session, err, session.backend),) + live_outputs(session, "")[1:]
    session.stop_clock()
    if session.live is None:
        return live_outputs(session, f"Done: {describe_run(session)} Step again to start a new decode.")
    kind = {"prefill": " (the prompt's forward: nothing committed yet)"}.get(record.kind, "")
    return live_outputs(session, f"Paused after round {record.round}{kind}. Step for the next round, "
                                 "Run to continue to the end.")


# A visitor's first Run that ends sooner than REPLAY_UNDER_S is shown again, round by round, one every REPLAY_STEP_S:
# its rounds streamed live, but the canvas refreshes every REFRESH_S["html"], so a decode of a few tenths
# of a second showed its first and last rounds only. Once a session: later Runs rest on their end. It is
# for the visitor's eyes and no one waits on it: while another visitor's decode runs it is left out, or
# jumps to its end (boundary.TURNS), so it never shares the CPU with someone's Run. The page asks for it
# (app.panels.round_view.PAGE_ASKS_JS) when a Run's final counters carry data-replay: a Run that needs none sends no
# request for it (Gradio's page updates the loading state of every component it has seen on each message
# of each event, so each event of a Run costs every page some CPU, more the more components it holds).
REPLAY_STEP_S = 0.15
ARRIVING_OUTPUTS = ("round_slider", "canvas", "answer")


def show_rounds_arriving(session: Session):
    """ARRIVING_OUTPUTS, once per round of the session's first Run when it finished in under REPLAY_UNDER_S
    (else nothing): the round on the slider and the canvas, ending on the Run's final round. Anything the
    visitor starts meanwhile (Run, Step, Reset, another run) ends it; the slider and Play cancel it
    (the round view's wire, __init__.py)."""
    run = session.run

    def moved_on() -> bool:      # another run shown, a decode started, or the visitor took the slider or Play
        return (session.run is not run or session.streaming or session.live is not None
                or session.view_moves != session.moves_at_end)

    if not replay_due(session) or moved_on() or TURNS.busy():
        # a generator that yields nothing has Gradio set every output to None: the canvas would go blank
        yield tuple(gr.skip() for _ in ARRIVING_OUTPUTS)
        return
    session.shown_arriving = True
    for r in range(session.n_rounds):
        if moved_on():
            return
        if TURNS.busy():                                 # someone's decode: straight to the end
            r = session.n_rounds - 1
        yield gr.update(value=r), token_canvas(run, r, session.names), answer_at(session, r)
        if r == session.n_rounds - 1:
            return
        time.sleep(REPLAY_STEP_S)


def stop_run(session: Session) -> tuple:
    """(status, counters). A streaming Run stops after its current round (and says so); a paused decode
    stops now."""
    if session.streaming:
        session.stop_requested = True
        return stop_pending(), gr.skip()
    if session.live is not None:
        session.cancel()
        return f"Stopped: {describe_run(session)}", counters_html(session.run, session.elapsed, session.status())
    return "Nothing is running.", gr.skip()


def reset_session(session: Session) -> tuple:
    """Drop the decode and clear the view (LIVE_OUTPUTS)."""
    session.close()
    session.run, session.names, session.source, session.elapsed_before = None, {}, "idle", 0.0
    session.current = None
    return live_outputs(session, "Reset. Press Run or Step to start (the run list keeps earlier runs).")


def select_run(session: Session, run_id) -> tuple:
    """LIVE_OUTPUTS for another run of the run list (a paused decode is stopped first)."""
    try:
        session.select(str(run_id))
    except ValueError as err:
        return (error_message(err),) + live_outputs(session, "")[1:]
    entry = session.runs[session.current]
    where = (f", a fork of run {entry.parent} at round {entry.at_round}" if entry.parent else "")
    return live_outputs(session, f"Showing run {entry.id} ({entry.note}{where}).")


# -- scrub / play -------------------------------------------------------------------------------
def show_round(session: Session, r) -> tuple:
    """Heavy view of a recorded round (the slider), then the output so far at it (answer_at); a round
    outside the run shows its first or last."""
    try:
        r = whole("round", r, -MAX_ROUND, MAX_ROUND)
    except ValueError as err:
        raise gr.Error(str(err), print_exception=False) from None     # no status among these outputs
    session.view_moves += 1                          # a replay of the last Run (show_rounds_arriving) gives way
    return view(session, r) + (answer_at(session, r),)


def toggle_play(session: Session, playing: bool, r) -> tuple:
    """(timer, play button, playing). Play from the current round; from the start if at the end."""
    session.view_moves += 1
    if playing or session.n_rounds < 2:
        return gr.Timer(active=False), gr.update(value="▶ Play"), False
    return gr.Timer(active=True), gr.update(value="⏸ Pause"), True


def play_tick(session: Session, playing: bool, r) -> tuple:
    """One replay step: (slider, timer, play button, playing) + VIEW_OUTPUTS + (answer,) for the next round.
    A tick that arrives after Pause changes nothing; only Play, Pause and the last round switch the
    timer, so a tick in flight cannot restart it."""
    if not playing or session.n_rounds == 0:
        return (gr.skip(), gr.Timer(active=False), gr.skip(), False) + tuple(gr.skip() for _ in VIEW_OUTPUTS + ("answer",))
    n = session.n_rounds
    nxt = 0 if r is None or int(r) >= n - 1 else int(r) + 1
    done = nxt >= n - 1
    controls = (gr.update(value=nxt), gr.Timer(active=False) if done else gr.skip(),
                gr.update(value="▶ Play") if done else gr.skip(), not done)
    return controls + view(session, nxt) + (answer_at(session, nxt),)
