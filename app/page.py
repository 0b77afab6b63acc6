"""The page: build_demo() lays the panels out (app/panels/: each panel's build_<panel>(), where it sits on the
page) and hands them to the one wiring site (app/wiring.py); its style (CSS) and how it is served
(LAUNCH_KWARGS: the middleware of app/serving/ among it)."""

from __future__ import annotations

import gradio as gr
from starlette.middleware import Middleware

from lopa.read_budget import MAX_TRACE_BYTES

from .panels import best_order, compare, denoise, forks, glossary, model, round_view, settings, studies, tour, traces
from .panels.settings import share
from .panels.tour.callbacks import CSS as TOUR_CSS
from .panels.tour.callbacks import TOUR_JS
from .panels.viz import CANVAS_CSS, GLOSSARY_CSS, ROUND_MARKS_CSS, THEME_COLOURS
from .serving import disk, frames
from .serving.blocks import Explorer
from .serving.progress import no_hidden_progress
from .serving.queue import QUEUE, quiet_queue
from .serving.scheme import LIGHT_SCHEME_JS
from .serving.session import SESSION_TTL_S, Session, end_session
from .wiring import wire

INTRO = """# LoPA Explorer
Watch **Lookahead Parallel Decoding** (Xu et al., arXiv 2512.16229) decode a masked diffusion LM round by round.
Each round the *anchor* commits every confident token, as vanilla **D2F** (Discrete Diffusion Forcing, the decoder
LoPA builds on) would; then *k lookahead branches* each add one more token, all k+1 are checked in one batched
*forward* (one model pass), and the branch whose remaining positions became most confident wins.
[Every term on the page](#glossary)."""

