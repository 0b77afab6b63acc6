"""The studies panel: the filling-order studies of lopa.study marked `app`, from the results the command line
shipped for the model on show, or run live on a few problems (build_studies_panel); its events (wire); its
callbacks in callbacks.py."""

from __future__ import annotations

import gradio as gr

from ..events import LONG, STUDY_VIEW, Wiring
from .callbacks import (
    LIVE_PROBLEMS,
    STUDY_OUTPUTS,
    arm_study,
    knob_keys,
    live_knobs,
    new_study_state,
    run_study,
    show_interactive,
    show_shipped,
    stop_study,
    study_choices,
)


def build_studies_panel() -> dict:
    """The Studies section: shipped results of `python -m lopa.study` (instant), or a live run; first the
    session's study state (its Stop flag)."""
    state = gr.State(new_study_state)
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
    first = dict(zip(STUDY_OUTPUTS, show_shipped("orders")))
    status = gr.Markdown(first["study_status"], elem_id="study-status")
    progress = gr.HTML(first["study_progress"], elem_id="study-progress")
    # Hidden by the page's CSS while it holds no figure: an empty plot box reads as a failed plot.
    plot = gr.Plot(label="study (interactive)", show_label=False, elem_id="study-plot")     # its title names it
    # No label: Gradio draws it over the picture's top-left corner, where the PNG has its title.
    image = gr.Image(first["study_image"]["value"], label="study (shipped results)", show_label=False, type="filepath",
                     interactive=False, elem_id="study-image")
    summary = gr.Markdown(first["study_summary"], elem_id="study-summary")
    return {"study_state": state, "study": study, "study_problems": problems, **knobs, "study_seed": seed,
            "study_run": run, "study_stop": stop, "study_shipped": shipped, "study_interactive": interactive,
            "study_status": status, "study_progress": progress, "study_plot": plot, "study_image": image,
            "study_summary": summary}


def wire(w: Wiring) -> None:
    """Studies: shipped results (instant), or a live run with progress and Stop."""
    c, out = w.c, w.pick(*STUDY_OUTPUTS)
    # Run arms the session's Stop outside the queue first, so a Stop pressed while the run waits for the
    # model (or before its first decode) is kept for it.
    armed = c["study_run"].click(arm_study, [c["study_state"]], None, queue=False, api_visibility="private")
    inputs = [c["study_state"], c["study"], c["study_problems"], *w.pick(*knob_keys()), c["study_seed"], w.session]
    run = w.on(armed.then, run_study, inputs, out, api_name="run_study", show_progress="hidden", **LONG)
    w.events["study_run"] = [run]
    w.on(c["study_stop"].click, stop_study, [c["study_state"]], [c["study_status"]], queue=False,
         api_name="stop_study", show_progress="hidden")
    # One at a time, in the order asked (STUDY_VIEW): in the shared view slot a study's picture, asked first,
    # could land after the interactive plot asked next and replace it.
    for event in (c["study"].input, c["study_shipped"].click):
        w.on(event, show_shipped, [c["study"], w.session], out, api_visibility="private",
             show_progress="hidden", **STUDY_VIEW)
    w.on(c["study_interactive"].click, show_interactive, [c["study"], w.session], out,
         api_visibility="private", show_progress="hidden", **STUDY_VIEW)
