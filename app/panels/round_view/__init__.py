"""Layout only: each build_<panel>() creates its components inside the current gr.Blocks and
returns them in a dict by name. No events here (see app/wiring.py)."""

from __future__ import annotations

import gradio as gr

from lopa.settings import SETTINGS

from ...serving.examples import example_groups
from ...serving.model_cache import MODELS
from ...serving.models import bundled_models, example_prompts
from ...serving.session import APP_DEFAULTS, BRANCH_PARALLEL, SETTING_NAMES, SINGLE, WORKER_RANGE, Session
from ..compare import BASELINES
from ..settings import PRESETS
from ..viz import esc
from .callbacks import VIEW_OUTPUTS, view

INTRO = """# LoPA Explorer
Watch **Lookahead Parallel Decoding** (Xu et al., arXiv 2512.16229) decode a masked diffusion LM round by round.
Each round the *anchor* commits every confident token, as vanilla **D2F** (Discrete Diffusion Forcing, the decoder
LoPA builds on) would; then *k lookahead branches* each add one more token, all k+1 are checked in one batched
*forward* (one model pass), and the branch whose remaining positions became most confident wins.
[Every term on the page](#glossary)."""
GLOSSARY_INTRO = "## Terms used on this page"


def build_model_panel() -> dict:
    with gr.Group():
        info = gr.Markdown(MODELS.describe(), elem_id="model-info")
        # This session's model, used from the moment it is picked (app.model_and_settings.pick_model); other visitors keep theirs.
        # Short names in the list (a paragraph per option was cut under the arrow), what each shows below it.
        offered = [(label.split(": ", 1)[0], folder) for label, folder in bundled_models()]
        model_dir = gr.Dropdown(offered, value=str(MODELS.default), allow_custom_value=True,
                                label="model of this session: a bundled one, or type a local Hugging Face folder "
                                      "(applies at once, to this page only)", elem_id="model-dir")
        gr.Markdown("\n".join(f"- **{esc(name)}**: {esc(shows)}" for name, shows in
                              (label.split(": ", 1) for label, _ in bundled_models() if ": " in label)),
                    elem_id="model-choices")
    return {"model_info": info, "model_dir": model_dir}


def build_input_panel() -> dict:
    """The prompt, Run and its siblings right under it, then the examples: on a phone this column comes
    first, so Run is within a screen of the arrival view."""
    examples = example_prompts()
    prompt = gr.Textbox(label="prompt (the model's prompt template is applied)", lines=1, max_lines=8, value=examples[0] if examples else "",
                        elem_id="prompt")
    with gr.Row(elem_id="run-buttons"):
        run = gr.Button("▶ Run", variant="primary", min_width=70, elem_id="run")
        # Disabled until something runs (app/wiring.py enables it for the run and disables it after).
        stop = gr.Button("■ Stop", variant="stop", min_width=70, interactive=False, elem_id="stop")
        step = gr.Button("Step", min_width=70, elem_id="step")          # one round (the status line says so)
        reset = gr.Button("Reset", min_width=70, elem_id="reset")
    for label, prompts in example_groups():
        gr.Examples(examples=[[e] for e in prompts], inputs=[prompt], label=label, examples_per_page=8)
    return {"prompt": prompt, "run": run, "stop": stop, "step": step, "reset": reset}


def setting_input(name: str, value):
    """The input of one registry setting (lopa.settings.SETTINGS): a dropdown for choices, a slider for
    a bounded interval, a number box otherwise; its label, help and range from the registry. Values
    are checked by the registry when read (app.request.read_request), with its message."""
    spec = SETTINGS[name]
    kw = dict(label=spec.label or name, info=f"{spec.help} ({spec.describe()})", value=value,
              elem_id=name.replace("_", "-"))
    if spec.choices is not None:
        return gr.Dropdown(list(spec.choices), **kw)
    if spec.type is int and spec.high - spec.low <= 64:
        return gr.Slider(spec.low, spec.high, step=1, **kw)
    if spec.type is float and spec.high <= 1:          # a probability: open ends one step inside
        step = 0.01
        return gr.Slider(spec.low + step * spec.open_low, spec.high - step * spec.open_high, step=step, **kw)
    return gr.Number(precision=0 if spec.type is int else None, **kw)


