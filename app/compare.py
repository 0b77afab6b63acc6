"""Side-by-side run: a vanilla baseline and LoPA on the same prompt and settings, streamed live.

The two decodes alternate round by round in one callback, so both counters move together on a
shared machine; each side's time is its own engine time (sum of its rounds), not the other's.
"""

from __future__ import annotations

import time

import gradio as gr

from lopa import decoder_settings
from app.callbacks import REFRESH_S, bp_fault_message, error_message
from app.examples import check_answer
from app.gpu import gpu
from app.models import MODELS, token_names
from app.session import Session, parse_ui
from visualizations import comparison_summary, counters_html, tfo_map
from visualizations.answer_mark import answer_mark

COMPARE_OUTPUTS = ("compare_status", "base_counters", "base_answer", "base_tfo",
                   "lopa_counters", "lopa_answer", "lopa_tfo", "compare_summary")
BASELINES = {"D2F vanilla (k = 0)": "d2f", "single block (Fast-dLLM style)": "single_block",
             "one token per round": "one_token"}


class Side:
    """One decode of the comparison: its stream, latest snapshot and engine time."""

    def __init__(self, loaded, prompt: str, settings, title: str):
        """loaded: a LoadedModel, or the branch-parallel BPGroup (same .decoder(settings), .tokenizer)."""
        self.decoder = loaded.decoder(settings)
        self.stream = self.decoder.stream(prompt)
        self.tokenizer, self.title, self.run, self.names, self.done = loaded.tokenizer, title, None, {}, False

    def advance(self) -> None:
        """One round, or mark done."""
        try:
            record = next(self.stream)
        except StopIteration:
            self.done = True
            self.run = self.decoder.result()       # now marked finished, not stopped
            return
        self.run = self.decoder.result()
        new = {t for row in record.branch_argmax for t in row} | set(record.anchor_tokens) | set(record.lookahead_tokens)
        self.names.update(token_names(self.tokenizer, new - self.names.keys()))

    def stop(self) -> None:
        if not self.done:
            self.stream.close()
            self.done = True
            if self.decoder.records:
                self.run = self.decoder.result()

    def counters(self) -> str:
        latency = sum(r.round_seconds for r in self.run.records) if self.run else 0.0
        status = "running" if not self.done else ("stopped" if self.run is not None and self.run.stopped else "done")
        mark = answer_mark(check_answer(self.run.prompt, self.run.text)) if status == "done" else ""
        return counters_html(self.run, latency, status, title=self.title) + mark


def _outputs(status, base: Side, lopa: Side, heavy: bool, summary="") -> tuple:
    """COMPARE_OUTPUTS; the TFO maps (plots) are skipped unless `heavy`, and share one colour scale."""
    if heavy:
        top = max((len(s.run.records) for s in (base, lopa) if s.run is not None), default=1)
        maps = [tfo_map(s.run, s.names, title=f"TFO — {s.title}", zmax=top) if s.run else gr.skip() for s in (base, lopa)]
    else:
        maps = [gr.skip(), gr.skip()]
    text = [s.run.text if s.run is not None else "" for s in (base, lopa)]
    return (status, base.counters(), text[0], maps[0], lopa.counters(), text[1], maps[1], summary)


@gpu
def compare_stream(session: Session, prompt: str, baseline: str, *values):
    """Yield COMPARE_OUTPUTS after every pair of rounds; the summary once both finish. `values`: the
    settings inputs, optionally followed by the backend inputs; the backend runs the LoPA side only."""
    session.stop_requested = False
    backend = base = lopa = None
    try:
        lopa_settings, backend = parse_ui(*values)
        if lopa_settings.k == 0:
            raise ValueError("k is 0, so LoPA would be the same as vanilla D2F: set k (lookahead branches) to 1 or more")
        base_settings = decoder_settings(BASELINES.get(baseline, baseline), lopa_settings)
        loaded = MODELS.get()
        base = Side(loaded, prompt, base_settings, baseline)
        lopa_title = f"LoPA (k = {lopa_settings.k}" + (f", {backend})" if backend.parallel else ")")
        lopa = Side(MODELS.bp_group(backend.workers) if backend.parallel else loaded, prompt, lopa_settings, lopa_title)
        session.streaming = True
        last_heavy = float("-inf")
        while not (base.done and lopa.done):
            for side in (base, lopa):
                if not side.done:
                    side.advance()       # ValueError here: empty or over-long prompt (first round)
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
        for side in (base, lopa):
            if side is not None:
                side.stream.close()
        yield (bp_fault_message(err),) + tuple(gr.skip() for _ in COMPARE_OUTPUTS[1:])
        return
    finally:                          # also when the browser goes away mid-run (GeneratorExit)
        session.streaming = False
    if base.run is None or lopa.run is None:
        yield _outputs("Stopped before the first round.", base, lopa, True)
        return
    session.compare = (base.run, lopa.run)
    stopped = " (stopped early)" if base.run.stopped or lopa.run.stopped else ""
    yield _outputs(f"Done{stopped}.", base, lopa, True, comparison_summary(base.run, lopa.run, baseline))


def stop_compare(session: Session) -> str:
    """Ask a running comparison to stop after its current pair of rounds."""
    if session.streaming:
        session.stop_requested = True
        return "Stopping after the current rounds…"
    return "Nothing is running."
