"""The one place where components meet callbacks: wire() walks PANELS, a table of the page's panels,
each connecting its own events in a few lines (app/page.py lays the panels out). Model events share
one concurrency group (MODEL) with a slot per decode worker (app/decode_pool.py; one slot without them),
each session's own model events one at a time (in_turn); the long jobs (a search, a study) run in a
group beside it (LONG), and view-only events beside both."""

from __future__ import annotations

import functools
import inspect

import gradio as gr

from . import layout
from .panels import best_order, forks, share, traces
from .panels import settings as model_and_settings
from .panels.compare import COMPARE_OUTPUTS, compare_runs, compare_stream, stop_compare
from .panels.denoise import callbacks as denoise
from .panels.denoise import traces as canvas_traces
from .panels.round_view import callbacks as cb
from .panels.studies import callbacks as studies
from .panels.tour import callbacks as tour
from .serving import api
from .serving.decode_pool import POOL
from .serving.session import BACKEND_NAMES, SETTING_NAMES, SINGLE, WORKER_RANGE, end_page, take_turn

# Every event that runs the model: one slot per decode worker (app/decode_pool.py; one without workers), each
# session's own events one at a time (in_turn).
MODEL = dict(concurrency_id="model", concurrency_limit=max(1, POOL.size))
# The jobs that run for many decodes (the best-order search, a live study) take a slot of their own beside
# MODEL: in MODEL one visitor's minutes-long study held every other visitor's Run until it ended. Beside it,
# the long job waits between two of its decodes while a visitor's decode runs (app/boundary.py GiveWay), so
# a Run has the CPU to itself. One at a time among themselves.
LONG = dict(concurrency_id="long", concurrency_limit=1)
VIEW = dict(concurrency_id="view", concurrency_limit=4)     # figures from a recorded trace only
STUDY_VIEW = dict(concurrency_id="study_view", concurrency_limit=1)   # shipped study results, first asked first shown
QUEUE = dict(max_size=32, default_concurrency_limit=1)
# How often Gradio's queue looks for a job to start while it has none, and for progress to send: Gradio's
# 0.001 s and 0.01 s woke an idle server 1,100 times a second (about 5% of a core, scripts/bench_crowd.py);
# a job now waits at most QUEUE_POLL_S more to start (quiet_queue).
QUEUE_POLL_S, PROGRESS_POLL_S = 0.01, 0.1
# What "Use via API" says of the page's own decode endpoints: they answer with the page's HTML and plots.
UNSET = ("Every setting left out (None) takes the picked model's own value (its attention, block size, ...), "
         "as the page shows it.")
RUN_API = ("The page's Run: streams the page's counters, canvas and plots round by round. For a decode as JSON "
           "(answer, settings, metrics, trace), use /decode. " + UNSET)
COMPARE_API = ("The page's Compare: the chosen baseline and LoPA decoded side by side, streamed as the page's panels "
               "(for JSON, call /decode once per decoder). " + UNSET)
STEP_API = "The page's Step: one round of the decode Run would stream (for JSON, use /decode). " + UNSET


def as_updates(fn, outputs):
    """`fn` with every plain value it returns for a component turned into gr.update(value=...).

    Why: Gradio 6.31 keeps, per session, the component an output was last updated to. When an
    output that got a prop update (gr.skip() counts: the view skips heavy outputs between
    refreshes) next gets a plain value, `Blocks.postprocess_data` stores the replacement component
    under the replacement's own new id (`block = state[block._id]` ... `state[block._id] = block`),
    so each skip-then-value adds a component to the session for good: 6 per Run here, the
    growth issue #18 measured. Outputs that only ever get updates are replaced in place. The
    callbacks stay plain functions returning values (their tests read values); gr.State outputs
    and components returned as updates pass through unchanged. API clients of these UI endpoints
    see Gradio's update dict ({"__type__": "update", "value": ...}) for a value; the typed endpoint
    /decode (app/api.py) is not wrapped."""
    plain = [not getattr(o, "stateful", False) for o in outputs]

    def convert(out):
        if len(outputs) == 1:
            out = (out,)
        out = tuple(gr.update(value=v) if keep and not (isinstance(v, dict) and "__type__" in v)
                    and not isinstance(v, gr.blocks.Block) else v for v, keep in zip(out, plain))
        return out[0] if len(outputs) == 1 else out

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            for out in fn(*args, **kwargs):
                yield convert(out)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return convert(fn(*args, **kwargs))
    return call


