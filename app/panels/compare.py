"""The compare panel: two runs compared. `compare_runs` takes any two runs of the session's run list (an original and
its fork, two orders, a loaded trace...); `compare_stream` first decodes a baseline and LoPA on the
same prompt and settings, live, then compares them the same way (one code path: compare_outputs).

The two decodes alternate round by round in one callback, so both counters move together on a
shared machine; each side's time is its own engine time (sum of its rounds), not the other's. The
panel's layout (build_compare_panel) and events (wire) follow the callbacks.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import closing

import gradio as gr

from lopa.settings import decoder_settings

from ..serving.boundary import stream_jobs
from ..serving.examples import check_answer
from ..serving.inputs import choice, text
from ..serving.model_cache import MODELS
from ..serving.request import read_request
from ..serving.session import Backend, LiveRun, Session, forkable
from .events import MODEL, UNSET, VIEW, Wiring, named
from .round_view.callbacks import bp_fault_message
from .round_view.views import REFRESH_S, RUN_LIST_OUTPUTS, run_list_outputs
from .status import error_message, stop_stream
from .viz import (
    PEER_RULES,
    answer_mark,
    comparison_summary,
    counters_html,
    esc,
    rule_name,
    run_diff,
    tfo_diff_html,
    tfo_map,
)

COMPARE_OUTPUTS = ("compare_status", "base_counters", "base_answer", "base_tfo",
                   "lopa_counters", "lopa_answer", "lopa_tfo", "compare_summary", "compare_diff") + RUN_LIST_OUTPUTS
# The baseline side: a decoder preset (k = 0 baselines), each peer's commit rule alone (k = 0, the rule's own
# knobs as the settings panel has them), LoPA with the same k under another order, or without token editing.
BASELINES = {"D2F vanilla (k = 0)": "d2f",
             **{f"{rule_name(rule)} (k = 0)": f"d2f-{rule}" for rule in PEER_RULES},
             "single block (Fast-dLLM style)": "single_block",
             "one token per round": "one_token", "LoPA, random order (same k)": "random",
             "LoPA, left-to-right order (same k)": "left_to_right",
             "LoPA without token editing (same k)": "no_editing"}


def baseline_settings(baseline: str, lopa_settings):
    """The baseline side's settings: the LoPA side's (already resolved on the session's model) under
    a decoder's overrides (lopa.settings.decoder_settings, the one place they are applied), or under
    another order. D2F vanilla and a peer (`d2f-<rule>`) set their commit rule, whatever the LoPA side's:
    LoPA over EB against D2F is a comparison of both changes at once, which the name must say. EB reads
    entropy from Conf, so its side takes confidence = neg_entropy (as the bench's rows do). Nothing is
    resolved again: every other setting is already the visitor's or the model's."""
    name = BASELINES.get(baseline, baseline)
    if name in ("random", "left_to_right"):
        return decoder_settings("lopa", lopa_settings, order=name)
    if name == "no_editing":                   # token editing off (edit_threshold 1: nothing is above it)
        return decoder_settings("lopa", lopa_settings, edit_threshold=1.0)
    if name == "d2f" or name.startswith("d2f-"):
        rule = name.removeprefix("d2f").removeprefix("-") or "threshold"
        entropy = {"confidence": "neg_entropy"} if rule == "eb" else {}
        return decoder_settings("d2f", lopa_settings, commit=rule, **entropy)
    return decoder_settings(name, lopa_settings)


def lopa_title(settings, backend) -> str:
    """The LoPA side's name: its k, the commit rule its branches commit by where it is not D2F's, its backend."""
    rule = "" if settings.commit == "threshold" else f" over {rule_name(settings.commit)}"
    editing = f", editing above {settings.edit_threshold:g}" if settings.edit_threshold < 1 else ""
    return f"LoPA{rule} (k = {settings.k}{editing}" + (f", {backend})" if backend.parallel else ")")


class Side:
    """One decode of the comparison, assembled from its chunks (app.serving.session.LiveRun)."""

    def __init__(self, job: dict, title: str):
        self.live, self.title, self.stopped = LiveRun(job), title, False

    @property
    def run(self):
        run = self.live.run
        return dataclasses.replace(run, stopped=True) if self.stopped and run is not None else run

    @property
    def names(self) -> dict:
        return self.live.names

    @property
    def done(self) -> bool:
        return self.live.finished or self.stopped

    def stop(self) -> None:
        self.stopped = not self.live.finished

    def counters(self) -> str:
        run = self.run
        latency = sum(r.round_seconds for r in run.records) if run else 0.0
        status = "running" if not self.done else ("stopped" if run is not None and run.stopped else "done")
        mark = answer_mark(check_answer(run.prompt, run.text)) if status == "done" else ""
        return counters_html(run, latency, status, title=self.title, gloss=False) + mark     # the page's counters gloss


def _outputs(status, base: Side, lopa: Side, heavy: bool, summary="") -> tuple:
    """COMPARE_OUTPUTS; the TFO maps (plots) are skipped unless `heavy`, and share one colour scale."""
    if heavy:
        top = max((len(s.run.records) for s in (base, lopa) if s.run is not None), default=1)
        maps = [tfo_map(s.run, s.names, title=f"Token filling order — {s.title}", zmax=top) if s.run else gr.skip() for s in (base, lopa)]
    else:
        maps = [gr.skip(), gr.skip()]
    text = [s.run.text if s.run is not None else "" for s in (base, lopa)]
    return (status, base.counters(), text[0], maps[0], lopa.counters(), text[1], maps[1], summary, gr.skip()) \
        + tuple(gr.skip() for _ in RUN_LIST_OUTPUTS)


def compare_outputs(status: str, a, b, title_a: str, title_b: str, names_a=None, names_b=None,
                    runs=(gr.skip(),) * len(RUN_LIST_OUTPUTS)) -> tuple:
    """COMPARE_OUTPUTS for any two finished (or stopped) runs: counters, answers, TFO maps on one
    colour scale with the positions filled in different rounds outlined, the summary and the
    position-by-position strip."""
    differs = run_diff(a, b)["differs"]
    top = max(len(a.records), len(b.records), 1)
    maps = [tfo_map(run, names, title=f"Token filling order — {title}", zmax=top, highlight=differs)
            for run, names, title in ((a, names_a, title_a), (b, names_b, title_b))]
    counters = [counters_html(run, sum(r.round_seconds for r in run.records),
                              "stopped" if run.stopped else "done", title=title, gloss=False)
                + ("" if run.stopped else answer_mark(check_answer(run.prompt, run.text)))   # ✓/✗ where known
                for run, title in ((a, title_a), (b, title_b))]
    return (status, counters[0], a.text, maps[0], counters[1], b.text, maps[1],
            comparison_summary(a, b, title_a, title_b), tfo_diff_html(a, b, title_a, title_b, names_b)) + tuple(runs)


def compare_runs(session: Session, a_id, b_id) -> tuple:
    """COMPARE_OUTPUTS for two runs of the run list."""
    missing = [x for x in (a_id, b_id)
               if not isinstance(x, str) or x not in session.runs or session.runs[x].run is None]
    if missing:
        return (error_message("pick two runs of the run list to compare (run something first, or load a trace)"),) \
            + tuple(gr.skip() for _ in COMPARE_OUTPUTS[1:])
    a, b = session.runs[a_id], session.runs[b_id]
    return compare_outputs(f"Compared run {a.id} with run {b.id}.", a.run, b.run, f"run {a.id}: {a.note}",
                           f"run {b.id}: {b.note}", a.names, b.names)


def compare_stream(session: Session, prompt: str, baseline: str, *values):
    """Yield COMPARE_OUTPUTS after every pair of rounds; the summary once both finish. `values`: the
    settings inputs, optionally followed by the backend inputs; the backend runs the LoPA side only.
    Both decodes run in one call to the GPU boundary, taking turns round by round."""
    try:
        session.check_free()          # before the try below, whose end clears the search's streaming flag
    except ValueError as err:
        yield (error_message(err),) + tuple(gr.skip() for _ in COMPARE_OUTPUTS[1:])
        return
    session.stop_requested = False
    backend = base = lopa = None
    try:
        prompt = text("prompt", prompt)
        choice("baseline", baseline, BASELINES)
        request = read_request(values, session.touched)     # every input read before any model is touched
        folder = str(MODELS.folder(session.model))     # the session's own model
        loaded = MODELS.get(folder)     # its spec and size, in the server process
        lopa_settings, backend = request.resolve(loaded.spec), request.backend      # resolved on the session's model
        if lopa_settings.k == 0:
            raise ValueError("k is 0, so LoPA would be the same as vanilla D2F: set k (lookahead branches) to 1 or more")
        base_settings = baseline_settings(baseline, lopa_settings)
        job = dict(model=folder, prompt=prompt, rounds=None, resume=None,
                   keep_states=forkable(loaded, Backend()))
        base = Side({**job, "settings": base_settings.to_dict(), "workers": 1}, baseline)
        lopa = Side({**job, "settings": lopa_settings.to_dict(), "workers": backend.workers},
                    lopa_title(lopa_settings, backend))
        session.streaming = True
        last_heavy = float("-inf")
        with closing(stream_jobs([base.live.job, lopa.live.job])) as passes:
            for chunks in passes:
                for chunk in chunks:
                    (base, lopa)[chunk["job"]].live.apply(chunk)   # ValueError: empty or over-long prompt
                if session.stop_requested:
                    base.stop(), lopa.stop()
                    break
                heavy = time.perf_counter() - last_heavy >= REFRESH_S["plots"]
                last_heavy = time.perf_counter() if heavy else last_heavy
                rounds = [len(s.run.records) if s.run else 0 for s in (base, lopa)]
                yield _outputs(f"Running… {baseline}: round {rounds[0]}, LoPA: round {rounds[1]}", base, lopa, heavy)
    except ValueError as err:
        yield (error_message(err),) + tuple(gr.skip() for _ in COMPARE_OUTPUTS[1:])
        return
    except RuntimeError as err:
        if backend is None or not backend.parallel:
            raise                     # single process: as before
        yield (bp_fault_message(err),) + tuple(gr.skip() for _ in COMPARE_OUTPUTS[1:])
        return
    finally:                          # also when the browser goes away mid-run (GeneratorExit)
        session.streaming = False
    if base.run is None or lopa.run is None:
        yield _outputs("Stopped before the first round.", base, lopa, True)
        return
    session.compare = (base.run, lopa.run)
    # Both runs join the run list (to be viewed, forked and compared again), then the general comparison.
    for side in (base, lopa):
        entry = session.runs.add(side.title, names=side.names, run=side.run)
        entry.model = side.live.job["model"]
    session.current, session.runs_changed = entry.id, True
    stopped = " (stopped early)" if base.run.stopped or lopa.run.stopped else ""
    yield compare_outputs(f"Done{stopped} on `{esc(loaded.spec.name)}`. Both runs are in the run list.", base.run, lopa.run, baseline, lopa.title,
                          base.names, lopa.names, runs=run_list_outputs(session, force=True))


stop_compare = stop_stream          # Stop of a running comparison


# -- layout and events ----------------------------------------------------------------------------
def build_compare_panel() -> dict:
    """Two runs of the run list picked and compared, or a baseline and LoPA decoded live: each side's counters,
    answer and TFO map, the summary and the position-by-position strip."""
    gr.Markdown("Compare **any two runs** of the run list (a run and its fork, two orders, a loaded trace), or "
                "decode the same prompt and settings twice, live, with a baseline (D2F, or a peer's commit rule "
                "alone: [the rules](#term-commit-rule)) and LoPA, then compare them the same way. Each TFO map (token filling order) colours a position by the round that filled it; "
                "outlined positions are filled in a different round by the two runs.")
    with gr.Row():
        compare_a = gr.Dropdown([], label="run A", scale=3, elem_id="compare-a")
        compare_b = gr.Dropdown([], label="run B", scale=3, elem_id="compare-b")
        compare_runs = gr.Button("Compare runs", scale=1, min_width=110, elem_id="compare-runs")
    with gr.Row():
        baseline = gr.Dropdown(list(BASELINES), value=list(BASELINES)[0], label="or decode: a baseline (k = 0: D2F or a peer's rule; or another order) vs LoPA",
                               elem_id="baseline")
        compare = gr.Button("▶ Compare", variant="primary", elem_id="compare")
        stop = gr.Button("■ Stop", variant="stop", interactive=False, elem_id="compare-stop")
    status = gr.Markdown(elem_id="compare-status")
    with gr.Row(equal_height=False, elem_id="compare-sides"):
        with gr.Column():
            base_counters = gr.HTML(elem_id="base-counters")
            base_answer = gr.Textbox(label="run A / baseline output", lines=3, interactive=False, elem_id="base-answer")
            # No floating label: on a phone it covered the figure's title, which names the map.
            base_tfo = gr.Plot(label="TFO map A", show_label=False, elem_id="base-tfo")
        with gr.Column():
            lopa_counters = gr.HTML(elem_id="lopa-counters")
            lopa_answer = gr.Textbox(label="run B / LoPA output", lines=3, interactive=False, elem_id="lopa-answer")
            # No floating label: on a phone it covered the figure's title, which names the map.
            lopa_tfo = gr.Plot(label="TFO map B", show_label=False, elem_id="lopa-tfo")
    summary = gr.Markdown(elem_id="compare-summary")
    diff = gr.HTML(elem_id="compare-diff")
    return {"baseline": baseline, "compare": compare, "compare_stop": stop, "compare_status": status,
            "base_counters": base_counters, "base_answer": base_answer, "base_tfo": base_tfo,
            "lopa_counters": lopa_counters, "lopa_answer": lopa_answer, "lopa_tfo": lopa_tfo,
            "compare_summary": summary, "compare_diff": diff, "compare_a": compare_a, "compare_b": compare_b,
            "compare_runs": compare_runs}


COMPARE_API = ("The page's Compare: the chosen baseline and LoPA decoded side by side, streamed as the page's panels "
               "(for JSON, call /decode once per decoder). " + UNSET)


def wire(w: Wiring) -> None:
    """Compare (LoPA against a baseline, both live), its Stop, and two runs of the list compared."""
    c, out = w.c, w.pick(*COMPARE_OUTPUTS)
    w.on(c["compare"].click, named(compare_stream, "prompt", "baseline"), [w.session, c["prompt"], c["baseline"], *w.decode_inputs[2:]], out,
         api_name="compare", api_description=COMPARE_API, show_progress="hidden", **MODEL)
    w.on(c["compare_stop"].click, stop_compare, [w.session], [c["compare_status"]], queue=False,
         api_visibility="private", show_progress="hidden")
    w.on(c["compare_runs"].click, compare_runs, [w.session, c["compare_a"], c["compare_b"]], out,
         api_name="compare_runs", show_progress="hidden", **VIEW)
