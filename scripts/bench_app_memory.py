"""The app's memory over time: RSS of the serving process after many runs in one session and after
many sessions of one run each (bundled model, through gradio_client, app served in-process), and
over many uploads of the largest trace the limits accept (through the upload callback, one session).

    python scripts/bench_app_memory.py [--runs 200] [--sessions 100] [--uploads 16]

Prints numbers and asserts nothing. The goals: flat after warm-up; uploads raise RSS by at most
the session's memory budget (app/serving/budget.py), and RSS comes back within 50 MB of its pre-upload
level once the session's runs are evicted.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TRIM = os.environ.get("TRIM") == "1"
PROMPT = "Tom has 23 apples. He gives 7 to Ann. How many apples does Tom have now?"


def _status_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    """Start the kernel's peak-RSS counter (VmHWM) afresh: it then sees every transient inside a
    call, such as a trace being parsed, which sampling RSS between calls misses."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss_mb() -> float:
    gc.collect()
    if TRIM:
        ctypes.CDLL("libc.so.6").malloc_trim(0)          # what the allocator holds but no object uses
    return _status_mb("VmRSS")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--uploads", type=int, default=16, help="uploads of the largest accepted trace (0: skip)")
    args = ap.parse_args(argv)

    import torch
    from gradio_client import Client
    from servers import free_port

    from app import LAUNCH_KWARGS, build_demo
    from app.serving.session import SETTING_NAMES
    from lopa import DecodeSettings

    torch.set_num_threads(1)
    values = DecodeSettings(k=4, max_new_tokens=128).to_dict()
    inputs = [values.get(name) for name in SETTING_NAMES]
    demo = build_demo()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    url = f"http://127.0.0.1:{port}/"

    def run(client):
        client.predict(PROMPT, *inputs, api_name="/run")

    from lopa.tasks.hardware import hardware, software
    print(f"hardware: {hardware('cpu')}; python {software()['python']}")
    client = Client(url, verbose=False)
    for _ in range(args.warmup):
        run(client)
    gc.collect()
    base = rss_mb()
    print(f"after {args.warmup} warm-up runs: RSS {base:.0f} MB")
    t0 = time.monotonic()
    for i in range(1, args.runs + 1):
        run(client)
        if i % 25 == 0:
            gc.collect()
            print(f"  one session, {i} runs: RSS {rss_mb():.0f} MB ({rss_mb() - base:+.0f})")
    print(f"{args.runs} runs in one session took {time.monotonic() - t0:.0f} s")
    for i in range(1, args.sessions + 1):
        other = Client(url, verbose=False)
        run(other)
        other.close() if hasattr(other, "close") else None
        if i % 25 == 0:
            gc.collect()
            print(f"  {i} new sessions of one run: RSS {rss_mb():.0f} MB ({rss_mb() - base:+.0f})")
    time.sleep(5)
    gc.collect()
    print(f"5 s idle later: RSS {rss_mb():.0f} MB ({rss_mb() - base:+.0f} over warm-up)")
    if args.uploads:
        uploads(args.uploads)
    demo.close()
    return 0


def uploads(n: int) -> None:
    """`n` uploads of the largest trace the schema accepts into one session, then the session ends."""
    import tempfile

    from big_trace import largest_trace

    from app.panels import traces
    from app.serving.budget import APP_BUDGET_BYTES, HOLD_BYTES, LEDGER, SESSION_BUDGET_BYTES, held_bytes
    from app.serving.session import Session, end_session
    from lopa import RunResult
    from lopa.read_budget import READ_BYTES, read_cost

    path = Path(tempfile.mkdtemp(prefix="lopa-bench-")) / "largest.json"
    path.write_text(text := largest_trace())
    held = held_bytes(RunResult.load(path))
    print(f"uploads: the largest accepted trace is {path.stat().st_size / 2**20:.1f} MB of JSON, costs at most "
          f"{read_cost(text) / 2**20:.0f} MB to read (limit {READ_BYTES >> 20} MB) and holds {held / 2**20:.0f} MB "
          f"(limit {HOLD_BYTES >> 20} MB); budgets: {SESSION_BUDGET_BYTES >> 20} MB a session, "
          f"{APP_BUDGET_BYTES >> 20} MB the app")
    del text
    session = Session()
    before = rss_mb()
    reset_peak()
    t0 = time.monotonic()
    for i in range(1, n + 1):
        status = traces.load_trace(session, str(path))[0]
        if i % 4 == 0 or "could not" in str(status):
            print(f"  {i} uploads: RSS {rss_mb():.0f} MB ({rss_mb() - before:+.0f}); session holds "
                  f"{session.runs.held / 2**20:.0f} MB in {len(session.runs.entries)} runs; {str(status)[:90]}")
    peak = _status_mb("VmHWM")
    print(f"{n} uploads took {time.monotonic() - t0:.0f} s; RSS {before:.0f} MB before, peak {peak:.0f} MB "
          f"(kernel's high-water mark: {peak - before:+.0f}; budget {SESSION_BUDGET_BYTES >> 20} MB)")
    end_session(session)                                  # what Gradio calls when the session expires
    del session
    time.sleep(5)
    gc.collect()
    print(f"session's runs evicted, 5 s idle: RSS {rss_mb():.0f} MB ({rss_mb() - before:+.0f} over pre-upload); "
          f"the app's ledger holds {LEDGER.held} bytes")


if __name__ == "__main__":
    raise SystemExit(main())
