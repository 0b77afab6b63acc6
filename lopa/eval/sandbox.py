"""The code sandbox: runs generated (untrusted) code against its unit tests and says pass or fail.

What it guarantees under bubblewrap (`bwrap` >= 0.5, Debian package `bubblewrap`):

- **The verdict is the tests' own.** A program is two parts: the candidate (the generated code) and
  the test. They run in two sandboxed processes that share only two pipes. The test process runs
  the test, sends each use of a name the test does not define (the entry point, a helper) to the
  candidate's process as a request and rebuilds the answer from plain data (numbers, strings,
  bytes, lists, tuples, dicts, sets; any other object stays with the candidate and is used through
  more requests). Nothing the candidate sends is run as code. Only the test process holds the pipe
  the verdict comes back on, and it writes "passed" only after the test returned there. The
  candidate cannot see that process (its own PID and mount namespaces), so no output, exit status,
  early exit, file or memory read in the candidate's process can produce a pass; the one way to
  pass is to answer the test's calls with values that satisfy its asserts.
- **Nothing outside is touched.** Each process has every namespace unshared (no network, its own
  PID namespace: nothing it starts outlives it or sees the grader), a read-only view of only the
  system and Python folders, no capabilities, a cleared environment, and is killed with the grader.
  Inside, CPU seconds, address space (2 GiB) and file size (16 MiB) are limited, and the candidate's
  dangerous os/shutil/subprocess/socket functions are removed as a second line.
- **Writes are bounded.** The only writable places in each process are one tmpfs of 64 MiB
  (`WRITE_LIMIT_BYTES`): its work directory /sandbox, with /tmp inside it; and /dev/shm, a tmpfs of
  1 MiB for semaphores; the root and the rest of /dev are read-only. Both live in memory and are
  gone when the process ends, so a run holds at most 2 x 65 MiB of the host's memory for files and
  writes nothing to the host's disk but its stdout and stderr (16 MiB each, in a folder removed
  after the run). A write past the limit fails
  with ENOSPC inside the program; if the program does not catch it, the run fails with a status
  naming the limit.

What it does not guarantee: the candidate can read what the system and Python folders hold (the
installed packages included); a value passed to the candidate is a copy, so a test that checks an
argument changed in place sees it unchanged; only plain data and the candidate's own objects can
be passed (a test that passes a function of its own fails). A program given as plain text, with no
separate test (`run_program(text)`), has no test process to answer to: it passes when it reports
that it ran to its end, which is its own word.

Where bubblewrap is missing or cannot create namespaces, a clearly labelled fallback runs the
same two processes in new sessions, with the limits and `unshare --net` where allowed, in host
folders: it contains mistakes of a code model, not an attacker. `ExecResult.sandbox` says which ran.

Layer: evaluation (lopa/eval/); the bench's HumanEval and lopa.eval's graders import it.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")   # what runs inside, stdlib only
WRITE_LIMIT_BYTES = 64 << 20    # everything one sandboxed process can write: its /sandbox and /tmp
SHM_LIMIT_BYTES = 1 << 20       # /dev/shm, where multiprocessing keeps its semaphores (EvalPlus uses them)
FILE_LIMIT_BYTES = 16 << 20     # one file, its stdout and stderr included
MEMORY_LIMIT_MB = 2048
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc")


class Program(str):
    """A program's text, candidate + newline + test (what HF code_eval execs), that also knows its
    two parts, so the sandbox can run the test in a process of its own."""

    candidate: str
    test: str

    def __new__(cls, candidate: str, test: str):
        program = super().__new__(cls, candidate + "\n" + test)
        program.candidate, program.test = candidate, test
        return program


@dataclass
class ExecResult:
    passed: bool
    status: str              # "passed", "timed out", or "failed: <why>"
    seconds: float
    network_isolated: bool
    sandbox: str = ""        # "bubblewrap", or "fallback (...)" where bubblewrap is unavailable


def _readable_dirs() -> list[str]:
    """What the sandbox may read: the system folders and the Python installation (the venv and the
    interpreter it links to), nothing else: not the checkout, not home directories."""
    python = [sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)]
    return sorted({d for d in (*_SYSTEM_DIRS, *python) if os.path.isdir(d)})


def bwrap_command(work: Path | None = None, env: dict | None = None, files: dict[str, Path] | None = None) -> list[str]:
    """The bubblewrap prefix: every namespace unshared, read-only system and Python, no capabilities,
    killed with its parent, the root and /dev read-only, /dev/shm a tmpfs of SHM_LIMIT_BYTES. `work` None: /sandbox is a tmpfs of
    WRITE_LIMIT_BYTES with /tmp inside it, and `files` ({name: host path}) are bound read-only into
    it. `work` a host folder: it is bound writable as /sandbox (EvalPlus, whose results come back
    through it; lopa.eval.codegen) and /tmp is a tmpfs of WRITE_LIMIT_BYTES. `env`: variables set
    inside, on top of the cleared environment."""
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
               "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox", "--setenv", "TMPDIR", "/tmp",
               "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0", "--proc", "/proc", "--dev", "/dev",
               "--size", str(SHM_LIMIT_BYTES), "--tmpfs", "/dev/shm"]
    for name, value in (env or {}).items():
        command += ["--setenv", name, value]
    for folder in _readable_dirs():
        command += ["--ro-bind", folder, folder]
    if work is None:
        command += ["--size", str(WRITE_LIMIT_BYTES), "--tmpfs", "/sandbox", "--dir", "/sandbox/tmp",
                    "--symlink", "/sandbox/tmp", "/tmp"]
        for name, path in (files or {}).items():
            command += ["--ro-bind", str(path), f"/sandbox/{name}"]
    else:
        command += ["--size", str(WRITE_LIMIT_BYTES), "--tmpfs", "/tmp", "--bind", str(work), "/sandbox"]
    # bwrap's own root and /dev are unbounded tmpfs: read-only, they hold nothing the program writes
    return command + ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/sandbox", "--"]


@functools.lru_cache(maxsize=1)
def bubblewrap_available() -> bool:
    """Whether bwrap is installed, knows every option used here, and can create its namespaces
    (probed once)."""
    if shutil.which("bwrap") is None:
        return False
    try:
        probe = subprocess.run([*bwrap_command(), sys.executable, "-I", "-c", "pass"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[str, ...]:
    """The fallback's network isolation: `unshare --net --map-root-user` when this kernel allows
    unprivileged network namespaces (the child then has only loopback), else ()."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    prefix = (unshare, "--net", "--map-root-user")
    try:
        probe = subprocess.run([*prefix, sys.executable, "-I", "-c", "pass"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if probe.returncode == 0 else ()


def _tail(path: Path, limit: int = 2000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - limit))
        return f.read().decode("utf-8", "replace")


def _explain(verdict: str) -> str:
    """Name the sandbox's limit when the program ran into one."""
    if "[Errno 28]" in verdict:
        return f"failed: wrote past the sandbox's {WRITE_LIMIT_BYTES >> 20} MiB write limit ({verdict[8:]})"
    if "[Errno 27]" in verdict:
        return f"failed: a file grew past the sandbox's {FILE_LIMIT_BYTES >> 20} MiB file-size limit ({verdict[8:]})"
    return verdict


class _Side:
    """One sandboxed process: its folder on the host (source files in, stdout and stderr out)."""

    def __init__(self, root: Path, role: str, source: str):
        self.role, self.folder = role, root / role
        self.folder.mkdir()
        (self.folder / "program.py").write_text(source, encoding="utf-8")
        (self.folder / "child.py").write_bytes(CHILD.read_bytes())

    def start(self, sandboxed: bool, isolation: tuple[str, ...], argv: list[str], fds: tuple[int, ...]):
        if sandboxed:
            files = {"program.py": self.folder / "program.py", "child.py": self.folder / "child.py"}
            prefix, where, cwd = bwrap_command(files=files), "/sandbox", self.folder
            env = {"PATH": os.defpath}
        else:
            prefix, where, cwd = list(isolation), str(self.folder), self.folder
            env = {"PATH": os.defpath, "HOME": where, "TMPDIR": where, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        command = [*prefix, sys.executable, "-I", "-B", f"{where}/child.py", self.role, f"{where}/program.py", *argv]
        with open(self.folder / "stdout", "wb") as out, open(self.folder / "stderr", "wb") as err:
            # A new session makes the child a process group leader, so the kill in stop() takes
            # anything it managed to start with it (under bubblewrap, the PID namespace does).
            self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True, pass_fds=fds)

    def stop(self) -> int | None:
        """Kill it and everything it started; its exit code if it had ended by itself."""
        code = self.proc.poll()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        return code


def run_program(program: str, timeout: float = 10.0, memory_mb: int = MEMORY_LIMIT_MB,
                run_name: str = "__main__") -> ExecResult:
    """Run `program` in the sandbox (see the module docstring). A `Program` runs its test in a
    process of its own and passes when that test returns within `timeout` wall-clock seconds; plain
    text is a candidate with no test. `run_name`: the `__name__` of both parts ("builtins" is what
    `exec(program, {})` gives, as in HF code_eval, so that an `if __name__ == "__main__":` block in
    a completion does not run; lopa.eval.code_eval)."""
    candidate, test = (program.candidate, program.test) if isinstance(program, Program) else (str(program), "")
    sandboxed = bubblewrap_available()
    isolation = () if sandboxed else network_isolation()
    limits = [str(int(timeout) + 1), str(memory_mb << 20), str(FILE_LIMIT_BYTES)]
    requests_read, requests_write = os.pipe()    # test -> candidate
    replies_read, replies_write = os.pipe()      # candidate -> test
    result_read, result_write = os.pipe()        # test -> grader: the verdict
    with tempfile.TemporaryDirectory(prefix="lopa-sandbox-") as root:
        sides = {role: _Side(Path(root), role, source) for role, source in (("candidate", candidate), ("test", test))}
        start = time.monotonic()
        try:
            sides["candidate"].start(sandboxed, isolation, [run_name, str(requests_read), str(replies_write), *limits],
                                     (requests_read, replies_write))
            sides["test"].start(sandboxed, isolation,
                                [run_name, str(requests_write), str(replies_read), *limits, str(result_write)],
                                (requests_write, replies_read, result_write))
        finally:
            for fd in (requests_read, requests_write, replies_read, replies_write, result_write):
                os.close(fd)
        try:
            code, timed_out = sides["test"].proc.wait(timeout=max(0.0, timeout - (time.monotonic() - start))), False
        except subprocess.TimeoutExpired:
            code, timed_out = None, True
        finally:
            codes = {role: side.stop() for role, side in sides.items()}
        os.set_blocking(result_read, False)      # never wait on a pipe something escaped may hold open
        with os.fdopen(result_read, "rb") as returned:
            try:
                verdict = (returned.read(4096) or b"").decode("utf-8", "replace")
            except BlockingIOError:
                verdict = ""
        seconds = time.monotonic() - start
        if timed_out:
            status = "timed out"
        elif code == 0 and verdict == "passed":
            status = "passed"
        elif verdict.startswith("failed: "):
            status = _explain(verdict)
        else:
            lines = [line for line in _tail(sides["test"].folder / "stderr").splitlines() if line.strip()]
            reason = lines[-1].strip() if lines else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
            status = f"failed: the test process ended without a verdict ({reason})"
        if status.startswith("failed: CandidateGone") and codes["candidate"] not in (None, 0):
            ended = codes["candidate"]
            status += f" (killed by signal {-ended})" if ended < 0 else f" (exit code {ended})"
    label = "bubblewrap" if sandboxed else f"fallback (rlimits{', unshare --net' if isolation else ''}; no bubblewrap)"
    return ExecResult(status == "passed", status[:300], seconds, sandboxed or bool(isolation), label)
