"""The model panel: the session's model, which a visitor picks for their page alone (build_model_panel); it is
warmed up when the page loads, and applied when picked (wire). A DiffusionGemma folder picked here goes to
its own panel (app/panels/denoise/). Plain callbacks, each returning values in the order its docstring names."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ..serving.gpu import zero_gpu
from ..serving.model_cache import MODELS
from ..serving.models import bundled_models
from ..serving.session import Session
from .denoise.callbacks import canvas_folder, picked_message
from .events import MODEL, Wiring
from .round_view.views import view
from .status import error_message
from .viz import esc


def build_model_panel() -> dict:
    with gr.Group():
        info = gr.Markdown(MODELS.describe(), elem_id="model-info")
        # This session's model, used from the moment it is picked (pick_model, below); other visitors keep theirs.
        # Short names in the list (a paragraph per option was cut under the arrow), what each shows below it.
        offered = [(label.split(": ", 1)[0], folder) for label, folder in bundled_models()]
        model_dir = gr.Dropdown(offered, value=str(MODELS.default), allow_custom_value=True,
                                label="model of this session: a bundled one, or type a local Hugging Face folder "
                                      "(applies at once, to this page only)", elem_id="model-dir")
        gr.Markdown("\n".join(f"- **{esc(name)}**: {esc(shows)}" for name, shows in
                              (label.split(": ", 1) for label, _ in bundled_models() if ": " in label)),
                    elem_id="model-choices")
    return {"model_info": info, "model_dir": model_dir}


def warm_model(session: Session) -> str:
    """Load the session's model on first page view so the first Run starts at once (locally: on a ZeroGPU
    Space the models were loaded at import and only a GPU worker can run them, so this only describes it)."""
    folder = session.model if isinstance(session, Session) else None
    if zero_gpu():
        return MODELS.describe(folder)
    try:
        warm = MODELS.warm_up(folder)
        if warm is not None:         # plotly builds its validators on first use: a second, once
            view(Session(run=warm))
    except ValueError as err:
        return MODELS.describe(folder) + f"\n\n**⚠ Error:** {esc(err)}"
    return MODELS.describe(folder)


def pick_model(session: Session, choice) -> tuple:
    """(model info, status, model box): make the model in `choice` (a bundled model's folder or name, or
    a typed local folder) this session's model, for every later Run, Step, Compare, fork and study of
    this session; other sessions keep theirs. It is loaded into the shared cache (app/serving/model_cache.py) now, in
    the server process, so that a folder that does not load says so at once; then the session keeps its
    model and the box shows that model again. A paused decode of the previous model is stopped."""
    current = session.model or str(MODELS.default)
    try:
        session.check_free()
        if not isinstance(choice, str):
            raise ValueError(f"model must be a bundled model's name or a folder, got {type(choice).__name__}")
        folder = MODELS.servable(MODELS.folder(choice))
        if canvas_folder(folder) is not None:     # not a LoPA model: its own panel takes it (app/panels/denoise/)
            session.canvas_model, kept = str(folder), MODELS.peek(current)
            return (MODELS.describe(current), picked_message(folder, kept.spec.name if kept else Path(current).name),
                    gr.update(value=current))
        loaded = MODELS.get(folder)
        if not zero_gpu():
            MODELS.warm_up(folder)
    except ValueError as err:
        kept = MODELS.peek(current)
        kept = kept.spec.name if kept is not None else Path(current).name
        return (MODELS.describe(current), error_message(f"{err} — this session still uses `{kept}`."),
                gr.update(value=current))
    if MODELS.key(folder) == MODELS.key(current):
        # The same model (the box shown again after an error, or picked twice): the status keeps its message.
        session.model = str(folder)
        return MODELS.describe(folder), gr.skip(), gr.skip()
    session.cancel()                # a paused decode of the previous model: stopped, kept in the run list
    session.close()
    session.model = str(folder)
    return (MODELS.describe(folder), f"This session now decodes with `{esc(loaded.spec.name)}` (other visitors "
                                     "keep their own model).", gr.skip())


def wire(w: Wiring) -> None:
    """The session's model: applied when picked (a typed folder when the box loses focus or Enter is
    pressed), warmed up when the page loads (after the link's listeners: it may name the model)."""
    c = w.c
    w.deps["picked"] = w.on(c["model_dir"].change, pick_model, [w.session, c["model_dir"]],
                            [c["model_info"], c["status"], c["model_dir"]], api_name="pick_model", **MODEL)
    w.deps["warmed"] = w.on(w.demo.load, warm_model, [w.session], [c["model_info"]],
                            api_visibility="private", **MODEL)
