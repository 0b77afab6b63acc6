"""The one place where components meet callbacks: build_demo() lays out the panels, wire() connects
every event. Model events share one concurrency group of size 1 (the cached models are shared by
all sessions and a CPU runs one forward well at a time); the long jobs (a search, a study) run in one
beside it (LONG), and view-only events beside both."""

from __future__ import annotations

import functools
import inspect

import gradio as gr
from starlette.middleware import Middleware

from lopa.read_budget import MAX_TRACE_BYTES

from . import (
    api,
    best_order,
    canvas_traces,
    denoise,
    disk,
    forks,
    frames,
    layout,
    model_and_settings,
    share,
    studies,
    tour,
    traces,
)
from . import callbacks as cb
from .compare import COMPARE_OUTPUTS, compare_runs, compare_stream, stop_compare
from .inputs import shown
from .panels import (
    INTRO,
    build_arrival_panel,
    build_compare_panel,
    build_controls,
    build_glossary,
    build_input_panel,
    build_model_panel,
    build_round_view,
    build_settings_panel,
    build_studies_panel,
    build_tour_dock,
    build_trace_panel,
)
from .session import BACKEND_NAMES, SESSION_TTL_S, SETTING_NAMES, end_page, end_session, new_session
from .viz import GLOSSARY_CSS

MODEL = dict(concurrency_id="model", concurrency_limit=1)   # every event that runs the model
# The jobs that run for many decodes (the best-order search, a live study) take a slot of their own beside
# MODEL: in MODEL one visitor's minutes-long study held every other visitor's Run until it ended; beside it,
# a Run shares the CPU with it for its second or two instead. One at a time among themselves.
LONG = dict(concurrency_id="long", concurrency_limit=1)
VIEW = dict(concurrency_id="view", concurrency_limit=4)     # figures from a recorded trace only
STUDY_VIEW = dict(concurrency_id="study_view", concurrency_limit=1)   # shipped study results, first asked first shown
QUEUE = dict(max_size=32, default_concurrency_limit=1)
CSS = """
#counters, #base-counters, #lopa-counters {min-height: 64px}
.lopa-canvas {overflow-x: auto}
#backend-slot {border: 1px dashed #999}
.lopa-hidden {display: none !important}
#run-list label {font-size: 12px}
/* Wide tables (the branches of a round) scroll inside their panel instead of leaving it. */
#branches {min-width: 0; max-width: 100%}
#branches .lopa-branches {overflow-x: auto; max-width: 100%}
#branches table {min-width: 560px}
/* A disabled Stop must not look like a live red button. */
button:disabled.stop, button[disabled][class*="stop"] {opacity: 0.35; filter: grayscale(0.7)}
#glossary {margin-top: 16px}
/* Run, Stop, Step and Reset on one line under the prompt, in the narrow column too. */
#run-buttons {flex-wrap: nowrap; gap: 6px}
#run-buttons button {min-width: 0 !important; padding-left: 4px; padding-right: 4px}
/* An empty study plot folds to nothing (not display: none, under which Gradio never draws the figure). */
#study-plot:has(> [aria-label="Empty value"]) {height: 0 !important; min-height: 0 !important; padding: 0 !important;
  border: none !important; margin: 0 !important; overflow: hidden}
@media (max-width: 640px) {
  /* Phone: the model's description after the prompt, Run and the examples. */
  #model-panel {order: 5}
  #settings-panel {order: 6}
  #arrival-actions {flex-direction: column; align-items: stretch}
  .lopa-story-sentence {font-size: 15px !important}
  .lopa-tok {font-size: 11px !important; line-height: 16px !important; padding: 0 3px !important}
}
"""
# Gradio keeps a SessionState per browser session (a copy of the page's config holding the last
# output of every component, and more: README "Limits") until this many newer sessions push it out;
# its time-to-live only frees the gr.State values. Default 10,000, about 1 MB each here: the most
# recent SESSION_CAPACITY sessions keep their state, an older idle one starts afresh.
SESSION_CAPACITY = 32
# Uploads are traces (lopa.schema bounds what a trace may hold); nothing larger is accepted.
# A shared link longer than Gradio can parse is cut before it gets there (app.share.BoundLinkLength).
LAUNCH_KWARGS = dict(css=CSS + tour.CSS + GLOSSARY_CSS, theme=gr.themes.Default(), head=forks.CLICK_JS + tour.TOUR_JS, max_file_size=MAX_TRACE_BYTES,
                     state_session_capacity=SESSION_CAPACITY,
                     app_kwargs={"middleware": [Middleware(share.BoundLinkLength), Middleware(disk.BoundUploads),
                                                Middleware(frames.FirstScript)]})


