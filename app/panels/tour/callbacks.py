"""Arrival and the guided tour: the default example decoded by vanilla D2F and by LoPA, from traces
recorded by `python -m app.panels.tour --record` (assets/traces/), shown side by side on arrival and walked
through in six steps (seven when the LoPA run edits its own tokens).

Each step puts the page in a prepared state (one of the two runs at a round, or both compared),
names the panel that matters and says what to see there. Rounds are picked by rules applied to the
trace (`pick_*` in app/panels/tour/steps.py), and every number in a step's words is read from the trace it shows, so the tour
stays true when the traces are re-recorded on another model (tests/test_tour.py checks each claim
against the records). Callbacks are plain functions of (session, tour state) -> TOUR_OUTPUTS.
"""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from lopa import DecodeSettings, RunResult, decoder_settings
from lopa.models import ASSETS, DEFAULT_MODEL

from ...serving.session import APP_DEFAULTS, Session
from ..compare import COMPARE_OUTPUTS, compare_outputs
from ..round_view.callbacks import reset_session
from ..round_view.views import LIVE_OUTPUTS, RUN_LIST_OUTPUTS, answer_at, counters_at, run_list_outputs, view
from ..viz import STORY_CSS, esc, tour_card
from .steps import tour_steps

TRACES = ASSETS / "traces"
MANIFEST = "tour.json"                       # names the two trace files, the model, the token strings
D2F_TITLE = "vanilla D2F (k = 0)"
# The tour's outputs: its dock, card, state and Back / Next, the round view, then the comparison (whose run list
# pickers are already among the round view's outputs).
TOUR_OUTPUTS = ("tour_dock", "tour_card", "tour_state", "tour_prev", "tour_next") + LIVE_OUTPUTS + COMPARE_OUTPUTS[:-len(RUN_LIST_OUTPUTS)]
# Scrolls to the panel the current step names and outlines it; a step's card carries the panel's
# selector (visualizations.story.tour_card). Runs on every change of the page, so it also catches the
# card Gradio swaps in.
TOUR_JS = """<script>
(() => {
  let shown = null;
  const closed = () => document.body.classList.contains("lopa-tour-closed");
  const focus = () => {
    const card = closed() ? null : document.querySelector("#tour-card .lopa-tour-card");
    const key = card ? `${card.dataset.step}|${card.dataset.target}` : null;
    const fresh = key !== shown;
    if (fresh) document.querySelectorAll(".lopa-tour-focus").forEach((el) => el.classList.remove("lopa-tour-focus"));
    const targets = card && card.dataset.target ? [...document.querySelectorAll(card.dataset.target)] : [];
    // Outlined again on every change: a panel drawn later (the what-if panel opens on a click) gets it too.
    targets.forEach((el) => el.classList.contains("lopa-tour-focus") || el.classList.add("lopa-tour-focus"));
    if (fresh) {
      shown = key;
      if (targets.length) targets[0].scrollIntoView({block: "start"});
    }
  };
  new MutationObserver(focus).observe(document.documentElement, {subtree: true, childList: true});
  // Close hides the dock here at once, whatever answers the server still owes: a step requested just
  // before Close (Next, then Close at once) arrives after it and must not bring the tour back. The
  // server closes the tour in the same queue as the steps, after them.
  const close = () => { document.body.classList.add("lopa-tour-closed"); focus(); };
  document.addEventListener("click", (event) => {
    if (event.target.closest("#tour-end")) close();
    else if (event.target.closest("#tour-start")) { document.body.classList.remove("lopa-tour-closed"); focus(); }
  }, true);
  // Escape closes the tour too (the dock's own Close button, so the server hears of it), and takes the visitor
  // back to the top: the panel a step had scrolled to is emptied by the close.
  document.addEventListener("keydown", (event) => {
    const end = document.querySelector("#tour-end");
    if (event.key === "Escape" && end && !closed() && end.offsetParent !== null) {
      close(); end.click(); window.scrollTo({top: 0, behavior: "instant"});
    }
  });
})();
</script>"""
TOUR_CSS = """
#tour-dock {position: fixed; left: 8px; right: 8px; bottom: 8px; width: auto !important; box-sizing: border-box;
  z-index: 1000; max-height: 40vh; overflow-y: auto; box-shadow: 0 2px 14px rgba(0,0,0,0.35); border: 2px solid #D55E00}
/* Gradio gives a Group's id to its inner box too: only the outer one floats */
#tour-dock #tour-dock {position: static; max-height: none; box-shadow: none; border: none; overflow: visible}
.lopa-tour-title {font-weight: 700; font-size: 15px; margin-bottom: 3px}
.lopa-tour-text {font-size: 14px; line-height: 1.4}
.lopa-tour-focus {outline: 4px solid #D55E00 !important; outline-offset: 3px; border-radius: 4px; scroll-margin-top: 12px}
#arrival, #tour-card {overflow-wrap: anywhere}
body.lopa-tour-closed #tour-dock {display: none !important}
/* The card scrolls above Back / Next / Close, so they stay in the dock whatever the card's length. A phone's screen
   is short: the dock leaves room for the panel a step points at (two maps at the filling order). */
#tour-card {max-height: calc(40vh - 64px); overflow-y: auto}
@media (max-width: 640px) {#tour-dock {max-height: 28vh} #tour-card {max-height: calc(28vh - 60px)}
  #tour-buttons {flex-wrap: nowrap; gap: 4px}
  #tour-buttons button {min-width: 0 !important; padding-left: 4px; padding-right: 4px}}
"""
CSS = TOUR_CSS + STORY_CSS                  # the page's CSS for the arrival view and the tour


