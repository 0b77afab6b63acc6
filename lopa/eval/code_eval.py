"""Unit-test grading as lm-eval's code tasks do it (HF `evaluate`'s `code_eval` metric), with every
program run inside our bubblewrap sandbox (lopa.tasks.sandbox.run_program) instead of in-process.

What the authors' numbers were graded with (zhijie-group/LoPA scale_dream_d2f/eval_dream7.sh, lm-eval
0.4.8, `--confirm_run_unsafe_code`, HF_ALLOW_CODE_EVAL=1):
- MBPP 3-shot: lm-eval `mbpp`; the response (cut at "[DONE]") is the candidate and the three
  `test_list` asserts (the task's `doc_to_target`) are the test.
- HumanEval 0-shot: lm-eval `humaneval` with `escape_until=true`; the candidate is prompt + the whole
  response (its `build_predictions`), the test is `test` + "check(entry_point)" (its `doc_to_target`).
`code_eval` runs `candidate + "\\n" + test` with `exec(program, {})` in a child process, 3 s limit;
pass@1 with one greedy sample is 1 when that returns without an exception, else 0.

Here: the same program text, the same 3 s, `__name__` = "builtins" as under `exec(program, {})` (an
`if __name__ == "__main__":` block in a completion does not run, as there), stdin closed (there a
read raises too). Pass is the sandbox's: the test, run in a process of its own against the
candidate's names, returned (lopa.tasks.sandbox).
Where the two can still differ: our limit is wall-clock from the sandboxed interpreters' start
(~0.1 s of bubblewrap and Python start-up inside the 3 s; theirs counts only the `exec`); our
sandbox caps memory at 2 GiB (theirs sets none); the functions each disables differ at the edges
(code_eval also removes `os.getcwd`, `os.chdir`, `help`, ...: a program that calls one fails there
and may pass here); the test passes the candidate copies of its values, so a test that checks an
argument changed in place, or passes a function of its own, fails here.

Without bubblewrap, grading refuses: generated code never runs outside the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

from lopa.tasks.sandbox import (
    CODE_EVAL_RUN_NAME,
    CODE_EVAL_TIMEOUT_S,
    Program,
    bubblewrap_available,
    isolation,
    run_program,
)


def require_bubblewrap() -> None:
    """Raise unless bubblewrap can sandbox a program here (checked before any decoding starts),
    saying whether it is not installed or installed but unable to start, and why."""
    if not bubblewrap_available():
        found = isolation()
        why = ("it is not installed" if found.bubblewrap == "not installed" else
               f"it is installed but cannot start: {found.reason}" if found.reason else "it is unavailable")
        raise RuntimeError(f"grading executes generated code and runs only inside bubblewrap here, and {why}; install "
                           "it (Debian: apt-get install bubblewrap, with util-linux's unshare and mount) on a kernel "
                           "that allows user namespaces")


def program(candidate: str, test: str) -> Program:
    """The program code_eval runs for one candidate: candidate, a newline, the test (and the
    sandbox runs the two parts in two processes)."""
    return Program(candidate, test)


def humaneval_program(problem: dict, completion: str) -> str:
    """lm-eval humaneval: candidate = prompt + completion; test = `test` + check(entry_point)."""
    return program(problem["prompt"] + completion, f"{problem['test']}\ncheck({problem['entry_point']})")


def lm_eval_sample_program(sample: dict) -> str:
    """The program for one lm-eval sample-log row: its filtered response and its rendered target
    (for mbpp the three asserts), exactly what lm-eval would have handed code_eval."""
    response = sample["filtered_resps"]
    while isinstance(response, list):            # [resp] or [[resp]], by filter and lm-eval version
        response = response[0]
    return program(response, sample["target"])


def grade_programs(programs: dict[str, str], out: str | Path, timeout: float = CODE_EVAL_TIMEOUT_S) -> dict:
    """Run each {id: program} in the sandbox; one pass/fail each, from how it exited. Writes `out`
    (JSONL: id, passed, status, seconds). Returns {"score": pass@1 %, "n", "passed", "sandbox",
    "per_task": {id: status}, "results_file"}."""
    require_bubblewrap()
    rows = []
    for task_id, text in programs.items():
        result = run_program(text, timeout=timeout, run_name=CODE_EVAL_RUN_NAME)
        rows.append({"task_id": task_id, "passed": result.passed, "status": result.status,
                     "seconds": round(result.seconds, 3), "sandbox": result.sandbox})
    out = Path(out)
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    passed = sum(row["passed"] for row in rows)
    return {"score": 100 * passed / len(rows) if rows else 0.0, "n": len(rows), "passed": passed,
            "sandbox": "bubblewrap", "per_task": {row["task_id"]: row["status"] for row in rows},
            "results_file": str(out)}


def grade_lm_eval_samples(samples: str | Path, out: str | Path | None = None) -> dict:
    """Grade (or re-grade) an lm-eval sample log (samples_<task>.jsonl, as run_lm_eval saves it):
    one program per document. Results go to graded_<task>.jsonl beside it unless `out` is given."""
    samples = Path(samples)
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    programs = {str(row["doc"].get("task_id", row["doc_id"])): lm_eval_sample_program(row) for row in rows}
    return grade_programs(programs, out or samples.with_name(samples.name.replace("samples_", "graded_", 1)))
