"""The tour panel: the arrival view, the default example's recorded D2F and LoPA runs side by side on the first
screen (build_arrival_panel), and the guided tour's card docked at the bottom of the window (build_tour_dock);
its events (wire). The callbacks, the recorded traces and the page's script for the tour: callbacks.py; the
steps' words, read from the traces: steps.py. `python -m app.panels.tour --record` records the traces."""

from __future__ import annotations

import gradio as gr

from ..events import MODEL, Wiring
from .callbacks import TOUR_OUTPUTS, arrival, end_tour, new_tour_state, next_step, previous_step, start_tour


def build_arrival_panel() -> dict:
    """The first screen: the recorded D2F and LoPA runs of the default example side by side (drawn into
    the page itself, so it shows without a click or a request), and the way into the tour."""
    with gr.Column(elem_id="arrival-view"):
        story = gr.HTML(arrival(), elem_id="arrival")
        with gr.Row(equal_height=True, elem_id="arrival-actions"):
            start = gr.Button("▶ Take the guided tour", variant="primary", scale=0, min_width=220, elem_id="tour-start")
            # Presses the prompt's Run in the page itself (RUN_VIEW_JS): one Run, whichever button.
            gr.Button("▶ Run the first example", scale=0, min_width=220, elem_id="arrival-run")
            gr.HTML('<a href="#all-controls" style="font-size:15px;line-height:40px">Run your own prompt ↓ (then '
                    'fork, compare, studies)</a>', elem_id="all-controls-link")
    return {"arrival": story, "tour_start": start}


def build_tour_dock() -> dict:
    """The tour's card, docked at the bottom of the window while the tour is on (CSS in callbacks.py)."""
    with gr.Group(visible=False, elem_id="tour-dock") as dock:
        card = gr.HTML(elem_id="tour-card")
        with gr.Row(elem_id="tour-buttons"):          # under the card, which scrolls (callbacks.TOUR_CSS)
            back = gr.Button("◀ Back", size="sm", min_width=80, elem_id="tour-prev")
            forward = gr.Button("Next ▶", variant="primary", size="sm", min_width=80, elem_id="tour-next")
            end = gr.Button("Close the tour", size="sm", min_width=80, elem_id="tour-end")
    return {"tour_dock": dock, "tour_card": card, "tour_prev": back, "tour_next": forward, "tour_end": end,
            "tour_state": gr.State(new_tour_state)}


def wire(w: Wiring) -> None:
    """Arrival and the guided tour: recorded runs, no model. A step selects a run of the
    session's list, so it waits for a running decode like select_run (the session's turn) instead of racing it;
    Close queues behind a step already asked for, so the step cannot reopen the tour after it (the page
    hides the dock at once meanwhile: callbacks.TOUR_JS)."""
    c, out = w.c, w.pick(*TOUR_OUTPUTS)
    for name, fn in (("tour_start", start_tour), ("tour_next", next_step),
                     ("tour_prev", previous_step), ("tour_end", end_tour)):
        w.on(c[name].click, fn, [w.session, c["tour_state"]], out, api_visibility="private", show_progress="hidden",
             **MODEL)
