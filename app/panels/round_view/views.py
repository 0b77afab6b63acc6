"""The round view's outputs: a round as the page shows it (view: the canvas, the branches, the figures, the
round in words), what every decode streams into the round view (live_outputs: the status, the counters, the
slider, the output so far, the run list), and the figures a page's Run leaves for the page to ask for
(draw_figures). Plain functions of the session, which the round view's callbacks (callbacks.py) and the
panels that show a run there (forks, traces, the tour, compare) return; each returns values in the order of
a constant (VIEW_OUTPUTS, LIVE_OUTPUTS, RUN_LIST_OUTPUTS, FIGURE_OUTPUTS) that the wiring maps to components.
"""

from __future__ import annotations

import time
from dataclasses import replace

import gradio as gr

from lopa import DecodeSettings, RunResult
from lopa.cost import curve_words, run_curve
from lopa.order import budget_warning
from lopa.trace import edits, fills, metrics

from ...serving.examples import check_answer
from ...serving.session import Session
from ..viz import (
    answer_mark,
    branches_table,
    canvas_text,
    confidence_heatmap,
    counters_html,
    detail_note,
    detail_round,
    explain_round,
    rank_lanes,
    round_marks,
    token_canvas,
    tokens_per_round_chart,
)

# New outputs go last ("ranks", then "round_marks"): API clients read the earlier outputs by position.
VIEW_OUTPUTS = ("canvas", "branches", "heatmap", "chart", "explanation", "ranks", "round_marks")
# The run list and the two "compare runs" pickers follow every change of the session's runs.
RUN_LIST_OUTPUTS = ("run_list", "compare_a", "compare_b")
LIVE_OUTPUTS = ("status", "counters", "round_slider", "answer") + VIEW_OUTPUTS + RUN_LIST_OUTPUTS
# While streaming, the least seconds between two renders of each kind of heavy output (always drawn
# at the end). HTML views cost the browser little; a plotly figure costs it 0.3-0.6 s in Gradio on
# a small shared CPU (measured in headless Chromium), so plots at 4/s left the page seconds behind.
REFRESH_S = {"html": 0.25, "plots": 1.0}
VIEW_KINDS = {"canvas": "html", "branches": "html", "heatmap": "plots", "ranks": "plots", "chart": "plots",
              "explanation": "html", "round_marks": "html"}
# A first Run that ended sooner than this is shown again, round by round (callbacks.show_rounds_arriving says
# why): its final counters say so (replay_due), and the page asks for it.
REPLAY_UNDER_S = 1.0


# -- rendering ---------------------------------------------------------------------------------
def view(session: Session, r: int | None = None, kinds=("html", "plots")) -> tuple:
    """The heavy outputs (VIEW_OUTPUTS order) for round r (default: the latest round; a finished run's
    final round shows its last commits); outputs whose kind (VIEW_KINDS) is not in `kinds` are
    gr.skip() and cost nothing."""
    run = session.run or RunResult(prompt="", prompt_ids=[], settings={}, spec={}, records=[], tokens=[])
    r = max(0, session.n_rounds - 1 if r is None else min(int(r), session.n_rounds - 1))
    names = session.names
    d = detail_round(run.records, r)       # the final round has no branches: the last round that had them
    render = {"canvas": lambda: token_canvas(run, r, names),
              "branches": lambda: detail_note(run, r) + branches_table(run, d, names),
              "heatmap": lambda: confidence_heatmap(run, d, names), "ranks": lambda: rank_lanes(run, d, names),
              "chart": lambda: tokens_per_round_chart(run, r),
              "explanation": lambda: explain_round(run, r, names),
              "round_marks": lambda: round_marks(run)}       # under the slider: where the run's editing sits
    if "plots" in kinds:
        session.figures_stale = False
    return tuple(render[name]() if VIEW_KINDS[name] in kinds else gr.skip() for name in VIEW_OUTPUTS)


def answer_at(session: Session, r: int | None = None) -> str:
    """"output so far": what the canvas holds at round r (default: the latest round)."""
    if session.run is None:
        return ""
    return canvas_text(session.run, session.n_rounds - 1 if r is None else int(r), session.names)


def counters_at(session: Session, r: int, title: str = "") -> str:
    """The counters of the session's run as it stood after round r (its first r + 1 records, the tokens the
    canvas holds then): what a view of round r shows beside the canvas (the guided tour's steps)."""
    run = session.run
    if run is None:
        return counters_html(None, 0.0, session.status(), title=title)
    r = max(0, min(int(r), len(run.records) - 1))
    last = r == len(run.records) - 1
    mask = run.spec.get("mask_token_id")
    held = {p: fill.token for p, fill in fills(run.records, r).items()}
    held.update({p: edit.new for p, edit in edits(run.records, r).items()})      # token editing's rewrites
    snapshot = run if last else replace(run, records=run.records[:r + 1], decoder=None, text=answer_at(session, r),
                                        tokens=[held.get(p, mask) for p in range(len(run.tokens))])
    where = f" at round {r} of {len(run.records) - 1}" + ("" if last else ": the counters so far")
    return counters_html(snapshot, 0.0, session.status(), title=title + where)


