"""The server alone: API callers (gradio_client, a session each, no browser) call the page's Run endpoint, one
alone and then N at once, as a Space's visitors' pages do from their own machines. Seconds are the caller's,
from its call to the final message; CPU seconds per Run are read from /proc for the server process, its decode
workers and the callers (this process: on a Space they are elsewhere, here they share the cores)."""

from __future__ import annotations

import os
import statistics
import threading
import time

from .procs import process_cpu_s
from .server import Server

# The goals (docs/deployment.md, "Crowd"): (how many callers at once, the figure, the bound, "max" or "min").
GOALS = {"later_of_two_ratio": (2, "later_ratio", 1.3, "max"),
         "eight_callers_rate_ratio": (8, "rate_ratio", 1.8, "min")}


def cpu_sides(server: Server) -> dict:
    """CPU seconds so far of the server process, its children (the decode workers) and this process (the callers)."""
    return {"server": process_cpu_s(server.proc.pid), "workers": sum(map(process_cpu_s, server.workers())),
            "callers": process_cpu_s(os.getpid())}


def per_run(before: dict, after: dict, runs: int) -> dict:
    return {side: round((after[side] - before[side]) / max(runs, 1), 3) for side in before}


class Callers:
    """`n` API callers of `server`'s `endpoint` (a Client each, made once), each call bounded by `bound_s`."""

    def __init__(self, server: Server, prompt: str, n: int, endpoint: str, bound_s: float):
        from gradio_client import Client
        self.server, self.prompt, self.endpoint, self.bound_s = server, prompt, endpoint, bound_s
        self.clients = [Client(server.url, verbose=False) for _ in range(n)]

    def call(self, i: int) -> float:
        """Caller i's Run: seconds from the call to its final message."""
        start = time.perf_counter()
        self.clients[i].submit(prompt=self.prompt, api_name=self.endpoint).result(timeout=self.bound_s)
        return time.perf_counter() - start

    def together(self, n: int) -> tuple[list[float], float]:
        """Callers 0..n-1 call at the same instant: each one's seconds, and the seconds from that instant to the
        last one's end (a caller that fails raises here)."""
        start, ends, errors = [0.0], [None] * n, []
        gate = threading.Barrier(n, action=lambda: start.__setitem__(0, time.perf_counter()), timeout=self.bound_s)

        def caller(i: int) -> None:
            try:
                gate.wait()
                ends[i] = (self.call(i), time.perf_counter())
            except Exception as err:              # the first caller that fails says why
                errors.append(err)
                gate.abort()
        threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.bound_s * 2)
        if errors or None in ends:
            raise RuntimeError(f"{n} callers at once: {errors[0] if errors else 'a caller did not end in time'}")
        return [round(s, 3) for s, _ in ends], round(max(end for _, end in ends) - start[0], 3)


def server_alone(server: Server, prompt: str, counts: list[int], runs: int, endpoint: str, bound_s: float,
                 log=print) -> dict:
    """The server-alone section: `runs` calls by one caller alone, then for each n of `counts` `runs` rounds of
    n callers at once. Per crowd: each round's seconds, the last caller's end over the median alone (with 2
    callers: the later one), and the Runs per second the server completed over one caller's (1 / the median
    alone: a caller that calls again as soon as its Run ends)."""
    out = {"endpoint": endpoint, "workers": len(server.workers()),
           "torch_threads": os.environ.get("LOPA_TORCH_THREADS", "1 (the default)")}
    callers = Callers(server, prompt, max(counts, default=1), endpoint, bound_s)
    # Every session's first call, and every worker's (called together, each caller takes a worker of its own
    # while one is free): what a process or session does once is not a Run's cost.
    callers.together(len(callers.clients))
    server.settle_cpu(bound_s=30.0, window_s=1.0)
    before = cpu_sides(server)
    out["alone"] = [round(callers.call(0), 3) for _ in range(runs)]
    out["alone_cpu_s"] = per_run(before, cpu_sides(server), runs)
    out["threads"] = server.threads()
    median = statistics.median(out["alone"])
    out["alone_median_s"], out["alone_rate"] = median, round(1 / median, 2)
    log(f"alone: {', '.join(f'{s:.2f}' for s in out['alone'])} s; CPU s per Run {out['alone_cpu_s']}")
    out["crowds"] = []
    for n in counts:
        server.settle_cpu(bound_s=30.0, window_s=1.0)
        before, rounds, walls = cpu_sides(server), [], []
        for _ in range(runs):
            seconds, wall = callers.together(n)
            rounds.append(sorted(seconds))
            walls.append(wall)
        rate = n * runs / sum(walls)
        crowd = {"callers": n, "rounds": rounds, "walls_s": walls, "cpu_s": per_run(before, cpu_sides(server), n * runs),
                 "later_ratio": round(statistics.median(r[-1] for r in rounds) / median, 2),
                 "rate": round(rate, 2), "rate_ratio": round(rate * median, 2)}
        out["crowds"].append(crowd)
        log(f"{n} callers at once: {fmt_crowd(crowd)}")
    out["goals"] = goals(out)
    return out


def fmt_crowd(crowd: dict) -> str:
    return (f"last ends at {', '.join(f'{r[-1]:.2f}' for r in crowd['rounds'])} s ({crowd['later_ratio']}x alone); "
            f"{crowd['rate']} Runs/s ({crowd['rate_ratio']}x one caller's); CPU s per Run {crowd['cpu_s']}")


def goals(out: dict) -> dict:
    """Each goal's figure from the crowd of its size (None where that crowd was not measured)."""
    found = {}
    for name, (n, figure, bound, kind) in GOALS.items():
        crowd = next((c for c in out.get("crowds", []) if c["callers"] == n), None)
        value = crowd[figure] if crowd else None
        found[name] = {"value": value, "goal": bound, "op": "<=" if kind == "max" else ">=", "callers": n,
                       "pass": None if value is None else value <= bound if kind == "max" else value >= bound}
    return found
