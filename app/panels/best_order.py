"""The best-order panel, "compare with the best order found": the headroom search of lopa.study.headroom run on the
shown run's prompt and settings (LoPA's round kept, the extra position of each round chosen by the forwards
to finish, LoPA below), behind the GPU boundary (app/serving/boundary.py). The order found joins the run list as a
fork of the run and is compared with it by the comparison's own outputs (app/panels/compare.py), so a visitor sees
the first round where LoPA's choice and the best choice part.

Bounded for a shared CPU: no rollout starts after SEARCH_SECONDS (the order found so far is then the answer,
its later rounds as LoPA left them); Stop ends it within the rollout under way (one decode: the search yields
after each), keeping the order found so far (the rounds searched to the end). Its layout (build_best_order,
under the what-if panel in the round view), events (wire) and callbacks.
"""

from __future__ import annotations

from contextlib import closing

import gradio as gr

from ..serving import boundary
from ..serving.session import Session
from .compare import COMPARE_OUTPUTS, compare_outputs
from .events import LONG, Wiring
from .forks import fork_model
from .status import error_message, stop_stream
from .viz import esc

BEST_OUTPUTS = ("best_status",) + COMPARE_OUTPUTS
SEARCH_SECONDS = 20.0        # no rollout starts after this: the search answers within about this long
MAX_CANDIDATES = 0           # rollouts per round: every free position of the window (the study's default)


def build_best_order() -> dict:
    """The headroom search on the shown run: its button, its Stop and its status line (the order found joins the
    run list as a fork)."""
    with gr.Row():
        best_order = gr.Button("Compare with the best order found", scale=3, elem_id="best-order")
        best_stop = gr.Button("■ Stop search", variant="stop", scale=1, min_width=110, interactive=False,
                              elem_id="best-order-stop")
    best_status = gr.Markdown("After a run: search the best filling order for its prompt and settings (LoPA's round "
                              "kept, the extra position chosen by the forwards to finish) and compare the two below.",
                              elem_id="best-order-status")
    return {"best_order": best_order, "best_order_stop": best_stop, "best_status": best_status}


def _progress(done: int, total: int, text: str) -> str:
    return (f'<progress value="{done}" max="{max(total, 1)}" style="width:100%"></progress>\n\n{text}')


def _skip() -> tuple:
    return tuple(gr.skip() for _ in COMPARE_OUTPUTS)


def _where(choice: dict) -> str:
    """Where the order found first left LoPA's choice, in words."""
    def added(key: str) -> str:          # a depth-2 search's step may add two positions (lookahead_depth > 1)
        many = choice.get(f"{key}s") or ([] if choice[key] is None else [choice[key]])
        return f"position{'s' * (len(many) > 1)} {' and '.join(map(str, many))}"

    lopa = "verified no extra token" if choice["lopa_position"] is None else f"added {added('lopa_position')}"
    if choice["position"] is None:
        best = "the best order found kept the anchor's commits alone"
    else:
        best = (f"the best order found filled {added('position')} (its first ranked {choice['conf_rank']} of "
                f"{choice['free']} free positions by Conf, max prob {choice['max_prob']:.2f})")
    return (f"They part in **round {choice['round']}**: LoPA {lopa}, {best}, and that saved "
            f"{choice['saved']} forward(s).")