def _slider(session: Session):
    """The round slider at its end, on the latest round: a finished run shows its final round (the
    anchor's last commits, no forward); resting one short of the end read as a run not shown to the end."""
    last = max(session.n_rounds - 1, 0)
    return gr.update(maximum=max(last, 1), value=last)


def run_list_outputs(session: Session, force: bool = False) -> tuple:
    """RUN_LIST_OUTPUTS: the run list (current run selected) and the compare pickers (the current
    run against its parent or the run before it); gr.skip() when nothing changed."""
    if not (force or session.runs_changed):
        return tuple(gr.skip() for _ in RUN_LIST_OUTPUTS)
    session.runs_changed = False
    choices = session.run_choices()
    ids = {value for _, value in choices}
    a, b = session.runs.default_pair(session.current)
    return (gr.update(choices=choices, value=session.current if session.current in ids else None),
            gr.update(choices=choices, value=a), gr.update(choices=choices, value=b))


def live_outputs(session: Session, status: str, final: bool = True, lazy: bool = False, replay: bool = False) -> tuple:
    """LIVE_OUTPUTS for the latest round. Counters always; each kind of heavy output only when
    `final` or REFRESH_S has passed since it was last sent (gr.skip() otherwise). `lazy` (a page's final
    state): the figures are left to draw_figures, which the page asks for once it shows them. `replay` (a
    page's Run, done): the counters say whether the page may ask for its rounds again (show_rounds_arriving)."""
    now = time.perf_counter()
    due = tuple(kind for kind, every in REFRESH_S.items()
                if final or (session.run is not None and now - session.last_render[kind] >= every))
    lazy = lazy and session.run is not None and "plots" in due
    if lazy:
        due = tuple(kind for kind in due if kind != "plots")
    session.last_render.update({kind: now for kind in due})
    # The slider and "output so far" move with the canvas (REFRESH_S["html"]), not at every round: each of
    # their updates has the page measure and lay itself out again, and a Run streams dozens of rounds a second.
    moving = (_slider(session), answer_at(session)) if "html" in due else (gr.skip(), gr.skip())
    outputs = view(session, kinds=due)           # before the counters: drawing the figures marks them drawn
    if lazy:
        session.figures_stale = True
    counters = counters_now(session, "stale" if lazy else "", replay)
    return (status, counters, *moving) + outputs + run_list_outputs(session, final)


def counters_now(session: Session, figures: str = "", replay: bool = False) -> str:
    """The counters of the session's run as they stand, with the answer's mark once it is done; with
    `replay`, the run's id where its rounds may be shown again (replay_due)."""
    again = str(session.current or "run") if replay and replay_due(session) else ""
    counters = counters_html(session.run, session.elapsed, session.status(), figures=figures, replay=again)
    if session.run is not None and not session.run.stopped and session.status() in ("done", "replay"):
        counters += answer_mark(check_answer(session.run.prompt, session.run.text))
    return counters


# The figures a page's Run leaves for later (live_outputs lazy), in VIEW_OUTPUTS order.
FIGURE_OUTPUTS = tuple(name for name in VIEW_OUTPUTS if VIEW_KINDS[name] == "plots")


def draw_figures(session: Session) -> tuple:
    """FIGURE_OUTPUTS and the counters: the figures a page's Run ended without, drawn when the page shows
    them (app.panels.round_view.PAGE_ASKS_JS asks). Plotly drawing three figures was half of what a page spent on a
    Run of the first example, most often for figures below the screen. Nothing when they are drawn already
    (the slider or Play drew a round since) or a decode streams."""
    if session.streaming:
        return tuple(gr.skip() for _ in FIGURE_OUTPUTS) + (gr.skip(),)
    if not session.figures_stale or session.run is None:
        figures = tuple(gr.skip() for _ in FIGURE_OUTPUTS)
    else:
        shown = dict(zip(VIEW_OUTPUTS, view(session, kinds=("plots",))))
        figures = tuple(shown[name] for name in FIGURE_OUTPUTS)
    return figures + (counters_now(session, "drawn"),)


def describe_run(session: Session) -> str:
    """One line on the session's run: finished or stopped, rounds, tokens, TPF (and, for order=adaptive, the cost
    curve it priced branches by and a budget warning)."""
    r = session.run
    if r is None:
        return ""
    m = metrics(r)
    state = "stopped (cancelled)" if r.stopped else "finished"
    settings = DecodeSettings.from_dict(r.settings)
    curve = run_curve(settings, r.order)                                # order=adaptive: measured here, or linear
    warning = budget_warning(settings, *curve) if curve else None       # "adaptive" that decoded as vanilla D2F
    return (f"{state} after {m['rounds']} rounds: {m['tokens_useful']} tokens, TPF {m['tpf_useful']:.2f}."
            + (f" Adaptive {curve_words(*curve)}." if curve else "") + (f" Note: {warning}." if warning else ""))


def replay_due(session: Session) -> bool:
    """Whether the session's run is a first Run, finished in under REPLAY_UNDER_S, whose rounds
    show_rounds_arriving would show again."""
    run = session.run
    return not (session.shown_arriving or run is None or run.stopped or session.source != "live"
                or session.streaming or session.live is not None
                or session.n_rounds < 3 or session.elapsed >= REPLAY_UNDER_S)