def build_settings_panel() -> dict:
    # Closed: a newcomer runs the defaults; the title names what the visitor set (app.layout.settings_title).
    with gr.Accordion("Decoding settings: all at the defaults", open=False, elem_id="settings") as accordion:
        preset = gr.Dropdown(list(PRESETS), value=list(PRESETS)[0], label="preset (paper: Table 5; keeps max new tokens)",
                             elem_id="preset")
        inputs = {name: setting_input(name, APP_DEFAULTS[name]) for name in SETTING_NAMES}
    # ---- BACKEND SLOT --------------------------------------------------------------------------
    # Where the LoPA decode runs (Run, Step and Compare's LoPA side); see app.model_cache.ModelCache.bp_group.
    with gr.Group(elem_id="backend-slot"):
        with gr.Row():
            backend = gr.Radio([SINGLE, BRANCH_PARALLEL], value=SINGLE, label="backend", scale=3, elem_id="backend")
            workers = gr.Number(value=WORKER_RANGE[0], precision=0,    # range checked by the callbacks, with a message
                                label=f"workers (ranks, {WORKER_RANGE[0]}–{WORKER_RANGE[1]})", scale=1,
                                elem_id="workers")
        gr.Markdown("*Branch-parallel: the k+1 branches are spread over worker processes, each with a model replica "
                    "(the first run starts them, ~10 s). The rank lanes show who computed what.*")
    # ---- END BACKEND SLOT ----------------------------------------------------------------------
    with gr.Accordion("share this run: a link, or the same decode on the command line", open=False):
        share_link = gr.Textbox(label="this run as a link (opening it restores the prompt and settings)",
                                interactive=False, buttons=["copy"], elem_id="share-link")
        command = gr.Code(language="shell", label="copy as command", interactive=False, elem_id="command")
    return {"settings_accordion": accordion, "share_link": share_link, "command": command, "preset": preset, **inputs,
            "backend": backend,
            "workers": workers}


def build_controls() -> dict:
    """The status, counters and run list of the round view (Run and its siblings sit with the prompt)."""
    status = gr.Markdown("Press **Run** (under the prompt) to stream a decode live, or **Step** to advance one round.",
                         elem_id="status")
    counters = gr.HTML(elem_id="counters")
    run_list = gr.Radio([], label="runs: the originals, their forks and forks of forks (select one to view it)",
                        elem_id="run-list")
    return {"status": status, "counters": counters, "run_list": run_list}


