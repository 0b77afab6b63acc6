"""How long the first example's decode takes on 1 and on 2 torch threads, with 0, 1 and 2 busy processes
beside it: why the app decodes on one thread by default (app.server_threads, LOPA_TORCH_THREADS).

    python scripts/bench_threads.py [--model open-gsm-dllm] [--repeats 8]

Prints the median seconds per decode for each (busy processes, threads), the two thread counts taken in
turn so that both meet the same machine. The busy processes are plain Python loops, ended when the
benchmark ends (or after --deadline-s)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="open-gsm-dllm", help="a bundled model's name or a folder")
    parser.add_argument("--repeats", type=int, default=8, help="decodes per (busy, threads) cell, in turns")
    parser.add_argument("--deadline-s", type=float, default=600.0, help="the busy processes end by then")
    args = parser.parse_args(argv)
    import torch

    from app.serving.models import example_prompts
    from lopa.models import load
    from lopa.settings import DecodeSettings

    loaded, prompt = load(args.model), example_prompts()[0]
    decoder = lambda: loaded.decoder(DecodeSettings(k=4)).run(prompt)           # noqa: E731 (the app's defaults)
    decoder()                                                                     # warm-up
    print(f"{loaded.spec.name}, k = 4, first example; median seconds per decode over {args.repeats}")
    print("busy processes | 1 thread | 2 threads | 2 / 1")
    for busy in (0, 1, 2):
        loops = [subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {args.deadline_s}\n"
                                   "while time.time() < end: pass"]) for _ in range(busy)]
        try:
            time.sleep(0.5)
            times = {1: [], 2: []}
            for _ in range(args.repeats):
                for n in (1, 2):
                    torch.set_num_threads(n)
                    start = time.perf_counter()
                    decoder()
                    times[n].append(time.perf_counter() - start)
        finally:
            for loop in loops:
                loop.kill()
        one, two = statistics.median(times[1]), statistics.median(times[2])
        print(f"{busy} | {one:.3f} | {two:.3f} | {two / one:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
