"""The what-if panel: click a still-masked cell of any recorded round, then fill it first or hold it
back, and watch the fork decode live from that round (it joins the run list under its parent).

The canvas reports a click through a hidden textbox ("round:position:nonce", see CLICK_JS); the
chosen cell is kept in a gr.State (`whatif_target`). Forks and the top tokens run behind the GPU
boundary (app/serving/boundary.py) on the shared model: a fork replays its parent's recorded decisions, or
resumes from the parent's saved state where the decoding process kept one
(lopa.engine.Decoder.stream_fork). Its layout (build_what_if, under the round view's canvas), events
(wire) and callbacks.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from ..serving import boundary
from ..serving.inputs import whole
from ..serving.model_cache import MODELS
from ..serving.models import bundled_folder
from ..serving.session import Backend, Session, forkable
from .events import MODEL, QUIET, Wiring
from .round_view.callbacks import drain
from .round_view.views import LIVE_OUTPUTS, live_outputs
from .status import error_message
from .viz import esc, fills, predictions, token_label, token_repr

WHATIF_OUTPUTS = ("whatif_panel", "whatif_info", "whatif_token", "whatif_target", "fill_first", "hold_back")
TOP_N = 5
MAX_TOKEN_ID = 2**31 - 1
# Reports a click on a still-masked canvas cell to the hidden #clicked-cell textbox. A nonce makes
# every click a change, so clicking the same cell twice opens the panel twice.
CLICK_JS = """<script>
document.addEventListener("click", (event) => {
  const cell = event.target.closest && event.target.closest("#canvas .lopa-cell[data-state='masked']");
  if (!cell) return;
  const canvas = cell.closest(".lopa-canvas");
  const box = document.querySelector("#clicked-cell textarea, #clicked-cell input");
  if (!canvas || !box) return;
  // The chosen cell keeps a marker (the what-if panel names it): one at a time, gone when the round is redrawn.
  document.querySelectorAll("#canvas .lopa-whatif-chosen").forEach((el) => el.classList.remove("lopa-whatif-chosen"));
  cell.classList.add("lopa-whatif-chosen");
  box.value = `${canvas.dataset.round}:${cell.dataset.position}:${Date.now()}`;
  const info = () => document.querySelector("#whatif-info")?.innerText || "";
  const panel = () => document.querySelector("#whatif-panel");
  const before = panel()?.offsetParent ? info() : "", until = Date.now() + 30000;
  box.dispatchEvent(new Event("input", {bubbles: true}));
  // Bring the panel the tap opened into view (on a phone it opens a screen below the cell): once it shows
  // this cell, scroll it just as far as needed for the whole of it (Fill first and Hold back) to show.
  const reveal = () => {
    const text = info();
    if (panel()?.offsetParent && text !== before && text.includes(`position ${cell.dataset.position}`)) {
      panel().scrollIntoView({block: "nearest"});
    } else if (Date.now() < until) setTimeout(reveal, 150);
  };
  setTimeout(reveal, 150);
});
</script>
<style>#canvas .lopa-cell.lopa-whatif-chosen {outline: 3px dashed #D55E00; outline-offset: 1px}</style>"""


def build_what_if() -> dict:
    """The hidden box a click on a still-masked cell of the canvas lands in (CLICK_JS), and the panel it opens:
    the cell, the model's top tokens there, Fill first and Hold back."""
    clicked = gr.Textbox(elem_id="clicked-cell", elem_classes=["lopa-hidden"], show_label=False, container=False)
    with gr.Group(visible=False, elem_id="whatif-panel") as whatif_panel:
        whatif_info = gr.Markdown(elem_id="whatif-info")
        whatif_token = gr.Radio([], label="fill with (the model's top tokens there)", elem_id="whatif-token")
        with gr.Row():
            fill_first = gr.Button("Fill first", variant="primary", elem_id="fill-first")
            hold_back = gr.Button("Hold back", elem_id="hold-back")
    whatif_target = gr.State(None)
    return {"clicked_cell": clicked, "whatif_panel": whatif_panel, "whatif_info": whatif_info,
            "whatif_token": whatif_token, "whatif_target": whatif_target, "fill_first": fill_first, "hold_back": hold_back}


def fork_model(session: Session, run_id: str):
    """(folder, model) of the model that made run `run_id` of the session's list: the folder its entry
    names, or for a loaded trace the session's own model or the bundled model of the trace's name,
    whichever holds a model of that name; a ValueError in plain words otherwise."""
    entry = session.runs[run_id]
    name = entry.run.spec.get("name", "?")
    tried = [entry.model] if entry.model else [session.model or str(MODELS.default), bundled_folder(str(name))]
    problem = None
    for folder in filter(None, tried):
        try:
            loaded = MODELS.get(folder)
        except ValueError as err:
            problem = err
            continue
        if loaded.spec.name == name:
            return str(folder), loaded
    if entry.model and problem is not None:
        raise ValueError(f"forks need the model this run was made with (`{name}`), and it does not load now "
                         f"({problem}). The run can still be viewed and compared.")
    raise ValueError(f"forks need the model this run was made with (`{name}`), but this session's model is "
                     f"`{Path(session.model or MODELS.default).name}`. Pick `{name}` in the model box to fork it; "
                     "it can still be viewed and compared.")


def _closed(message: str) -> tuple:
    return (gr.update(visible=True), message, gr.update(choices=[], value=None), None,
            gr.update(interactive=False), gr.update(interactive=False))