class Explorer(gr.Blocks):
    """gr.Blocks whose reading of an upload answers a bad value with a message naming the input. Every
    other input reaches its callback raw (preprocess=False, see wire()); an upload cannot, since
    Gradio checks where its file lives before any callback runs (a path outside its uploads, text, a
    number or a list), and those checks fail with a bare server error and no message."""

    async def preprocess_data(self, block_fn, inputs, state, explicit_call=False):
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except gr.Error:
            raise
        except Exception:           # pydantic's ValidationError, Gradio's InvalidPathError, OSError
            files = [i for i, block in enumerate(block_fn.inputs) if isinstance(block, gr.File)]
            if not files:
                raise
            given = inputs[files[0]] if files[0] < len(inputs) else None
            given = given.get("path") if isinstance(given, dict) else given
            raise gr.Error(f"the trace file must be a .json or .parquet file uploaded to this page, got {shown(given)}",
                           print_exception=False) from None


def build_demo() -> gr.Blocks:
    """The whole app; nothing is loaded until a user needs the model."""
    # delete_cache: Gradio sweeps its cache of what nothing removed (app/disk.py: exports and uploads are removed
    # by the app itself; an upload no load ever read is not)
    with Explorer(title="LoPA Explorer", delete_cache=(disk.CACHE_SWEEP_S, disk.CACHE_AGE_S)) as demo:
        gr.Markdown(INTRO)
        # A factory, not an instance: gradio calls it once per browser session.
        # Sessions expire and free their runs (bounded memory on a Space; README "Limits").
        c: dict = {"session": gr.State(new_session, time_to_live=SESSION_TTL_S, delete_callback=end_session),
                   "playing": gr.State(False)}
        # Arrival: the story on screen before any click; the tour's dock floats over the page.
        c.update(build_arrival_panel())
        c.update(build_tour_dock())
        with gr.Row(equal_height=False, elem_id="all-controls"):
            with gr.Column(scale=1, min_width=320, elem_id="inputs-column"):
                c.update(build_input_panel())
                with gr.Column(elem_id="model-panel"):
                    c.update(build_model_panel())
                with gr.Column(elem_id="settings-panel"):
                    c.update(build_settings_panel())
            # One page, no tabs: a plotly figure in a hidden tab throws on every relayout (zero width),
            # and those errors made the browser drop other components' updates.
            with gr.Column(scale=3):
                with gr.Column(elem_id="round-view"):
                    gr.Markdown("## Round by round")
                    c.update(build_controls())
                    c.update(build_round_view())
                c.update(build_trace_panel())
                with gr.Column(elem_id="compare-view"):
                    gr.Markdown("## Compare runs")
                    c.update(build_compare_panel())
                with gr.Column(elem_id="studies-view"):
                    gr.Markdown("## Studies")
                    c["study_state"] = gr.State(studies.new_study_state)
                    c.update(build_studies_panel())
                with gr.Column(elem_id="denoise-view"):
                    gr.Markdown("## DiffusionGemma on its own sampler")
                    c["denoise_view"] = gr.State(denoise.new_canvas_view, time_to_live=SESSION_TTL_S,
                                                 delete_callback=denoise.end_canvas_view)
                    c.update(denoise.build_denoise_panel())
        c.update(build_glossary())
        wire(demo, c)
    demo.queue(**QUEUE)
    return demo


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


