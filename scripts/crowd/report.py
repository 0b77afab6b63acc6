"""What the benchmark prints: a log line, each section's figures, the goals with PASS or FAIL."""

from __future__ import annotations

import time
from collections import Counter


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def fmt_run(run: dict) -> str:
    cpu = run.get("cpu_s")
    return (f"first round {run['first_round_s']:.2f} s, final state {run['final_s']:.2f} s "
            f"(server decode {run['server_s']:.2f} s)"
            + (f"; CPU s: server {cpu['server']:.2f}, workers {cpu['workers']:.2f}, browsers {cpu['browsers']:.2f}"
               if cpu else ""))


def fmt_cpu(cpu: dict) -> str:
    return ", ".join(f"{side} {s:.3f}" for side, s in cpu.items())


def report_server_alone(a: dict) -> None:
    """The headline: the server alone, its Runs called through the API (what a Space's server does)."""
    print(f"\n== the server alone: {a['endpoint']} through the API, {a['workers']} decode workers (model slots: one "
          f"per worker, at least one: app/panels/events.py MODEL), torch threads {a['torch_threads']}; threads now: server "
          f"{a['threads']['server']}, workers {a['threads']['workers']}")
    print(f"one caller alone:  {', '.join(f'{s:.2f}' for s in a['alone'])} s (median {a['alone_median_s']:.3f} s: "
          f"{a['alone_rate']} Runs/s); CPU s per Run: {fmt_cpu(a['alone_cpu_s'])}")
    print("callers  last/alone  Runs/s  x one caller  CPU s per Run")
    for c in a["crowds"]:
        print(f"{c['callers']:7d}  {c['later_ratio']:9.2f}x  {c['rate']:6.2f}  {c['rate_ratio']:11.2f}x  {fmt_cpu(c['cpu_s'])}")
        print("         every caller's end, round by round (s): "
              + " | ".join(", ".join(f"{s:.2f}" for s in r) for r in c["rounds"]))


def report_pages(result: dict) -> None:
    """The co-located pages: this machine's Chromium pages on the server's own cores."""
    print("\n== co-located pages (Chromium on this machine, the server's cores)")
    print("idle page  settled  load reqs  during visitors  during watch  by path")
    for r in result.get("idle", []):
        paths = Counter(r.get("during_active", {})) + Counter(r.get("during_watch", {}))
        print(f"{r['page']:9d}  {'yes' if r['settled'] else 'NO':7s}  {r['load_requests']:9d}  "
              f"{sum(r.get('during_active', {}).values()):15d}  {sum(r.get('during_watch', {}).values()):12d}  "
              + ("; ".join(f"{n} x {p}" for p, n in paths.most_common()) or "-"))
    if "warmup" in result:
        w = result["warmup"]
        print(f"warm-up:     {fmt_run(w['runs'][0])}; " + ", ".join(f"{n} {a['s']:.1f} s {'ok' if a['ok'] else 'FAILED'}"
                                                       for n, a in w["actions"].items()))
    for i, r in enumerate(result.get("alone", []), 1):
        print(f"alone {i}:     {fmt_run(r)}")
    for i, v in enumerate(result.get("crowd", []), 1):
        if "runs" not in v:
            print(f"visitor {i}:   {v.get('error')}")
            continue
        for run in v["runs"]:
            stop = run["stop_enabled_while_running"]
            print(f"visitor {i}:   {fmt_run(run)}; Stop enabled while running: "
                  f"{'not seen running' if stop is None else 'yes' if stop else 'NO'}")
        for name, a in v["actions"].items():
            print(f"             {name:10s} {a['s']:7.1f} s  {'ok' if a['ok'] else 'FAILED'}  {a['note']}")
    s = result["server"]
    print(f"server CPU s: {s['cpu_s']}; RSS MB: {s['rss_mb']} "
          f"(peak: {'VmHWM since the baseline' if s.get('peak_is_vmhwm') else 'VmHWM since start'})")


def report_goals(goals: dict) -> None:
    print()
    for name, g in goals.items():
        verdict = "not measured" if g["pass"] is None else "PASS" if g["pass"] else "FAIL"
        print(f"goal {name:25s} {g['value']!s:>8s}  ({g['op']} {g['goal']})  {verdict}")
