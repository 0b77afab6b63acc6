"""Words of the layout that follow the page's state: the decode settings' title says how many settings
differ from what Run would use untouched. A plain callback (wired in app/wiring.py)."""

from __future__ import annotations

import math

import gradio as gr

from lopa.resolution import resolve

from .model_cache import MODELS
from .session import APP_DEFAULTS, SETTING_NAMES

SETTINGS_TITLE = "Decoding settings"


def _same(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return str(a) == str(b)


def changed_settings(values: dict, spec=None) -> list[str]:
    """The settings (by name) whose value differs from the one Run resolves when the visitor sets none:
    the model's own value where it has one (ModelSpec.decode), else the app's default."""
    baseline = resolve({}, spec, defaults=APP_DEFAULTS)
    return [name for name in SETTING_NAMES if name in values and not _same(values[name], getattr(baseline, name))]


def settings_title(session, *values):
    """The settings accordion with its title counting the settings the visitor changed (values in
    SETTING_NAMES order)."""
    spec = None
    try:
        loaded = MODELS.peek(MODELS.folder(getattr(session, "model", None)))
        spec = loaded.spec if loaded is not None else None
    except ValueError:                # an unloadable model choice: the model panel says why
        pass
    changed = changed_settings(dict(zip(SETTING_NAMES, values)), spec)
    if not changed:
        return gr.update(label=f"{SETTINGS_TITLE}: all at the defaults")
    names = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return gr.update(label=f"{SETTINGS_TITLE}: {len(changed)} differ from the defaults ({names})")


# -- Stop buttons show whether something runs ----------------------------------------------------
def stop_enabled():
    """A Stop button as something starts (its Run was pressed)."""
    return gr.update(interactive=True)


def stop_disabled():
    """A Stop button once its run is over."""
    return gr.update(interactive=False)


def decode_stop(session):
    """The round view's Stop: enabled while the session has a decode to stop (streaming, or paused after
    Step), else disabled."""
    return gr.update(interactive=getattr(session, "live", None) is not None)