def wire(demo: gr.Blocks, c: dict) -> None:
    """Connect every event. `c` maps names (as in the callbacks' output constants) to components.
    Every callback goes through as_updates (why: its docstring)."""
    def pick(*names):
        return [c[n] for n in names]

    def on(event, fn, inputs, outputs, **kwargs):
        # Raw values reach the callbacks (preprocess=False), which read every input themselves (the
        # registry, app/inputs.py): Gradio's own checks answer a string in a number box with a
        # traceback and echo a 100 KB value outside a dropdown's choices in full. Uploads keep theirs.
        kwargs.setdefault("preprocess", False)
        dep = event(as_updates(fn, outputs), inputs, outputs, **kwargs)
        # Each component's events, by the component's name: stop_buttons() follows them.
        owner = getattr(event, "__self__", None)
        for name in [n for n, x in c.items() if x is owner]:
            events.setdefault(name, []).append(dep)
        return dep

    events = c["__events__"] = {}

    session, settings = c["session"], pick(*SETTING_NAMES)
    live, view = pick(*cb.LIVE_OUTPUTS), pick(*cb.VIEW_OUTPUTS)
    # Before any job's own listener on the same buttons (why: enable_stops).
    enable_stops(c)
    # After the settings: the callbacks' values are settings + backend (app.session.parse_ui).
    backend = pick(*BACKEND_NAMES)

    # Model events: run, step, compare, forks, picking a model.
    on(c["run"].click, cb.run_stream, [session, c["prompt"], *settings, *backend], live, api_name="run",
                               show_progress="hidden", **MODEL)
    # Enter in the prompt box runs too (same callback; the API keeps the one name "run").
    on(c["prompt"].submit, cb.run_stream, [session, c["prompt"], *settings, *backend], live, api_visibility="private",
                       show_progress="hidden", **MODEL)
    gr.api(api.decode, api_name="decode", **MODEL)          # typed JSON endpoint (app/api.py)
    # A shared link restores the inputs (and says in the status what it could not read); the link and
    # the command line follow the inputs.
    shared, touched = [c["prompt"], *settings], c["touched"]
    # One handler: Gradio runs each unload handler on the page's state, and would make that state afresh for a
    # second handler after the first dropped it.
    demo.unload(end_page)                # the closed page's exports leave the disk, its runs the memory
    on(demo.load, share.on_load, [touched, *shared], [*shared, touched, c["model_dir"], c["status"]],
       api_visibility="private", queue=False)
    # A DiffusionGemma folder picked for its panel rides along in the link with the panel's settings.
    panel = pick(*denoise.PANEL_INPUTS)
    canvas_link = on(demo.load, share.open_canvas_link, [session], [c["denoise_folder"], *panel, c["denoise_status"]],
                     api_visibility="private", queue=False)
    # The link follows the inputs here, and the session's model and DiffusionGemma folder in follow_model.
    on(functools.partial(gr.on, [x.change for x in [*shared, *panel]]),
       share.links, [session, *shared, *panel], [c["share_link"], c["command"]], api_visibility="private", queue=False)
    # The settings inputs show the session's model's own values until the visitor touches them.
    for name in SETTING_NAMES:
        on(c[name].input, model_and_settings.toucher(name), [touched], [touched], api_visibility="private", queue=False)
    on(c["step"].click, cb.step_once, [session, c["prompt"], *settings, *backend], live, api_name="step",
                    show_progress="hidden", **MODEL)
    on(c["compare"].click, compare_stream, [session, c["prompt"], c["baseline"], *settings, *backend],
                                       pick(*COMPARE_OUTPUTS), api_name="compare", show_progress="hidden", **MODEL)
    whatif = pick(*forks.WHATIF_OUTPUTS)
    on(c["clicked_cell"].change, forks.pick_cell, [session, c["clicked_cell"]], whatif, api_name="whatif",
                             show_progress="hidden", **MODEL)
    on(c["fill_first"].click, forks.fill_first, [session, c["whatif_target"], c["whatif_token"]], live,
                          api_name="fill_first", show_progress="hidden", **MODEL)
    on(c["hold_back"].click, forks.hold_back, [session, c["whatif_target"]], live, api_name="hold_back",
                         show_progress="hidden", **MODEL)
    # The best order found for the shown run (the headroom search), compared with it.
    on(c["best_order"].click, best_order.compare_with_best, [session], pick(*best_order.BEST_OUTPUTS),
       api_name="best_order", show_progress="hidden", **LONG)
    on(c["best_order_stop"].click, best_order.stop_search, [session], [c["best_status"]], queue=False,
       api_visibility="private", show_progress="hidden")
    # Selecting a run waits for a running decode (same slot) instead of racing its snapshots.
    on(c["run_list"].input, forks.select_run, [session, c["run_list"]], live, api_name="select_run",
                        show_progress="hidden", **MODEL)
    # The session's model: applied when picked (a typed folder when the box loses focus or Enter is pressed).
    picked = on(c["model_dir"].change, model_and_settings.pick_model, [session, c["model_dir"]],
                [c["model_info"], c["status"], c["model_dir"]], api_name="pick_model", **MODEL)
    warmed = on(demo.load, model_and_settings.warm_model, [session], [c["model_info"]], api_visibility="private", **MODEL)

    # Stop bypasses the queue: it only sets a flag the running decode checks after each round. It answers at
    # once, so it draws no progress over the status it answers in (nor its timer before the status's text).
    on(c["stop"].click, cb.stop_run, [session], [c["status"], c["counters"]], queue=False, api_name="stop",
       show_progress="hidden")
    on(c["compare_stop"].click, stop_compare, [session], [c["compare_status"]], queue=False, api_visibility="private",
       show_progress="hidden")
    on(c["reset"].click, cb.reset_session, [session], live, api_name="reset", **VIEW)
    on(c["compare_runs"].click, compare_runs, [session, c["compare_a"], c["compare_b"]], pick(*COMPARE_OUTPUTS),
                            api_name="compare_runs", show_progress="hidden", **VIEW)

    # Recorded rounds: scrub, play / pause.
    on(c["round_slider"].input, cb.show_round, [session, c["round_slider"]], view, api_name="show_round",
                            trigger_mode="always_last", show_progress="hidden", **VIEW)
    on(c["play"].click, cb.toggle_play, [session, c["playing"], c["round_slider"]], [c["timer"], c["play"], c["playing"]],
                    api_visibility="private", **VIEW)
    on(c["timer"].tick, cb.play_tick, [session, c["playing"], c["round_slider"]],
                    [c["round_slider"], c["timer"], c["play"], c["playing"], *view], api_visibility="private",
                    show_progress="hidden", **VIEW)

    # Traces and settings.
    on(c["export"].click, traces.export_trace, [session, c["export_format"]], [c["export_file"], c["status"]],
                      api_name="export_trace", **VIEW)
    on(c["trace_upload"].upload, traces.load_trace, [session, c["trace_upload"]], live, api_name="load_trace",
       preprocess=True, **VIEW).then(
        as_updates(traces.clear_upload, [c["trace_upload"]]), None, [c["trace_upload"]], api_visibility="private", **VIEW)
    on(c["preset"].change, model_and_settings.apply_preset, [c["preset"], touched, session], [*settings, touched],
       api_visibility="private", **VIEW)

    # Studies: shipped results (instant), or a live run with progress and Stop.
    study_out = pick(*studies.STUDY_OUTPUTS)
    # Run arms the session's Stop outside the queue first, so a Stop pressed while the run waits for the
    # model (or before its first decode) is kept for it.
    armed = c["study_run"].click(studies.arm_study, [c["study_state"]], None, queue=False, api_visibility="private")
    study_in = [c["study_state"], c["study"], c["study_problems"], *pick(*studies.knob_keys()), c["study_seed"], session]
    study_dep = on(armed.then, studies.run_study, study_in, study_out, api_name="run_study",
                   show_progress="hidden", **LONG)
    events["study_run"] = [study_dep]
    on(c["study_stop"].click, studies.stop_study, [c["study_state"]], [c["study_status"]], queue=False, api_name="stop_study",
       show_progress="hidden")
    # One at a time, in the order asked (STUDY_VIEW): in the shared view slot a study's picture, asked first,
    # could land after the interactive plot asked next and replace it.
    for event in (c["study"].input, c["study_shipped"].click):
        on(event, studies.show_shipped, [c["study"], session], study_out, api_visibility="private",
           show_progress="hidden", **STUDY_VIEW)
    on(c["study_interactive"].click, studies.show_interactive, [c["study"], session], study_out, api_visibility="private",
       show_progress="hidden", **STUDY_VIEW)

    # Arrival and the guided tour (app/tour.py): recorded runs, no model. A step selects a run of the
    # session's list, so it waits for a running decode like select_run (same slot) instead of racing it.
    tour_out = pick(*tour.TOUR_OUTPUTS)
    for name, fn in (("tour_start", tour.start_tour), ("tour_next", tour.next_step), ("tour_prev", tour.previous_step)):
        on(c[name].click, fn, [session, c["tour_state"]], tour_out, api_visibility="private", show_progress="hidden",
           **MODEL)
    # Close queues behind a step already asked for (same slot), so the step cannot reopen the tour after it;
    # the page hides the dock at once meanwhile (tour.TOUR_JS).
    on(c["tour_end"].click, tour.end_tour, [session, c["tour_state"]], tour_out, api_visibility="private",
       show_progress="hidden", **MODEL)

    # DiffusionGemma on its own sampler (app/denoise.py): a DiffusionGemma folder named in the model box opens
    # there; its decode takes the model slot like Run; its steps and saved traces (app/canvas_traces.py) are views.
    canvas, canvas_out = c["denoise_view"], pick(*denoise.DENOISE_OUTPUTS)
    picked.then(as_updates(denoise.folder_line, [c["denoise_folder"]]), [session], [c["denoise_folder"]],
                api_visibility="private", queue=False, show_progress="hidden")
    on(c["denoise_decode"].click, denoise.decode_canvas, [session, canvas, c["prompt"], c["denoise_max_new_tokens"],
                                                         c["denoise_steps"], c["denoise_bound"], c["denoise_seed"]],
       canvas_out, api_name="decode_canvas", **MODEL)
    on(c["denoise_slider"].input, denoise.show_step, [canvas, c["denoise_slider"]], canvas_out[1:],
       api_name="show_canvas_step", trigger_mode="always_last", show_progress="hidden", **VIEW)
    on(c["denoise_export"].click, canvas_traces.export_canvas_trace, [canvas], [c["denoise_export_file"], c["denoise_status"]],
       api_name="export_canvas_trace", **VIEW)
    on(c["denoise_upload"].upload, canvas_traces.load_canvas_trace, [canvas, c["denoise_upload"]], canvas_out,
       api_name="load_canvas_trace", preprocess=True, **VIEW).then(
        as_updates(traces.clear_upload, [c["denoise_upload"]]), None, [c["denoise_upload"]],
        api_visibility="private", **VIEW)

    # The decode settings' title counts the settings that differ from what Run uses untouched.
    on(functools.partial(gr.on, [x.change for x in settings]), layout.settings_title,
       [session, *settings], [c["settings_accordion"]], api_visibility="private", queue=False, show_progress="hidden")
    follow_model(c, warmed, picked)
    follow_link(c, canvas_link)
    # Stop buttons are enabled only while there is something to stop.
    stop_buttons(c)


