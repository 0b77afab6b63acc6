"""The settings panel's callbacks: the presets, the inputs that follow the session's model's own values until
the visitor touches them, and the panel's title, which names what the visitor set. Plain functions, each
returning values in the order its docstring names (the panel's layout and events: __init__.py)."""

from __future__ import annotations

import gradio as gr

from lopa import PAPER_PRESETS

from ...serving.model_cache import MODELS
from ...serving.request import follow_model, shown_settings, touched_names
from ...serving.session import SETTING_NAMES, Session
from . import share

# The first preset is no fixed row: the session's model's own settings with the app's k (shown_settings).
OWN = "the model's own settings (k = 4)"
# A paper row's settings that the page has inputs for (SETTING_NAMES): one without an input (app=False) would
# stay at the engine's value and never be the visitor's.
PRESETS = {OWN: None,
           **{f"paper: {name}": {n: v for n, v in preset.items() if n in SETTING_NAMES}
              for name, preset in PAPER_PRESETS.items()}}


SETTINGS_TITLE = "Decoding settings"


def settings_title(session):
    """The settings accordion with its title naming the settings the visitor set (the session's touched
    ones, which Run takes as theirs; every other is the model's own or the app's default). Nothing is
    resolved: the title follows what was touched, not what each value resolves to."""
    names = touched_names(getattr(session, "touched", ()) or ())
    if not names:
        return gr.update(label=f"{SETTINGS_TITLE}: all at the defaults")
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return gr.update(label=f"{SETTINGS_TITLE}: {len(names)} set by you ({listed})")


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
    (app.panels.settings.share.links)."""
    return (settings_title(session), *share.links(request, session, prompt, *values))


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
    (app.serving.request.follow_model: a Dream-format checkpoint asking for full attention shows full); touched
    ones are kept."""
    try:
        spec = MODELS.get(MODELS.folder(getattr(session, "model", None))).spec
    except ValueError:
        return tuple(gr.skip() for _ in SETTING_NAMES)       # the model panel says why
    follow = follow_model(spec, getattr(session, "touched", None) or (), *values)
    return tuple(gr.skip() if new == old else gr.update(value=new) for new, old in zip(follow, values))


