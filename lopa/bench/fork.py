"""What a fork costs: time to the fork's first round, resumed from a saved state or replayed.

    python -m lopa.bench.fork                 # bundled model, one held-out prompt

For a fork at an early and at a late round of a run: the seconds until the fork's first own round
is computed when it resumes from the parent's saved state (Decoder(keep_states=True)), and when it
has to replay the parent's decisions from round 0 (a loaded trace); plus what keeping the states
costs the parent run. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import torch

from lopa.engine import fork_decoder
from lopa.models import DEFAULT_MODEL, load
from lopa.resolution import add_settings_arguments, settings_from_args
from lopa.settings import decoder_settings
from lopa.tasks.hardware import hardware
from lopa.tasks.sources import heldout_questions
from lopa.trace import RunResult

ROWS = {"lopa k=4": dict(decoder="lopa", k=4), "one token per round": dict(decoder="one_token")}
DEFAULTS = {"max_new_tokens": 128}       # the model's own values come first; each row sets its decoder and k


def first_fork_round(parent: RunResult, at_round: int, loaded, resume: bool) -> float:
    """Seconds until the fork's first own round (best of 3)."""
    best = float("inf")
    source = parent if resume else RunResult.from_json(parent.to_json())        # a trace: no saved states
    record = parent.records[at_round]
    position = record.branch_positions[record.winner][0]
    for _ in range(3):
        decoder = fork_decoder(source, model=loaded)
        start = time.perf_counter()
        stream = decoder.stream_fork(source, at_round, {position: None})
        next(stream)
        best = min(best, time.perf_counter() - start)
        stream.close()
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--threads", type=int, default=1)
    add_settings_arguments(parser, per_row=("k", "commit"), choose_decoder=False, defaults=DEFAULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load(args.model)
    prompt = heldout_questions(1)[0]
    base = settings_from_args(args, loaded.spec, defaults=DEFAULTS)
    print(f"model: {loaded.describe()}   hardware: {hardware(loaded)}   max_new_tokens {base.max_new_tokens}")
    print(f"{'decoder':>20} {'rounds':>6} {'fork at':>7} {'resume ms':>9} {'replay ms':>9} {'replayed fwd':>12} "
          f"{'keep_states ms/round':>20}")
    for name, row in ROWS.items():
        settings = decoder_settings(row["decoder"], base, k=row.get("k", 0))
        timed = {}
        for keep in (False, True):
            decoder = loaded.decoder(settings)
            decoder.keep_states = keep
            start = time.perf_counter()
            parent = decoder.run(prompt)
            timed[keep] = time.perf_counter() - start
        last = max(r.round for r in parent.records if r.kind != "final")
        per_round = (timed[True] - timed[False]) / len(parent.records) * 1e3
        for at in (1, max(2, int(0.8 * last))):       # early, late
            resume = first_fork_round(parent, at, loaded, resume=True)
            replay = first_fork_round(parent, at, loaded, resume=False)
            print(f"{name:>20} {len(parent.records):6d} {at:7d} {resume * 1e3:9.1f} {replay * 1e3:9.1f} {at + 1:12d} "
                  f"{per_round:20.2f}")
    print("resume: from the parent's state saved after the fork round; replay: the parent's decisions re-run from "
          "round 0 (what a fork of a loaded trace does). keep_states: extra parent time per round, noisy.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