def follow_link(c: dict, *deps) -> None:
    """The share link and the command, again after each of `deps` (they change what the link names)."""
    out = [c["share_link"], c["command"]]
    inputs = [c["session"], c["prompt"], *[c[n] for n in SETTING_NAMES], *[c[n] for n in denoise.PANEL_INPUTS]]
    for dep in deps:
        dep.then(as_updates(share.links, out), inputs, out, preprocess=False, queue=False, api_visibility="private",
                 show_progress="hidden")


def follow_model(c: dict, *model_set) -> None:
    """What follows the session's model, chained after the events that set it (`model_set`: the page's
    warm-up, a model picked): the settings inputs show the model's own values, the share link and the
    command name it, the settings' title counts against its defaults, the studies show its shipped results.
    Chained with .then, not on a Markdown's .change (the model panel's, the DiffusionGemma folder's): once a
    Markdown's text had changed (on a just-started server, "not loaded yet" → the loaded model), Gradio 6.31's
    page kept re-rendering it and firing its change with the same text, ~10 times a second for as long as
    the page stayed open, each a queued model-slot job every other visitor waited behind
    (tests/test_app_browser_crowd.py). A .then runs once per event that set the model."""
    session, settings, touched = c["session"], [c[n] for n in SETTING_NAMES], c["touched"]
    quiet = dict(api_visibility="private", show_progress="hidden")
    follow_link(c, *model_set)
    for dep in model_set:
        dep.then(as_updates(model_and_settings.follow_session_model, settings), [session, touched, *settings], settings,
                 preprocess=False, **quiet, **MODEL)
        dep.then(as_updates(layout.settings_title, [c["settings_accordion"]]), [session, *settings], [c["settings_accordion"]],
                 preprocess=False, queue=False, **quiet)
        study_out = [c[n] for n in studies.STUDY_OUTPUTS]
        dep.then(as_updates(studies.show_shipped, study_out), [c["study"], session], study_out, preprocess=False,
                 **quiet, **STUDY_VIEW)


