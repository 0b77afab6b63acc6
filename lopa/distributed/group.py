"""A persistent branch-parallel group for long-lived callers (the app, benchmarks, tests).

    from lopa.distributed.group import BPGroup
    group = BPGroup.start("assets/models/open-gsm-dllm", workers=3, timeout_s=60)   # R = 3 ranks
    decoder = group.decoder(settings)          # a lopa Decoder: .stream(prompt) / .run(prompt) as usual
    for record in decoder.stream("Tom has 3 apples ..."):
        ...                                    # record.branch_rank, record.extra["gather_s"], ...
    group.close()                              # or `with BPGroup.start(...) as group:`

- `workers` is the world size R: R rank processes, each with a model replica; rank 0 drives the
  others (lopa.distributed.parallel). The caller holds only the tokenizer and spec; its Decoder talks to rank 0
  through a RemoteExecutor (a socket pair, pickled verbs), so a crashed or hung group can never
  leave the caller's own process in a broken torch.distributed state.
- Reused across runs and settings. One run at a time: calls are serialised by a lock (Gradio worker
  threads may share a group), and starting a run supersedes the previous one, whose next round
  then raises a RuntimeError instead of reading the new run's caches.
- Faults: any failure (a rank dies, a collective times out after `timeout_s`, no reply within
  2 x timeout_s) raises RuntimeError naming the rank and the cause, kills every rank process and
  leaves the group stopped. The next `decoder()` / `executor()` call starts fresh ranks; so does a
  rank that died between runs (`last_failure` says why).
- Start-up: ranks are forked from one launcher process per caller process, which imports torch,
  transformers and the model's code once (~10 s on a small CPU) and idles until exit
  (`stop_launcher()` ends it earlier). Forking from it rather than from the caller is safe with
  threads in the caller, never re-runs the caller's __main__ (multiprocessing's spawn would
  re-import an app.py), and makes a (re)start take about a second plus the model load.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from lopa.distributed.ranks import Launcher, kill_pid, recv, send, stop_launcher
from lopa.engine import Decoder
from lopa.forward import Verified
from lopa.settings import DecodeSettings

__all__ = ["BPGroup", "RemoteExecutor", "stop_launcher"]
# How a rank's log ends when it failed only because a peer did (gloo's wording): a consequence.
_PEER_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Timed out", "timed out")


class RemoteExecutor:
    """The Executor protocol, forwarded to rank 0 of a BPGroup (where a BPExecutor does the work);
    the model replicas live in the rank processes."""

    def __init__(self, group: BPGroup, settings: DecodeSettings):
        self.group, self.spec, self.settings, self._extra = group, group.spec, settings, {}

    def start(self, prompt_ids: torch.Tensor) -> None:
        self.group._call(("start", self.settings.to_dict(), torch.as_tensor(prompt_ids).tolist()))
        self.group._owner = self              # the ranks' caches now belong to this run

    def verify(self, branches) -> Verified:
        self._check_owner()
        t0 = time.perf_counter()
        verified = self.group._call(("verify", list(branches)))
        verified.extra["ipc_s"] = time.perf_counter() - t0 - verified.seconds
        self._extra = verified.extra          # commit() adds its timings before the engine records them
        return verified

    def commit(self, winner: int, n_positions: int) -> None:
        self._check_owner()
        self._extra.update(self.group._call(("commit", winner, n_positions)))

    def snapshot(self) -> None:
        return None                           # the caches live in the rank processes: a fork replays instead

    def _check_owner(self) -> None:
        if self.group._owner is not self:
            raise RuntimeError("another run started on this branch-parallel group since this one did (or the group "
                               "restarted): a group decodes one prompt at a time")


class BPGroup:
    """R rank processes serving branch-parallel rounds; see the module docstring.
    device: "cpu" (gloo), "cuda" (NCCL; rank r on cuda:r) or "npu" (HCCL, needs torch_npu).
    threads: torch intra-op threads per rank. load_options: passed to lopa.models.load in every
    rank (trust_remote_code, lora, base_path, lora_path, allow_download)."""

    def __init__(self, model_dir=None, workers: int = 2, timeout_s: float = 60.0, start_timeout_s: float = 300.0,
                 device: str = "cpu", threads: int = 1, **load_options):
        from lopa.distributed.parallel import dist_backend
        from lopa.models.loading import DEFAULT_MODEL
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers (ranks) must be a positive integer, got {workers!r}")
        if timeout_s <= 0 or start_timeout_s <= 0:
            raise ValueError("timeouts must be positive seconds")
        dist_backend(torch.device(device).type)                 # a clear error now, not in R children
        self.model_dir = str(model_dir or DEFAULT_MODEL)
        self.world, self.timeout_s, self.start_timeout_s = workers, float(timeout_s), float(start_timeout_s)
        self.device, self.threads, self.load_options = device, threads, load_options
        self.spec = self.tokenizer = None    # as rank 0 loaded them (lopa.models.load), once started
        self.pids: dict[int, int] = {}
        self.description = self.last_failure = ""
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self._dir: str | None = None
        self._closed = False
        self._owner: RemoteExecutor | None = None

    @classmethod
    def start(cls, model_dir=None, workers: int = 2, **options) -> BPGroup:
        group = cls(model_dir, workers, **options)
        with group._lock:
            group._launch()
        return group

    # -- public API ----------------------------------------------------------------------------
    def executor(self, settings: DecodeSettings) -> RemoteExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("this BPGroup was closed; start a new one")
            if self._conn is not None and self._dead():        # a rank died while idle: no run to fail
                self.last_failure = self._dead()
                self._teardown(grace_s=0.0)
            if self._conn is None:
                self._launch()
        return RemoteExecutor(self, settings)

    def decoder(self, settings: DecodeSettings, tokenizer=None) -> Decoder:
        executor = self.executor(settings)            # first: it (re)starts the ranks, which set spec
        return Decoder(None, self.spec, settings, tokenizer or self.tokenizer, executor=executor)

    def digests(self) -> list[list[float]]:
        """Every rank's cache checksum after the last run (lopa.distributed.parallel.kv_digest), rank order."""
        return self._call(("digest",))

    @property
    def running(self) -> bool:
        return self._conn is not None

    def close(self) -> None:
        """Stop the rank processes (politely, by force after 10 s). Idempotent."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                try:
                    send(self._conn, ("close",))
                except OSError:
                    pass
                self._teardown(grace_s=10.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- lifecycle -------------------------------------------------------------------------------
    def _launch(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="lopa-bp-")
        launcher = Launcher.get(self.start_timeout_s)
        mine, theirs = socket.socketpair()
        self._conn = Connection(mine.detach())
        try:
            for rank in range(self.world):
                cfg = {"rank": rank, "world": self.world, "model_dir": self.model_dir, "device": self.device,
                       "threads": self.threads, "load": self.load_options, "timeout_s": self.timeout_s, "start_timeout_s": self.start_timeout_s,
                       "store": os.path.join(self._dir, "store"), "log": self._path(rank, "log"),
                       "exit_file": self._path(rank, "exit")}
                self.pids[rank] = launcher.fork(cfg, theirs.fileno() if rank == 0 else None)
            theirs.close()
            self.description, self.spec, self.tokenizer = self._wait_reply(self.start_timeout_s, "start")
        except BaseException as err:
            theirs.close()
            self._fail(err)

    def _call(self, message: tuple):
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the branch-parallel group is not running (closed or failed); "
                                   "ask it for a new executor or decoder to restart it")
            try:
                send(self._conn, message)
            except OSError as err:
                self._fail(err)
            return self._wait_reply(2 * self.timeout_s, message[0])

    def _wait_reply(self, timeout_s: float, what: str):
        """Rank 0's answer, watching every rank's liveness meanwhile; any failure tears down."""
        deadline = time.monotonic() + timeout_s
        try:
            while not self._conn.poll(0.05):
                if self._dead():
                    raise RuntimeError(self._dead())
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer to {what!r} from rank 0 within {timeout_s:.0f} s")
            status, value = recv(self._conn)
        except (EOFError, OSError, RuntimeError, TimeoutError) as err:
            self._fail(err)
        if status != "ok":
            self._fail(RuntimeError(value))
        return value

    def _ended(self) -> dict[int, str]:
        """{rank: 'was killed by SIGKILL' | 'exited with code 1'} for the ranks that ended (the
        launcher writes a rank's exit file when it reaps it)."""
        return {r: Path(self._path(r, "exit")).read_text() for r in self.pids if os.path.exists(self._path(r, "exit"))}

    def _dead(self) -> str:
        ended = [f"rank {r} {text}" for r, text in self._ended().items()]
        return "; ".join(ended + ([] if Launcher.alive() else ["the launcher process died"]))

    def _fail(self, err: BaseException):
        """Name the cause, stop every rank, raise. A rank that died of a signal or of its own error is
        a cause; ranks whose collectives then broke are consequences; when only consequences ended,
        the ranks still alive are the ones that stopped answering (hung)."""
        deadline = time.monotonic() + 1.0           # give the launcher time to reap the ending ranks
        while time.monotonic() < deadline and not self._ended():
            time.sleep(0.05)
        time.sleep(0.2)
        ended, causes, logs = self._ended(), [], ""
        for r, text in ended.items():
            tail = self._tail(r)
            if "killed by" in text or not any(m in tail for m in _PEER_FAILURES):
                causes.append(f"rank {r} (pid {self.pids[r]}) {text}")
                logs += "" if "killed by" in text else f"\n--- rank {r} log, last lines ---\n{tail}"
        if not causes and ended:
            causes = [f"rank {r} (pid {self.pids[r]}) stopped answering: its peers timed out waiting for it"
                      for r in self.pids if r not in ended]
        causes += [] if Launcher.alive() else ["the launcher process died"]
        detail = re.sub(r"\[[^\]]*\.(cc|cpp|h):\d+\] ", "", f"{type(err).__name__}: {err}")   # gloo's noise
        detail = detail.split(". This is typically")[0]
        self._teardown(grace_s=0.0)
        raise RuntimeError(f"branch-parallel group ({self.world} ranks) failed: {'; '.join(causes) or detail}"
                           f"{f' ({detail})' if causes else ''}. All ranks were stopped; the next run starts "
                           f"fresh ones.{logs}") from None

    def _teardown(self, grace_s: float) -> None:
        """Wait up to grace_s for the ranks to exit, SIGKILL the rest, wait (5 s at most) until the
        launcher has reaped them all, so that nothing is left running."""
        for wait_s, kill in ((grace_s, True), (5.0, False)):
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and len(self._ended()) < len(self.pids) and Launcher.alive():
                time.sleep(0.02)
            for r in set(self.pids) - set(self._ended()) if kill else ():
                kill_pid(self.pids[r])
        if self._conn is not None:
            self._conn.close()
        self._conn, self.pids, self._owner = None, {}, None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _path(self, rank: int, kind: str) -> str:
        return os.path.join(self._dir or "", f"rank{rank}.{kind}")

    def _tail(self, rank: int, lines: int = 4) -> str:
        try:
            return "\n".join(Path(self._path(rank, "log")).read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

