"""The round view: a decode round by round. The prompt with Run, Stop, Step and Reset under it
(build_input_panel), the status, counters and run list (build_controls), the round on show (build_rounds)
and what it holds (build_figures), each laid out where app/page.py puts it; the events (wire); the
callbacks in callbacks.py. The what-if panel and the best-order search sit between the rounds and the
figures on the page, each a panel of its own (app/panels/forks.py, best_order.py)."""

from __future__ import annotations

import gradio as gr

from ...serving import api
from ...serving.examples import checkpoint_examples, example_groups
from ...serving.models import example_prompts
from ...serving.session import Session
from ..events import MODEL, UNSET, VIEW, Wiring, named
from . import callbacks as cb
from . import views

# After a Run (the prompt's, or the arrival view's, which presses it) the round view comes into view
# where it is off screen: on a phone it sits below the examples and settings, a screen or more down.
# In the page, not a server event: nothing is sent for it.
RUN_VIEW_JS = """<script>
document.addEventListener("click", (event) => {
  const arrival = event.target.closest && event.target.closest("#arrival-run");
  if (!arrival && !(event.target.closest && event.target.closest("#run"))) return;
  if (arrival) document.querySelector("#run")?.click();
  const view = document.querySelector("#round-view");
  const top = view ? view.getBoundingClientRect().top : 0;
  if (view && (top < 0 || top > innerHeight * 0.4)) view.scrollIntoView({block: "start"});
});
</script>"""


# What a page's Run leaves for the page to ask for, by pressing a hidden button (no request otherwise):
# - its figures (views.draw_figures): the counters then say data-figures="stale", and the page asks
#   once one of them is on the screen: at once when it is, when the visitor scrolls to them otherwise. A page
#   with nothing stale watches nothing and sends nothing;
# - its rounds shown again (callbacks.show_rounds_arriving): the counters carry data-replay (the run's id), and
#   the page asks once for each run.
PAGE_ASKS_JS = """<script>
(() => {
  let seen = null, watching = null, replayed = null;
  new MutationObserver(() => {
    const counters = document.querySelector("#counters .lopa-counters");
    const replay = counters?.dataset.replay;
    if (replay && replay !== replayed) {
      replayed = replay;
      document.querySelector("#show-arriving")?.click();
    }
    const stale = counters?.dataset.figures === "stale" ? counters : null;
    if (stale === seen) return;
    seen = stale;
    watching?.disconnect();
    watching = null;
    if (!stale) return;
    const observer = watching = new IntersectionObserver((entries) => {
      if (!entries.some((entry) => entry.isIntersecting)) return;
      observer.disconnect();
      document.querySelector("#draw-figures")?.click();
    });
    for (const id of ["#heatmap", "#rank-lanes", "#tokens-chart"]) {
      const figure = document.querySelector(id);
      if (figure) observer.observe(figure);
    }
  }).observe(document.documentElement, {childList: true, subtree: true});
})();
</script>"""


def build_input_panel() -> dict:
    """The prompt, Run and its siblings right under it, then the examples: on a phone this column comes
    first, so Run is within a screen of the arrival view."""
    examples = example_prompts()
    prompt = gr.Textbox(label="prompt (the model's prompt template is applied)", lines=1, max_lines=8, value=examples[0] if examples else "",
                        elem_id="prompt")
    with gr.Row(elem_id="run-buttons"):
        run = gr.Button("▶ Run", variant="primary", min_width=70, elem_id="run")
        # Disabled until something runs (app/wiring.py enables it for the run and disables it after).
        stop = gr.Button("■ Stop", variant="stop", min_width=70, interactive=False, elem_id="stop")
        step = gr.Button("Step", min_width=70, elem_id="step")          # one round (the status line says so)
        reset = gr.Button("Reset", min_width=70, elem_id="reset")
    for label, prompts in example_groups():
        gr.Examples(examples=[[e] for e in prompts], inputs=[prompt], label=label, examples_per_page=8)
    # What a real checkpoint is for, apart and closed: the bundled models cannot answer these.
    label, prompts = checkpoint_examples()
    if prompts:
        with gr.Accordion("Harder examples, for a real checkpoint (the bundled models cannot answer them)",
                          open=False, elem_id="checkpoint-examples"):
            gr.Examples(examples=[[e] for e in prompts], inputs=[prompt], label=label, examples_per_page=8)
    return {"prompt": prompt, "run": run, "stop": stop, "step": step, "reset": reset}


def build_controls() -> dict:
    """The status, counters and run list of the round view (Run and its siblings sit with the prompt)."""
    status = gr.Markdown("Press **Run** (under the prompt) to stream a decode live, or **Step** to advance one round.",
                         elem_id="status")
    counters = gr.HTML(elem_id="counters")
    run_list = gr.Radio([], label="runs: the originals, their forks and forks of forks (select one to view it)",
                        elem_id="run-list")
    return {"status": status, "counters": counters, "run_list": run_list}


