"""The session's model and the decode settings inputs: warm-up on page load, the model picker, the
presets, and the inputs that follow the model's own values until the visitor touches them.

Plain callbacks like app/callbacks.py's (the wiring connects them); each returns values in the order
its docstring names.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from lopa import PAPER_PRESETS

from .. import layout
from ..serving.gpu import zero_gpu
from ..serving.model_cache import MODELS
from ..serving.request import follow_model, shown_settings
from ..serving.session import SETTING_NAMES, Session
from . import share
from .denoise.callbacks import canvas_folder, picked_message
from .round_view.callbacks import error_message, view
from .viz import esc

# The first preset is no fixed row: the session's model's own settings with the app's k (shown_settings).
OWN = "the model's own settings (k = 4)"
# A paper row's settings that the page has inputs for (SETTING_NAMES): one without an input (app=False) would
# stay at the engine's value and never be the visitor's.
PRESETS = {OWN: None,
           **{f"paper: {name}": {n: v for n, v in preset.items() if n in SETTING_NAMES}
              for name, preset in PAPER_PRESETS.items()}}


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
    this session; other sessions keep theirs. It is loaded into the shared cache (app/model_cache.py) now, in
    the server process, so that a folder that does not load says so at once; then the session keeps its
    model and the box shows that model again. A paused decode of the previous model is stopped."""
    current = session.model or str(MODELS.default)
    try:
        session.check_free()
        if not isinstance(choice, str):
            raise ValueError(f"model must be a bundled model's name or a folder, got {type(choice).__name__}")
        folder = MODELS.servable(MODELS.folder(choice))
        if canvas_folder(folder) is not None:     # not a LoPA model: its own panel takes it (app/denoise.py)
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


def apply_preset(name: str, session: Session | None = None) -> tuple:
    """Values for the settings inputs (SETTING_NAMES order): a paper row's settings count as the visitor's
    (the session's touched names take them); OWN shows the session's model's own values and untouches
    them. Every preset keeps max new tokens; settings a preset leaves open are skipped."""
    preset = PRESETS.get(name, {}) if isinstance(name, str) else {}
    touched = set(getattr(session, "touched", None) or ())
    if preset is None:
        loaded = MODELS.peek(MODELS.folder(getattr(session, "model", None)))   # loaded by the page's warm-up
        own = shown_settings(loaded.spec if loaded is not None else None)
        preset = {n: getattr(own, n) for n in SETTING_NAMES if n != "max_new_tokens"}
        touched -= set(preset)
    else:
        touched |= set(preset)
    if isinstance(session, Session):
        session.touched = frozenset(touched)
    return tuple(gr.update(value=preset[n]) if n in preset else gr.skip() for n in SETTING_NAMES)


def settings_follow(request: gr.Request, session: Session, prompt, *values) -> tuple:
    """(settings title, share link, command) after the visitor's settings changed (an input, a preset, a
    link): what follows their request. `values`: the settings inputs, then the DiffusionGemma panel's
    (app.share.links)."""
    return (layout.settings_title(session), *share.links(request, session, prompt, *values))


def toucher(name: str):
    """The callback of setting `name`'s input event (the visitor changed it): the session counts it as
    theirs (Session.touched), then settings_follow."""
    def touch(request: gr.Request, session, prompt, *values):
        if isinstance(session, Session):
            session.touched = frozenset(session.touched or ()) | {name}
        return settings_follow(request, session, prompt, *values)
    touch.__name__ = f"touch_{name}"
    return touch


def follow_session_model(session: Session, *values) -> tuple:
    """The settings inputs (SETTING_NAMES order) once the session's model is known (page load, a model
    picked): the inputs the visitor has not touched show the model's own values, as Run resolves them
    (app.request.follow_model: a Dream-format checkpoint asking for full attention shows full); touched
    ones are kept."""
    try:
        spec = MODELS.get(MODELS.folder(getattr(session, "model", None))).spec
    except ValueError:
        return tuple(gr.skip() for _ in SETTING_NAMES)       # the model panel says why
    follow = follow_model(spec, getattr(session, "touched", None) or (), *values)
    return tuple(gr.skip() if new == old else gr.update(value=new) for new, old in zip(follow, values))