def compare_with_best(session: Session):
    """BEST_OUTPUTS: search the best order for the shown run (progress after every searched round), then the
    order found joins the run list under it and both are compared like any two runs."""
    run, run_id = session.run, session.current
    try:
        if session.streaming:         # this session's Run, fork or comparison (the model slot, beside this one)
            raise ValueError("something of this session is still running: wait for it or press its Stop")
        if run is None or run_id is None or session.live is not None:
            raise ValueError("run a decode to the end first (or select a finished run): the search starts from it")
        if run.stopped:
            raise ValueError("this run was stopped before its end: the search compares whole decodes, run it to the end")
        if int(run.settings.get("k", 0)) < 1:
            raise ValueError("the search keeps LoPA below every round it tries: run with k (lookahead branches) 1 or more")
        if float(run.settings.get("temperature", 0.0)) != 0.0:
            raise ValueError("the search compares decodes by their forwards, so it needs greedy decoding: temperature 0")
        folder, _ = fork_model(session, run_id)
    except ValueError as err:
        yield (error_message(err),) + _skip()
        return
    start = run.metrics()["forwards"]
    yield (_progress(0, 1, f"Searching the best order for run {esc(run_id)} ({start} forwards)…"),) + _skip()
    step, names = None, dict(session.names)
    session.stop_requested, session.streaming, session.searching = False, True, True
    try:
        with closing(boundary.best_order_steps_on_gpu(folder, boundary.trace_of(run), MAX_CANDIDATES,
                                                      SEARCH_SECONDS)) as steps:
            for searched in steps:
                if "error" in searched:
                    yield (error_message(searched["error"]),) + _skip()
                    return
                if "rollout" in searched:        # one decode of the round under way
                    done = step["round"] if step else 0
                    yield (_progress(done, step["rounds"] if step else start,
                                     f"Searching round {searched['round']}: rollout {searched['rollout']} of "
                                     f"{searched['of']}…"),) + _skip()
                else:
                    step = searched
                    names.update({int(i): text for i, text in step["names"]})
                    yield (_progress(step["round"], step["rounds"],
                                     f"Searched round {step['round']} of {step['rounds']}: the best order found so far "
                                     f"needs {step['rounds']} forwards against this run's {start} ({step['spent']} "
                                     "rollout forwards)."),) + _skip()
                if session.stop_requested:
                    break
    finally:
        session.streaming = session.searching = False
    if step is None:
        yield ("Stopped before the first round was searched.",) + _skip()
        return
    yield _show(session, run_id, step, names, stopped=session.stop_requested)


def _show(session: Session, run_id: str, step: dict, names: dict, stopped: bool) -> tuple:
    """BEST_OUTPUTS for the search's last step: the order found in the run list, the comparison."""
    run, best = session.runs[run_id].run, boundary.run_of(step["trace"])
    choices = step["choices"]
    ended = (" (stopped: the rounds after it as LoPA left them)" if stopped else
             f" (the {SEARCH_SECONDS:.0f} s limit: the rounds after it as LoPA left them)" if step["out_of_time"] else "")
    searched = f"searched rounds 1 to {step['round']}{ended}, {step['spent']} rollout forwards"
    if not choices:
        status = (f"**LoPA's order is the best found** for run {esc(run_id)}: no other extra position (or the anchor "
                  f"alone) finishes in fewer than its {step['rounds']} forwards ({searched}).")
        return (status,) + compare_outputs(status, run, best, f"run {run_id}", "best order found", session.names, names)
    first = choices[0]
    entry = session.runs.add(f"best order found (rollouts, {len(choices)} round(s) changed)", parent=run_id,
                             at_round=first["round"] - 1, names=names, run=best)
    session.runs_changed = True
    status = (f"**Best order found** for run {esc(run_id)}: {step['rounds']} forwards against "
              f"{run.metrics()['forwards']} ({searched}). {_where(first)} It is run {esc(entry.id)} of the run "
              "list; the two are compared below in *Compare runs*.")
    choices_ids = session.run_choices()
    runs = (gr.update(choices=choices_ids, value=session.current), gr.update(choices=choices_ids, value=run_id),
            gr.update(choices=choices_ids, value=entry.id))
    compared = compare_outputs(status, run, best, f"run {run_id}: {session.runs[run_id].note}",
                               f"run {entry.id}: best order found", session.runs[run_id].names, names, runs=runs)
    return (status,) + compared


stop_search = stop_stream          # Stop of a running search


def wire(w: Wiring) -> None:
    """The best order found for the shown run (the headroom search), compared with it; its Stop."""
    c = w.c
    w.on(c["best_order"].click, compare_with_best, [w.session], w.pick(*BEST_OUTPUTS),
         api_name="best_order", show_progress="hidden", **LONG)
    w.on(c["best_order_stop"].click, stop_search, [w.session], [c["best_status"]], queue=False,
         api_visibility="private", show_progress="hidden")