def build_round_view() -> dict:
    with gr.Row():
        round_slider = gr.Slider(0, 1, value=0, step=1, label="round (scrub through recorded rounds)", scale=5,
                                 elem_id="round-slider")
        play = gr.Button("▶ Play", scale=1, min_width=90, elem_id="play")
    timer = gr.Timer(0.6, active=False)
    # Start with the empty views: the page then loads plotly.js (~2 s on a small CPU) when it opens,
    # not when the first round arrives.
    empty = dict(zip(VIEW_OUTPUTS, view(Session())))
    canvas = gr.HTML(empty["canvas"], elem_id="canvas")
    # A click on a still-masked cell lands here (app.forks.CLICK_JS) and opens the what-if panel.
    clicked = gr.Textbox(elem_id="clicked-cell", elem_classes=["lopa-hidden"], show_label=False, container=False)
    with gr.Group(visible=False, elem_id="whatif-panel") as whatif_panel:
        whatif_info = gr.Markdown(elem_id="whatif-info")
        whatif_token = gr.Radio([], label="fill with (the model's top tokens there)", elem_id="whatif-token")
        with gr.Row():
            fill_first = gr.Button("Fill first", variant="primary", elem_id="fill-first")
            hold_back = gr.Button("Hold back", elem_id="hold-back")
    whatif_target = gr.State(None)
    # The headroom search on the shown run (app/best_order.py): its order joins the run list as a fork.
    with gr.Row():
        best_order = gr.Button("Compare with the best order found", scale=3, elem_id="best-order")
        best_stop = gr.Button("■ Stop search", variant="stop", scale=1, min_width=110, interactive=False,
                              elem_id="best-order-stop")
    best_status = gr.Markdown("After a run: search the best filling order for its prompt and settings (LoPA's round "
                              "kept, the extra position chosen by the forwards to finish) and compare the two below.",
                              elem_id="best-order-status")
    answer = gr.Textbox(label="output so far (up to the first EOS)", lines=3, interactive=False, elem_id="answer")
    explanation = gr.Markdown(empty["explanation"], elem_id="explanation")
    branches = gr.HTML(empty["branches"], elem_id="branches")
    heatmap = gr.Plot(empty["heatmap"], label="confidence: branches × masked positions", elem_id="heatmap")
    ranks = gr.Plot(empty["ranks"], label="rank lanes: who computed which branch, and when", elem_id="rank-lanes")
    chart = gr.Plot(empty["chart"], label="tokens committed per round", elem_id="tokens-chart")
    # Pressed by the page itself (PAGE_ASKS_JS): when a Run's figures come into view, and when its counters
    # say its rounds may be shown again.
    draw = gr.Button("draw the figures", elem_id="draw-figures", elem_classes=["lopa-hidden"])
    again = gr.Button("show the rounds arriving", elem_id="show-arriving", elem_classes=["lopa-hidden"])
    return {"draw_figures": draw, "show_arriving": again, "round_slider": round_slider, "play": play, "timer": timer, "canvas": canvas, "answer": answer,
            "explanation": explanation, "branches": branches, "heatmap": heatmap, "ranks": ranks, "chart": chart,
            "clicked_cell": clicked, "whatif_panel": whatif_panel, "whatif_info": whatif_info,
            "whatif_token": whatif_token, "whatif_target": whatif_target, "fill_first": fill_first,
            "hold_back": hold_back, "best_order": best_order, "best_order_stop": best_stop, "best_status": best_status}


def build_trace_panel() -> dict:
    with gr.Accordion("Save / replay a trace", open=False, elem_id="trace-panel"):
        with gr.Row():
            fmt = gr.Radio(["JSON", "Parquet"], value="JSON", label="format", elem_id="export-format")
            export = gr.Button("Export trace", elem_id="export")
        export_file = gr.File(label="download", interactive=False, elem_id="export-file")
        upload = gr.File(label="load a trace (.json / .parquet) to replay it without a model",
                         file_types=[".json", ".parquet"], elem_id="trace-upload")
    return {"export_format": fmt, "export": export, "export_file": export_file, "trace_upload": upload}


def build_compare_panel() -> dict:
    gr.Markdown("Compare **any two runs** of the run list (a run and its fork, two orders, a loaded trace), or "
                "decode the same prompt and settings twice, live, with a baseline (D2F, or a peer's commit rule "
                "alone: [the rules](#term-commit-rule)) and LoPA, then compare them the same way. Each TFO map (token filling order) colours a position by the round that filled it; "
                "outlined positions are filled in a different round by the two runs.")
    with gr.Row():
        compare_a = gr.Dropdown([], label="run A", scale=3, elem_id="compare-a")
        compare_b = gr.Dropdown([], label="run B", scale=3, elem_id="compare-b")
        compare_runs = gr.Button("Compare runs", scale=1, min_width=110, elem_id="compare-runs")
    with gr.Row():
        baseline = gr.Dropdown(list(BASELINES), value=list(BASELINES)[0], label="or decode: a baseline (k = 0: D2F or a peer's rule; or another order) vs LoPA",
                               elem_id="baseline")
        compare = gr.Button("▶ Compare", variant="primary", elem_id="compare")
        stop = gr.Button("■ Stop", variant="stop", interactive=False, elem_id="compare-stop")
    status = gr.Markdown(elem_id="compare-status")
    with gr.Row(equal_height=False, elem_id="compare-sides"):
        with gr.Column():
            base_counters = gr.HTML(elem_id="base-counters")
            base_answer = gr.Textbox(label="run A / baseline output", lines=3, interactive=False, elem_id="base-answer")
            # No floating label: on a phone it covered the figure's title, which names the map.
            base_tfo = gr.Plot(label="TFO map A", show_label=False, elem_id="base-tfo")
        with gr.Column():
            lopa_counters = gr.HTML(elem_id="lopa-counters")
            lopa_answer = gr.Textbox(label="run B / LoPA output", lines=3, interactive=False, elem_id="lopa-answer")
            # No floating label: on a phone it covered the figure's title, which names the map.
            lopa_tfo = gr.Plot(label="TFO map B", show_label=False, elem_id="lopa-tfo")
    summary = gr.Markdown(elem_id="compare-summary")
    diff = gr.HTML(elem_id="compare-diff")
    return {"baseline": baseline, "compare": compare, "compare_stop": stop, "compare_status": status,
            "base_counters": base_counters, "base_answer": base_answer, "base_tfo": base_tfo,
            "lopa_counters": lopa_counters, "lopa_answer": lopa_answer, "lopa_tfo": lopa_tfo,
            "compare_summary": summary, "compare_diff": diff, "compare_a": compare_a, "compare_b": compare_b,
            "compare_runs": compare_runs}


