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
- **Writes are bounded, in bytes and in files.** The only writable places in each process are one
  tmpfs of 64 MiB and 4,096 files and folders (`WRITE_LIMIT_BYTES`, `FILE_COUNT_LIMIT`): its work
  directory /sandbox, with /tmp inside it; and /dev/shm, a tmpfs of 1 MiB and 64 files for
  semaphores; the root and the rest of /dev are read-only. bwrap cannot limit a tmpfs's inodes,
  so both are mounted (size= and nr_inodes=) by `unshare --user --mount` around bwrap, in a mount
  namespace of their own. Both live in memory and are gone when the process ends, so a run holds at
  most 2 x 65 MiB of the host's memory for files (plus a few MB of inodes) and writes nothing to the
  host's disk but its stdout and stderr (16 MiB each, in a folder removed after the run). A write
  past a limit fails with ENOSPC inside the program; if the program does not catch it, the run fails
  with a status naming the limits.
- **Wherever Python lives.** The interpreter, its installation and the virtual environment are
  bound read-only at their own paths after the private /tmp is in place, so a venv or an
  interpreter under /tmp (a CI clone) or a home folder runs the same; nothing else of /tmp or home
  is visible.

What it does not guarantee: the candidate can read what the system and Python folders hold (the
installed packages included); a value passed to the candidate is a copy, so a test that checks an
argument changed in place sees it unchanged; only plain data and the candidate's own objects can
be passed (a test that passes a function of its own fails). A program given as plain text, with no
separate test (`run_program(text)`), has no test process to answer to: it passes when it reports
that it ran to its end, which is its own word.

Where bubblewrap is not installed, or is installed but cannot start (`isolation()` says which, and
why), grading refuses (`SandboxUnavailable`, naming bwrap, how to install it and how to opt in)
unless the caller opts in to the fallback: `run_program(..., allow_fallback=True)` (the
`--unsafe-fallback-sandbox` flag of `python -m lopa.bench`) or the environment variable
LOPA_UNSAFE_FALLBACK_SANDBOX=1 (for a library, an app or a test). With the opt-in, a warning line
(printed once a process, and in `ExecResult.warning`) says what the fallback does not protect. The
fallback, clearly labelled, runs the same two processes in host folders, each in its own
session and process group, dying with the grader (PR_SET_PDEATHSIG, and `setpriv --pdeathsig`
for `unshare`) and, where `unshare` may create them, with its own user, PID (with its own /proc),
mount and network namespaces.
The verdict stays out of the candidate's reach there too: the test process reads its program and
makes itself undumpable before the candidate starts; the candidate runs under an audit hook
(sandbox_child.guard) that refuses new processes, signals, sockets, other processes' /proc
entries and writes outside its own folder, refuses the modules that write files from C where the
hook cannot see the path (sqlite3, readline, Tcl, dbm, /dev/shm), and allows at most
`FALLBACK_NAME_LIMIT` files of `FALLBACK_FILE_LIMIT_BYTES` each. A test process that is lost
(killed, crashed) is a failure with its reason. The hook is Python's, so it cannot be complete:
any native code (a C extension module the list misses, a bug in one) writes, reads and signals
as the grader's user, around it, which bubblewrap's namespaces do not allow (`FALLBACK_RISKS`).
`ExecResult.sandbox` says which ran and why.

