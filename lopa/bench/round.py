"""Benchmark one round: the cost of verifying k + 1 branches in one batched forward, and the share
of a round spent outside the forward (bookkeeping). Prints numbers; asserts nothing.

    python -m lopa.bench.round [--model DIR] [--device cpu|cuda] [--repeats 20]

LoPA pays off when a forward over k + 1 short windows costs little more than over one; that holds
on a GPU at batch 1 (memory-bound) and not on a CPU (compute-bound). See the design note, "Why it
is faster, and where it is not".
"""

from __future__ import annotations

import argparse

import torch

from lopa.forward import BatchedExecutor, EagerBatchedExecutor
from lopa.models import DEFAULT_MODEL, load
from lopa.resolution import add_settings_arguments, settings_from_args
from lopa.settings import DecodeSettings
from lopa.tasks.hardware import hardware
from lopa.tasks.sources import heldout_questions
from lopa.tasks.timing import BRANCH_COUNTS, forward_times

DEFAULTS = {"max_new_tokens": 128}     # four blocks of the paper's 32; the model's own values come first


def bookkeeping_share(loaded, prompts: list[str], settings: DecodeSettings) -> tuple[float, float, int]:
    """(share of round time outside the forward, mean round seconds, rounds) over full decodes."""
    total = forward = 0.0
    rounds = 0
    for prompt in prompts:
        result = loaded.decoder(settings).run(prompt)
        for r in result.records:
            if r.kind == "round":
                total += r.round_seconds
                forward += r.forward_seconds
                rounds += 1
    return (total - forward) / total, total / max(rounds, 1), rounds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lopa.bench.round", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--device")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=5, help="prompts decoded for the bookkeeping share")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    add_settings_arguments(parser, per_row=("k",), choose_decoder=False, defaults=DEFAULTS)   # k: 1..15 branches, then 8
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load(args.model, device=args.device)
    settings = settings_from_args(args, loaded.spec, defaults=DEFAULTS)
    block = settings.block_size
    prompt_ids = loaded.decoder(settings).encode(heldout_questions(1)[0])

    print(f"model: {loaded.describe()}   hardware: {hardware(loaded)}   torch {torch.__version__}")
    print(f"verify forward over B windows of 2 blocks x {block} tokens, prefix {prompt_ids.numel()} tokens, "
          f"median of {args.repeats}")
    times = forward_times(loaded, prompt_ids, settings, args.repeats, BRANCH_COUNTS)
    eager = forward_times(loaded, prompt_ids, settings, args.repeats, BRANCH_COUNTS, executor=EagerBatchedExecutor)
    late = forward_times(loaded, prompt_ids, settings, args.repeats, BRANCH_COUNTS, where="last")
    path = BatchedExecutor(loaded.model, loaded.spec, settings)
    label = "lean (lopa.fast)" if path.lean else f"the model's own ({path.lean_reason})"
    print(f"batched forward: {label}{', CUDA graphs after the prefill' if path.static and path.lean else ''}")
    print(f"{'B = k+1':>8} {'ms/forward':>11} {'x single':>9} {'ms/branch':>10} {'last block':>11} {'x single':>9} "
          f"{'eager ms':>9} {'fast/eager':>11}")
    for B, t in times.items():
        print(f"{B:>8} {t * 1e3:>11.2f} {t / times[1]:>9.2f} {t * 1e3 / B:>10.2f} {late[B] * 1e3:>11.2f} "
              f"{late[B] / times[1]:>9.2f} {eager[B] * 1e3:>9.2f} {t / eager[B]:>11.2f}")
    print("(last block: each branch's extra token in the window's last block; under block_causal it feeds only "
          "that block, the blocks before are the anchor's. eager: the same forward through the model's own code, "
          "executor batched_eager, the fast path's reference)")

    look = settings.replace(k=8)
    share, per_round, rounds = bookkeeping_share(loaded, heldout_questions(args.prompts), look)
    print(f"\nbookkeeping at k = 8: {share * 100:.1f}% of round time outside the forward "
          f"({rounds} rounds, {per_round * 1e3:.1f} ms/round; goal <= 20%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
