"""Fit a bundled model's adaptive branch budget and ship it in its config.json.

    .venv/bin/python scripts/fit_budget.py [--models open-gsm-dllm,sure-gsm-dllm] [--n 32] [--seed 37001] [--write]

--models takes bundled model names or model folders (scripts/ship_model.sh passes its folder).

For each model: `--n` fresh held-out problems of the model's own family (config.lopa.problems, drawn
with `--seed`, never a shipped file) decoded at k = 0 and k = 1 under each lookahead ranking in
--ranks, as `lopa generate --order adaptive` resolves its settings for that model
(lopa.study.adaptive_fit.calibrate, lopa.rules.fit_gain). The ranking whose k = 1 calibration decodes
reach the higher TPF is the model's: its gain model (adaptive_win, adaptive_release, adaptive_lift)
and adaptive_rank go in config.json as "lopa": {"decode": {...}} (beside the decode settings already there, which
the fit decodes with), which lopa.models.loading reads
into ModelSpec.decode, under whatever the user sets (lopa.resolution.resolve). Without --write it
prints what it would write. Untimed: a fit counts forwards, so a busy machine gives the same numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lopa.models import load  # noqa: E402
from lopa.models.loading import ASSETS  # noqa: E402
from lopa.order import budget_warning  # noqa: E402
from lopa.problems import family_problems  # noqa: E402
from lopa.resolution import settings_for_model  # noqa: E402
from lopa.study.adaptive_fit import GAIN, calibrate  # noqa: E402


def folder_of(name: str) -> Path:
    return Path(name) if Path(name).is_dir() else ASSETS / "models" / name


def fit(name: str, n: int, seed: int, ranks: list[str]) -> dict:
    loaded = load(str(folder_of(name)), device="cpu")
    family = loaded.spec.extra.get("problems") or {"name": "synthetic-gsm"}
    problems = [{"id": i, **p} for i, p in enumerate(family_problems(family, n, seed))]
    fits = {}
    for rank in ranks:
        base = settings_for_model(loaded.spec, order="adaptive", adaptive_rank=rank)
        fits[rank] = calibrate(loaded, base, problems)
        print(f"{name}, ranking {rank}: {json.dumps(fits[rank])}", flush=True)
    rank = max(fits, key=lambda r: fits[r]["tpf_k1"])
    decode = {"adaptive_rank": rank, **{g: round(fits[rank][g], 4) for g in GAIN}}
    settings = settings_for_model(loaded.spec, order="adaptive", **decode)
    print(f"{name}: ships {decode}; at the CLI's defaults: {budget_warning(settings) or 'branches where the fit pays'}")
    return decode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="open-gsm-dllm,sure-gsm-dllm",
                    help="bundled model names or model folders, comma-separated")
    ap.add_argument("--n", type=int, default=32, help="calibration problems per model (default 32)")
    ap.add_argument("--seed", type=int, default=37001, help="seed of the fresh problems (default 37001)")
    ap.add_argument("--ranks", default="confidence,least_confident", help="rankings to fit, comma-separated")
    ap.add_argument("--write", action="store_true", help="write the fit into each model's config.json")
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        decode = fit(name, args.n, args.seed, args.ranks.split(","))
        if args.write:
            path = folder_of(name) / "config.json"
            config = json.loads(path.read_text())
            # the fit's keys replace their old values; the model's other decode settings (token editing's) stay
            config["lopa"]["decode"] = {**config["lopa"].get("decode", {}), **decode}
            path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
