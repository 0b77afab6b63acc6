"""The process side of a lopa.distributed.group.BPGroup: the launcher that forks rank processes, and the
loop each rank runs. The caller's side (BPGroup, RemoteExecutor) lives in lopa.distributed.group.

- The launcher (a "zygote") is one helper process per caller process. It imports torch,
  transformers and the model's code once, then forks a rank per request, reaps it and writes
  why it ended (signal or exit code) to that rank's exit file, which the caller watches.
- A rank loads its model replica, joins the torch.distributed group (lopa.distributed.parallel.Comm) and
  either drives the round (rank 0, answering the caller's verbs over a socket) or serves.
"""

from __future__ import annotations

import atexit
import os
import pickle
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

from lopa.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[2]     # what holds the lopa package (checkout or site-packages)


# Plain pickle, not Connection.send: torch registers shared-memory reductions for tensors with
# multiprocessing's pickler, and these messages are a few KB that should simply be copied.
def send(conn: Connection, obj) -> None:
    conn.send_bytes(pickle.dumps(obj))


def recv(conn: Connection):
    return pickle.loads(conn.recv_bytes())


def kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- a rank process -------------------------------------------------------------------------------
def _rank_main(cfg: dict, conn: Connection | None) -> None:
    from lopa.distributed.parallel import Comm, serve
    from lopa.models import load

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


class Driver:
    """Rank 0 of a BPGroup: the caller's verbs, by name, on a fresh BPExecutor per run."""

    VERBS = ("start", "verify", "commit", "digest")

    def __init__(self, loaded, comm):
        self.loaded, self.comm, self.executor = loaded, comm, None

    def start(self, settings: dict, prompt_ids: list[int]) -> None:
        from lopa.distributed.parallel import BPExecutor
        # settings may change from run to run: a fresh executor
        self.executor = BPExecutor(self.loaded.model, self.loaded.spec, DecodeSettings.from_dict(settings), self.comm)
        self.executor.start(torch.tensor(prompt_ids, dtype=torch.long))

    def verify(self, branches):
        return self.executor.verify(branches)

    def commit(self, winner: int, n_positions: int) -> dict:
        """-> the commit's timings and traffic, which the caller adds to the round's extra."""
        self.executor.commit(winner, n_positions)
        return {k: self.executor.extra[k] for k in ("commit_s", "commit_bytes", "commit_broadcast", "control_bytes",
                                                    "bytes")}

    def digest(self) -> list:
        return self.executor.digests() if self.executor else []


def _drive(conn: Connection, loaded, comm, timeout_s: float) -> None:
    """Rank 0 of a BPGroup: run the caller's verbs on a Driver; ping the ranks while idle so that
    their waits (bounded by timeout_s) never expire between runs."""
    from lopa.distributed.parallel import ping

    send(conn, ("ok", (f"{loaded.describe()} x {comm.world} ranks", loaded.spec, loaded.tokenizer)))
    driver = Driver(loaded, comm)
    while True:
        if not conn.poll(timeout_s / 4):
            ping(comm)
            continue
        try:
            verb, *args = recv(conn)
        except EOFError:              # the caller is gone
            verb = "close"
        try:
            if verb == "close":
                comm.send_control(("stop",))
                return
            if verb not in Driver.VERBS:
                raise RuntimeError(f"unknown verb {verb!r}")
            reply = getattr(driver, verb)(*args)
        except Exception as err:      # a failed collective leaves the group unusable: report, exit
            send(conn, ("error", f"rank 0: {type(err).__name__}: {err}"))
            raise
        send(conn, ("ok", reply))


# -- the launcher ("zygote") ----------------------------------------------------------------------
class Launcher:
    """A helper process that imported torch + transformers once and forks rank processes on request;
    it reaps them and writes each one's exit cause to its exit file. One per caller process."""
    current: Launcher | None = None
    lock = threading.Lock()

    @classmethod
    def get(cls, timeout_s: float) -> Launcher:
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
        self.proc = subprocess.Popen([sys.executable, "-m", "lopa.distributed.ranks", "--launcher", str(theirs.fileno())],
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
    with Launcher.lock:
        if Launcher.current is not None:
            Launcher.current.close()
            Launcher.current = None


def _launcher_main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the caller's to handle
    import transformers  # noqa: F401  (the slow imports, done once and shared by every fork)
    from transformers import AutoModelForCausalLM  # noqa: F401

    import lopa.distributed.parallel  # noqa: F401
    import lopa.models.loading  # noqa: F401
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
        kill_pid(pid)
    while children:
        _reap(children, block=True)


def _preload(model_dir: str) -> None:
    try:                                              # best effort: the rank reports real errors
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
        MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model_dir, local_files_only=True))]
        import lopa.models.presets  # noqa: F401  (Dream / LLaDA / preset loading, where present)
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
        sys.exit("usage: python -m lopa.distributed.ranks --launcher FD (started by BPGroup; not for direct use)")
