"""The trace panel, under the round view: export the current run as JSON or Parquet, replay an uploaded one.

Its layout (build_trace_panel), events (wire) and plain callbacks: export_trace returns (file, status);
load_trace returns LIVE_OUTPUTS, the view of the replayed run.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from lopa import RunResult

from ..serving import disk
from ..serving.budget import LEDGER
from ..serving.inputs import choice
from ..serving.model_cache import tokenizer_for_trace
from ..serving.models import token_names, trace_ids
from ..serving.session import Session
from .events import VIEW, Wiring
from .round_view.views import LIVE_OUTPUTS, describe_run, live_outputs
from .status import error_message
from .viz import esc

EXPORT_FORMATS = ("JSON", "Parquet")


def build_trace_panel() -> dict:
    """Save the run on show as a trace file, or load one to replay it (an accordion, closed)."""
    with gr.Accordion("Save / replay a trace", open=False, elem_id="trace-panel"):
        with gr.Row():
            fmt = gr.Radio(["JSON", "Parquet"], value="JSON", label="format", elem_id="export-format")
            export = gr.Button("Export trace", elem_id="export")
        export_file = gr.File(label="download", interactive=False, elem_id="export-file")
        upload = gr.File(label="load a trace (.json / .parquet) to replay it without a model",
                         file_types=[".json", ".parquet"], elem_id="trace-upload")
    return {"export_format": fmt, "export": export, "export_file": export_file, "trace_upload": upload}


def export_trace(session: Session, fmt: str, request: gr.Request = None) -> tuple:
    """(file, status): the current trace written as JSON or Parquet for download, into Gradio's cache
    and charged to the session's disk budget (app/serving/disk.py: its oldest exports go to make room)."""
    try:
        fmt = choice("format", fmt, EXPORT_FORMATS)
    except ValueError as err:
        return gr.update(value=None), error_message(err)
    if session.run is None:
        return gr.update(value=None), error_message("nothing to export yet: run a decode or load a trace first")
    suffix = ".parquet" if fmt == "Parquet" else ".json"
    try:
        path, removed = disk.export(request, "lopa-trace", session.run.spec.get("name"), suffix, session.run.save)
    except (OSError, ValueError) as err:
        return gr.update(value=None), error_message(f"could not export the trace: {err}")
    older = f" ({removed} older export(s) removed to make room)" if removed else ""
    return (gr.update(value=str(path), visible=True),
            f"Exported {session.n_rounds} rounds to `{esc(path.name)}`{older}.")


def load_trace(session: Session, file) -> tuple:
    """Replay a trace file without a model (LIVE_OUTPUTS). The file is only parsed (RunResult.load),
    and the read is charged to the app's memory budget while it runs (app/serving/budget.py)."""
    path = getattr(file, "name", file)
    if not path:
        return (error_message("no trace file given"),) + live_outputs(session, "")[1:]
    with LEDGER.reading_trace() as read:
        try:
            run = RunResult.load(path, reserve=read.reserve)
        except (ValueError, OSError, UnicodeDecodeError) as err:
            return (error_message(f"could not read {Path(str(path)).name}: {err}"),) + live_outputs(session, "")[1:]
        finally:
            disk.discard_upload(path)            # read or refused, the upload is not kept on disk
        if not run.records:
            return (error_message("the trace has no rounds to replay"),) + live_outputs(session, "")[1:]
        tokenizer = tokenizer_for_trace(run.spec)
        names = token_names(tokenizer, trace_ids(run)) if tokenizer is not None else {}
        try:
            session.replay(run, names, read=read)
        except ValueError as err:                # over the memory budget (app/serving/budget.py): nothing changed
            return (error_message(f"could not load {Path(str(path)).name}: {err}"),) + live_outputs(session, "")[1:]
    where = "token strings from the local tokenizer" if names else "token ids (its tokenizer is not available here)"
    k = run.settings.get("k", "?")
    return live_outputs(session, f"Replaying a trace of {session.n_rounds} rounds (k={k}, {describe_run(session)}) "
                                 f"with {where}. Prompt: “{esc(run.prompt[:120])}”")


def clear_upload():
    """Empty an upload box after its trace was read, ready for the next file (the round view's and the
    DiffusionGemma panel's)."""
    return None


def wire(w: Wiring) -> None:
    """A run saved as a trace, and a trace opened (the upload box emptied after)."""
    c = w.c
    w.on(c["export"].click, export_trace, [w.session, c["export_format"]], [c["export_file"], c["status"]],
         api_name="export_trace", **VIEW)
    loaded = w.on(c["trace_upload"].upload, load_trace, [w.session, c["trace_upload"]],
                  w.pick(*LIVE_OUTPUTS), api_name="load_trace", preprocess=True, **VIEW)
    w.then(loaded, clear_upload, None, [c["trace_upload"]], show_progress="full", **VIEW)