# Each Stop and the buttons that start its job (the round view's: every decode that streams into it).
STOP_STARTS = {"stop": ("run", "prompt", "step", "fill_first", "hold_back"), "compare_stop": ("compare",),
               "best_order_stop": ("best_order",), "study_stop": ("study_run",)}
QUIET = dict(api_visibility="private", queue=False, show_progress="hidden")


def enable_stops(c: dict) -> None:
    """Each Stop is enabled the moment a button that starts its job is pressed. Wired before the jobs'
    own listeners on those buttons: Gradio 6.31's page runs the listeners of one event in the order they
    were added and awaits each queued one to its end before it sends the next (Blocks.dispatch: `for await`
    over the job's stream), so a Stop enabled by a listener added after Run's was enabled only once the
    Run had ended. Outside the queue: they only touch buttons."""
    for stop_name, starts in STOP_STARTS.items():
        for name in starts:
            trigger = c[name].submit if name == "prompt" else c[name].click
            trigger(layout.stop_enabled, None, c[stop_name], **QUIET)


def stop_buttons(c: dict) -> None:
    """Each Stop is disabled when its run ends (the round view's: while the session has a decode,
    streaming or paused after Step, it stays enabled). enable_stops enables them."""
    session, stop = c["session"], c["stop"]
    for name in ("run", "prompt", "step", "fill_first", "hold_back", "run_list", "reset", "stop", "tour_start", "tour_next",
                 "tour_prev", "tour_end"):
        for dep in c["__events__"].get(name, ()):
            dep.then(layout.decode_stop, [session], stop, **QUIET)
    for stop_name in ("compare_stop", "best_order_stop", "study_stop"):
        for start in STOP_STARTS[stop_name]:
            for dep in c["__events__"].get(start, ()):
                dep.then(layout.stop_disabled, None, c[stop_name], **QUIET)