Layer: evaluation (lopa/eval/); the bench's HumanEval and lopa.eval's graders import it.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")   # what runs inside, stdlib only
ARMED = b"armed\n"              # sandbox_child.ARMED: the test process has read its program
WRITE_LIMIT_BYTES = 64 << 20    # everything one sandboxed process can write: its /sandbox and /tmp
SHM_LIMIT_BYTES = 1 << 20       # /dev/shm, where multiprocessing keeps its semaphores (EvalPlus uses them)
FILE_LIMIT_BYTES = 16 << 20     # one file, its stdout and stderr included
FILE_COUNT_LIMIT = 4096         # files and folders in /sandbox (inodes: empty files cost kernel memory, not bytes)
SHM_FILE_COUNT_LIMIT = 64
FALLBACK_FILE_LIMIT_BYTES = 1 << 20    # outside bubblewrap: one file (its stdout and stderr included) ...
FALLBACK_NAME_LIMIT = 64               # ... and files written: 64 MiB in all, in its host folder
MEMORY_LIMIT_MB = 2048
# How HF code_eval runs a program under lm-eval's mbpp and humaneval tasks (lopa.eval.code_eval, lopa.tasks.mbpp):
CODE_EVAL_TIMEOUT_S = 3.0       # its default `timeout`
CODE_EVAL_RUN_NAME = "builtins"  # `__name__` under its exec(program, {}): the builtins module's name
UNSAFE_FALLBACK_ENV = "LOPA_UNSAFE_FALLBACK_SANDBOX"    # "1": grade in the fallback where bubblewrap cannot run
UNSAFE_FALLBACK_FLAG = "--unsafe-fallback-sandbox"      # the same opt-in on the command lines that grade code
FALLBACK_RISKS = ("the fallback is not isolation: the generated code runs as your user in host folders, held "
                  "only by a Python audit hook and rlimits, and any native code (ctypes-like tricks, a C extension "
                  "module, a bug in one) goes around the hook to your files, processes and, without a network "
                  "namespace, the network")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc")
# Runs in a user and mount namespace of its own, around bwrap: the tmpfs mounts bwrap cannot bound
# by inodes, on host folders ($1, $2) that stay empty outside this namespace. Then bwrap.
_MOUNT_SCRIPT = ('set -e; mkdir -p "$1" "$2"; mount -t tmpfs -o "$3" lopa-sandbox "$1"; '
                 'mount -t tmpfs -o "$4" lopa-shm "$2"; mkdir -p "$1/tmp"; shift 4; exec "$@"')


class Program(str):
    """A program's text, candidate + newline + test (what HF code_eval execs), that also knows its
    two parts, so the sandbox can run the test in a process of its own."""

    candidate: str
    test: str

    def __new__(cls, candidate: str, test: str):
        program = super().__new__(cls, candidate + "\n" + test)
        program.candidate, program.test = candidate, test
        return program


class SandboxUnavailable(RuntimeError):
    """Bubblewrap cannot run here and nobody opted in to the fallback: generated code is not run."""


@dataclass
class ExecResult:
    passed: bool
    status: str              # "passed", "timed out", or "failed: <why>"
    seconds: float
    network_isolated: bool
    sandbox: str = ""        # "bubblewrap", or "fallback (...; why bubblewrap did not run)"
    warning: str = ""        # in the fallback: what it does not protect (FALLBACK_RISKS), else ""


@dataclass(frozen=True)
class Isolation:
    """Which sandbox runs generated code on this machine, and why where it is not bubblewrap."""

    bubblewrap: str                    # "ready", "not installed" or "cannot start"
    reason: str = ""                   # why bubblewrap cannot start (its own message), else ""
    fallback: tuple[str, ...] = ()     # the fallback's command prefix (setpriv, unshare), where it runs
    layers: str = ""                   # what the fallback adds to the audit hook and rlimits, in words

    @property
    def ready(self) -> bool:
        return self.bubblewrap == "ready"

    @property
    def label(self) -> str:
        """ExecResult.sandbox: "bubblewrap", or the fallback with what it has and why it runs."""
        if self.ready:
            return "bubblewrap"
        why = "bubblewrap not installed" if self.bubblewrap == "not installed" else \
            f"bubblewrap installed but cannot start: {self.reason}"
        return f"fallback (audit hook, rlimits{', ' + self.layers if self.layers else ''}; {why})"