def in_turn(fn, at: int):
    """`fn` run in its session's turn (app.session.take_turn): the session is its argument `at`. A stream holds
    the turn until it ends or is closed."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            turn = take_turn(args[at] if len(args) > at else None)
            try:
                yield from fn(*args, **kwargs)
            finally:
                if turn is not None:
                    turn.release()
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        turn = take_turn(args[at] if len(args) > at else None)
        try:
            return fn(*args, **kwargs)
        finally:
            if turn is not None:
                turn.release()
    return call


def named(fn, *leading: str):
    """`fn(session, *leading, *settings, *backend)` with the signature Gradio names an endpoint's API
    parameters from (else `param_2` ... for its *values): the settings by name, each None by default (unset:
    the picked model's own value, app.request.read_request; the API lists it so, app.page.Explorer), the
    backend at the page's initial values."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(name, kind) for name in ("session", *leading)]
    params += [inspect.Parameter(name, kind, default=None) for name in SETTING_NAMES]
    params += [inspect.Parameter(name, kind, default=default)
               for name, default in zip(BACKEND_NAMES, (SINGLE, WORKER_RANGE[0]))]

    if inspect.isgeneratorfunction(fn):         # a stream stays one (Gradio and as_updates ask)
        @functools.wraps(fn)
        def call(*args, **kwargs):
            yield from fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            return fn(*args, **kwargs)
    call.__signature__ = inspect.Signature(params)
    return call


class Wiring:
    """What each panel's wiring gets: the components by name (`c`, as in the callbacks' output constants),
    the page (`demo`), `on` to connect an event, and `deps`, the events one panel chains after another's
    (the page's warm-up, a model picked, a link's DiffusionGemma folder)."""

    def __init__(self, demo: gr.Blocks, c: dict):
        self.demo, self.c, self.deps = demo, c, {}
        self.events = c["__events__"] = {}      # each component's events, by its name: stop_buttons() follows them
        session = c["session"]
        self.session, self.settings = session, self.pick(*SETTING_NAMES)
        # A decode's inputs: the session, the prompt, the settings and the backend (app.request.read_request).
        self.decode_inputs = [session, c["prompt"], *self.settings, *self.pick(*BACKEND_NAMES)]
        # What the share link and the command are made from (app.share.links).
        self.link_inputs = [session, c["prompt"], *self.settings, *self.pick(*denoise.PANEL_INPUTS)]

    def pick(self, *names) -> list:
        return [self.c[n] for n in names]

    def on(self, event, fn, inputs, outputs, **kwargs):
        """Connect `event` to `fn` through as_updates (why: its docstring). Raw values reach the callbacks
        (preprocess=False), which read every input themselves (the registry, app/inputs.py): Gradio's own
        checks answer a string in a number box with a traceback and echo a 100 KB value outside a
        dropdown's choices in full. Uploads keep theirs."""
        kwargs.setdefault("preprocess", False)
        dep = event(as_updates(self.turns(fn, inputs, kwargs), outputs), inputs, outputs, **kwargs)
        owner = getattr(event, "__self__", None)
        for name in [n for n, x in self.c.items() if x is owner]:
            self.events.setdefault(name, []).append(dep)
        return dep

    def then(self, dep, fn, inputs, outputs, **kwargs):
        """`fn` chained after `dep` (through as_updates, raw values), private and without progress unless
        `kwargs` say otherwise; queued unless queue=False."""
        quiet = dict(api_visibility="private", show_progress="hidden")
        return dep.then(as_updates(self.turns(fn, inputs, kwargs), outputs), inputs, outputs, preprocess=False,
                        **{**quiet, **kwargs})

    def turns(self, fn, inputs, kwargs):
        """A model event's callback in its session's turn (in_turn), where the session is one of its inputs."""
        if kwargs.get("concurrency_id") != MODEL["concurrency_id"] or self.session not in inputs:
            return fn
        return in_turn(fn, inputs.index(self.session))


def wire(demo: gr.Blocks, c: dict) -> None:
    """Connect every event: the Stops' enabling first (why: enable_stops), each panel of PANELS in order
    (the page load's listeners run in the order added: the link's inputs, then its DiffusionGemma folder,
    then the warm-up), then what follows the session's model and the Stops' disabling."""
    w = Wiring(demo, c)
    enable_stops(c)
    for panel in PANELS:
        panel(w)
    follow_model(w, w.deps["warmed"], w.deps["picked"])
    follow_link(w, w.deps["canvas_link"])
    stop_buttons(c)


def no_hidden_progress(demo: gr.Blocks) -> None:
    """Every event whose progress is hidden (or whose outputs are all gr.State, which shows none) keeps no
    loading state on its outputs (show_progress_on=[]). Called once the Blocks is closed (app.page.build_demo):
    Gradio adds the load events of gr.State(callable) then.

    Why: Gradio 6.31's page keeps a loading state for every component that was ever a progress target (an
    output, unless show_progress_on names others) of an event it ran, and on each status message of any
    event (pending, started, each streamed yield, done) it hands every one of those states back to its
    component (Blocks `update_loading_stati_state`), which deep-copies the component's props first (the
    core's update_state: get_data, Svelte's $state.snapshot: a structuredClone per leaf). That was about
    9,000 copies on a page for one Run of the first example; naming no target left about 3,500 (the Run's
    inputs, which Gradio marks as a queued event ends) and cut the browser's CPU for a Run by about a
    quarter (scripts/bench_crowd.py, docs/deployment.md). A hidden progress shows nothing on those outputs,
    so naming no target changes nothing on the screen (the page reads `show_progress_on || outputs`: an
    empty list is taken as given)."""
    for fn in demo.fns.values():
        states = fn.outputs and all(isinstance(block, gr.State) for block in fn.outputs)
        if fn.show_progress_on is None and (fn.show_progress == "hidden" or states):
            fn.show_progress_on = []


def quiet_queue(demo: gr.Blocks) -> None:
    """Gradio's queue (made by demo.queue) polls at QUEUE_POLL_S and PROGRESS_POLL_S, not 1,100 times a
    second. Gradio 6.31 has no setting for it: its Queue's sleep_when_free and progress_update_sleep_when_free
    (Gradio's own values on Windows: 0.05 and 0.1 s)."""
    demo._queue.sleep_when_free = QUEUE_POLL_S
    demo._queue.progress_update_sleep_when_free = PROGRESS_POLL_S


def round_view(w: Wiring) -> None:
    """Run (the button, Enter in the prompt: one API name), Step, Stop, Reset, the run list, the rounds."""
    c, session, live, view = w.c, w.session, w.pick(*cb.LIVE_OUTPUTS), w.pick(*cb.VIEW_OUTPUTS)
    answer = w.pick(*cb.RUN_OUTPUTS)
    w.on(c["run"].click, named(cb.run_with_stop, "prompt"), w.decode_inputs, answer, api_name="run",
         api_description=RUN_API, show_progress="hidden", **MODEL)
    w.on(c["prompt"].submit, cb.run_with_stop, w.decode_inputs, answer, api_visibility="private",
         show_progress="hidden", **MODEL)
    replays = [w.on(c["show_arriving"].click, cb.show_rounds_arriving, [session], w.pick(*cb.ARRIVING_OUTPUTS),
                    api_visibility="private", show_progress="hidden", **VIEW)]      # the page asks (PAGE_ASKS_JS)
    gr.api(api.decode, api_name="decode", **MODEL)          # typed JSON endpoint (app/api.py)
    w.on(c["step"].click, named(cb.step_once, "prompt"), w.decode_inputs, live, api_name="step",
         api_description=STEP_API, show_progress="hidden", **MODEL)
    # Stop bypasses the queue: it only sets a flag the running decode checks after each round. It answers at
    # once, so it draws no progress over the status it answers in (nor its timer before the status's text).
    w.on(c["stop"].click, cb.stop_run, [session], [c["status"], c["counters"]], queue=False, api_name="stop",
         show_progress="hidden")
    w.on(c["reset"].click, cb.reset_session, [session], live, api_name="reset", show_progress="hidden", **VIEW)
    # Selecting a run waits for the session's running decode (its turn: in_turn) instead of racing its snapshots.
    w.on(c["run_list"].input, forks.select_run, [session, c["run_list"]], live, api_name="select_run",
         show_progress="hidden", **MODEL)
    w.on(c["round_slider"].input, cb.show_round, [session, c["round_slider"]], [*view, c["answer"]], api_name="show_round",
         trigger_mode="always_last", show_progress="hidden", cancels=replays, **VIEW)
    w.on(c["draw_figures"].click, cb.draw_figures, [session], [*w.pick(*cb.FIGURE_OUTPUTS), c["counters"]],
         api_visibility="private", show_progress="hidden", **VIEW)
    w.on(c["play"].click, cb.toggle_play, [session, c["playing"], c["round_slider"]],
         [c["timer"], c["play"], c["playing"]], api_visibility="private", cancels=replays, show_progress="hidden", **VIEW)
    w.on(c["timer"].tick, cb.play_tick, [session, c["playing"], c["round_slider"]],
         [c["round_slider"], c["timer"], c["play"], c["playing"], *view, c["answer"]], api_visibility="private",
         show_progress="hidden", **VIEW)


def shared_link(w: Wiring) -> None:
    """A shared link restores the inputs (the status says what it could not read) and a DiffusionGemma folder;
    the link and the command follow the prompt and the panel's inputs (the settings: settings_panel)."""
    c, out = w.c, [w.c["share_link"], w.c["command"]]
    # One unload handler: Gradio runs each on the page's state, and would make that state afresh for a second
    # handler after the first dropped it. The closed page's exports leave the disk, its runs the memory.
    w.demo.unload(end_page)
    loaded = w.on(w.demo.load, share.on_load, [w.session, c["prompt"], *w.settings],
                  [c["prompt"], *w.settings, c["model_dir"], c["status"], w.session], api_visibility="private",
                  queue=False, show_progress="hidden")
    w.then(loaded, model_and_settings.settings_follow, w.link_inputs, [c["settings_accordion"], *out], queue=False)
    panel = w.pick(*denoise.PANEL_INPUTS)
    w.deps["canvas_link"] = w.on(w.demo.load, share.open_canvas_link, [w.session],
                                 [c["denoise_folder"], *panel, c["denoise_status"]], api_visibility="private",
                                 queue=False, show_progress="hidden")
    w.on(functools.partial(gr.on, [x.change for x in [c["prompt"], *panel]]), share.links, w.link_inputs, out,
         api_visibility="private", queue=False, show_progress="hidden")


def settings_panel(w: Wiring) -> None:
    """An input the visitor changes, or a preset, becomes theirs (Session.touched: their request); the
    settings' title, the link and the command follow it in the same answer."""
    c = w.c
    follows = [c["settings_accordion"], c["share_link"], c["command"]]
    for name in SETTING_NAMES:
        w.on(c[name].input, model_and_settings.toucher(name), w.link_inputs, follows, api_visibility="private",
             queue=False, show_progress="hidden")
    preset = w.on(c["preset"].change, model_and_settings.apply_preset, [c["preset"], w.session], w.settings,
                  api_visibility="private", show_progress="hidden", **VIEW)
    w.then(preset, model_and_settings.settings_follow, w.link_inputs, follows, queue=False)


def compare_panel(w: Wiring) -> None:
    """Compare (LoPA against a baseline, both live), its Stop, and two runs of the list compared."""
    c, out = w.c, w.pick(*COMPARE_OUTPUTS)
    w.on(c["compare"].click, named(compare_stream, "prompt", "baseline"), [w.session, c["prompt"], c["baseline"], *w.decode_inputs[2:]], out,
         api_name="compare", api_description=COMPARE_API, show_progress="hidden", **MODEL)
    w.on(c["compare_stop"].click, stop_compare, [w.session], [c["compare_status"]], queue=False,
         api_visibility="private", show_progress="hidden")
    w.on(c["compare_runs"].click, compare_runs, [w.session, c["compare_a"], c["compare_b"]], out,
         api_name="compare_runs", show_progress="hidden", **VIEW)


def what_if(w: Wiring) -> None:
    """A cell clicked in the canvas, and the forks from it (fill it first, hold it back)."""
    c, session, live = w.c, w.session, w.pick(*cb.LIVE_OUTPUTS)
    w.on(c["clicked_cell"].change, forks.pick_cell, [session, c["clicked_cell"]], w.pick(*forks.WHATIF_OUTPUTS),
         api_name="whatif", show_progress="hidden", **MODEL)
    made = [w.on(c["fill_first"].click, forks.fill_first, [session, c["whatif_target"], c["whatif_token"]], live,
                 api_name="fill_first", show_progress="hidden", **MODEL),
            w.on(c["hold_back"].click, forks.hold_back, [session, c["whatif_target"]], live, api_name="hold_back",
                 show_progress="hidden", **MODEL)]
    for dep in made:            # the panel then names the fork shown, not the parent's cell
        dep.then(forks.after_fork, [session, c["whatif_target"]], w.pick(*forks.WHATIF_OUTPUTS), **QUIET)


def best_order_panel(w: Wiring) -> None:
    """The best order found for the shown run (the headroom search), compared with it; its Stop."""
    c = w.c
    w.on(c["best_order"].click, best_order.compare_with_best, [w.session], w.pick(*best_order.BEST_OUTPUTS),
         api_name="best_order", show_progress="hidden", **LONG)
    w.on(c["best_order_stop"].click, best_order.stop_search, [w.session], [c["best_status"]], queue=False,
         api_visibility="private", show_progress="hidden")


def model_panel(w: Wiring) -> None:
    """The session's model: applied when picked (a typed folder when the box loses focus or Enter is
    pressed), warmed up when the page loads (after the link's listeners: it may name the model)."""
    c = w.c
    w.deps["picked"] = w.on(c["model_dir"].change, model_and_settings.pick_model, [w.session, c["model_dir"]],
                            [c["model_info"], c["status"], c["model_dir"]], api_name="pick_model", **MODEL)
    w.deps["warmed"] = w.on(w.demo.load, model_and_settings.warm_model, [w.session], [c["model_info"]],
                            api_visibility="private", **MODEL)


def trace_files(w: Wiring) -> None:
    """A run saved as a trace, and a trace opened (the upload box emptied after)."""
    c = w.c
    w.on(c["export"].click, traces.export_trace, [w.session, c["export_format"]], [c["export_file"], c["status"]],
         api_name="export_trace", **VIEW)
    loaded = w.on(c["trace_upload"].upload, traces.load_trace, [w.session, c["trace_upload"]],
                  w.pick(*cb.LIVE_OUTPUTS), api_name="load_trace", preprocess=True, **VIEW)
    w.then(loaded, traces.clear_upload, None, [c["trace_upload"]], show_progress="full", **VIEW)


def studies_panel(w: Wiring) -> None:
    """Studies: shipped results (instant), or a live run with progress and Stop."""
    c, out = w.c, w.pick(*studies.STUDY_OUTPUTS)
    # Run arms the session's Stop outside the queue first, so a Stop pressed while the run waits for the
    # model (or before its first decode) is kept for it.
    armed = c["study_run"].click(studies.arm_study, [c["study_state"]], None, queue=False, api_visibility="private")
    inputs = [c["study_state"], c["study"], c["study_problems"], *w.pick(*studies.knob_keys()), c["study_seed"], w.session]
    run = w.on(armed.then, studies.run_study, inputs, out, api_name="run_study", show_progress="hidden", **LONG)
    w.events["study_run"] = [run]
    w.on(c["study_stop"].click, studies.stop_study, [c["study_state"]], [c["study_status"]], queue=False,
         api_name="stop_study", show_progress="hidden")
    # One at a time, in the order asked (STUDY_VIEW): in the shared view slot a study's picture, asked first,
    # could land after the interactive plot asked next and replace it.
    for event in (c["study"].input, c["study_shipped"].click):
        w.on(event, studies.show_shipped, [c["study"], w.session], out, api_visibility="private",
             show_progress="hidden", **STUDY_VIEW)
    w.on(c["study_interactive"].click, studies.show_interactive, [c["study"], w.session], out,
         api_visibility="private", show_progress="hidden", **STUDY_VIEW)


def tour_panel(w: Wiring) -> None:
    """Arrival and the guided tour (app/tour.py): recorded runs, no model. A step selects a run of the
    session's list, so it waits for a running decode like select_run (the session's turn) instead of racing it;
    Close queues behind a step already asked for, so the step cannot reopen the tour after it (the page
    hides the dock at once meanwhile: tour.TOUR_JS)."""
    c, out = w.c, w.pick(*tour.TOUR_OUTPUTS)
    for name, fn in (("tour_start", tour.start_tour), ("tour_next", tour.next_step),
                     ("tour_prev", tour.previous_step), ("tour_end", tour.end_tour)):
        w.on(c[name].click, fn, [w.session, c["tour_state"]], out, api_visibility="private", show_progress="hidden",
             **MODEL)


def denoise_panel(w: Wiring) -> None:
    """DiffusionGemma on its own sampler (app/denoise.py): a DiffusionGemma folder named in the model box opens
    there; its decode takes the model slot like Run; its steps and saved traces (app/canvas_traces.py) are views."""
    c, canvas, out = w.c, w.c["denoise_view"], w.pick(*denoise.DENOISE_OUTPUTS)
    w.then(w.deps["picked"], denoise.folder_line, [w.session], [c["denoise_folder"]], queue=False)
    w.on(c["denoise_decode"].click, denoise.decode_canvas, [w.session, canvas, c["prompt"], *w.pick(*denoise.PANEL_INPUTS)],
         out, api_name="decode_canvas", **MODEL)
    w.on(c["denoise_slider"].input, denoise.show_step, [canvas, c["denoise_slider"]], out[1:],
         api_name="show_canvas_step", trigger_mode="always_last", show_progress="hidden", **VIEW)
    w.on(c["denoise_export"].click, canvas_traces.export_canvas_trace, [canvas],
         [c["denoise_export_file"], c["denoise_status"]], api_name="export_canvas_trace", **VIEW)
    loaded = w.on(c["denoise_upload"].upload, canvas_traces.load_canvas_trace, [canvas, c["denoise_upload"]], out,
                  api_name="load_canvas_trace", preprocess=True, **VIEW)
    w.then(loaded, traces.clear_upload, None, [c["denoise_upload"]], show_progress="full", **VIEW)


# The page's panels, wired in this order (a trigger's listeners run in the order added: the page load's).
PANELS = (round_view, shared_link, settings_panel, compare_panel, what_if, best_order_panel, model_panel, trace_files,
          studies_panel, tour_panel, denoise_panel)


def follow_link(w: Wiring, *deps) -> None:
    """The share link and the command, again after each of `deps` (they change what the link names)."""
    for dep in deps:
        w.then(dep, share.links, w.link_inputs, [w.c["share_link"], w.c["command"]], queue=False)


def follow_model(w: Wiring, *model_set) -> None:
    """What follows the session's model, chained after the events that set it (`model_set`: the page's
    warm-up, a model picked): the settings inputs show the model's own values, the share link and the
    command name it, the studies show its shipped results.
    Chained with .then, not on a Markdown's .change (the model panel's, the DiffusionGemma folder's): once a
    Markdown's text had changed (on a just-started server, "not loaded yet" → the loaded model), Gradio 6.31's
    page kept re-rendering it and firing its change with the same text, ~10 times a second for as long as
    the page stayed open, each a queued model-slot job every other visitor waited behind
    (tests/test_app_browser_crowd.py). A .then runs once per event that set the model."""
    follow_link(w, *model_set)
    study_out = w.pick(*studies.STUDY_OUTPUTS)
    for dep in model_set:
        w.then(dep, model_and_settings.follow_session_model, [w.session, *w.settings], w.settings, **MODEL)
        w.then(dep, studies.show_shipped, [w.c["study"], w.session], study_out, **STUDY_VIEW)


# Each Stop and the buttons that start its job (the round view's: every decode that streams into it).
STOP_STARTS = {"stop": ("run", "prompt", "step", "fill_first", "hold_back"), "compare_stop": ("compare",),
               "best_order_stop": ("best_order",), "study_stop": ("study_run",)}
QUIET = dict(api_visibility="private", queue=False, show_progress="hidden")


def enable_stops(c: dict) -> None:
    """Each Stop is enabled the moment a button that starts its job is pressed. Wired before the jobs'
    own listeners on those buttons: Gradio 6.31's page runs the listeners of one event in the order they
    were added and awaits each queued one to its end before it sends the next (Blocks.dispatch: `for await`
    over the job's stream), so a Stop enabled by a listener added after Run's was enabled only once the
    Run had ended. In the page (layout.ENABLE_STOP_JS): they only touch buttons."""
    for stop_name, starts in STOP_STARTS.items():
        for name in starts:
            trigger = c[name].submit if name == "prompt" else c[name].click
            trigger(None, None, c[stop_name], js=layout.ENABLE_STOP_JS, **QUIET)


def stop_buttons(c: dict) -> None:
    """Each Stop is disabled when its run ends (the round view's: while the session has a decode,
    streaming or paused after Step, it stays enabled; Run's own last message says so: callbacks.run_with_stop).
    enable_stops enables them."""
    session, stop = c["session"], c["stop"]
    for name in ("step", "fill_first", "hold_back", "run_list", "reset", "stop", "tour_start", "tour_next",
                 "tour_prev", "tour_end"):
        for dep in c["__events__"].get(name, ()):
            dep.then(layout.decode_stop, [session], stop, **QUIET)
    for stop_name in ("compare_stop", "best_order_stop", "study_stop"):
        for start in STOP_STARTS[stop_name]:
            for dep in c["__events__"].get(start, ()):
                dep.then(layout.stop_disabled, None, c[stop_name], **QUIET)
