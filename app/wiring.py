"""The one place where components meet callbacks: wire() walks PANELS, the page's panels (app/panels/), each of
which connects its own events in a few lines (its wire(w), given the components by name: app.panels.events.Wiring);
then what crosses panels: what follows the session's model and the shared link, and the Stops, enabled in the
page as their job starts and disabled when it ends. app/page.py lays the panels out."""

from __future__ import annotations

import gradio as gr

from .panels import best_order, compare, denoise, forks, model, round_view, settings, studies, tour, traces
from .panels.events import MODEL, QUIET, STUDY_VIEW, Wiring
from .panels.round_view.callbacks import decode_stop
from .panels.settings import link_inputs
from .panels.settings.callbacks import follow_session_model
from .panels.settings.share import links
from .panels.studies.callbacks import STUDY_OUTPUTS, show_shipped

# The page's panels, wired in this order (a trigger's listeners run in the order added: the page load's; and the
# API lists its endpoints in that order).
PANELS = (round_view, settings, compare, forks, best_order, model, traces, studies, tour, denoise)


def wire(demo: gr.Blocks, c: dict) -> None:
    """Connect every event: the Stops' enabling first (why: enable_stops), each panel of PANELS in order
    (the page load's listeners run in the order added: the link's inputs, then its DiffusionGemma folder,
    then the warm-up), then what follows the session's model and the Stops' disabling."""
    w = Wiring(demo, c)
    enable_stops(c)
    for panel in PANELS:
        panel.wire(w)
    follow_model(w, w.deps["warmed"], w.deps["picked"])
    follow_link(w, w.deps["canvas_link"])
    stop_buttons(c)


def follow_link(w: Wiring, *deps) -> None:
    """The share link and the command, again after each of `deps` (they change what the link names)."""
    for dep in deps:
        w.then(dep, links, link_inputs(w), [w.c["share_link"], w.c["command"]], queue=False)


def follow_model(w: Wiring, *model_set) -> None:
    """What follows the session's model, chained after the events that set it (`model_set`: the page's
    warm-up, a model picked): the settings inputs show the model's own values, the share link and the
    command name it, the studies show its shipped results.
    Chained with .then, not on a Markdown's .change (the model panel's, the DiffusionGemma folder's): once a
    Markdown's text had changed (on a just-started server, "not loaded yet" → the loaded model), Gradio 6.31's
    page kept re-rendering it and firing its change with the same text, ~10 times a second for as long as
    the page stayed open, each a queued model-slot job every other visitor waited behind
    (tests/test_app_browser_crowd.py). A .then runs once per event that set the model."""
    follow_link(w, *model_set)
    study_out = w.pick(*STUDY_OUTPUTS)
    for dep in model_set:
        w.then(dep, follow_session_model, [w.session, *w.settings], w.settings, **MODEL)
        w.then(dep, show_shipped, [w.c["study"], w.session], study_out, **STUDY_VIEW)


# -- Stop buttons show whether something runs ----------------------------------------------------
# Each Stop and the buttons that start its job (the round view's: every decode that streams into it).
STOP_STARTS = {"stop": ("run", "prompt", "step", "fill_first", "hold_back"), "compare_stop": ("compare",),
               "best_order_stop": ("best_order",), "study_stop": ("study_run",)}
# A Stop button as something starts (its Run was pressed): an update made in the page, no request. As a
# server call it went first, before the job's own request, on every Run: one more round trip for the Run
# to wait on, the longest when other visitors keep the server busy.
ENABLE_STOP_JS = "() => ({__type__: 'update', interactive: true})"


def stop_disabled():
    """A Stop button once its run is over."""
    return gr.update(interactive=False)


def enable_stops(c: dict) -> None:
    """Each Stop is enabled the moment a button that starts its job is pressed. Wired before the jobs'
    own listeners on those buttons: Gradio 6.31's page runs the listeners of one event in the order they
    were added and awaits each queued one to its end before it sends the next (Blocks.dispatch: `for await`
    over the job's stream), so a Stop enabled by a listener added after Run's was enabled only once the
    Run had ended. In the page (ENABLE_STOP_JS): they only touch buttons."""
    for stop_name, starts in STOP_STARTS.items():
        for name in starts:
            trigger = c[name].submit if name == "prompt" else c[name].click
            trigger(None, None, c[stop_name], js=ENABLE_STOP_JS, **QUIET)


def stop_buttons(c: dict) -> None:
    """Each Stop is disabled when its run ends (the round view's: while the session has a decode,
    streaming or paused after Step, it stays enabled; Run's own last message says so:
    app.panels.round_view.callbacks.run_with_stop). enable_stops enables them."""
    session, stop = c["session"], c["stop"]
    for name in ("step", "fill_first", "hold_back", "run_list", "reset", "stop", "tour_start", "tour_next",
                 "tour_prev", "tour_end"):
        for dep in c["__events__"].get(name, ()):
            dep.then(decode_stop, [session], stop, **QUIET)
    for stop_name in ("compare_stop", "best_order_stop", "study_stop"):
        for start in STOP_STARTS[stop_name]:
            for dep in c["__events__"].get(start, ()):
                dep.then(stop_disabled, None, c[stop_name], **QUIET)
