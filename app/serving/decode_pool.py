"""Decode workers: on a CPU Space (or wherever LOPA_DECODE_WORKERS says), the visitors' decodes (app/serving/boundary.py
decode_rounds: Run, Step, a fork, Compare, /decode) run in worker processes, so that two visitors' decodes run
side by side, and a decode beside the server's own work for the streams.

Why processes: the bundled models are small, so a decode is mostly Python between small torch calls, and
Python threads take turns on one interpreter lock: in one process, two decodes in two threads took 0.25 s
against 0.29 s one after the other. In two processes they run at once. Off a Space they are off by default:
where the pages run on the server's own cores they take the cores the second decode would use, and two
decodes at once then both end late where one after the other the first ends early (docs/deployment.md,
"Crowd", has the figures of both).

    POOL.size          the workers this server has (decode_workers(): LOPA_DECODE_WORKERS, or a CPU Space's
                       cores; 0: every decode in this process)
    POOL.start(warm, threads)  start them (app.serve does, before the first page); each warms the model in
                       `warm` and decodes on `threads` torch threads (server_threads(): LOPA_TORCH_THREADS)
    POOL.take(jobs)    an idle worker for these jobs, or None: they then run in this process
    POOL.stream(w, jobs)  decode_rounds(jobs) in worker w, pass by pass
    POOL.forget(ids)   what the workers keep of these runs goes (a closed page); forget(None): everything

What runs in a worker: jobs of the single-process backend over a model of at most POOL_MAX_PARAMS
parameters (each worker holds its own copy, so a large model stays in one process; the branch-parallel
backend has its own processes). Everything else (the branch-parallel backend, large models, a ZeroGPU
Space, a GPU: one device, nothing to gain) runs in this process, as without workers.

A worker decodes up to AHEAD passes (a round of each job) beyond the one the caller is taking, and a paused
decode stays in the worker that ran it: Step goes back to it (`_homes`); a Run stopped while its worker ran
ahead, or a decode continued in another worker, replays its trace (app/serving/boundary.py: the same tokens, more
forwards; these models are small enough that a replay costs little). Every wait here has a bound; a
worker that dies or stops answering is replaced, and the decode it ran ends with an error chunk (kind
"worker") that the page shows as a message. A worker is a fresh interpreter (app/serving/decode_worker.py), not a
fork of the server, whose threads a fork would copy mid-step, nor a multiprocessing child, which would
run the server's main script again.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
from collections import OrderedDict
from multiprocessing.connection import Connection
from pathlib import Path

# Largest model (parameters) a worker decodes: below it a copy per worker costs little (the bundled models:
# 0.8 M, a few MB) and forks replay their parent's decisions rather than keep per-round states
# (app/serving/session.py KEEP_STATES_MIN_PARAMS), so nothing a run needs later lives only in a worker.
POOL_MAX_PARAMS = 10_000_000
WORKERS_ENV = "LOPA_DECODE_WORKERS"
MAX_WORKERS = 8
START_S = 180.0        # a worker's start: importing torch and the app, loading and warming the model
PASS_S = 120.0         # one pass (a round of each job) of a model this small
TAKE_S = 30.0          # waiting for an idle worker (the model slots match the workers: app/panels/events.py MODEL)
POLL_S = 0.5           # how often a wait looks whether its worker is still alive
# Passes a worker may decode beyond those the server took: the next round is ready when the server asks for
# it. In lockstep two visitors' decodes each took twice as long as one alone, every round waiting for the
# server's interpreter between two of its own (both streams, the pages' requests).
AHEAD = 2
MAX_HOMES = 512        # runs whose paused decode a worker may keep, newest last (each worker keeps at most 4)


def decode_workers() -> int:
    """The decode workers this server runs: LOPA_DECODE_WORKERS (0..MAX_WORKERS); unset, one per usable core (at
    most 4) on a CPU Hugging Face Space with two cores or more (SPACE_ID set: its visitors' pages run on their own
    machines), else 0. Each worker is an interpreter of its own with torch and a copy of the model (about
    0.5 GB). Where the pages share the server's cores (a laptop serving its own page), two decodes at once both
    end late where one after the other the first ends early; where they do not (API callers here, a Space's
    visitors), the workers made a Run faster and two at once end sooner (docs/deployment.md, "Crowd")."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) > MAX_WORKERS:
            raise SystemExit(f"{WORKERS_ENV} must be a whole number of worker processes in 0..{MAX_WORKERS}, "
                             f"got {text[:40]!r}")
        return int(text)
    from .gpu import zero_gpu
    if not os.environ.get("SPACE_ID") or zero_gpu():
        return 0
    import torch
    if torch.cuda.is_available():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cores, 4) if cores >= 2 else 0


