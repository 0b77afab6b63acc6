"""Where a round's time goes: D2F's rounds against a LoPA row's, by the window's size in blocks and the
block its lookahead branch lies in, on fresh problems of the model's own family. Prints numbers.

    .venv/bin/python scripts/round_breakdown.py [--model DIR] [--seed 7301] [--n 60] [--row lopa-k1-least_confident]
                                                [--passes 3]

Under block_causal attention the batched executor feeds a branch only from the block its token lies in
(lopa.kv.Packing): a branch in the window's first block feeds the whole window again. Each problem is decoded
by both rows, the rows interleaved, once to warm every shape up and then --passes times; the decodes are
greedy, so every pass takes the same rounds, and each round counts with the fastest of its passes (other
work on a shared machine only ever adds time). One torch thread (docs/studies.md, section 3, quotes this
script's table).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from lopa.bench.decoders import DEFAULTS, row_settings  # noqa: E402
from lopa.models import DEFAULT_MODEL, load  # noqa: E402
from lopa.resolution import resolve  # noqa: E402
from lopa.tasks import synthetic  # noqa: E402


def where(record, block_size: int) -> tuple[int, str]:
    """(window blocks, "none" | "first" | "later": the block of the first lookahead position)."""
    blocks = len(record.branch_tokens[0]) // block_size
    if not record.lookahead_positions:
        return blocks, "none"
    return blocks, "first" if record.lookahead_positions[0] - record.window_start < block_size else "later"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--seed", type=int, default=7301, help="problem seed (fresh problems, never a shipped file)")
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--row", default="lopa-k1-least_confident", help="a lopa.bench row name")
    parser.add_argument("--passes", type=int, default=3, help="timed passes; a round counts with its fastest")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load(args.model, device="cpu")
    problems, _ = synthetic.TASK.problems("", args.n, args.seed, loaded.spec.extra.get("problems"))
    base = resolve({}, loaded.spec, defaults=DEFAULTS)
    rows = {"d2f": row_settings("d2f", base), args.row: row_settings(args.row, base)}
    N = base.block_size
    for name in rows:
        loaded.decoder(rows[name])                  # an adaptive row measures its cost curve here, not in a round
    passes = {name: [[] for _ in problems] for name in rows}         # per problem, the runs of every pass
    for counted in [False] + [True] * args.passes:
        for i, problem in enumerate(problems):
            for name, settings in rows.items():
                run = loaded.decoder(settings).run(synthetic.TASK.prompt(loaded, problem, "", 0))
                if counted:
                    passes[name][i].append(run)
    rounds = {name: defaultdict(list) for name in rows}
    for name, per_problem in passes.items():
        for runs in per_problem:
            for same in zip(*(run.records for run in runs)):         # one round, as each pass timed it
                r = same[0]
                if r.kind == "prefill":
                    rounds[name]["prefill"].append(min(x.round_seconds for x in same))
                elif r.kind == "round":
                    rounds[name][where(r, N)].append((min(x.forward_seconds for x in same),
                                                      min(x.round_seconds - x.forward_seconds for x in same),
                                                      r.committed))
    for name, groups in rounds.items():
        prefill = groups.pop("prefill")
        every = [x for group in groups.values() for x in group]
        print(f"{name}: {len(every)} rounds, forward {statistics.mean(x[0] for x in every) * 1e3:.2f} ms + outside "
              f"{statistics.mean(x[1] for x in every) * 1e3:.2f} ms a round (means); per answer "
              f"{len(every) / len(problems):.2f} rounds behind a prefill of {statistics.median(prefill) * 1e3:.2f} ms "
              "(median)")
        for (blocks, block), group in sorted(groups.items()):
            print(f"  window of {blocks} block(s), lookahead {block:>5}: {len(group) / len(every):6.1%} of rounds, "
                  f"forward {statistics.median(x[0] for x in group) * 1e3:5.2f} ms, outside "
                  f"{statistics.median(x[1] for x in group) * 1e3:4.2f} ms (medians), "
                  f"{statistics.mean(x[2] for x in group):5.2f} tokens committed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