CSS = """
#counters, #base-counters, #lopa-counters {min-height: 64px}
.lopa-canvas {overflow-x: auto}
#backend-slot {border: 1px dashed #999}
.lopa-hidden {display: none !important}
#run-list label {font-size: 12px}
/* The strip under the round slider (visualizations/round_marks.py) sits close under it, and takes no room when
   the run shown never edits. */
#round-column {gap: 2px}
#round-column > #round-marks:not(:has(.lopa-round-marks)) {display: none}
/* Wide tables (the branches of a round) scroll inside their panel instead of leaving it. */
#branches {min-width: 0; max-width: 100%}
#branches .lopa-branches {overflow-x: auto; max-width: 100%}
#branches table {min-width: 560px; display: table !important; overflow: visible !important}  /* one scroll box: its div */
#branches td:not(:nth-child(2)) {white-space: nowrap}     /* "-1.033" broke after its minus; only "what it fills" wraps */
/* The headers wrap and "what it fills" is capped, so that at a laptop's width every column (the score the tour
   points at included) shows; where the table is still wider than its panel (a phone) it scrolls inside a marked
   box: a border, on a phone a "swipe sideways" line above it, and the first column kept in view. */
#branches th {white-space: normal; vertical-align: bottom}
#branches td:nth-child(2) {max-width: 180px}
#branches td:has(.lopa-chain-kept, .lopa-chain-cut) {max-width: 160px; white-space: normal}
#branches td[style*="min-width:150px"] {min-width: 110px !important}
#branches td:last-child {white-space: normal; min-width: 90px}
#branches .lopa-branches:has(table) {border: 1px solid #8a8a8a; border-radius: 4px; padding: 2px}
#branches td:first-child, #branches th:first-child {position: sticky; left: 0; background: #ffffff; z-index: 1}
/* A disabled Stop must not look like a live red button. */
button:disabled.stop, button[disabled][class*="stop"] {opacity: 0.35; filter: grayscale(0.7)}
#glossary {margin-top: 16px}
/* Run, Stop, Step and Reset on one line under the prompt, in the narrow column too. */
#run-buttons {flex-wrap: nowrap; gap: 6px}
#run-buttons button {min-width: 0 !important; padding-left: 4px; padding-right: 4px}
/* An empty study plot folds to nothing (not display: none, under which Gradio never draws the figure). */
#study-plot:has(> [aria-label="Empty value"]) {height: 0 !important; min-height: 0 !important; padding: 0 !important;
  border: none !important; margin: 0 !important; overflow: hidden}
/* After a page's Run its figures are drawn once they come into view: until then the empty figures' "No rounds
   yet." is not true any more, so it is not shown. */
#round-view:has(#counters .lopa-counters[data-figures="stale"]) :is(#heatmap, #rank-lanes, #tokens-chart) .annotation
  {visibility: hidden}
/* A command or a code span wraps inside its panel rather than run off its edge. */
.prose code {overflow-wrap: anywhere; white-space: pre-wrap}
.prose pre {max-width: 100%; overflow-x: auto}
#command .cm-content, #command .cm-line {white-space: pre-wrap !important; overflow-wrap: anywhere; word-break: break-all}
#command .cm-content {flex-shrink: 1 !important; min-width: 0 !important}
/* No plotly toolbar: it covered the figures' titles (a tap shows it on a phone); drag zooms, a double-click resets. */
.js-plotly-plot .modebar-container {display: none !important}
/* Tables scroll sideways inside their panel rather than break a number over two lines; only the first
   column (the row's label) wraps. */
.prose table {display: block; max-width: 100%; overflow-x: auto}
.prose table td:not(:first-child), .prose table th:not(:first-child) {white-space: nowrap}
@media (max-width: 640px) {
  /* Phone: the model's description after the prompt, Run and the examples. */
  #model-panel {order: 5}
  #settings-panel {order: 6}
  /* the tour and Run on the first screen, the recorded story after them */
  #arrival-actions {flex-direction: column; align-items: stretch; order: -1}
  /* after Run: the counters, four to a row, and the canvas right under them, within one screen */
  #round-view > * {order: 5}
  #round-view > :first-child, #round-view > #status, #round-view > #counters {order: 1}
  #round-view > #canvas {order: 2}
  #round-view > #round-row {order: 3}
  #round-view > #whatif-panel {order: 4}
  /* the canvas and the slider right under it on one screen: a block's label over its cells, not beside them, and
     a compact legend */
  #canvas .lopa-swatch {height: 22px; line-height: 18px; min-width: 30px}
  #canvas .lopa-legend {font-size: 11px}
  .lopa-block {flex-wrap: wrap}
  .lopa-block-label {width: 100%}
  .lopa-block-label br {display: none}
  .lopa-block-label small {margin-left: 6px}
  /* Compare's table stacked: each measure's label on a line of its own, its values and Δ under it */
  #compare-summary table, #compare-summary tbody, #compare-summary thead {display: block}
  #compare-summary tr {display: grid; grid-template-columns: 1fr 1fr 0.7fr}
  #compare-summary tr > :first-child {grid-column: 1 / -1; white-space: normal; padding-bottom: 0; border-bottom: none}
  #compare-summary thead tr > :first-child {display: none}
  #compare-summary td, #compare-summary th {min-width: 0; overflow-wrap: anywhere}
  /* The confidence heatmap and the TFO maps keep a readable width (the heatmap's data area over 240 px, a TFO cell
     wide enough for a two-digit round) and scroll sideways inside their marked box, which says so. */
  #heatmap, #base-tfo, #lopa-tfo {overflow-x: auto !important; border: 1px solid #8a8a8a !important}
  #heatmap .js-plotly-plot {min-width: 620px}
  #base-tfo .js-plotly-plot, #lopa-tfo .js-plotly-plot {min-width: 460px}
  #heatmap::before, #base-tfo::before, #lopa-tfo::before, #branches .lopa-branches:has(table)::before {
    content: "⇆ swipe sideways for the whole of it"; display: block; position: sticky; left: 0; width: max-content;
    font-size: 12px; color: #444444; padding: 2px 4px}
  .lopa-counter {min-width: 0 !important; padding: 2px 6px !important}
  .lopa-counter > div:last-child {font-size: 15px !important}
  .lopa-story-sentence {font-size: 15px !important}
  .lopa-tok {font-size: 11px !important; line-height: 16px !important; padding: 0 3px !important}
  /* The two TFO maps one under the other, after both runs' counters and answers (not each under its own run's),
     so the tour's step on the filling order shows both on one screen. */
  #compare-sides > .column {display: contents}
  #compare-sides > .column > * {flex: 1 1 100%}
  #base-tfo, #lopa-tfo {order: 1}
}
/* Hover words on a screen that hovers, tap words on a touch screen (a tap shows what a hover would: TAP_JS). */
@media (hover: none) {.lopa-hover-words {display: none}}
@media (hover: hover) {.lopa-tap-words {display: none}}
#lopa-tap-note {position: fixed; z-index: 1001; max-width: min(360px, calc(100vw - 16px)); box-sizing: border-box;
  background: #ffffff; color: #222222; border: 1px solid #555555; border-radius: 4px; padding: 4px 8px; font-size: 13px;
  line-height: 1.35; white-space: pre-line; box-shadow: 0 2px 8px rgba(0,0,0,0.3); pointer-events: none}
"""
# What a hover's tooltip says (a cell's token and probabilities, a token's position, a counter's meaning), shown by a
# tap too: a touch screen never hovers. As text (textContent), in a note by the element; the next tap moves or hides it.
TAP_JS = """<script>
document.addEventListener("click", (event) => {
  const tappable = "#canvas .lopa-cell[title], #arrival [title], #branches [title], .lopa-counter[title]";
  const el = event.target.closest && event.target.closest(tappable);
  let note = document.querySelector("#lopa-tap-note");
  if (!note) {
    note = Object.assign(document.createElement("div"), {id: "lopa-tap-note", hidden: true});
    document.body.appendChild(note);
  }
  if (!el || !el.title) { note.hidden = true; return; }
  note.textContent = el.title;
  note.hidden = false;
  const at = el.getBoundingClientRect(), size = note.getBoundingClientRect();
  note.style.left = `${Math.max(8, Math.min(at.left, innerWidth - size.width - 8))}px`;
  note.style.top = `${at.bottom + 4 + size.height <= innerHeight ? at.bottom + 4 : Math.max(8, at.top - size.height - 4)}px`;
});
</script>"""
# Where the branches table scrolls inside its box (a phone) while the tour points at it, the box is scrolled to the
# score the tour's words are about, beside the branch's name (the first column stays in view); once a table.
SCORE_IN_VIEW_JS = """<script>
(() => {
  const done = new WeakSet();
  new MutationObserver(() => {
    const box = document.querySelector("#branches.lopa-tour-focus .lopa-branches");
    const table = box?.querySelector("table");
    if (!table || done.has(table) || box.scrollWidth <= box.clientWidth + 1) return;
    const score = [...table.querySelectorAll("th")].find((th) => /^score/i.test(th.innerText.trim()));
    if (!score) return;
    done.add(table);
    box.scrollLeft = score.offsetLeft - table.querySelector("th").offsetWidth;
  }).observe(document.documentElement, {subtree: true, childList: true, attributes: true, attributeFilter: ["class"]});
})();
</script>"""
# Gradio keeps a SessionState per browser session (a copy of the page's config holding the last
# output of every component, and more: README "Limits") until this many newer sessions push it out;
# its time-to-live only frees the gr.State values. Default 10,000, about 1 MB each here: the most
# recent SESSION_CAPACITY sessions keep their state, an older idle one starts afresh.
SESSION_CAPACITY = 32
# Uploads are traces (lopa.schema bounds what a trace may hold); nothing larger is accepted.
# A shared link longer than Gradio can parse is cut before it gets there (app.panels.settings.share.BoundLinkLength).
LAUNCH_KWARGS = dict(css=CSS + CANVAS_CSS + ROUND_MARKS_CSS + TOUR_CSS + GLOSSARY_CSS, theme=gr.themes.Default().set(**THEME_COLOURS), head=forks.CLICK_JS + TAP_JS + SCORE_IN_VIEW_JS + TOUR_JS + round_view.RUN_VIEW_JS + round_view.PAGE_ASKS_JS, max_file_size=MAX_TRACE_BYTES,
                     state_session_capacity=SESSION_CAPACITY,
                     app_kwargs={"middleware": [Middleware(share.BoundLinkLength), Middleware(disk.BoundUploads),
                                                Middleware(frames.FirstScript, script=frames.IDLE_FRAMES_JS + LIGHT_SCHEME_JS)]})


