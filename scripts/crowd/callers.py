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


# How often a caller looks for its job's next message. gradio_client 2.7 looks every 0.05 s (gradio_client.utils:
# stream_sse_v1plus, and check_for_cancel beside it), so it saw a Run's end up to 50 ms late: Runs alone read
# 0.155 or 0.205 s by where the end fell between two looks, a ratio to them 1.0x or 1.3x by chance.
LOOK_S = 0.002


def look_often() -> None:
    """gradio_client's two polling loops (the only sleeps in gradio_client.utils) look every LOOK_S."""
    import types

    import gradio_client.utils as client_utils
    clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    client_utils.time = types.SimpleNamespace(**{**clock, "sleep": lambda s: time.sleep(min(s, LOOK_S))})


class Callers:
    """`n` API callers of `server`'s `endpoint` (a Client each, made once), each call bounded by `bound_s`."""

    def __init__(self, server: Server, prompt: str, n: int, endpoint: str, bound_s: float):
        from gradio_client import Client
        look_often()
        self.server, self.prompt, self.endpoint, self.bound_s = server, prompt, endpoint, bound_s
        # Plain http to 127.0.0.1, so no certificate to verify: with verification on, httpx (under gradio_client)
        # loads the CA bundle again for each request, about 0.035 CPU s a Run, three quarters of what the callers
        # spent here (py-spy), taken from the server's own cores.
        self.clients = [Client(server.url, verbose=False, ssl_verify=False) for _ in range(n)]

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


def apart(fn, nice: int = 0, cpus: set[int] | None = None):
    """fn() in a thread of its own at niceness `nice` and on `cpus` (both are a thread's own on Linux, and the
    threads it starts inherit them: the callers' clients), this thread left as it was; returns what fn returns."""
    box = {}

    def run() -> None:
        try:
            me = threading.get_native_id()
            if nice:
                os.setpriority(os.PRIO_PROCESS, me, nice)
            if cpus:
                os.sched_setaffinity(me, cpus)
            box["value"] = fn()
        except BaseException as err:          # raised again in the caller's thread
            box["error"] = err
    thread = threading.Thread(target=run, name="lopa-crowd-callers", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def server_alone(server: Server, prompt: str, counts: list[int], runs: int, endpoint: str, bound_s: float,
                 log=print) -> dict:
    """The server-alone section: `runs` calls by one caller alone, then for each n of `counts` `runs` rounds of
    n callers at once, each round after one more call alone (a load on the machine that drifts moves both).
    Per crowd: each round's seconds, the last caller's end over the median alone (with 2 callers: the later
    one), and the Runs per second the server completed over one caller's (1 / the median alone: a caller that
    calls again as soon as its Run ends); CPU seconds per Run by side, alone and in each crowd."""
    out = {"endpoint": endpoint, "workers": len(server.workers()),
           "torch_threads": os.environ.get("LOPA_TORCH_THREADS", "1 (the default)")}
    callers = Callers(server, prompt, max(counts, default=1), endpoint, bound_s)
    # Every session's first call, and every worker's (called together, each caller takes a worker of its own
    # while one is free): what a process or session does once is not a Run's cost.
    callers.together(len(callers.clients))
    server.settle_cpu(bound_s=30.0, window_s=1.0)
    alone, alone_cpu = [], dict.fromkeys(cpu_sides(server), 0.0)

    def spent(call) -> tuple:
        """call()'s value and the CPU seconds each side spent meanwhile."""
        before = cpu_sides(server)
        value = call()
        return value, {side: s - before[side] for side, s in cpu_sides(server).items()}

    def one_alone() -> None:
        seconds, cpu = spent(lambda: callers.call(0))
        alone.append(round(seconds, 3))
        for side, s in cpu.items():
            alone_cpu[side] += s
    for _ in range(runs):
        one_alone()
    out["threads"] = server.threads()
    log(f"alone: {', '.join(f'{s:.2f}' for s in alone)} s")
    crowds = []
    for n in counts:
        crowd = {"callers": n, "rounds": [], "walls_s": [], "cpu_s": dict.fromkeys(alone_cpu, 0.0)}
        for _ in range(runs):
            one_alone()
            (seconds, wall), cpu = spent(lambda n=n: callers.together(n))
            crowd["rounds"].append(sorted(seconds))
            crowd["walls_s"].append(wall)
            crowd["cpu_s"] = {side: s + cpu[side] for side, s in crowd["cpu_s"].items()}
        crowd["cpu_s"] = {side: round(s / (n * runs), 3) for side, s in crowd["cpu_s"].items()}
        crowds.append(crowd)
        log(f"{n} callers at once: the last ends at {', '.join(f'{r[-1]:.2f}' for r in crowd['rounds'])} s")
    median = statistics.median(alone)
    out.update(alone=alone, alone_cpu_s={side: round(s / len(alone), 3) for side, s in alone_cpu.items()},
               alone_median_s=median, alone_rate=round(1 / median, 2), crowds=crowds)
    for crowd in crowds:
        rate = crowd["callers"] * runs / sum(crowd["walls_s"])
        crowd.update(later_ratio=round(statistics.median(r[-1] for r in crowd["rounds"]) / median, 2),
                     rate=round(rate, 2), rate_ratio=round(rate * median, 2))
    out["goals"] = goals(out)
    return out


def goals(out: dict) -> dict:
    """Each goal's figure from the crowd of its size (None where that crowd was not measured)."""
    found = {}
    for name, (n, figure, bound, kind) in GOALS.items():
        crowd = next((c for c in out.get("crowds", []) if c["callers"] == n), None)
        value = crowd[figure] if crowd else None
        found[name] = {"value": value, "goal": bound, "op": "<=" if kind == "max" else ">=", "callers": n,
                       "pass": None if value is None else value <= bound if kind == "max" else value >= bound}
    return found
