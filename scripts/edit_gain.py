"""What token editing does to a model's answers: each decoder row with editing off and on, on the same problems.

    python scripts/edit_gain.py --model assets/models/edit-gsm-dllm --problem-seed S --n 120 \
        --decoders d2f,lopa-k1,lopa-k4 --threads 1 [--edit-threshold T --edit-post-steps P] [--tau-conf C] [--out DIR]

Settings resolve as `python -m lopa.bench` resolves them (the flags, then the model's config.lopa.decode, then the
paper's); the "on" row of a decoder decodes with the resolved editing settings, its "off" row with the same
settings and edit_threshold 1. Both rows decode every problem, interleaved (lopa.bench.decoders.run_interleaved).
Per decoder it prints and writes (--out/edit_gain.json, with every row's summary): the accuracy off and on, the
answers editing fixed (wrong off, right on) and broke (right off, wrong on), the share of answers with at least one
edit, edits per answer, and TPF (useful tokens per forward) off and on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from lopa.bench.decoders import DEFAULTS, row_settings, run_interleaved, summarize_rows  # noqa: E402
from lopa.models import add_model_arguments, load_from_args  # noqa: E402
from lopa.resolution import add_settings_arguments, settings_from_args  # noqa: E402
from lopa.tasks import synthetic  # noqa: E402
from lopa.trace import pooled  # noqa: E402

OFF = 1.0   # edit_threshold 1: no probability is above it, editing off (lopa/editing.py)


def gain(off: list[dict], on: list[dict]) -> dict:
    """The comparison of one decoder's per-problem rows (problems.csv rows, the same problems in the same order)."""
    if [r["problem"] for r in off] != [r["problem"] for r in on]:
        raise ValueError("editing off and on must be rows of the same problems, in the same order")
    n = len(off)
    fixed = [r["problem"] for r, e in zip(off, on) if not r["correct"] and e["correct"]]
    broken = [r["problem"] for r, e in zip(off, on) if r["correct"] and not e["correct"]]
    tpf = lambda rows: pooled(rows)["tpf_useful"]  # pooled over the problems, as the bench's TPF
    return {"n": n, "acc_off": sum(r["correct"] for r in off) / n, "acc_on": sum(e["correct"] for e in on) / n,
            "fixed": len(fixed), "broken": len(broken), "fixed_problems": fixed, "broken_problems": broken,
            "edited_share": sum(e["edits"] > 0 for e in on) / n, "edits_per_answer": sum(e["edits"] for e in on) / n,
            "post_rounds_per_answer": sum(e["post_rounds"] for e in on) / n,
            "tpf_off": tpf(off), "tpf_on": tpf(on)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--problem-seed", type=int, required=True, help="fresh problems of the model's own family")
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--decoders", default="d2f,lopa-k1,lopa-k4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--out", default=None, help="folder for edit_gain.json (default: print only)")
    add_model_arguments(ap)
    add_settings_arguments(ap, per_row=("k", "commit"), choose_decoder=False, defaults=DEFAULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_from_args(args)
    problems, where = synthetic.TASK.problems("synthetic", args.n, args.problem_seed, loaded.spec.extra.get("problems"))
    base = settings_from_args(args, loaded.spec, defaults=DEFAULTS)
    if base.edit_threshold >= OFF:
        ap.error("editing is off in these settings: pass --edit-threshold below 1 (or decode a model whose "
                 "config.lopa.decode sets it)")
    rows = {}
    for name in args.decoders.split(","):
        on = row_settings(name.strip(), base)
        rows[f"{name}"], rows[f"{name}+edit"] = on.replace(edit_threshold=OFF), on
    print(f"model {loaded.describe()}; data {where} (n={len(problems)}); {args.threads} torch thread(s)")
    print(f"editing: threshold {base.edit_threshold}, post steps {base.edit_post_steps}; tau_conf {base.tau_conf}")
    decoded = run_interleaved(loaded, rows, problems)
    report = {"model": loaded.spec.name, "data": where, "n": len(problems), "argv": sys.argv[1:] if argv is None else argv,
              "settings": base.to_dict(), "decoders": {}, "rows": [summarize_rows(k, s, decoded[k]) for k, s in rows.items()]}
    print(f"{'decoder':>10} {'acc off':>8} {'acc on':>7} {'fixed':>6} {'broken':>7} {'edited':>7} {'edits/ans':>9} "
          f"{'TPF off':>8} {'TPF on':>7}")
    for name in args.decoders.split(","):
        g = gain(decoded[name], decoded[f"{name}+edit"])
        report["decoders"][name] = g
        print(f"{name:>10} {g['acc_off']:8.1%} {g['acc_on']:7.1%} {g['fixed']:6d} {g['broken']:7d} "
              f"{g['edited_share']:7.1%} {g['edits_per_answer']:9.2f} {g['tpf_off']:8.2f} {g['tpf_on']:7.2f}", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "edit_gain.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
