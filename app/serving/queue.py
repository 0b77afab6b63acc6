"""The page's queue (QUEUE: its size and default slot), and how often it looks for work when it has none:
Gradio 6.31's queue polls every 0.001 s for a job and every 0.01 s for progress, with no setting for it,
which woke an idle server 1,100 times a second. quiet_queue sets the Queue's own attributes (the values
Gradio itself uses on Windows) once the page has its queue (app.page.build_demo)."""

from __future__ import annotations

import gradio as gr

# The page's queue: at most 32 events waiting; one at a time where an event names no group of its own
# (app/panels/events.py: MODEL, LONG, VIEW, ...).
QUEUE = dict(max_size=32, default_concurrency_limit=1)
# How often Gradio's queue looks for a job to start while it has none, and for progress to send: Gradio's
# 0.001 s and 0.01 s woke an idle server 1,100 times a second (about 5% of a core, scripts/bench_crowd.py);
# a job now waits at most QUEUE_POLL_S more to start (quiet_queue).
QUEUE_POLL_S, PROGRESS_POLL_S = 0.01, 0.1


def quiet_queue(demo: gr.Blocks) -> None:
    """Gradio's queue (made by demo.queue) polls at QUEUE_POLL_S and PROGRESS_POLL_S, not 1,100 times a
    second. Gradio 6.31 has no setting for it: its Queue's sleep_when_free and progress_update_sleep_when_free
    (Gradio's own values on Windows: 0.05 and 0.1 s)."""
    demo._queue.sleep_when_free = QUEUE_POLL_S
    demo._queue.progress_update_sleep_when_free = PROGRESS_POLL_S
