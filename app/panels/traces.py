"""Trace files in the round-by-round view: export the current run as JSON or Parquet, replay an uploaded one.

Plain callbacks like app/callbacks.py's (the wiring connects them): export_trace returns (file, status);
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
from .round_view.callbacks import describe_run, error_message, live_outputs
from .viz import esc

EXPORT_FORMATS = ("JSON", "Parquet")


def export_trace(session: Session, fmt: str, request: gr.Request = None) -> tuple:
    """(file, status): the current trace written as JSON or Parquet for download, into Gradio's cache
    and charged to the session's disk budget (app/disk.py: its oldest exports go to make room)."""
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
    and the read is charged to the app's memory budget while it runs (app/budget.py)."""
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
        except ValueError as err:                # over the memory budget (app/budget.py): nothing changed
            return (error_message(f"could not load {Path(str(path)).name}: {err}"),) + live_outputs(session, "")[1:]
    where = "token strings from the local tokenizer" if names else "token ids (its tokenizer is not available here)"
    k = run.settings.get("k", "?")
    return live_outputs(session, f"Replaying a trace of {session.n_rounds} rounds (k={k}, {describe_run(session)}) "
                                 f"with {where}. Prompt: “{esc(run.prompt[:120])}”")


def clear_upload():
    """Empty an upload box after its trace was read, ready for the next file (the round view's and the
    DiffusionGemma panel's)."""
    return None