def pick_cell(session: Session, clicked: str) -> tuple:
    """WHATIF_OUTPUTS for a clicked cell ("round:position[:nonce]"): the position, the model's top
    tokens there from that round's forward, and the two actions (disabled, with the reason, when
    no fork is possible)."""
    try:
        r, position = (int(x) for x in str(clicked).split(":")[:2])
    except ValueError:
        return tuple(gr.skip() for _ in WHATIF_OUTPUTS)
    run, entry = session.run, session.current
    if run is None or entry is None or not 0 <= r < len(run.records):
        return _closed("Run a decode (or load a trace), then click a still-masked cell of a round.")
    record = run.records[r]
    guess = predictions(record).get(position)
    if record.kind == "final" or guess is None or position in fills(run.records, r):
        return _closed(f"Position {position} is not masked after round {r}: click a still-masked (pale) cell.")
    names, mask_id = session.names, run.spec.get("mask_token_id")
    head = (f"**What if position {position} were filled first?** Run {esc(entry)}, after round {r} (the cell "
            f"outlined in dashes on the canvas): still masked; round {r}'s forward predicts {esc(token_repr(guess.token, names))} "
            f"with probability {guess.max_prob:.3f}.")
    try:
        folder, _ = fork_model(session, entry)
    except ValueError as err:
        return _closed(f"{head}\n\n**⚠** {esc(str(err))}")
    answer = boundary.top_tokens_on_gpu(folder, boundary.trace_of(run), r, position, TOP_N)
    if "error" in answer:
        return _closed(f"{head}\n\n**⚠** {esc(answer['error'])}")
    top = [(int(t), p) for t, p in answer["top"]]
    names.update({int(i): text for i, text in answer["names"]})
    choices = [(f"{token_label(t, names, mask_id)} · p = {p:.3f}", str(t)) for t, p in top]
    info = (f"{head}\n\n*Fill first* commits it in round {r + 1} with the token chosen below (the model's top "
            f"{len(top)} there, from round {r}'s forward); *Hold back* keeps it masked in round {r + 1} even if it "
            "passes τ_conf. Either way the fork is identical through round "
            f"{r} and then follows the run's own order policy.")
    target = {"run": entry, "round": r, "position": position}
    return (gr.update(visible=True), info, gr.update(choices=choices, value=choices[0][1]), target,
            gr.update(interactive=True), gr.update(interactive=True))


def _fork(session: Session, target, commit: dict, hold: list, note: str):
    def begin():
        if not target or target.get("run") not in session.runs:
            raise ValueError("click a still-masked cell of a round first")
        folder, loaded = fork_model(session, target["run"])
        return session.begin_fork(target["run"], int(target["round"]), commit, hold, note,
                                  keep_states=forkable(loaded, Backend()), model=folder)
    yield from drain(session, begin, f"Fork of run {target.get('run') if target else '?'} running…")


def fill_first(session: Session, target, token):
    """Fork: the clicked position committed first (with the chosen token) in the next round."""
    if token in (None, ""):
        yield (error_message("choose a token to fill the position with"),) + live_outputs(session, "")[1:]
        return
    try:
        token = whole("token", token, 0, MAX_TOKEN_ID)     # the model's vocabulary is checked by the fork
    except ValueError as err:
        yield (error_message(err),) + live_outputs(session, "")[1:]
        return
    p, r = (target or {}).get("position"), (target or {}).get("round")
    label = token_label(token, session.names, None)
    yield from _fork(session, target, {p: token}, [], f"fill {p} = “{label}” in round {r + 1 if r is not None else '?'}")


def hold_back(session: Session, target):
    """Fork: the clicked position kept masked in the next round."""
    p, r = (target or {}).get("position"), (target or {}).get("round")
    yield from _fork(session, target, {}, [p], f"hold {p} back in round {r + 1 if r is not None else '?'}")


def after_fork(session: Session, target) -> tuple:
    """WHATIF_OUTPUTS once a fork ended: the panel no longer offers the clicked cell of the parent run,
    which the page no longer shows; it names the fork shown instead."""
    if not target or session.current in (None, target.get("run")):
        return tuple(gr.skip() for _ in WHATIF_OUTPUTS)          # no fork was made (an error said why)
    return _closed(f"Run {esc(target['run'])} was forked after round {int(target['round'])} into run "
                   f"{esc(session.current)}, shown now. Click a still-masked cell to fork again.")


def wire(w: Wiring) -> None:
    """A cell clicked in the canvas, and the forks from it (fill it first, hold it back)."""
    c, session, live = w.c, w.session, w.pick(*LIVE_OUTPUTS)
    w.on(c["clicked_cell"].change, pick_cell, [session, c["clicked_cell"]], w.pick(*WHATIF_OUTPUTS),
         api_name="whatif", show_progress="hidden", **MODEL)
    made = [w.on(c["fill_first"].click, fill_first, [session, c["whatif_target"], c["whatif_token"]], live,
                 api_name="fill_first", show_progress="hidden", **MODEL),
            w.on(c["hold_back"].click, hold_back, [session, c["whatif_target"]], live, api_name="hold_back",
                 show_progress="hidden", **MODEL)]
    for dep in made:            # the panel then names the fork shown, not the parent's cell
        dep.then(after_fork, [session, c["whatif_target"]], w.pick(*WHATIF_OUTPUTS), **QUIET)