def build_rounds() -> dict:
    """The round on show: its slider with the strip under it marking where the run's token editing sits, Play (and
    Play's timer), and the canvas of the round (a click on a still-masked cell opens the what-if panel,
    app/panels/forks.py, laid out right under it)."""
    empty = dict(zip(views.VIEW_OUTPUTS, views.view(Session(), kinds=("html",))))
    with gr.Row(elem_id="round-row"):                # on a phone, right under the canvas (app/page.py)
        with gr.Column(scale=5, min_width=160, elem_id="round-column"):
            round_slider = gr.Slider(0, 1, value=0, step=1, label="round (scrub through recorded rounds)",
                                     elem_id="round-slider")
            # Where the run's token editing sits on the slider (visualizations/round_marks.py); empty otherwise.
            marks = gr.HTML(empty["round_marks"], elem_id="round-marks", padding=False)
        play = gr.Button("▶ Play", scale=1, min_width=90, elem_id="play")
    timer = gr.Timer(0.6, active=False)
    canvas = gr.HTML(empty["canvas"], elem_id="canvas")
    return {"round_slider": round_slider, "round_marks": marks, "play": play, "timer": timer, "canvas": canvas}


def build_figures() -> dict:
    """What the round on show holds, under the canvas (and the what-if and best-order panels): the output so
    far, the round in words, its branches and the figures; and the two hidden buttons the page presses
    (PAGE_ASKS_JS)."""
    # Start with the empty views: the page then loads plotly.js (~2 s on a small CPU) when it opens,
    # not when the first round arrives.
    empty = dict(zip(views.VIEW_OUTPUTS, views.view(Session())))
    answer = gr.Textbox(label="output so far (up to the first EOS)", lines=3, interactive=False, elem_id="answer")
    explanation = gr.Markdown(empty["explanation"], elem_id="explanation")
    branches = gr.HTML(empty["branches"], elem_id="branches")
    heatmap = gr.Plot(empty["heatmap"], label="confidence: branches × masked positions", elem_id="heatmap")
    ranks = gr.Plot(empty["ranks"], label="rank lanes: who computed which branch, and when", elem_id="rank-lanes")
    chart = gr.Plot(empty["chart"], label="tokens committed per round", elem_id="tokens-chart")
    # Pressed by the page itself (PAGE_ASKS_JS): when a Run's figures come into view, and when its counters
    # say its rounds may be shown again.
    draw = gr.Button("draw the figures", elem_id="draw-figures", elem_classes=["lopa-hidden"])
    again = gr.Button("show the rounds arriving", elem_id="show-arriving", elem_classes=["lopa-hidden"])
    return {"draw_figures": draw, "show_arriving": again, "answer": answer, "explanation": explanation,
            "branches": branches, "heatmap": heatmap, "ranks": ranks, "chart": chart}


RUN_API = ("The page's Run: streams the page's counters, canvas and plots round by round. For a decode as JSON "
           "(answer, settings, metrics, trace), use /decode. " + UNSET)
STEP_API = "The page's Step: one round of the decode Run would stream (for JSON, use /decode). " + UNSET


def wire(w: Wiring) -> None:
    """Run (the button, Enter in the prompt: one API name), Step, Stop, Reset, the run list, the rounds."""
    c, session, live, view = w.c, w.session, w.pick(*views.LIVE_OUTPUTS), w.pick(*views.VIEW_OUTPUTS)
    answer = w.pick(*cb.RUN_OUTPUTS)
    w.on(c["run"].click, named(cb.run_with_stop, "prompt"), w.decode_inputs, answer, api_name="run",
         api_description=RUN_API, show_progress="hidden", **MODEL)
    w.on(c["prompt"].submit, cb.run_with_stop, w.decode_inputs, answer, api_visibility="private",
         show_progress="hidden", **MODEL)
    replays = [w.on(c["show_arriving"].click, cb.show_rounds_arriving, [session], w.pick(*cb.ARRIVING_OUTPUTS),
                    api_visibility="private", show_progress="hidden", **VIEW)]      # the page asks (PAGE_ASKS_JS)
    gr.api(api.decode, api_name="decode", **MODEL)    # typed JSON endpoint (app/serving/api.py), here: the API's order
    w.on(c["step"].click, named(cb.step_once, "prompt"), w.decode_inputs, live, api_name="step",
         api_description=STEP_API, show_progress="hidden", **MODEL)
    # Stop bypasses the queue: it only sets a flag the running decode checks after each round. It answers at
    # once, so it draws no progress over the status it answers in (nor its timer before the status's text).
    w.on(c["stop"].click, cb.stop_run, [session], [c["status"], c["counters"]], queue=False, api_name="stop",
         show_progress="hidden")
    w.on(c["reset"].click, cb.reset_session, [session], live, api_name="reset", show_progress="hidden", **VIEW)
    # Selecting a run waits for the session's running decode (its turn: in_turn) instead of racing its snapshots.
    w.on(c["run_list"].input, cb.select_run, [session, c["run_list"]], live, api_name="select_run",
         show_progress="hidden", **MODEL)
    w.on(c["round_slider"].input, cb.show_round, [session, c["round_slider"]], [*view, c["answer"]], api_name="show_round",
         trigger_mode="always_last", show_progress="hidden", cancels=replays, **VIEW)
    w.on(c["draw_figures"].click, views.draw_figures, [session], [*w.pick(*views.FIGURE_OUTPUTS), c["counters"]],
         api_visibility="private", show_progress="hidden", **VIEW)
    w.on(c["play"].click, cb.toggle_play, [session, c["playing"], c["round_slider"]],
         [c["timer"], c["play"], c["playing"]], api_visibility="private", cancels=replays, show_progress="hidden", **VIEW)
    w.on(c["timer"].tick, cb.play_tick, [session, c["playing"], c["round_slider"]],
         [c["round_slider"], c["timer"], c["play"], c["playing"], *view, c["answer"]], api_visibility="private",
         show_progress="hidden", **VIEW)
