"""What a panel says in its status line: a problem the visitor can fix (error_message: the line and a toast),
and nothing while a Stop waits for its stream to end (stop_pending, stop_stream)."""

from __future__ import annotations

import gradio as gr

from .viz import esc


def error_message(err: Exception | str) -> str:
    """Status-panel Markdown for a problem the user can fix; also raised as a toast."""
    text = esc(err)                    # messages can quote file names and values from an upload
    gr.Warning(text)
    return f"**⚠ Error:** {text}"


def stop_pending():
    """What a Stop shows while a stream runs: nothing. The stream ends within a step and its last status
    says it stopped; Stop is answered outside the queue and the stream's updates through it, in no
    guaranteed order, so a "Stopping…" from Stop could reach the page after that last status and hide it."""
    return gr.skip()


def stop_stream(session) -> str:
    """A Stop of a session's stream (a comparison, a best-order search): ask it to end within its current step
    (stop_pending: the stream says so), or say that nothing runs."""
    if session.streaming:
        session.stop_requested = True
        return stop_pending()
    return "Nothing is running."
