"""Pick the app's first examples: held-out problems on which the filling order matters.

    python scripts/pick_examples.py [--model DIR] [--n 4] [--k 4] [--scan 150]

For each of the first `--scan` problems of assets/data/synthetic/heldout.jsonl, decode with vanilla
D2F and with LoPA (k = the app's default) at the app's settings, and keep those both answer right in
every line (grammatical, every calculation right),
that D2F needs at least `--min-rounds` rounds for (not filled in two rounds), and whose two token
filling orders (TFO) disagree most: the share of position pairs the two decoders fill in opposite
order, then (a confident model rarely reverses a pair) the share of positions filled in another
round, then D2F's rounds. Writes assets/data/synthetic/examples.jsonl, which app/serving/examples.py lists first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.serving.session import APP_DEFAULTS  # noqa: E402
from lopa.models import load  # noqa: E402
from lopa.problems import CALC_RE, final_answer, grammatical_lines, read_jsonl  # noqa: E402
from lopa.settings import DecodeSettings, decoder_settings  # noqa: E402
from visualizations.timeline import fills  # noqa: E402


def order_disagreement(a: dict[int, int], b: dict[int, int]) -> float:
    """Share of position pairs (filled by both) that one run fills in strictly the opposite order of the other."""
    common = sorted(set(a) & set(b))
    pairs = list(itertools.combinations(common, 2))
    if not pairs:
        return 0.0
    return sum((a[i] - a[j]) * (b[i] - b[j]) < 0 for i, j in pairs) / len(pairs)


def moved_share(a: dict[int, int], b: dict[int, int]) -> float:
    """Share of positions (filled by both) that the two runs fill in different rounds."""
    common = set(a) & set(b)
    return sum(a[i] != b[i] for i in common) / len(common) if common else 0.0


def sound(text: str, phrasing: str) -> bool:
    """Every line one the family can write, every calculation right and shown as its result: the first
    screen shows these answers, so a right final number over a wrong line does not qualify."""
    ok, total = grammatical_lines(text, phrasing)
    if ok != total:
        return False
    for a, op, b, c, shown in CALC_RE.findall(text):
        a, b = int(a), int(b)
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b and a % b == 0 else None}[op]
        if value != int(c) or c != shown:
            return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--k", type=int, default=APP_DEFAULTS["k"])
    ap.add_argument("--scan", type=int, default=500)
    ap.add_argument("--min-rounds", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "assets" / "data" / "synthetic" / "examples.jsonl"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load(args.model)
    phrasing = loaded.spec.extra.get("problems", {}).get("phrasing", "plain")
    app = {k: v for k, v in APP_DEFAULTS.items() if k != "k"}
    base = DecodeSettings(**app)
    vanilla, lopa = decoder_settings("d2f", base), decoder_settings("lopa", base, k=args.k)
    scored = []
    for p in read_jsonl(ROOT / "assets" / "data" / "synthetic" / "heldout.jsonl")[: args.scan]:
        runs = [loaded.decoder(s).run(p["question"]) for s in (vanilla, lopa)]
        if any(final_answer(r.text) != final_answer(p["answer"]) or not sound(r.text, phrasing) for r in runs):
            continue
        rounds = [len(r.records) for r in runs]
        if rounds[0] < args.min_rounds:
            continue
        useful = len(runs[0].useful_tokens)
        orders = [{pos: f.round for pos, f in fills(r.records).items() if pos < useful} for r in runs]
        scored.append((order_disagreement(*orders), moved_share(*orders), rounds, p))
    scored.sort(key=lambda s: (-s[0], -s[1], -s[2][0], -s[3]["answer"].count("<<")))
    picked = []
    for steps in itertools.cycle((3, 2, 1)):       # mix the step counts, longest first
        left = [s for s in scored if s[3]["answer"].count("<<") == steps and s not in picked]
        if left:
            picked.append(left[0])
        if len(picked) >= min(args.n, len(scored)):
            break
    with open(args.out, "w") as f:
        for disagreement, moved, rounds, p in picked:
            f.write(json.dumps({"question": p["question"], "answer": p["answer"],
                                "order_disagreement": round(disagreement, 3), "moved_share": round(moved, 3),
                                "rounds_d2f": rounds[0],
                                f"rounds_lopa_k{args.k}": rounds[1]}) + "\n")
            print(f"{disagreement:.2f} moved {moved:.2f} rounds D2F {rounds[0]} LoPA {rounds[1]}: {p['question']}")
    print(f"wrote {len(picked)} of {len(scored)} candidates to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
