"""A task: the format of its problems, the prompt a model decodes for one, and the grade of a reply,
declared once in the task's own module (`TASK = Task(...)`) and taken by the bench (lopa.bench), the
studies (lopa.study) and the evaluations (lopa.eval) alike; lopa.tasks.TASKS names them.

    synthetic.py  the model's own problem family (lopa.problems): GSM8K-format problems, graded by the
                  `#### N` answer and the family's own line counts
    gsm8k.py      GSM8K: the `#### N` answer by exact match
    humaneval.py  HumanEval: a reply becomes a program, graded by its unit tests in the code sandbox

MBPP, MATH and EvalPlus run through the harnesses the paper used (lopa.eval), which bring their own
prompts and grading; their files are read in sources.py.
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
    "predicted" and "expected" first. code: graded by running code (lopa.tasks.sandbox must run first)."""
    name: str
    problems: Callable[..., tuple[list[dict], str]]
    prompt: Callable[..., object]
    grade: Callable[..., dict]
    code: bool = False