def build_studies_panel() -> dict:
    """The Studies section: shipped results of `python -m lopa.study` (instant), or a live run."""
    from ..studies.callbacks import LIVE_PROBLEMS, live_knobs, show_shipped, study_choices
    from ..studies.callbacks import STUDY_OUTPUTS as names
    gr.Markdown("Questions the paper leaves open, answered on the loaded model (docs/studies.md). The plots start "
                "from the results the command line shipped for that model; **Run live** repeats a study on a few "
                "fresh problems here.")
    knobs = {}
    with gr.Row():
        study = gr.Dropdown(study_choices(), value="orders", label="study", scale=3, elem_id="study")
        problems = gr.Number(value=3, precision=0, label=f"problems ({LIVE_PROBLEMS[0]}–{LIVE_PROBLEMS[1]})", scale=1,
                             min_width=90, elem_id="study-problems")
        # One input per live knob the studies declare (lopa.study.declaration.Knob), naming the studies it is for.
        for name, (knob, takers) in live_knobs().items():
            knobs[f"study_{name}"] = gr.Number(value=knob.live[2], precision=0, label=f"{knob.words} ({', '.join(takers)})",
                                               scale=1, min_width=90, elem_id=f"study-{name.replace('_', '-')}")
        seed = gr.Number(value=15, precision=0, label="problem seed", scale=1, min_width=90, elem_id="study-seed")
    with gr.Row():
        run = gr.Button("▶ Run live", variant="primary", elem_id="study-run")
        stop = gr.Button("■ Stop", variant="stop", interactive=False, elem_id="study-stop")
        shipped = gr.Button("Show shipped results", elem_id="study-shipped")
        interactive = gr.Button("Interactive plot of them", elem_id="study-interactive")
    first = dict(zip(names, show_shipped("orders")))
    status = gr.Markdown(first["study_status"], elem_id="study-status")
    progress = gr.HTML(first["study_progress"], elem_id="study-progress")
    # Hidden by the page's CSS while it holds no figure: an empty plot box reads as a failed plot.
    plot = gr.Plot(label="study (interactive)", show_label=False, elem_id="study-plot")     # its title names it
    # No label: Gradio draws it over the picture's top-left corner, where the PNG has its title.
    image = gr.Image(first["study_image"]["value"], label="study (shipped results)", show_label=False, type="filepath",
                     interactive=False, elem_id="study-image")
    summary = gr.Markdown(first["study_summary"], elem_id="study-summary")
    return {"study": study, "study_problems": problems, **knobs, "study_seed": seed,
            "study_run": run, "study_stop": stop, "study_shipped": shipped, "study_interactive": interactive,
            "study_status": status, "study_progress": progress, "study_plot": plot, "study_image": image,
            "study_summary": summary}