def build_demo() -> gr.Blocks:
    """The whole app; nothing is loaded until a user needs the model."""
    # delete_cache: Gradio sweeps its cache of what nothing removed (app/serving/disk.py: exports and uploads are removed
    # by the app itself; an upload no load ever read is not)
    with Explorer(title="LoPA Explorer", delete_cache=(disk.CACHE_SWEEP_S, disk.CACHE_AGE_S)) as demo:
        gr.Markdown(INTRO)
        # An instance, which Gradio deep-copies for each browser session when an event first reads it. Not a
        # factory: Gradio runs a State's factory as a page-load event of its own, after the page's load
        # listeners, and the fresh Session replaced the one they had set up (a shared link's settings as the
        # visitor's, its DiffusionGemma folder). The page's first load listener hands it back
        # (app.panels.settings.share.on_load), which starts its time-to-live: sessions expire and free their runs
        # (README "Limits"), and a closed page ends its own (end_page).
        c: dict = {"session": gr.State(Session(), time_to_live=SESSION_TTL_S, delete_callback=end_session),
                   "playing": gr.State(False)}
        # Arrival: the story on screen before any click; the tour's dock floats over the page.
        c.update(tour.build_arrival_panel())
        c.update(tour.build_tour_dock())
        with gr.Row(equal_height=False, elem_id="all-controls"):
            with gr.Column(scale=1, min_width=320, elem_id="inputs-column"):
                c.update(round_view.build_input_panel())
                with gr.Column(elem_id="model-panel"):
                    c.update(model.build_model_panel())
                with gr.Column(elem_id="settings-panel"):
                    c.update(settings.build_settings_panel())
            # One page, no tabs: a plotly figure in a hidden tab throws on every relayout (zero width),
            # and those errors made the browser drop other components' updates.
            with gr.Column(scale=3):
                with gr.Column(elem_id="round-view"):
                    gr.Markdown("## Round by round")
                    c.update(round_view.build_controls())
                    c.update(round_view.build_rounds())
                    c.update(forks.build_what_if())          # a click on a still-masked cell of the canvas opens it
                    c.update(best_order.build_best_order())
                    c.update(round_view.build_figures())
                c.update(traces.build_trace_panel())
                with gr.Column(elem_id="compare-view"):
                    gr.Markdown("## Compare runs")
                    c.update(compare.build_compare_panel())
                with gr.Column(elem_id="studies-view"):
                    gr.Markdown("## Studies")
                    c.update(studies.build_studies_panel())
                with gr.Column(elem_id="denoise-view"):
                    gr.Markdown("## DiffusionGemma on its own sampler")
                    c.update(denoise.build_denoise_panel())
        c.update(glossary.build_glossary())
        wire(demo, c)
    no_hidden_progress(demo)
    demo.queue(**QUEUE)
    quiet_queue(demo)
    return demo
