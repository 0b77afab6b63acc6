"""A closed page gives back what it held at once: a workaround for Gradio 6.31, which keeps a closed page's
States an hour (SessionState.STATE_TTL_WHEN_CLOSED: 3600 s) in case the page comes back, and its record (a
copy of the page's config with every component's last output) until state_session_capacity newer pages push
it out. end_page is the page's one unload handler (app/panels/settings/__init__.py wires it): it ends the
page's jobs in Gradio's queue, removes its exports (app/serving/disk.py), ends each of its States by its own
delete callback (app.serving.session.end_session, the DiffusionGemma panel's end_canvas_view) and drops
Gradio's record of the page."""

from __future__ import annotations

import anyio
import gradio as gr

from . import disk
from .budget import return_freed_memory


async def end_page(request: gr.Request = None) -> None:
    """demo.unload: the closed page's jobs end, its exports leave the disk (app.serving.disk.end_session), and its
    States are ended now, each by its own delete callback (end_session, app.panels.denoise.callbacks.end_canvas_view), so a
    crowd's closed tabs give their runs back at once. Gradio 6.31 would keep a closed page's States an hour
    (SessionState.STATE_TTL_WHEN_CLOSED: 3600 s, longer than SESSION_TTL_S) in case the page comes back; a
    reloaded page is a new session here, and one whose connection dropped and came back starts with a fresh
    session (its run list empty). `request`: the gr.Request Gradio passes an unload handler (its app holds
    the pages' States and its queue)."""
    app = getattr(getattr(request, "request", None), "app", None)
    key = getattr(request, "session_hash", None)
    queue = getattr(app.get_blocks(), "_queue", None) if app is not None and key else None
    if queue is not None:
        # Each step of a job (a stream's every chunk) finds its page's record in Gradio's holder and makes it
        # afresh when it is gone. Gradio ends a closed page's jobs when it sees the page's message stream
        # close, which may come after this unload: end them first (a step already running ends its job).
        await queue.clean_events(session_hash=key)
    await anyio.to_thread.run_sync(drop_page, request, getattr(app, "state_holder", None), key)


def drop_page(request, holder, key: str | None) -> None:
    """The rest of end_page, blocking: the page's exports, and Gradio's record of the page (page `key` in
    the app's StateHolder `holder`), its States ended."""
    disk.end_session(request)
    if holder is None or not key:
        return
    # Gradio's record of the page (its States, and a copy of its config with the last output of every
    # component: the figures, the canvas) leaves the holder first, whatever a delete callback does; it would
    # stay until state_session_capacity newer pages pushed it out.
    with holder.lock:
        record = holder.session_data.pop(key, None)
        holder.time_last_used.pop(key, None)
    if record is None:
        return
    # An event of the page may be in its last step and add a State to the record meanwhile: Gradio's own
    # StateHolder.delete_state iterates the live dict and then fails ("dictionary changed size during
    # iteration"). The callbacks run on a copy (dict() copies under the GIL in one step).
    for state_id, value in dict(record.state_data).items():
        block = record.blocks_config.blocks.get(state_id)
        if isinstance(block, gr.State):
            block.delete_callback(value)
    record.state_data.clear()
    return_freed_memory()