# ---- ARRIVAL AND THE GUIDED TOUR (app/tour.py) ----------------------------------------------------
# After a Run (the prompt's, or the arrival view's, which presses it) the round view comes into view
# where it is off screen: on a phone it sits below the examples and settings, a screen or more down.
# In the page, not a server event: nothing is sent for it.
RUN_VIEW_JS = """<script>
document.addEventListener("click", (event) => {
  const arrival = event.target.closest && event.target.closest("#arrival-run");
  if (!arrival && !(event.target.closest && event.target.closest("#run"))) return;
  if (arrival) document.querySelector("#run")?.click();
  const view = document.querySelector("#round-view");
  const top = view ? view.getBoundingClientRect().top : 0;
  if (view && (top < 0 || top > innerHeight * 0.4)) view.scrollIntoView({block: "start"});
});
</script>"""


# What a page's Run leaves for the page to ask for, by pressing a hidden button (no request otherwise):
# - its figures (app/callbacks.py draw_figures): the counters then say data-figures="stale", and the page asks
#   once one of them is on the screen: at once when it is, when the visitor scrolls to them otherwise. A page
#   with nothing stale watches nothing and sends nothing;
# - its rounds shown again (callbacks.show_rounds_arriving): the counters carry data-replay (the run's id), and
#   the page asks once for each run.
PAGE_ASKS_JS = """<script>
(() => {
  let seen = null, watching = null, replayed = null;
  new MutationObserver(() => {
    const counters = document.querySelector("#counters .lopa-counters");
    const replay = counters?.dataset.replay;
    if (replay && replay !== replayed) {
      replayed = replay;
      document.querySelector("#show-arriving")?.click();
    }
    const stale = counters?.dataset.figures === "stale" ? counters : null;
    if (stale === seen) return;
    seen = stale;
    watching?.disconnect();
    watching = null;
    if (!stale) return;
    const observer = watching = new IntersectionObserver((entries) => {
      if (!entries.some((entry) => entry.isIntersecting)) return;
      observer.disconnect();
      document.querySelector("#draw-figures")?.click();
    });
    for (const id of ["#heatmap", "#rank-lanes", "#tokens-chart"]) {
      const figure = document.querySelector(id);
      if (figure) observer.observe(figure);
    }
  }).observe(document.documentElement, {childList: true, subtree: true});
})();
</script>"""


def build_arrival_panel() -> dict:
    """The first screen: the recorded D2F and LoPA runs of the default example side by side (drawn into
    the page itself, so it shows without a click or a request), and the way into the tour."""
    from ..tour.callbacks import arrival
    with gr.Column(elem_id="arrival-view"):
        story = gr.HTML(arrival(), elem_id="arrival")
        with gr.Row(equal_height=True, elem_id="arrival-actions"):
            start = gr.Button("▶ Take the guided tour", variant="primary", scale=0, min_width=220, elem_id="tour-start")
            # Presses the prompt's Run in the page itself (RUN_VIEW_JS): one Run, whichever button.
            gr.Button("▶ Run the first example", scale=0, min_width=220, elem_id="arrival-run")
            gr.HTML('<a href="#all-controls" style="font-size:15px;line-height:40px">Run your own prompt ↓ (then '
                    'fork, compare, studies)</a>', elem_id="all-controls-link")
    return {"arrival": story, "tour_start": start}


def build_tour_dock() -> dict:
    """The tour's card, docked at the bottom of the window while the tour is on (CSS in app/tour.py)."""
    from ..tour.callbacks import new_tour_state
    with gr.Group(visible=False, elem_id="tour-dock") as dock:
        card = gr.HTML(elem_id="tour-card")
        with gr.Row():
            back = gr.Button("◀ Back", size="sm", min_width=80, elem_id="tour-prev")
            forward = gr.Button("Next ▶", variant="primary", size="sm", min_width=80, elem_id="tour-next")
            end = gr.Button("Close the tour", size="sm", min_width=80, elem_id="tour-end")
    return {"tour_dock": dock, "tour_card": card, "tour_prev": back, "tour_next": forward, "tour_end": end,
            "tour_state": gr.State(new_tour_state)}


def build_glossary() -> dict:
    """Every term the page uses, spelled out (the counters, the tour and the studies link here)."""
    from ..viz import glossary_html
    with gr.Column(elem_id="glossary"):
        gr.Markdown(GLOSSARY_INTRO)
        terms = gr.HTML(glossary_html(), elem_id="glossary-terms")
    return {"glossary": terms}
