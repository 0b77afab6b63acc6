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
# How a rank's log ends when it failed only because a peer did (gloo's wording): a consequence.
_PEER_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Timed out", "timed out")


class RemoteExecutor(Executor):
    """The executor verbs, forwarded to rank 0 of a BPGroup (where a BPExecutor does the work).
    Executor.__init__ is skipped on purpose: the model replicas live in the rank processes."""

    def __init__(self, group: "BPGroup", settings: DecodeSettings):
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

    def _check_owner(self) -> None:
        if self.group._owner is not self:
            raise RuntimeError("another run started on this branch-parallel group since this one did (or the group "
                               "restarted): a group decodes one prompt at a time")


class BPGroup:
    """W rank processes serving branch-parallel rounds; see the module docstring.
    device: "cpu" (gloo), "cuda" (NCCL; rank r on cuda:r) or "npu" (HCCL, needs torch_npu).
    threads: torch intra-op threads per rank. load_options: passed to lopa.checkpoints.load in every
    rank (trust_remote_code, lora, base_path, lora_path, allow_download)."""

    def __init__(self, model_dir=None, workers: int = 2, timeout_s: float = 60.0, start_timeout_s: float = 300.0,
                 device: str = "cpu", threads: int = 1, **load_options):
        from lopa.loading import DEFAULT_MODEL
        from lopa.parallel import dist_backend
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers (ranks) must be a positive integer, got {workers!r}")
        if timeout_s <= 0 or start_timeout_s <= 0:
            raise ValueError("timeouts must be positive seconds")
        dist_backend(torch.device(device).type)                 # a clear error now, not in W children
        self.model_dir = str(model_dir or DEFAULT_MODEL)
        self.world, self.timeout_s, self.start_timeout_s = workers, float(timeout_s), float(start_timeout_s)
        self.device, self.threads, self.load_options = device, threads, load_options
        self.spec = self.tokenizer = None    # as rank 0 loaded them (lopa.checkpoints.load), once started
        self.pids: dict[int, int] = {}
        self.description = self.last_failure = ""
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self._dir: str | None = None
        self._closed = False
        self._owner: RemoteExecutor | None = None

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
        """Every rank's cache checksum after the last run (lopa.parallel.kv_digest), rank order."""
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
                    _send(self._conn, ("close",))
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
        launcher = _Launcher.get(self.start_timeout_s)
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
                _send(self._conn, message)
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
            status, value = _recv(self._conn)
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
        return "; ".join(ended + ([] if _Launcher.alive() else ["the launcher process died"]))

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
        causes += [] if _Launcher.alive() else ["the launcher process died"]
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
            while time.monotonic() < deadline and len(self._ended()) < len(self.pids) and _Launcher.alive():
                time.sleep(0.02)
            for r in set(self.pids) - set(self._ended()) if kill else ():
                _kill(self.pids[r])
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


# Plain pickle, not Connection.send: torch registers shared-memory reductions for tensors with
# multiprocessing's pickler, and these messages are a few KB that should simply be copied.
def _send(conn: Connection, obj) -> None:
    conn.send_bytes(pickle.dumps(obj))


def _recv(conn: Connection):
    return pickle.loads(conn.recv_bytes())


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- a rank process -------------------------------------------------------------------------------
def _rank_main(cfg: dict, conn: Connection | None) -> None:
    from lopa.checkpoints import load
    from lopa.parallel import Comm, serve

    torch.set_num_threads(cfg["threads"])
    rank, device = cfg["rank"], torch.device(cfg["device"])
    if device.type != "cpu":
        device = torch.device(device.type, rank)           # one accelerator per rank on this host
    loaded = load(cfg["model_dir"], device=str(device), **cfg["load"])
    comm = Comm.init(device, cfg["timeout_s"], cfg["start_timeout_s"], init_method=f"file://{cfg['store']}",
                     rank=rank, world=cfg["world"])
    if rank == 0:
        _drive(conn, loaded, comm, cfg["timeout_s"])
    else:
        serve(loaded.model, loaded.spec, comm)
    comm.close()                 # only reached on a clean stop; after an error the process just exits


