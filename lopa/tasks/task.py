"""A task: the format of its problems, the prompt a model decodes for one, and the grade of a reply,
declared once in the task's own module (`TASK = Task(...)`) and taken by the bench (lopa.bench), the
studies (lopa.study) and the evaluations (lopa.eval) alike; lopa.tasks.TASKS names them.

    synthetic.py       the model's own problem family (lopa.problems): GSM8K-format problems, graded by the
                       `#### N` answer and the family's own line counts
    gsm8k.py           GSM8K: the `#### N` answer by exact match
    humaneval.py       HumanEval: a reply becomes a program, graded by its unit tests in the code sandbox
    mbpp.py            MBPP: a reply graded by the problem's three asserts in the code sandbox
    hendrycks_math.py  MATH (the minerva_math subjects): the boxed answer, graded by lm-eval's own check
    evalplus.py        HumanEval+ and MBPP+: EvalPlus's problems, graded by EvalPlus in the code sandbox

Where the paper's harness grades a task, its declaration says which: `lm_eval` (lm-eval runs it from
local files, `metric` its score where lm-eval's metric is the grade) or `evalplus` (EvalPlus's
evaluator grades it); lopa.eval reads these and nothing else to run a task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """name: what --data calls it. problems(data, n, seed=None, family=None) -> (the first `n` problems that
    --data `data` names, where they came from; `seed`: `n` fresh ones of the model's `family` instead, where
    the task has a family). prompt(loaded, problem, data="",
    shots=0) -> [P] prompt ids (`data`: the --data value, which picks GSM8K's template for gsm8k on a model
    without one; `shots`: GSM8K training examples before it). grade(loaded, problem, reply,
    allow_fallback=False) -> the row fields of one graded reply, "correct" (0/1, None without a reference),
    "predicted" and "expected" first. code: graded by running code (lopa.tasks.sandbox must run first).
    lm_eval(data) -> {lm-eval task YAML (relative to lm-eval's tasks folder): (datasets builder,
    {split: [files]})} of the local copy at `data`, where lm-eval runs the task (None: it does not).
    metric: lm-eval's metric that is the score ("": a code task, its saved replies graded in the sandbox).
    evalplus: the EvalPlus dataset whose evaluator grades the task ("": none)."""
    name: str
    problems: Callable[..., tuple[list[dict], str]]
    prompt: Callable[..., object]
    grade: Callable[..., dict]
    code: bool = False
    lm_eval: Callable[..., dict] | None = None
    metric: str = ""
    evalplus: str = ""
