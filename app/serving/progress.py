"""Events whose progress is hidden name no progress target: a workaround for Gradio 6.31's page, which
hands every component it ever showed progress on its loading state again on each status message of any
event, deep-copying its props (about 9,000 copies for one Run). Applied once the page is built
(app.page.build_demo); why in detail: no_hidden_progress's docstring."""

from __future__ import annotations

import gradio as gr


def no_hidden_progress(demo: gr.Blocks) -> None:
    """Every event whose progress is hidden (or whose outputs are all gr.State, which shows none) keeps no
    loading state on its outputs (show_progress_on=[]). Called once the Blocks is closed (app.page.build_demo):
    Gradio adds the load events of gr.State(callable) then.

    Why: Gradio 6.31's page keeps a loading state for every component that was ever a progress target (an
    output, unless show_progress_on names others) of an event it ran, and on each status message of any
    event (pending, started, each streamed yield, done) it hands every one of those states back to its
    component (Blocks `update_loading_stati_state`), which deep-copies the component's props first (the
    core's update_state: get_data, Svelte's $state.snapshot: a structuredClone per leaf). That was about
    9,000 copies on a page for one Run of the first example; naming no target left about 3,500 (the Run's
    inputs, which Gradio marks as a queued event ends) and cut the browser's CPU for a Run by about a
    quarter (scripts/bench_crowd.py, docs/deployment.md). A hidden progress shows nothing on those outputs,
    so naming no target changes nothing on the screen (the page reads `show_progress_on || outputs`: an
    empty list is taken as given)."""
    for fn in demo.fns.values():
        states = fn.outputs and all(isinstance(block, gr.State) for block in fn.outputs)
        if fn.show_progress_on is None and (fn.show_progress == "hidden" or states):
            fn.show_progress_on = []
