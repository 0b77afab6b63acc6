"""Words of the layout that follow the page's state: the decode settings' title names the settings the
visitor set (their request, app/request.py). A plain callback (wired in app/wiring.py)."""

from __future__ import annotations

import gradio as gr

from .serving.request import touched_names

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


# -- Stop buttons show whether something runs ----------------------------------------------------
# A Stop button as something starts (its Run was pressed): an update made in the page, no request. As a
# server call it went first, before the job's own request, on every Run: one more round trip for the Run
# to wait on, the longest when other visitors keep the server busy.
ENABLE_STOP_JS = "() => ({__type__: 'update', interactive: true})"


def stop_disabled():
    """A Stop button once its run is over."""
    return gr.update(interactive=False)


def decode_stop(session):
    """The round view's Stop: enabled while the session has a decode to stop (streaming, or paused after
    Step), else disabled."""
    return gr.update(interactive=getattr(session, "live", None) is not None)
