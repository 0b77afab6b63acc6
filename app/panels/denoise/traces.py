"""Saved canvas traces in the DiffusionGemma panel (app/panels/denoise/): open one, save the one shown.

A saved lopa-canvas-trace/1 (JSON) is bounded in size, read within the app's memory budget, validated by
lopa.canvas_schema before use, and every string it holds reaches the page through `esc`; the trace shown is
saved for download as the same file, within the app's disk budgets (app/serving/disk.py). Plain callbacks like the
panel's (the wiring connects them): load_canvas_trace returns DENOISE_OUTPUTS, export_canvas_trace
(file, status).
"""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from lopa.models.canvas_trace import CanvasRun
from lopa.read_budget import check_read, read_cost

from ...serving import disk
from ...serving.budget import LEDGER, mb
from ...serving.model_cache import tokenizer_for_trace
from ..viz import esc
from .callbacks import CanvasView, error_status, render, trace_names, unchanged

# A saved canvas trace may be this large: a 1024-token decode at DiffusionGemma's defaults (4 canvases x 48 steps
# of 256 positions, a 262k vocabulary) is about 2.2 MB.
MAX_UPLOAD_BYTES = 8 << 20


def load_canvas_trace(view: CanvasView, file) -> tuple:
    """DENOISE_OUTPUTS after opening a saved lopa-canvas-trace/1 (JSON). The file is bounded in size
    (MAX_UPLOAD_BYTES), its read charged to the app's memory budget and bounded before parsing
    (lopa.read_budget.read_cost), and validated by lopa.canvas_schema before anything reads it; refused, nothing changes."""
    path = getattr(file, "name", file)
    if not path or not isinstance(path, (str, Path)):
        return (error_status("no canvas trace file given"),) + unchanged()
    shown_name = esc(Path(str(path)).name[:80])
    try:
        with LEDGER.reading_trace() as read:
            size = Path(path).stat().st_size
            if size > MAX_UPLOAD_BYTES:
                raise ValueError(f"it is {mb(size)}; a canvas trace may be {mb(MAX_UPLOAD_BYTES)}")
            body = Path(path).read_bytes().decode("utf-8")
            check_read(read_cost(body), reserve=read.reserve)
            run = CanvasRun.from_json(body)          # lopa.canvas_schema.validate_canvas_trace first
            del body
            if not run.records:
                raise ValueError("the trace has no denoising steps to show")
            tokenizer = tokenizer_for_trace({"name": run.model})      # a cached DiffusionGemma's too (app/serving/model_cache.py)
            view.hold(run, trace_names(tokenizer, run), read=read)
    except (ValueError, OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as err:
        return (error_status(f"could not open {shown_name}: {err}"),) + unchanged()
    finally:
        disk.discard_upload(path)             # read or refused, the upload is not kept on disk
    where = "token strings from the local tokenizer" if view.names else "token ids (its tokenizer is not available here)"
    status = (f"Opened a canvas trace of `{esc(run.model[:80])}`: {run.forwards} denoising steps, shown with {where}. "
              f"Prompt: “{esc(run.prompt[:120])}”")
    return (status,) + render(view, 0)


def export_canvas_trace(view: CanvasView, request: gr.Request = None) -> tuple:
    """(file, status): the trace shown, as the lopa-canvas-trace/1 JSON that load_canvas_trace opens, written
    for download into Gradio's cache within the app's disk budgets (app/disk.export, as the round view's export)."""
    if view.run is None:
        return gr.update(value=None), error_status("nothing to save yet: decode the prompt or open a saved canvas trace first")
    body = json.dumps(view.run)                 # CanvasRun.to_json of the trace shown
    if len(body) > MAX_UPLOAD_BYTES:            # ASCII: characters are bytes
        return gr.update(value=None), error_status(f"this trace takes {mb(len(body))} as a file and this panel "
                                                   f"opens canvas traces up to {mb(MAX_UPLOAD_BYTES)}: decode fewer steps")
    try:
        path, removed = disk.export(request, "lopa-canvas-trace", view.run.get("model"), ".json",
                                    lambda path: path.write_text(body, encoding="utf-8"))
    except (OSError, ValueError) as err:
        return gr.update(value=None), error_status(f"could not save the canvas trace: {err}")
    older = f" ({removed} older export(s) removed to make room)" if removed else ""
    return (gr.update(value=str(path), visible=True),
            f"Saved {len(view.run['records'])} denoising steps to `{esc(path.name)}`{older}: open it here again "
            "with the upload box.")