def _interpreter_dirs() -> list[str]:
    """What the candidate's interpreter needs, wherever it lives: the venv, the installation it was
    made from, and the folder of every link on the way from sys.executable to the binary."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    link = Path(sys.executable).absolute()
    for _ in range(40):                                  # a link chain, each hop's installation
        dirs.add(str(link.parent.parent))
        if not link.is_symlink():
            break
        link = (link.parent / os.readlink(link)).absolute()
    dirs.add(str(Path(sys.executable).resolve().parent.parent))
    dirs = sorted(os.path.normpath(d) for d in dirs if os.path.isdir(d) and os.path.normpath(d) != "/")
    # a folder inside another one already listed comes with it
    return [d for d in dirs if not any(d.startswith(other + "/") for other in dirs)]


def _readable_dirs() -> list[str]:
    """What the sandbox may read: the system folders and the Python installation (the venv and the
    interpreter it links to), nothing else: not the checkout, not home directories."""
    return sorted({d for d in (*_SYSTEM_DIRS, *_interpreter_dirs()) if os.path.isdir(d)})


def bwrap_command(work: Path | None = None, env: dict | None = None, files: dict[str, Path] | None = None,
                  scratch: Path | None = None) -> list[str]:
    """The bubblewrap prefix: every namespace unshared, read-only system and Python, no capabilities,
    killed with its parent, the root and /dev read-only, /dev/shm a tmpfs of SHM_LIMIT_BYTES and
    SHM_FILE_COUNT_LIMIT files. `work` None: /sandbox is a tmpfs of WRITE_LIMIT_BYTES and
    FILE_COUNT_LIMIT files with /tmp inside it, and `files` ({name: host path}) are bound read-only
    into it. `work` a host folder: it is bound writable as /sandbox (EvalPlus, whose results come
    back through it; lopa.tasks.evalplus) and /tmp is in the bounded tmpfs. The two tmpfs are mounted on
    folders made under `scratch` (default: `work`), empty outside the run. `env`: variables set
    inside, on top of the cleared environment."""
    scratch = scratch if scratch is not None else work
    if scratch is None:
        raise ValueError("bwrap_command needs `work` or `scratch`: a host folder for the tmpfs mount points")
    fs, shm = Path(scratch) / ".lopa-fs", Path(scratch) / ".lopa-shm"
    command = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
               _MOUNT_SCRIPT, "sh", str(fs), str(shm),
               f"size={WRITE_LIMIT_BYTES},nr_inodes={FILE_COUNT_LIMIT},mode=0755",
               f"size={SHM_LIMIT_BYTES},nr_inodes={SHM_FILE_COUNT_LIMIT},mode=1777",
               shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
               "--cap-drop", "ALL", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox",
               "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0",
               "--proc", "/proc", "--dev", "/dev", "--bind", str(shm), "/dev/shm"]
    for name, value in (env or {}).items():
        command += ["--setenv", name, value]
    for folder in _SYSTEM_DIRS:
        if os.path.isdir(folder):
            command += ["--ro-bind", folder, folder]
    if work is None:
        command += ["--bind", str(fs), "/sandbox", "--bind", str(fs / "tmp"), "/tmp"]
        for name, path in (files or {}).items():
            command += ["--ro-bind", str(path), f"/sandbox/{name}"]
    else:
        command += ["--bind", str(fs / "tmp"), "/tmp", "--bind", str(work), "/sandbox"]
    # Python after /tmp: an interpreter or venv under /tmp shows through the private one, at its path.
    for folder in _interpreter_dirs():
        if not any(folder == d or folder.startswith(d + "/") for d in _SYSTEM_DIRS):
            command += ["--ro-bind", folder, folder]
    # bwrap's own root and /dev are unbounded tmpfs: read-only, they hold nothing the program writes
    return command + ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/sandbox", "--"]


def _probe(command: list[str], timeout: float = 30) -> str:
    """"" when `command` ran and exited 0, else why not (its last line of stderr)."""
    try:
        probe = subprocess.run(command, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{type(error).__name__}: {error}"[:200]
    if probe.returncode == 0:
        return ""
    lines = [line for line in probe.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return (lines[-1].strip() if lines else f"exit code {probe.returncode}")[:200]


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe once which sandbox runs here: bubblewrap (with unshare and mount for its bounded
    tmpfs), else the fallback with the strongest prefix this machine allows."""
    if shutil.which("bwrap") is None:
        state, reason = "not installed", ""
    elif shutil.which("unshare") is None:
        state, reason = "cannot start", "unshare (util-linux) is missing: it mounts the sandbox's bounded tmpfs"
    else:
        with tempfile.TemporaryDirectory(prefix="lopa-sandbox-probe-") as scratch:
            reason = _probe([*bwrap_command(scratch=Path(scratch)), sys.executable, "-I", "-c", "pass"])
        state = "cannot start" if reason else "ready"
    if state == "ready":
        return Isolation("ready")
    return Isolation(state, reason, *_fallback_prefix())


