"""How long the CPU toy run of `python -m lopa.bench.gpu` takes (goal: at most 2 minutes on an idle
2-core machine): the command as a user runs it on a machine without a GPU, its wall time, its CPU time
and the seconds of each section from its report.

    python scripts/bench_gpu_toy.py [--threads N]      # N = 1 by default, as docs/gpu.md runs it

Prints figures and asserts nothing; tests/test_bench_gpu.py checks what the command writes. Run it on
an idle machine; on a shared one the load average printed beside the figures says how busy it was.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 120.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="passed to the command (0: torch's own; two threads on a busy 2-core machine spin)")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "lopa.bench.gpu", "--device", "cpu", "--out", out]
        command += ["--threads", str(args.threads)] if args.threads else []
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - start
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            print(done.stdout[-2000:] + done.stderr[-2000:], file=sys.stderr)
            return done.returncode
        report = json.loads((Path(out) / "report.json").read_text())
    print(f"{report['environment']['device']}; load average {' '.join(f'{x:.2f}' for x in load)} at the start")
    print("sections: " + ", ".join(f"{name} {s:.0f} s" for name, s in report["seconds"].items()))
    print(f"wall {wall:.0f} s, CPU {cpu.ru_utime + cpu.ru_stime:.0f} s "
          f"(goal: wall <= {GOAL_S:.0f} s on an idle 2-core machine: {'met' if wall <= GOAL_S else 'missed'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
