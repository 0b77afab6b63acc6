"""A persistent branch-parallel group for long-lived callers (the app, benchmarks, tests).

    from lopa.bp_group import BPGroup
    group = BPGroup.start("assets/models/tiny-gsm-dllm", workers=3, timeout_s=60)   # W = 3 ranks
    decoder = group.decoder(settings)          # a lopa Decoder: .stream(prompt) / .run(prompt) as usual
    for record in decoder.stream("Tom has 3 apples ..."):
        ...                                    # record.branch_rank, record.extra["gather_s"], ...
    group.close()                              # or `with BPGroup.start(...) as group:`

- `workers` is the world size W: W rank processes, each with a model replica; rank 0 drives the
  others (lopa.parallel). The caller holds only the tokenizer and spec; its Decoder talks to rank 0
  through a RemoteExecutor (a socket pair, pickled verbs), so a crashed or hung group can never
  leave the caller's own process in a broken torch.distributed state.
- Reused across runs and settings; one run at a time (calls are serialised by a lock, so it is safe
  to use from a Gradio worker thread).
- Faults: any failure (a rank dies, a collective times out after `timeout_s`, no reply within
  2 x timeout_s) raises RuntimeError naming the rank and cause, kills every rank process and
  leaves the group stopped. The next `decoder()` / `executor()` call starts fresh ranks.
- Start-up: ranks are forked from one launcher process per caller process, which imports torch and
  transformers once (~10 s on a small CPU) and stays idle until exit (`stop_launcher()` ends it
  earlier). Forking from it, not from the caller, is safe with threads in the caller, never re-runs
  the caller's __main__ (multiprocessing's spawn would re-import an app.py) and makes a restart take
  about a second plus the model load.
"""

from __future__ import annotations

import atexit
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path

import torch

from lopa.engine import Decoder
from lopa.forward import Executor, Verified
from lopa.settings import DecodeSettings

ROOT = Path(__file__).resolve().parent.parent


class RemoteExecutor(Executor):
    """The executor verbs, forwarded to rank 0 of a BPGroup (where a BPExecutor does the work).
    No model here: the replicas live in the rank processes."""

    def __init__(self, group: "BPGroup", settings: DecodeSettings):   # noqa: super().__init__ needs a model
        self.group, self.spec, self.settings = group, group.spec, settings
        self._extra: dict = {}

    def start(self, prompt_ids: torch.Tensor) -> None:
        self.group._call(("start", self.settings.to_dict(), torch.as_tensor(prompt_ids).tolist()))

    def verify(self, branches) -> Verified:
        t0 = time.perf_counter()
        verified = self.group._call(("verify", list(branches)))
        verified.extra["ipc_s"] = time.perf_counter() - t0 - verified.seconds
        self._extra = verified.extra          # commit() adds its timings before the engine records
        return verified

    def commit(self, winner: int, n_positions: int) -> None:
        self._extra.update(self.group._call(("commit", winner, n_positions)))