def _fallback_prefix() -> tuple[tuple[str, ...], str]:
    """The strongest prefix this machine allows for the fallback, and its layers in words."""
    setpriv, unshare = shutil.which("setpriv"), shutil.which("unshare")
    death = (setpriv, "--pdeathsig", "KILL") if setpriv and not _probe([setpriv, "--pdeathsig", "KILL", "true"]) else ()
    options = []
    if unshare:
        options += [((unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount",
                      "--mount-proc"), "pid+net+mount namespaces"),
                    ((unshare, "--net", "--map-root-user"), "net namespace")]
    for prefix, layers in options:
        if not _probe([*death, *prefix, sys.executable, "-I", "-c", "pass"], timeout=20):
            return (*death, *prefix), layers + (", dies with the grader" if death else "")
    return death, "dies with the grader" if death else ""


def bubblewrap_available() -> bool:
    """Whether bubblewrap is installed and starts here (see `isolation()` for why not)."""
    return isolation().ready


def network_isolation() -> tuple[str, ...]:
    """The fallback's prefix when it has a network namespace (the child then has only loopback), else ()."""
    prefix = isolation().fallback
    return prefix if "--net" in prefix else ()


def describe() -> str:
    """One line for a command line or a report: which sandbox grades generated code here, and why."""
    found = isolation()
    if found.ready:
        return "generated code runs under bubblewrap (lopa.tasks.sandbox)"
    return f"generated code runs in the sandbox's {found.label} (lopa.tasks.sandbox)"


def fallback_opted_in(allow_fallback: bool = False) -> bool:
    """Whether the fallback may grade: the caller's flag, or UNSAFE_FALLBACK_ENV set to 1 (either one)."""
    return allow_fallback or os.environ.get(UNSAFE_FALLBACK_ENV, "").strip().lower() in ("1", "true", "yes")


_warned: set[str] = set()        # the fallback labels this process has printed its warning for


def require_sandbox(allow_fallback: bool = False) -> Isolation:
    """The isolation that grades here; raise SandboxUnavailable where it would be the fallback and
    nobody opted in (`fallback_opted_in`). The first time a process grades in the fallback, one
    warning line on stderr says what it does not protect."""
    found = isolation()
    if found.ready:
        return found
    if not fallback_opted_in(allow_fallback):
        why = ("is not installed" if found.bubblewrap == "not installed" else
               f"is installed but cannot start ({found.reason or 'no reason given'}); it needs util-linux's "
               "unshare and a kernel that allows unprivileged user namespaces")
        raise SandboxUnavailable(
            f"bubblewrap (bwrap) {why}, and generated code is graded only inside it. Install it (Debian/Ubuntu: "
            f"apt-get install bubblewrap), or opt in to the unsafe fallback with {UNSAFE_FALLBACK_FLAG} or "
            f"{UNSAFE_FALLBACK_ENV}=1: {FALLBACK_RISKS}.")
    if found.label not in _warned:
        _warned.add(found.label)
        print(f"WARNING: generated code is graded in the sandbox's {found.label}, as opted in: {FALLBACK_RISKS}. "
              "Install bubblewrap (apt-get install bubblewrap) to isolate it.", file=sys.stderr, flush=True)
    return found