# -- the shipped traces ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Shipped:
    """The two recorded runs of the default example, and the token strings their figures show."""
    d2f: RunResult
    lopa: RunResult
    names: dict = field(default_factory=dict)
    model: str = "?"

    @property
    def runs(self) -> dict:
        return {"d2f": self.d2f, "lopa": self.lopa}


def load_shipped(folder: Path = TRACES) -> Shipped:
    """Read the manifest and both traces (each validated by lopa.schema on load); ValueError saying
    how to record them when they are missing or unreadable."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST).read_text())
        files = manifest["runs"]
        runs = {key: RunResult.load(Path(folder) / Path(str(files[key])).name) for key in ("d2f", "lopa")}
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"no recorded tour traces in {folder} ({err}); record them with "
                         "`python -m app.panels.tour --record`") from None
    names = {int(i): s for i, s in (manifest.get("names") or {}).items()
             if str(i).lstrip("-").isdigit() and isinstance(s, str)}
    return Shipped(runs["d2f"], runs["lopa"], names, str(manifest.get("model", "?")))


@functools.lru_cache(maxsize=1)
def shipped() -> Shipped | str:
    """The shipped traces, read once per process, or why they could not be read."""
    try:
        return load_shipped()
    except ValueError as err:
        return str(err)


def record(model_dir: str | Path = DEFAULT_MODEL, out: Path = TRACES, prompt: str | None = None) -> Shipped:
    """Decode the default example (the app's first) with vanilla D2F and LoPA at the app's defaults on
    `model_dir` and write both traces and the manifest to `out`."""
    from lopa.models import load

    from ...serving.models import example_prompts, token_names, trace_ids
    prompt = prompt or example_prompts()[0]
    loaded = load(str(model_dir))
    settings = DecodeSettings(**APP_DEFAULTS)
    runs = {"d2f": loaded.decoder(decoder_settings("d2f", settings)).run(prompt),
            "lopa": loaded.decoder(settings).run(prompt)}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for key, run in runs.items():
        run.save(out / f"{key}.json")
    ids = set().union(*(trace_ids(run) for run in runs.values()))
    manifest = {"model": loaded.spec.name, "prompt": prompt, "runs": {key: f"{key}.json" for key in runs},
                "recorded_with": f"python -m app.panels.tour --record --model {model_dir}",
                "names": {str(i): s for i, s in sorted(token_names(loaded.tokenizer, ids).items())}}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return Shipped(runs["d2f"], runs["lopa"], token_names(loaded.tokenizer, ids), loaded.spec.name)


# -- callbacks ----------------------------------------------------------------------------------------
def new_tour_state() -> dict:
    """Per browser session: the step shown (None: the tour is closed) and the run list ids of the two
    recorded runs once the tour added them."""
    return {"step": None, "ids": {}}


def _skips(n: int) -> tuple:
    return tuple(gr.skip() for _ in range(n))


def _ensure_runs(session: Session, state: dict, data: Shipped) -> dict:
    """The two recorded runs in the session's run list (added once, again if the list dropped them)."""
    ids = state.setdefault("ids", {})
    for key, run in data.runs.items():
        entry = session.runs.entries.get(ids.get(key))
        if entry is None or entry.run is None or entry.run.run_id != run.run_id:
            note = D2F_TITLE if key == "d2f" else f"LoPA (k = {run.settings.get('k')})"
            ids[key] = session.runs.add(f"{note}, recorded for the tour", names=data.names, source="replay",
                                        run=run, series="tour ").id
            session.runs_changed = True
    return ids


def show_step(session: Session, state: dict, index: int) -> tuple:
    """TOUR_OUTPUTS for step `index` (clamped to the steps): its card, and the page in its state."""
    data = shipped()
    n_live, n_compare = len(LIVE_OUTPUTS), len(COMPARE_OUTPUTS) - len(RUN_LIST_OUTPUTS)
    if isinstance(data, str):
        card = f'<div class="lopa-tour-card"><b>The tour needs its recorded traces.</b> {esc(data)}</div>'
        return (gr.update(visible=True), card, state) + _skips(2 + n_live + n_compare)
    steps = tour_steps(data.d2f, data.lopa, data.names)
    index = max(0, min(int(index), len(steps) - 1))
    step = steps[index]
    state = {**state, "step": index}
    try:
        ids = _ensure_runs(session, state, data)
        if step.run is not None:
            session.select(ids[step.run])
    except ValueError as err:       # the session's memory budget (app/serving/budget.py) is full, or its search runs
        card = f'<div class="lopa-tour-card"><b>⚠</b> {esc(err)}</div>'
        return (gr.update(visible=True), card, state) + _skips(2 + n_live + n_compare)
    card = tour_card(index, len(steps), step.title, step.text, step.target)
    head = (gr.update(visible=True), card, state, gr.update(interactive=index > 0),
            gr.update(interactive=index < len(steps) - 1))
    status = f"Tour, step {index + 1} of {len(steps)}: {esc(step.title)}."
    if step.run is not None:
        r = step.round
        # The slider's own path (round_view.callbacks.show_round: view and answer_at at round r), and the counters
        # as they stood then: every box holds what the canvas holds at the step's round.
        live = (status, counters_at(session, r, title=session.runs[ids[step.run]].note),
                gr.update(maximum=max(session.n_rounds - 1, 1), value=r), answer_at(session, r)) \
            + view(session, r) + run_list_outputs(session, force=True)
        return head + live + _skips(n_compare)
    # The comparison of the two recorded runs, and the pickers set to them for "Compare runs".
    lopa_title = f"LoPA (k = {data.lopa.settings.get('k')})"
    compared = compare_outputs("Tour: the two recorded runs, compared.", data.d2f, data.lopa, D2F_TITLE, lopa_title,
                               data.names, data.names)[:n_compare]
    choices = session.run_choices()
    lists = (run_list_outputs(session, force=True)[0],
             gr.update(choices=choices, value=ids["d2f"]), gr.update(choices=choices, value=ids["lopa"]))
    live = (status,) + _skips(n_live - 1 - len(RUN_LIST_OUTPUTS)) + lists
    return head + live + compared


def start_tour(session: Session, state: dict) -> tuple:
    return show_step(session, state or new_tour_state(), 0)


def _closed_outputs(state: dict) -> tuple:
    """TOUR_OUTPUTS of a closed tour: the dock hidden and emptied, nothing else touched."""
    n = len(TOUR_OUTPUTS) - 3
    return (gr.update(visible=False), "", {**state, "step": None}) + _skips(n)


def next_step(session: Session, state: dict) -> tuple:
    """The next step; nothing (the tour stays closed) when Close came first: a Next clicked just before
    Close can reach the server after it."""
    state = state or new_tour_state()
    if state.get("step") is None:
        return _closed_outputs(state)
    return show_step(session, state, state["step"] + 1)


def previous_step(session: Session, state: dict) -> tuple:
    state = state or new_tour_state()
    if state.get("step") is None:
        return _closed_outputs(state)
    return show_step(session, state, state["step"] - 1)


def end_tour(session: Session, state: dict) -> tuple:
    """TOUR_OUTPUTS of a closed tour (the page script drops the outline), with the two recorded runs
    taken out of the visitor's run list, except one the visitor forked (its forks need it). When the
    page showed one of them, the round view goes back to empty."""
    state = {**(state or new_tour_state()), "step": None}
    ids = state.get("ids") or {}
    forked = {e.parent for e in session.runs.entries.values()}
    dropped = [i for i in ids.values() if i in session.runs and i not in forked]
    for run_id in dropped:
        session.runs.remove(run_id)
    state["ids"] = {key: i for key, i in ids.items() if i not in dropped}
    head = (gr.update(visible=False), "", state, gr.skip(), gr.skip())
    n_live, n_compare = len(LIVE_OUTPUTS), len(COMPARE_OUTPUTS) - len(RUN_LIST_OUTPUTS)
    if not dropped:
        return head + _skips(n_live + n_compare)
    session.runs_changed = True
    if session.current in dropped:
        live = reset_session(session)[:-len(RUN_LIST_OUTPUTS)] + run_list_outputs(session, force=True)
        live = ("Tour closed. Press **Run** to decode the prompt on the left, or pick an example.",) + live[1:]
    else:
        live = _skips(n_live - len(RUN_LIST_OUTPUTS)) + run_list_outputs(session, force=True)
    return head + live + _skips(n_compare)


def arrival() -> str:
    """The arrival view's HTML: both recorded runs side by side under the sentence, or how to record them."""
    from ..viz import arrival_html
    data = shipped()
    if isinstance(data, str):
        return f'<div class="lopa-story lopa-empty">{esc(data)}</div>'
    note = (f"Recorded on the model {data.model} at the app's defaults (k = {data.lopa.settings.get('k')}), "
            f"on the first example: “{data.lopa.prompt}”")
    return arrival_html(data.d2f, data.lopa, data.names, d2f_title="Vanilla D2F (k = 0)", note=note)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.panels.tour",
                                     description="Record the traces the app's arrival view and guided tour show.")
    parser.add_argument("--record", action="store_true", help="decode the default example with D2F and LoPA")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="model folder (default: the bundled default)")
    parser.add_argument("--out", default=str(TRACES), help="folder for the traces and manifest")
    args = parser.parse_args(argv)
    if not args.record:
        parser.error("nothing to do: pass --record")
    data = record(args.model, Path(args.out))
    for key, run in data.runs.items():
        m = run.metrics()
        print(f"{key}: {m['forwards']} forwards, {m['tokens_useful']} tokens, TPF {m['tpf_useful']:.2f}: {run.text!r}")
    print(f"wrote {args.out}/{{d2f,lopa}}.json and {MANIFEST} (model {data.model})")


if __name__ == "__main__":
    main()