def server_threads() -> int:
    """The torch threads the server decodes on: LOPA_TORCH_THREADS, default 1. A server's CPU is shared (other
    visitors' requests, a study beside a Run, the pages themselves where they run on the same machine), and
    torch threads that wait for each other by spinning lose most when a core is taken: the figures are
    `python scripts/bench_threads.py`'s (docs/deployment.md, "Threads")."""
    text = os.environ.get("LOPA_TORCH_THREADS", "1")
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise SystemExit(f"LOPA_TORCH_THREADS must be a whole number of threads in 1..256, got {text[:40]!r}")
    return int(text)


class WorkerGone(Exception):
    """A worker died or did not answer within its bound."""


# -- the server's side ------------------------------------------------------------------------------------
class _Worker:
    """One worker process (app/serving/decode_worker.py, a fresh interpreter) and the server's end of its socket."""

    def __init__(self, warm: str | None, threads: int):
        ours, theirs = socket.socketpair()
        # The folder that holds the app's top package ("app" in a checkout, "lopa_explorer" from the wheel), however
        # we started: the worker imports this room by the same name.
        root = str(Path(__file__).resolve().parents[__package__.count(".") + 1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", f"{__package__}.decode_worker", str(theirs.fileno()), warm or "", str(threads)],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.forget: set | None = set()      # run ids to forget before its next job (None: everything)

    def alive(self) -> bool:
        return self.process.poll() is None

    def receive(self, bound_s: float):
        """The worker's next message, or WorkerGone when it dies or says nothing for `bound_s` seconds."""
        waited = 0.0
        while not self.conn.poll(POLL_S):
            waited += POLL_S
            if not self.alive():
                raise WorkerGone(f"it exited with code {self.process.returncode}")
            if waited >= bound_s:
                raise WorkerGone(f"it did not answer within {bound_s:.0f} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError) as err:
            raise WorkerGone(f"its pipe closed ({type(err).__name__})") from None

    def send(self, message) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError) as err:
            raise WorkerGone(f"its pipe closed ({type(err).__name__})") from None

    def stop(self) -> None:
        try:
            self.conn.send(("exit",))
        except OSError:
            pass
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(2)
        self.conn.close()


class DecodePool:
    """The server's decode workers (see the module's docstring)."""

    def __init__(self, size: int):
        self.size = size
        self._warm: str | None = None
        self._threads = 1
        self._started = False
        self._free: list[_Worker] = []        # idle and ready
        self._ready: list[_Worker] = []       # ready, idle or busy
        self._all: list[_Worker] = []
        self._changed = threading.Condition()
        self._homes: OrderedDict[str, _Worker] = OrderedDict()   # run id -> the worker that keeps its decode
        self.replaced = 0                     # workers replaced after dying or hanging (tests, the log)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, warm: str | Path | None = None, threads: int = 1) -> None:
        """Start the workers in the background, each warming the model in folder `warm`; until one is ready
        every decode runs in this process. Does nothing when size is 0 or it has started already."""
        with self._changed:
            if self.size <= 0 or self._started:
                return
            self._started, self._warm, self._threads = True, str(warm) if warm else None, threads
        for _ in range(self.size):
            self._launch()
        atexit.register(self.close)

    def _launch(self) -> None:
        """One more worker, joining the idle ones once it says it is ready (in a thread: never a caller's wait)."""
        def run():
            try:
                worker = _Worker(self._warm, self._threads)
            except OSError:
                return
            with self._changed:
                self._all.append(worker)
            try:
                message = worker.receive(START_S)
                ready = message[0] == "ready"
            except WorkerGone:
                ready = False
            with self._changed:
                if ready and worker in self._all:
                    self._free.append(worker)
                    self._ready.append(worker)
                    self._changed.notify_all()
                    return
            self._drop(worker, replace=False)
        threading.Thread(target=run, name="lopa-decode-worker-start", daemon=True).start()

    def close(self) -> None:
        """Stop every worker (at exit; tests)."""
        with self._changed:
            workers, self._all, self._free, self._ready, self._started = list(self._all), [], [], [], False
            self._homes.clear()
        for worker in workers:
            worker.stop()

    def started(self) -> bool:
        return self._started

    def ready(self) -> int:
        """How many workers are idle and ready right now."""
        with self._changed:
            return len(self._free)

    def pids(self) -> list[int]:
        with self._changed:
            return [w.process.pid for w in self._all]

    # -- which jobs, which worker ----------------------------------------------------------------
    def serves(self, jobs: list[dict]) -> bool:
        """Whether these jobs may run in a worker: the single-process backend over small models."""
        from .models import safetensors_param_count
        return (self._started and all(int(job.get("workers", 1)) == 1 for job in jobs)
                and all(0 < _params(job["model"], safetensors_param_count) <= POOL_MAX_PARAMS for job in jobs))

    def take(self, jobs: list[dict], bound_s: float = TAKE_S):
        """An idle worker for `jobs` (the one that keeps the decode they continue or fork, where it is idle),
        or None (not started, none ready yet, not for these jobs, none idle within bound_s): they run in this
        process."""
        if not self.serves(jobs):
            return None
        runs = [_continues(job) for job in jobs]
        with self._changed:
            dead = [w for w in self._free if not w.alive()]
        for worker in dead:                       # died while idle: replaced, never handed out
            self._drop(worker)
        with self._changed:
            if not self._changed.wait_for(lambda: self._free or not self._ready, timeout=bound_s):
                return None
            if not self._free:
                return None
            homes = [self._homes.get(run) for run in runs if run]
            worker = next((w for w in homes if w in self._free), self._free[-1])
            self._free.remove(worker)
            return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._changed:
            if worker in self._all:
                self._free.append(worker)
                self._changed.notify_all()

    def _drop(self, worker: _Worker, replace: bool = True) -> None:
        """Forget a dead or hung worker, stop what is left of it and start another in its place."""
        with self._changed:
            known = worker in self._all
            if known:
                self._all.remove(worker)
            for group in (self._free, self._ready):
                if worker in group:
                    group.remove(worker)
            for run in [r for r, w in self._homes.items() if w is worker]:
                del self._homes[run]
            started = self._started
        worker.stop()
        if known and replace and started:
            self.replaced += 1
            self._launch()

    def _home(self, run_id: str, worker: _Worker) -> None:
        with self._changed:
            self._homes[run_id] = worker
            self._homes.move_to_end(run_id)
            while len(self._homes) > MAX_HOMES:
                self._homes.popitem(last=False)

    # -- decoding ------------------------------------------------------------------------------------
    def stream(self, worker: _Worker, jobs: list[dict]):
        """decode_rounds(jobs) in `worker` (from take()): yields each pass's chunks, the worker running up to AHEAD
        passes ahead of the caller. Closing it stops the decode, which the worker keeps paused (up to AHEAD
        rounds past the caller's last: continuing it then replays the trace, the same tokens). A worker that dies
        or hangs ends every job with an error chunk (kind "worker") and is replaced; an exception in the worker
        is raised here as a RuntimeError, as decode_rounds would raise it in this process."""
        done = False
        try:
            with self._changed:
                forget, worker.forget = worker.forget, set()
            if forget is None or forget:
                worker.send(("forget", None if forget is None else sorted(forget)))
            worker.send(("jobs", jobs, AHEAD))
            while True:
                message = worker.receive(PASS_S)
                if message[0] == "end":
                    done = True
                    return
                if message[0] == "raise":
                    done = True
                    raise RuntimeError(message[1])
                for chunk in message[1]:
                    run_id = chunk.get("header", {}).get("run_id")
                    if run_id:
                        self._home(run_id, worker)
                yield message[1]
                worker.send(("next",))
        except WorkerGone as gone:
            done = True
            self._drop(worker)
            worker = None
            yield [{"job": i, "error": f"the decode worker stopped ({gone}); this decode ended with it, and a "
                    "new worker is starting: press Run again", "kind": "worker"} for i in range(len(jobs))]
        finally:
            if worker is not None and not done:
                try:                              # stop it, and read past the passes it ran ahead
                    worker.send(("close",))
                    while worker.receive(PASS_S)[0] != "closed":
                        pass
                except WorkerGone:
                    self._drop(worker)
                    worker = None
            if worker is not None:
                self._give_back(worker)

    def forget(self, run_ids) -> None:
        """The workers drop what they keep of `run_ids` (None: everything): an idle worker now, a busy one
        before its next job."""
        ids = None if run_ids is None else {r for r in run_ids if r}
        with self._changed:
            for run in ids if ids is not None else list(self._homes):
                self._homes.pop(run, None)
            for worker in self._all:
                if worker in self._free:
                    try:
                        worker.send(("forget", sorted(ids) if ids is not None else None))
                        continue
                    except WorkerGone:
                        pass          # found dead at its next take
                if ids is None or worker.forget is None:
                    worker.forget = None
                else:
                    worker.forget |= ids


def _continues(job: dict) -> str | None:
    """The run whose decode a job continues (or forks), if any: its worker may still keep it."""
    resume = job.get("resume") or {}
    return resume.get("run_id") or (resume.get("trace") or {}).get("run_id")


_PARAMS: OrderedDict[tuple, int] = OrderedDict()


def _params(folder, count) -> int:
    """The parameters in a model folder's safetensors headers, remembered by (folder, the files' times)."""
    path = Path(folder)
    try:
        stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in path.glob("*.safetensors")))
    except OSError:
        return 0
    key = (str(path), stamp)
    if key not in _PARAMS:
        _PARAMS[key] = count(path)
        while len(_PARAMS) > 64:
            _PARAMS.popitem(last=False)
    return _PARAMS[key]


POOL = DecodePool(decode_workers())