def _tail(path: Path, limit: int = 2000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - limit))
        return f.read().decode("utf-8", "replace")


def _explain(verdict: str, sandboxed: bool) -> str:
    """Name the sandbox's limit when the program ran into one."""
    shm = f"{SHM_LIMIT_BYTES >> 20} MiB, {SHM_FILE_COUNT_LIMIT:,} files"
    if "[Errno 28]" in verdict and "/dev/shm" in verdict:
        return f"failed: wrote past the sandbox's /dev/shm limit ({shm}) ({verdict[8:]})"
    if "[Errno 28]" in verdict:      # a failed write() names no file: either tmpfs may be the full one
        return (f"failed: wrote past the sandbox's write limit ({WRITE_LIMIT_BYTES >> 20} MiB, {FILE_COUNT_LIMIT:,} "
                f"files) or its /dev/shm limit ({shm}) ({verdict[8:]})")
    if "[Errno 27]" in verdict:
        limit = FILE_LIMIT_BYTES if sandboxed else FALLBACK_FILE_LIMIT_BYTES
        return f"failed: a file grew past the sandbox's {limit >> 20} MiB file-size limit ({verdict[8:]})"
    return verdict


def _ended(code: int | None) -> str:
    return "it did not end" if code is None else f"killed by signal {-code}" if code < 0 else f"exit code {code}"


