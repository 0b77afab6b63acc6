"""HumanEval+ and MBPP+ (EvalPlus, Liu et al. 2023): EvalPlus's problems (HumanEvalPlus-v0.1.10.jsonl,
MbppPlus-v0.2.0.jsonl from the EvalPlus releases, optionally .gz; not shipped), a reply graded by
EvalPlus's own evaluator on the problem's base and extra inputs against its canonical solution. Two tasks,
one format: HUMANEVAL_PLUS and MBPP_PLUS (the paper's Table 2 columns; lopa.eval decodes them with the
authors' prompts and grades the saved samples with `evaluate`).

Data is never downloaded: EvalPlus reads the problem file named by HUMANEVAL_OVERRIDE_PATH /
MBPP_OVERRIDE_PATH (evalplus/data/humaneval.py, mbpp.py), which `evaluate` sets to a copy of the
problems graded.

Isolation: `evalplus.evaluate` executes the completions (and the canonical solutions, for the
expected outputs). The whole evaluator runs under `bwrap` with the prefix of lopa.tasks.sandbox (every
namespace unshared, so no network and its own PID namespace; a read-only view of only the system and
Python folders; a private writable /sandbox holding only the samples and the problems, a host folder,
since the results come back through it, so the sandbox's write limit holds here for /tmp only; no
capabilities; killed with its parent), inside which EvalPlus applies its own per-test time and memory
limits. Without bubblewrap grading refuses to run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lopa.tasks.prompts import encode
from lopa.tasks.results import write_jsonl
from lopa.tasks.sandbox import SandboxUnavailable, bubblewrap_available, bwrap_command
from lopa.tasks.sources import read_rows
from lopa.tasks.task import Task

FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "base_input", "plus_input")
OVERRIDE_ENV = {"humaneval": "HUMANEVAL_OVERRIDE_PATH", "mbpp": "MBPP_OVERRIDE_PATH"}
FLAGS = {"humaneval": "--humaneval-plus", "mbpp": "--mbpp-plus"}


def read_problems(path: str | Path) -> list[dict]:
    """EvalPlus-format problems (HumanEvalPlus / MbppPlus JSONL, optionally .gz), in file order."""
    return read_rows(path, FIELDS, "EvalPlus")


def problems_of(dataset: str):
    def problems(data: str, n: int | None, seed: int | None = None, family: dict | None = None):
        """The first `n` (None: all) problems of the EvalPlus file `data`; no fresh draws."""
        if data == f"{dataset}+":
            raise ValueError(f"EvalPlus problems are not shipped: give a local EvalPlus file ({FLAGS[dataset]} "
                             "FILE, or --data FILE)")
        return read_problems(data)[:n], Path(data).name
    return problems


def prompt(loaded, problem: dict, data: str = "", shots: int = 0):
    """[P] ids of the bare problem prompt after BOS (lm-eval humaneval's completion prompt)."""
    return encode(loaded.tokenizer, (loaded.tokenizer.bos_token or "") + problem["prompt"])


# `python -m evalplus.evaluate`, ending as soon as its results are written. EvalPlus 0.3.1's evaluate starts a
# non-daemon "stucking_checker" thread that sleeps 20 s at a time (evalplus/evaluate.py), so the process lived
# 20 s past its work whatever the number of samples: 20 s of every grading call (two thirds of grading one reply).
RUN_EVALUATE = """import os, sys, traceback
sys.argv[0] = "evalplus.evaluate"
code = 0
try:
    from evalplus.evaluate import main
    main()
except SystemExit as done:
    code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
except BaseException:
    traceback.print_exc()
    code = 1
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


def evaluate(task: Task, samples: str | Path, problems: list[dict], timeout: float = 3600.0) -> dict:
    """Grade `samples` (EvalPlus samples.jsonl: task_id, solution) against `problems` of `task` with
    `evalplus.evaluate`, inside bubblewrap. Writes <samples>_eval_results.json beside the samples, as
    EvalPlus does. Returns {"base": pass@1 %, "plus": pass@1 % (base and extra tests), "n", "sandbox",
    "per_task": {task_id: {"base", "plus"}}, "results_file"}."""
    if task.evalplus not in OVERRIDE_ENV:
        raise ValueError(f"EvalPlus grades {', '.join(f'{d}+' for d in OVERRIDE_ENV)}, not {task.name}")
    return _evaluate(task.evalplus, samples, problems, timeout)


def _evaluate(dataset: str, samples: str | Path, problems: list[dict], timeout: float = 3600.0) -> dict:
    if not bubblewrap_available():
        raise SandboxUnavailable("EvalPlus's evaluator runs generated code, only inside bubblewrap, which cannot run "
                                 "here: install it (Debian: apt-get install bubblewrap) on a kernel that allows user "
                                 "namespaces")
    samples = Path(samples)
    with tempfile.TemporaryDirectory(prefix="lopa-evalplus-") as work:
        work = Path(work)
        shutil.copy(samples, work / "samples.jsonl")
        write_jsonl(work / "problems.jsonl", problems)
        env = {OVERRIDE_ENV[dataset]: "/sandbox/problems.jsonl", "TOKENIZERS_PARALLELISM": "false"}
        command = bwrap_command(work, env=env) + [sys.executable, "-I", "-c", RUN_EVALUATE, "--dataset",
                                                  dataset, "--samples", "/sandbox/samples.jsonl", "--parallel", "1"]
        proc = subprocess.run(command, cwd=work, env={"PATH": os.defpath}, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        result_file = work / "samples_eval_results.json"
        if proc.returncode != 0 or not result_file.is_file():
            raise RuntimeError(f"evalplus.evaluate failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        target = samples.with_name(samples.stem + "_eval_results.json")
        shutil.copy(result_file, target)
    results = json.loads(target.read_text())["eval"]
    per_task = {tid: {"base": r[0]["base_status"], "plus": r[0]["plus_status"]} for tid, r in results.items()}
    n = len(per_task)
    passed = lambda key: sum(all(t[k] == "pass" for k in key) for t in per_task.values())
    return {"base": 100 * passed(("base",)) / n, "plus": 100 * passed(("base", "plus")) / n, "n": n,
            "sandbox": "bubblewrap", "per_task": per_task, "results_file": str(target)}


def grade_of(dataset: str):
    def grade(loaded, problem: dict, reply: str, allow_fallback: bool = False) -> dict:
        """Row fields for one reply (prompt + completion, EvalPlus-sanitized) by EvalPlus: correct where it
        passes the base and the extra tests, predicted the two statuses."""
        from evalplus.sanitize import sanitize
        solution = sanitize(problem["prompt"] + reply, problem["entry_point"])
        with tempfile.TemporaryDirectory(prefix="lopa-evalplus-one-") as folder:
            samples = write_jsonl(Path(folder) / "samples.jsonl", [{"task_id": problem["task_id"], "solution": solution}])
            status = _evaluate(dataset, samples, [problem])["per_task"][problem["task_id"]]
        return {"correct": int(status["base"] == status["plus"] == "pass"), "predicted": f"{status['base']}/{status['plus']}",
                "expected": "pass/pass"}
    return grade


HUMANEVAL_PLUS = Task("humaneval+", problems_of("humaneval"), prompt, grade_of("humaneval"), code=True,
                      evalplus="humaneval")
MBPP_PLUS = Task("mbpp+", problems_of("mbpp"), prompt, grade_of("mbpp"), code=True, evalplus="mbpp")