class BPGroup:
    """W rank processes serving branch-parallel rounds; see the module docstring."""

    def __init__(self, model_dir=None, workers: int = 2, timeout_s: float = 60.0, start_timeout_s: float = 300.0,
                 device: str = "cpu", threads: int = 1):
        from lopa.loading import DEFAULT_MODEL, load_tokenizer, spec_from_pretrained
        from lopa.parallel import dist_backend
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers (ranks) must be a positive integer, got {workers!r}")
        if timeout_s <= 0 or start_timeout_s <= 0:
            raise ValueError("timeouts must be positive seconds")
        dist_backend(torch.device(device).type)                 # a clear error now, not in W children
        self.model_dir = Path(model_dir) if model_dir else DEFAULT_MODEL
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(f"no model at {self.model_dir}: expected a Hugging Face directory")
        from transformers import AutoConfig
        config = AutoConfig.from_pretrained(self.model_dir, local_files_only=True)
        has_tok = any((self.model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
        self.tokenizer = load_tokenizer(self.model_dir) if has_tok else None
        self.spec = spec_from_pretrained(config, self.tokenizer, self.model_dir.name)
        self.world, self.timeout_s, self.start_timeout_s = workers, float(timeout_s), float(start_timeout_s)
        self.device, self.threads = device, threads
        self.pids: dict[int, int] = {}
        self.description = ""
        self.last_failure = ""            # why the last group ended unasked (a rank died while idle)
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self._dir: str | None = None
        self._closed = False

    @classmethod
    def start(cls, model_dir=None, workers: int = 2, **options) -> "BPGroup":
        group = cls(model_dir, workers, **options)
        with group._lock:
            group._launch()
        return group

    # -- public API ----------------------------------------------------------------------------
    def executor(self, settings: DecodeSettings) -> RemoteExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("this BPGroup was closed; start a new one")
            if self._conn is not None and self._dead():    # a rank died while idle: no run to fail
                self.last_failure = self._dead()
                self._teardown(grace_s=0.0)
            if self._conn is None:
                self._launch()
        return RemoteExecutor(self, settings)

    def decoder(self, settings: DecodeSettings, tokenizer=None) -> Decoder:
        return Decoder(None, self.spec, settings, tokenizer or self.tokenizer, executor=self.executor(settings))

    def digests(self) -> list[list[float]]:
        """Every rank's cache checksum after the last run (lopa.parallel.kv_digest)."""
        return self._call(("digest",))

    @property
    def running(self) -> bool:
        return self._conn is not None

    def close(self) -> None:
        """Stop the rank processes (politely, then by force after a few seconds). Idempotent."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                try:
                    _send(self._conn, ("close",))
                except OSError:
                    pass
                self._teardown(grace_s=10.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_conn", None) is not None:
            try:
                self._teardown(grace_s=0.0)
            except Exception:
                pass

    # -- lifecycle -------------------------------------------------------------------------------
    def _launch(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="lopa-bp-")
        launcher = _launcher(self.start_timeout_s)
        mine, theirs = socket.socketpair()
        self._conn = Connection(mine.detach())
        try:
            for rank in range(self.world):
                cfg = {"rank": rank, "world": self.world, "model_dir": str(self.model_dir), "device": self.device,
                       "threads": self.threads, "timeout_s": self.timeout_s, "start_timeout_s": self.start_timeout_s,
                       "store": os.path.join(self._dir, "store"), "log": self._path(rank, "log"),
                       "exit_file": self._path(rank, "exit")}
                self.pids[rank] = launcher.fork(cfg, theirs.fileno() if rank == 0 else None)
            theirs.close()
            self.description = self._wait_reply(self.start_timeout_s, "start")
        except BaseException as err:
            theirs.close()
            self._fail(err)

    def _call(self, message: tuple):
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the branch-parallel group is not running (closed or failed); "
                                   "ask it for a new executor or decoder to restart it")
            try:
                _send(self._conn, message)
            except OSError as err:
                self._fail(err)
            return self._wait_reply(2 * self.timeout_s, message[0])

    def _wait_reply(self, timeout_s: float, what: str):
        """Rank 0's answer, watching every rank's liveness meanwhile; any failure tears down."""
        deadline = time.monotonic() + timeout_s
        try:
            while not self._conn.poll(0.05):
                dead = self._dead()
                if dead:
                    raise RuntimeError(dead)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer to {what!r} from rank 0 within {timeout_s:.0f} s")
            status, value = _recv(self._conn)
        except (EOFError, OSError, RuntimeError, TimeoutError) as err:
            self._fail(err)
        if status != "ok":
            self._fail(RuntimeError(value))
        return value

    def _ended(self) -> dict[int, str]:
        """{rank: 'was killed by SIGKILL' / 'exited with code 1'} for rank processes that have ended."""
        return {r: Path(self._path(r, "exit")).read_text() for r in self.pids if os.path.exists(self._path(r, "exit"))}

    def _dead(self) -> str:
        ended = [f"rank {r} {text}" for r, text in self._ended().items()]
        return "; ".join(ended + ([] if _launcher_alive() else ["the launcher process died"]))

    def _fail(self, err: BaseException):
        """Name the cause, stop every rank, raise. A rank that died of a signal or of its own error is
        a cause; ranks whose collectives then broke are consequences; when only consequences ended,
        the ranks still alive are the ones that stopped answering (hung)."""
        deadline = time.monotonic() + 1.0          # let the launcher reap the ranks that are ending
        while time.monotonic() < deadline and not self._ended():
            time.sleep(0.05)
        time.sleep(0.2)
        ended = self._ended()
        causes, logs = [], ""
        for r, text in ended.items():
            tail = self._tail(r)
            if "killed by" in text or not any(m in tail for m in _COLLECTIVE_ERRORS):
                causes.append(f"rank {r} (pid {self.pids[r]}) {text}")
                logs += "" if "killed by" in text else f"\n--- rank {r} log, last lines ---\n{tail}"
        if not causes and ended:
            causes = [f"rank {r} (pid {self.pids[r]}) stopped answering: its peers timed out waiting for it"
                      for r in self.pids if r not in ended]
        if not _launcher_alive():
            causes.append("the launcher process died")
        detail = _short(f"{type(err).__name__}: {err}")
        self._teardown(grace_s=0.0)
        summary = "; ".join(causes) or detail
        raise RuntimeError(f"branch-parallel group ({self.world} ranks) failed: {summary}"
                           f"{f' ({detail})' if causes else ''}. All ranks were stopped; the next run "
                           f"starts fresh ones.{logs}") from None

    def _teardown(self, grace_s: float) -> None:
        """Wait up to grace_s for the ranks to exit, SIGKILL the rest, wait until all are reaped."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not self._all_exited():
            time.sleep(0.05)
        for r, pid in self.pids.items():
            if not os.path.exists(self._path(r, "exit")):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not self._all_exited() and _launcher_alive():
            time.sleep(0.02)
        if self._conn is not None:
            self._conn.close()
        self._conn, self.pids = None, {}
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _all_exited(self) -> bool:
        return all(os.path.exists(self._path(r, "exit")) for r in self.pids)

    def _path(self, rank: int, kind: str) -> str:
        return os.path.join(self._dir or "", f"rank{rank}.{kind}")

    def _tail(self, rank: int, lines: int = 4) -> str:
        try:
            return "\n".join(Path(self._path(rank, "log")).read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


# What a rank's log ends with when it failed only because a peer did (gloo's wording).
_COLLECTIVE_ERRORS = ("Connection closed by peer", "Connection reset by peer", "Timed out", "timed out")


def _short(message: str) -> str:
    """gloo's errors without source locations and boilerplate."""
    message = re.sub(r"\[[^\]]*\.(cc|cpp|h):\d+\] ", "", message)
    return message.split(". This is typically")[0].strip()


# -- the rank processes ---------------------------------------------------------------------------
def _rank_main(cfg: dict, conn: Connection | None) -> int:
    from lopa.loading import load_model
    from lopa.parallel import Comm, serve

    torch.set_num_threads(cfg["threads"])
    rank, device = cfg["rank"], torch.device(cfg["device"])
    if device.type != "cpu":
        device = torch.device(device.type, rank)           # one accelerator per rank on this host
    loaded = load_model(cfg["model_dir"], device=str(device))
    comm = Comm.init(device, cfg["timeout_s"], cfg["start_timeout_s"], init_method=f"file://{cfg['store']}",
                     rank=rank, world=cfg["world"])
    if rank == 0:
        _drive(conn, loaded, comm, cfg["timeout_s"])
    else:
        serve(loaded.model, loaded.spec, comm)
    comm.close()                 # only reached on a clean stop; on errors the process just exits
    return 0


def _drive(conn: Connection, loaded, comm, timeout_s: float) -> None:
    """Rank 0 of a BPGroup: run the caller's verbs on a BPExecutor; ping the ranks while idle so
    that their waits (bounded by timeout_s) never expire between runs."""
    from lopa.parallel import BPExecutor, ping

    _send(conn, ("ok", f"{loaded.describe()} x {comm.world} ranks"))
    executor = None
    while True:
        if not conn.poll(timeout_s / 4):
            ping(comm)
            continue
        try:
            verb, *args = _recv(conn)
        except EOFError:              # the caller is gone
            verb = "close"
        try:
            if verb == "close":
                comm.send_control(("stop",))
                return
            if verb == "start":
                settings = DecodeSettings.from_dict(args[0])
                executor = BPExecutor(loaded.model, loaded.spec, settings, comm)
                executor.start(torch.tensor(args[1], dtype=torch.long))
                reply = None
            elif verb == "verify":
                reply = executor.verify(args[0])
            elif verb == "commit":
                executor.commit(*args)
                keys = ("commit_s", "commit_bytes", "commit_broadcast", "control_bytes", "bytes")
                reply = {k: executor._extra[k] for k in keys}
            elif verb == "digest":
                reply = executor.digests() if executor else []
            else:
                raise RuntimeError(f"unknown verb {verb!r}")
        except Exception as err:      # a failed collective leaves the group unusable: report, exit
            _send(conn, ("error", f"rank 0: {type(err).__name__}: {err}"))
            raise
        _send(conn, ("ok", reply))


# Plain pickle, not Connection.send: torch registers shared-memory reductions for tensors with
# multiprocessing's pickler, and these messages are a few KB that should simply be copied.
def _send(conn: Connection, obj) -> None:
    conn.send_bytes(pickle.dumps(obj))


def _recv(conn: Connection):
    return pickle.loads(conn.recv_bytes())


# -- the launcher ("zygote") ----------------------------------------------------------------------
_LAUNCHER = None
_LAUNCHER_LOCK = threading.Lock()


class _Launcher:
    """A helper process that imported torch + transformers once and forks rank processes on request.
    It reaps them and writes each one's exit cause to its `exit_file`."""

    def __init__(self, timeout_s: float):
        mine, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        env.setdefault("OMP_NUM_THREADS", "1")        # threads are set per group (torch.set_num_threads)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")   # no BLAS threads in a process that forks
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")    # the ranks all live on this host
        self.log = tempfile.NamedTemporaryFile(prefix="lopa-bp-launcher-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-m", "lopa.bp_group", "--launcher", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, env=env, start_new_session=True)
        theirs.close()
        self.conn = Connection(mine.detach())
        self._expect("ready", timeout_s)

    def fork(self, cfg: dict, rank0_fd: int | None) -> int:
        self.conn.send(("fork", cfg))
        if rank0_fd is not None:
            send_handle(self.conn, rank0_fd, self.proc.pid)
        return self._expect("pid", 30.0)

    def _expect(self, what: str, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while not self.conn.poll(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the branch-parallel launcher did not answer {what!r} "
                                   f"(see {self.log.name})")
        kind, value = self.conn.recv()
        assert kind == what, (kind, what)
        return value

    def close(self) -> None:
        self.conn.close()                             # EOF: the launcher kills its children and exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _launcher(timeout_s: float) -> _Launcher:
    global _LAUNCHER
    with _LAUNCHER_LOCK:
        if _LAUNCHER is None or _LAUNCHER.proc.poll() is not None:
            _LAUNCHER = _Launcher(timeout_s)
        return _LAUNCHER


def _launcher_alive() -> bool:
    return _LAUNCHER is not None and _LAUNCHER.proc.poll() is None


@atexit.register
def stop_launcher() -> None:
    """End the launcher (and any rank it still has). Called at interpreter exit."""
    global _LAUNCHER
    with _LAUNCHER_LOCK:
        if _LAUNCHER is not None:
            _LAUNCHER.close()
            _LAUNCHER = None


def _launcher_main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the caller's to handle
    import transformers  # noqa: F401  (the slow imports, done once and shared by every fork)
    from transformers import AutoModelForCausalLM  # noqa: F401
    import lopa.loading  # noqa: F401
    import lopa.parallel  # noqa: F401

    conn = Connection(fd)
    conn.send(("ready", os.getpid()))
    children: dict[int, str] = {}
    while True:
        _reap(children)
        try:
            if not conn.poll(0.05 if children else 1.0):
                continue
            verb, cfg = conn.recv()
        except (EOFError, OSError):
            break
        rank0_fd = recv_handle(conn) if cfg["rank"] == 0 else None
        _preload(cfg["model_dir"])
        pid = os.fork()
        if pid == 0:
            _child(cfg, rank0_fd, fd)
        if rank0_fd is not None:
            os.close(rank0_fd)                        # only rank 0 keeps its end of the caller's socket
        children[pid] = cfg["exit_file"]
        conn.send(("pid", pid))
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while children:
        _reap(children, block=True)


_PRELOADED: set[str] = set()


def _preload(model_dir: str) -> None:
    """Import the model's modeling code here, once, before forking: it is the slowest part of a
    rank's start (~7 s for Qwen2 on a small CPU). Best effort; the rank reports real errors."""
    if model_dir in _PRELOADED:
        return
    _PRELOADED.add(model_dir)
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
        MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model_dir, local_files_only=True))]
    except Exception:
        pass


def _reap(children: dict[int, str], block: bool = False) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            text = f"was killed by {signal.Signals(sig).name}" if sig else f"exited with code {os.WEXITSTATUS(status)}"
            path = children.pop(pid)
            try:                                      # the group may have removed its folder already
                with open(path + ".tmp", "w") as f:
                    f.write(text)
                os.replace(path + ".tmp", path)
            except OSError:
                pass


def _child(cfg: dict, rank0_fd: int | None, launcher_fd: int) -> None:
    """A forked rank: own log, own stdio, never returns."""
    code = 1
    try:
        os.close(launcher_fd)
        log = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = _rank_main(cfg, Connection(rank0_fd) if rank0_fd is not None else None)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--launcher":
        _launcher_main(int(sys.argv[2]))
    else:
        sys.exit("usage: python -m lopa.bp_group --launcher FD (started by BPGroup; not for direct use)")