class _Side:
    """One sandboxed process: its folder on the host (source files in, stdout and stderr out)."""

    def __init__(self, root: Path, role: str, source: str):
        self.role, self.folder = role, root / role
        self.folder.mkdir()
        (self.folder / "program.py").write_text(source, encoding="utf-8")
        (self.folder / "child.py").write_bytes(CHILD.read_bytes())

    def start(self, found: Isolation, argv: list[str], fds: tuple[int, ...]):
        if found.ready:
            files = {"program.py": self.folder / "program.py", "child.py": self.folder / "child.py"}
            prefix, where = bwrap_command(files=files, scratch=self.folder), "/sandbox"
            env = {"PATH": os.defpath}
        else:
            prefix, where = list(found.fallback), str(self.folder)
            env = {"PATH": os.defpath, "HOME": where, "TMPDIR": where, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        command = [*prefix, sys.executable, "-I", "-B", f"{where}/child.py", self.role, f"{where}/program.py", *argv]
        with open(self.folder / "stdout", "wb") as out, open(self.folder / "stderr", "wb") as err:
            # A new session makes the child a process group leader, so the kill in stop() takes
            # anything it managed to start with it (bubblewrap's or unshare's PID namespace does more:
            # nothing in it outlives its first process).
            self.proc = subprocess.Popen(command, cwd=self.folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, start_new_session=True, pass_fds=fds)

    def reason(self) -> str:
        """The last line of its stderr, or how it ended."""
        lines = [line for line in _tail(self.folder / "stderr").splitlines() if line.strip()]
        return lines[-1].strip() if lines else _ended(self.proc.poll())

    def stop(self) -> int | None:
        """Kill it and everything it started; its exit code if it had ended by itself."""
        code = self.proc.poll()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        return code


def _read_armed(fd: int, deadline: float) -> bool:
    """Wait until the test process says its program is read (sandbox_child.ARMED), at most until
    `deadline`; False when it ended or the deadline passed first."""
    received = b""
    while len(received) < len(ARMED):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        chunk = os.read(fd, len(ARMED) - len(received))
        if not chunk:
            return False
        received += chunk
    return received == ARMED


def run_program(program: str, timeout: float = 10.0, memory_mb: int = MEMORY_LIMIT_MB,
                run_name: str = "__main__", allow_fallback: bool = False) -> ExecResult:
    """Run `program` in the sandbox (see the module docstring). A `Program` runs its test in a
    process of its own and passes when that test returns within `timeout` wall-clock seconds; plain
    text is a candidate with no test. `run_name`: the `__name__` of both parts ("builtins" is what
    `exec(program, {})` gives, as in HF code_eval, so that an `if __name__ == "__main__":` block in
    a completion does not run; lopa.eval.code_eval). Without bubblewrap it raises SandboxUnavailable
    unless `allow_fallback` or UNSAFE_FALLBACK_ENV opts in (`require_sandbox`)."""
    candidate, test = (program.candidate, program.test) if isinstance(program, Program) else (str(program), "")
    found = require_sandbox(allow_fallback)
    file_limit = FILE_LIMIT_BYTES if found.ready else FALLBACK_FILE_LIMIT_BYTES
    limits = [str(int(timeout) + 1), str(memory_mb << 20), str(file_limit)]
    requests_read, requests_write = os.pipe()    # test -> candidate
    replies_read, replies_write = os.pipe()      # candidate -> test
    result_read, result_write = os.pipe()        # test -> grader: ARMED, then the verdict
    with tempfile.TemporaryDirectory(prefix="lopa-sandbox-") as root:
        sides = {role: _Side(Path(root), role, source) for role, source in (("candidate", candidate), ("test", test))}
        start = time.monotonic()
        armed = False
        try:
            # The test first. In the fallback the candidate runs as the same user in host folders, so it
            # starts only once the test has read its program; under bubblewrap it cannot reach the
            # test's files, and ARMED is read with the verdict.
            sides["test"].start(found, [run_name, str(requests_write), str(replies_read), *limits, str(result_write)],
                                (requests_write, replies_read, result_write))
            os.close(result_write)
            armed = found.ready or _read_armed(result_read, start + max(timeout, 10.0))
            if armed:
                guarded = "" if found.ready else str(sides["candidate"].folder)
                sides["candidate"].start(found, [run_name, str(requests_read), str(replies_write), *limits, guarded,
                                                 str(FALLBACK_NAME_LIMIT)], (requests_read, replies_write))
        finally:
            for fd in (requests_read, requests_write, replies_read, replies_write):
                os.close(fd)
        code, timed_out = None, False
        if armed:
            try:
                code = sides["test"].proc.wait(timeout=max(0.0, timeout - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                timed_out = True
        codes = {role: side.stop() if hasattr(side, "proc") else None for role, side in sides.items()}
        os.set_blocking(result_read, False)      # never wait on a pipe something escaped may hold open
        with os.fdopen(result_read, "rb") as returned:
            try:
                verdict = returned.read(4096 + len(ARMED)) or b""
            except BlockingIOError:
                verdict = b""
        if found.ready:                          # ARMED came first, unread so far
            verdict = verdict[len(ARMED):] if verdict.startswith(ARMED) else b""
        verdict = verdict.decode("utf-8", "replace")
        seconds = time.monotonic() - start
        if not armed:
            status = f"failed: the test process did not start ({sides['test'].reason()})"
        elif timed_out:
            status = "timed out"
        elif code == 0 and verdict == "passed":
            status = "passed"
        elif verdict.startswith("failed: "):
            status = _explain(verdict, found.ready)
        else:                                    # the grading side was lost: killed, crashed, or it exited
            status = f"failed: the test process ended without a verdict ({sides['test'].reason()})"
        if status.startswith("failed: CandidateGone") and codes["candidate"] not in (None, 0):
            status += f" ({_ended(codes['candidate'])})"
    return ExecResult(status == "passed", status[:300], seconds, found.ready or "--net" in found.fallback, found.label,
                      "" if found.ready else FALLBACK_RISKS)
