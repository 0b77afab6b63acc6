"""How long each study's default live run in the app takes, end to end.

    .venv/bin/python scripts/bench_studies.py [--studies orders,calibration,adaptive,headroom] [--model NAME]
                                              [--threads 1]

Runs app.panels.studies.callbacks.run_study exactly as the Studies section's "Run live" does with its default inputs
(the panel's problems and seed, each study knob's declared live default; the default model unless --model names another bundled
one): the decodes behind the GPU boundary, then the tables, the summary and the plot. Prints one row per
study: seconds from the press to the final plot, the progress bar at the end (units of work done /
total: they match when the count is right) and the machine's 1-minute load average when the study ended
(other work on a shared machine slows every study alike). A figure, not a test: the time depends on the
machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The Studies panel's default inputs (app/panels/studies/__init__.py build_studies_panel: problems, seed; the knobs' inputs
# start at their declared live defaults, which run_study takes when none is given).
DEFAULT_LIVE = {"problems": 3, "seed": 15}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", default="", help="comma-separated (default: every study the app shows)")
    ap.add_argument("--model", default="", help="a bundled model's name (default: the app's default model)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, as the tests)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    from types import SimpleNamespace

    from app.panels.studies.callbacks import new_study_state, run_study
    from app.serving.model_cache import MODELS
    from lopa.study import APP_STUDIES
    studies = args.studies.split(",") if args.studies else list(APP_STUDIES)
    session = SimpleNamespace(model=str(MODELS.folder(args.model or None)))
    MODELS.get(MODELS.folder(args.model or None))         # loaded before the clock starts, as on a warm server
    from lopa.tasks.hardware import hardware
    print(f"{hardware('cpu')}; model {Path(session.model).name}; inputs {DEFAULT_LIVE}")
    print(f"{'study':>12} {'seconds':>8} {'progress':>9} {'load':>5}  final status")
    for study in studies:
        start = time.perf_counter()
        last = list(run_study(new_study_state(), study, DEFAULT_LIVE["problems"], seed=DEFAULT_LIVE["seed"],
                              session=session))[-1]
        seconds = time.perf_counter() - start
        bar = re.search(r"(\d+) / (\d+)", str(last[1]))
        print(f"{study:>12} {seconds:>8.1f} {bar.group(0) if bar else '?':>9} {os.getloadavg()[0]:>5.1f}  "
              f"{str(last[0])[:60]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
