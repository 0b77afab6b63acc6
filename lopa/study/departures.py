"""How much two of the engine's departures from the authors' loop change a run (docs/method.md,
"Where this engine departs"), measured on a model (the bundled one by default) and held-out prompts,
greedy, CPU.

    python -m lopa.study departures [--prompts 30] [--max-new-tokens 128] [--block-size 32] [--out DIR]

1. Cache timing (settings.cache_schedule): "eager" caches a block a lookahead token completed from
   the forward that verified it, "authors" one forward later. Counted: rounds where a winning
   lookahead token completed a leading block (the event), runs whose tokens or decisions differ,
   and the largest branch-score difference over the rounds both schedules share.
2. The mask token: probabilities and Conf come from the raw logits; mask_argmax="excluded" sets the
   mask token's logit to -inf before the softmax. Counted: runs whose decisions differ between the two, window
   predictions whose raw argmax is the mask token, and runs the authors' rule (mask_argmax="authors")
   stalls on (the mask predicted at every open position).
Prints one JSON row per attention mode and k, and writes them to departures.csv / .parquet / .json.
"""

from __future__ import annotations

import time

import torch

from lopa.engine import DecodeStalled
from lopa.resolution import add_settings_arguments, settings_from_args
from lopa.study.common import hardware, load_problems, write_results
from lopa.study.declaration import Study

STUDY = Study("departures", "What the engine's departures from the authors' loop change", rank=8)
DEFAULTS = {"max_new_tokens": 128}       # and the paper's GSM8K row (Table 5); the model's own values come first


def decisions(run):
    return [(r.anchor_positions, r.lookahead_positions, r.winner) for r in run.records], run.tokens


def score_gap(a, b):
    """Largest |Δ branch score| over the leading rounds where both runs took the same decisions."""
    gap = 0.0
    for x, y in zip(a.records, b.records):
        if (x.anchor_positions, x.lookahead_positions) != (y.anchor_positions, y.lookahead_positions):
            break
        for s, t in zip(x.branch_scores, y.branch_scores):
            if abs(s) != float("inf") and abs(t) != float("inf"):
                gap = max(gap, abs(s - t))
        if x.winner != y.winner:
            break
    return gap


def lookahead_completions(run, N):
    """Rounds where the winning lookahead token (or kept chain) completed a block whose predecessors are complete:
    (all of them, those followed by another forward, where the two schedules can differ)."""
    events, followed = 0, 0
    last = max(r.round for r in run.records if r.kind != "final")
    for r in run.records:
        if r.kind != "round" or r.winner == 0:
            continue
        # the winner's lookahead token, or its kept chain (lookahead_depth > 1: the winner is a row, not an index)
        extra = [p for p, _, ahead in r.filled() if ahead]
        tokens = r.branch_tokens[r.winner]                         # the winner's window, after the round
        w0 = r.window_start
        if any(all(t != run.spec["mask_token_id"] for t in tokens[:(p // N + 1) * N - w0]) for p in extra):
            events += 1
            followed += r.round < last
    return events, followed


def main(argv=None) -> int:
    import json

    import pandas as pd

    from lopa.models import load
    from lopa.models.loading import DEFAULT_MODEL
    ap = STUDY.parser()             # its own frame: the held-out prompts, every row's settings its own
    ap.add_argument("--model", default=str(DEFAULT_MODEL), help="model directory (default: the bundled model)")
    ap.add_argument("--prompts", type=int, default=30, help="the first N held-out prompts (default 30)")
    ap.add_argument("--out", default="study-out", help="output folder")
    # each row sets its attention, k, cache schedule and mask rule; every other setting is a flag
    add_settings_arguments(ap, per_row=("attention", "k", "cache_schedule", "mask_argmax"), choose_decoder=False,
                           defaults=DEFAULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    loaded = load(args.model, device="cpu")
    problems, where = load_problems("heldout", args.prompts, 0)
    questions = [p["question"] for p in problems]
    paper = settings_from_args(args, loaded.spec, defaults=DEFAULTS)
    t0, rows = time.perf_counter(), []
    for attention in ("full", "full_prompt_blind", "block_causal"):
        for k in (4, 8):
            s = paper.replace(k=k, attention=attention)
            row = {"attention": attention, "k": k, "prompts": len(questions), "block": s.block_size, "rounds": 0,
                   "events": 0, "events_followed": 0, "schedule_runs_differ": [], "schedule_max_dscore": 0.0,
                   "mask_runs_differ": [], "mask_argmax_predictions": 0, "predictions": 0, "mask_argmax_stalled": []}
            for i, q in enumerate(questions):
                eager = loaded.decoder(s).run(q)
                authors = loaded.decoder(s.replace(cache_schedule="authors")).run(q)
                row["rounds"] += sum(r.kind == "round" for r in eager.records)
                events, followed = lookahead_completions(eager, s.block_size)
                row["events"] += events
                row["events_followed"] += followed
                if decisions(eager) != decisions(authors):
                    row["schedule_runs_differ"].append(i)         # held-out prompt index
                row["schedule_max_dscore"] = max(row["schedule_max_dscore"], score_gap(eager, authors))
                raw = loaded.decoder(s.replace(mask_argmax="authors"))
                try:
                    raw.run(q)
                except DecodeStalled:        # the authors' rule spins where the mask is the argmax everywhere
                    row["mask_argmax_stalled"].append(i)
                row["mask_argmax_predictions"] += sum(t == loaded.spec.mask_token_id for r in raw.records
                                                      for a in r.branch_argmax for t in a)
                row["predictions"] += sum(len(a) for r in raw.records for a in r.branch_argmax)
                excluded = loaded.decoder(s.replace(mask_argmax="excluded")).run(q)     # its trace says so
                if decisions(eager) != decisions(excluded):
                    row["mask_runs_differ"].append(i)
            rows.append(row)
            print(json.dumps(row), flush=True)
    seconds = time.perf_counter() - t0
    print(f"# {seconds:.0f} s, {torch.get_num_threads()} torch thread, CPU")
    table = pd.DataFrame([{**r, "schedule_runs_differ": json.dumps(r["schedule_runs_differ"]),
                           "mask_runs_differ": json.dumps(r["mask_runs_differ"]),
                           "mask_argmax_stalled": json.dumps(r["mask_argmax_stalled"])} for r in rows])
    meta = {"command": argv, "model": loaded.describe(), "hardware": hardware(loaded), "data": where,
            "summary": {"rows": rows, "seconds": seconds}}
    files = write_results(args.out, STUDY.name, {"": table}, meta)
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
