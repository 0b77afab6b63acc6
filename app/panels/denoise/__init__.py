"""The DiffusionGemma panel: a DiffusionGemma checkpoint decoded on its own sampler, step by step
(build_denoise_panel), its events (wire); its callbacks and how its model is held in callbacks.py, its saved
canvas traces in traces.py."""

from __future__ import annotations

import gradio as gr

from lopa.settings import CANVAS_SETTINGS

from ...serving.session import SESSION_TTL_S
from ..events import MODEL, VIEW, Wiring
from ..traces import clear_upload
from .callbacks import (
    DENOISE_OUTPUTS,
    MAX_FORWARDS,
    NO_FOLDER,
    NOT_LOPA,
    PANEL_INPUTS,
    decode_canvas,
    end_canvas_view,
    folder_line,
    new_canvas_view,
    show_step,
)
from .traces import export_canvas_trace, load_canvas_trace


# -- layout -------------------------------------------------------------------------------------------
def _limit_label(name: str) -> str:
    """The label of a whole-number panel setting: its name, unset, and its range (CANVAS_SETTINGS)."""
    spec = CANVAS_SETTINGS[name]
    return f"{spec.label} (0: the checkpoint's own, within {MAX_FORWARDS} forwards; {spec.low} to {spec.high})"


def build_denoise_panel() -> dict:
    """The DiffusionGemma panel's components by name (DENOISE_OUTPUTS and its inputs), the session's canvas view
    (the trace shown, CanvasView) first."""
    view = gr.State(new_canvas_view, time_to_live=SESSION_TTL_S, delete_callback=end_canvas_view)
    gr.Markdown(NOT_LOPA, elem_id="denoise-note")
    folder = gr.Markdown(NO_FOLDER, elem_id="denoise-model")
    with gr.Row():
        tokens = gr.Number(0, label=_limit_label("max_new_tokens"), precision=0, elem_id="denoise-max-new-tokens")
        steps = gr.Number(0, label=_limit_label("max_denoising_steps"), precision=0, elem_id="denoise-steps")
        bound = gr.Number(0, label=f"{CANVAS_SETTINGS['entropy_bound'].label} (nats; 0: the checkpoint's own)",
                          elem_id="denoise-bound")
        seed = gr.Number(0, label=CANVAS_SETTINGS["seed"].label or "seed", precision=0, elem_id="denoise-seed")
    with gr.Row():
        decode_button = gr.Button("Decode the prompt on DiffusionGemma's sampler", variant="primary",
                                  elem_id="denoise-decode")
        upload = gr.File(label="open a saved canvas trace (lopa-canvas-trace/1, .json)", file_types=[".json"],
                         elem_id="denoise-upload")
    with gr.Row():
        export = gr.Button("Save the canvas trace shown (.json)", elem_id="denoise-export")
        export_file = gr.File(label="download", interactive=False, elem_id="denoise-export-file")
    status = gr.Markdown("", elem_id="denoise-status")
    counters = gr.HTML(elem_id="denoise-counters")
    slider = gr.Slider(0, 1, value=0, step=1, label="denoising step", interactive=False, elem_id="denoise-slider")
    step = gr.HTML(elem_id="denoise-step")
    settled = gr.HTML(elem_id="denoise-settled")
    heatmap = gr.Plot(label="entropy per position and step (dots: accepted draws; squares: where each final token "
                            "settled)", elem_id="denoise-heatmap")
    return {"denoise_view": view, "denoise_folder": folder, "denoise_max_new_tokens": tokens, "denoise_steps": steps,
            "denoise_bound": bound, "denoise_seed": seed, "denoise_decode": decode_button, "denoise_upload": upload,
            "denoise_export": export, "denoise_export_file": export_file, "denoise_status": status,
            "denoise_counters": counters, "denoise_slider": slider, "denoise_step": step, "denoise_settled": settled,
            "denoise_heatmap": heatmap}


def wire(w: Wiring) -> None:
    """DiffusionGemma on its own sampler: a DiffusionGemma folder named in the model box opens
    there; its decode takes the model slot like Run; its steps and saved traces (traces.py) are views."""
    c, canvas, out = w.c, w.c["denoise_view"], w.pick(*DENOISE_OUTPUTS)
    w.then(w.deps["picked"], folder_line, [w.session], [c["denoise_folder"]], queue=False)
    w.on(c["denoise_decode"].click, decode_canvas, [w.session, canvas, c["prompt"], *w.pick(*PANEL_INPUTS)],
         out, api_name="decode_canvas", **MODEL)
    w.on(c["denoise_slider"].input, show_step, [canvas, c["denoise_slider"]], out[1:],
         api_name="show_canvas_step", trigger_mode="always_last", show_progress="hidden", **VIEW)
    w.on(c["denoise_export"].click, export_canvas_trace, [canvas],
         [c["denoise_export_file"], c["denoise_status"]], api_name="export_canvas_trace", **VIEW)
    loaded = w.on(c["denoise_upload"].upload, load_canvas_trace, [canvas, c["denoise_upload"]], out,
                  api_name="load_canvas_trace", preprocess=True, **VIEW)
    w.then(loaded, clear_upload, None, [c["denoise_upload"]], show_progress="full", **VIEW)