def _drive(conn: Connection, loaded, comm, timeout_s: float) -> None:
    """Rank 0 of a BPGroup: run the caller's verbs on a BPExecutor; ping the ranks while idle so
    that their waits (bounded by timeout_s) never expire between runs."""
    from lopa.parallel import BPExecutor, ping

    _send(conn, ("ok", (f"{loaded.describe()} x {comm.world} ranks", loaded.spec, loaded.tokenizer)))
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
            reply = None
            if verb == "close":
                comm.send_control(("stop",))
                return
            if verb == "start":            # settings may change from run to run: a fresh executor
                executor = BPExecutor(loaded.model, loaded.spec, DecodeSettings.from_dict(args[0]), comm)
                executor.start(torch.tensor(args[1], dtype=torch.long))
            elif verb == "verify":
                reply = executor.verify(args[0])
            elif verb == "commit":
                executor.commit(*args)
                reply = {k: executor._extra[k] for k in ("commit_s", "commit_bytes", "commit_broadcast",
                                                         "control_bytes", "bytes")}
            elif verb == "digest":
                reply = executor.digests() if executor else []
        except Exception as err:      # a failed collective leaves the group unusable: report, exit
            _send(conn, ("error", f"rank 0: {type(err).__name__}: {err}"))
            raise
        _send(conn, ("ok", reply))


# -- the launcher ("zygote") ----------------------------------------------------------------------
class _Launcher:
    """A helper process that imported torch + transformers once and forks rank processes on request;
    it reaps them and writes each one's exit cause to its exit file. One per caller process."""
    current: "_Launcher | None" = None
    lock = threading.Lock()

    @classmethod
    def get(cls, timeout_s: float) -> "_Launcher":
        with cls.lock:
            if not cls.alive():
                cls.current = cls(timeout_s)
            return cls.current

    @classmethod
    def alive(cls) -> bool:
        return cls.current is not None and cls.current.proc.poll() is None

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
                raise RuntimeError(f"the branch-parallel launcher did not answer {what!r} (log: {self.log.name})")
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


@atexit.register
def stop_launcher() -> None:
    """End the launcher and any rank it still has (also called at interpreter exit)."""
    with _Launcher.lock:
        if _Launcher.current is not None:
            _Launcher.current.close()
            _Launcher.current = None


def _launcher_main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the caller's to handle
    import transformers  # noqa: F401  (the slow imports, done once and shared by every fork)
    from transformers import AutoModelForCausalLM  # noqa: F401

    import lopa.loading  # noqa: F401
    import lopa.parallel  # noqa: F401
    conn, children, preloaded = Connection(fd), {}, set()
    conn.send(("ready", os.getpid()))
    while True:
        _reap(children)
        try:
            if not conn.poll(0.05 if children else 1.0):
                continue
            _, cfg = conn.recv()
        except (EOFError, OSError):
            break
        rank0_fd = recv_handle(conn) if cfg["rank"] == 0 else None
        if cfg["model_dir"] not in preloaded:         # the model's modeling code: ~7 s per rank otherwise
            preloaded.add(cfg["model_dir"])
            _preload(cfg["model_dir"])
        pid = os.fork()
        if pid == 0:
            _child(cfg, rank0_fd, fd)
        if rank0_fd is not None:
            os.close(rank0_fd)                        # only rank 0 keeps its end of the caller's socket
        children[pid] = cfg["exit_file"]
        conn.send(("pid", pid))
    for pid in children:
        _kill(pid)
    while children:
        _reap(children, block=True)


def _preload(model_dir: str) -> None:
    try:                                              # best effort: the rank reports real errors
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
        MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model_dir, local_files_only=True))]
        import lopa.checkpoints  # noqa: F401  (Dream / LLaDA / preset loading, where present)
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
                Path(path + ".tmp").write_text(text)
                os.replace(path + ".tmp", path)
            except OSError:
                pass


def _child(cfg: dict, rank0_fd: int | None, launcher_fd: int) -> None:
    """A freshly forked rank: its own stdio (a log file), then _rank_main. Never returns."""
    code = 1
    try:
        os.close(launcher_fd)
        log = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _rank_main(cfg, Connection(rank0_fd) if rank0_fd is not None else None)
        code = 0
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
