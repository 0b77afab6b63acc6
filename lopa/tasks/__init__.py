"""The task layer: what a benchmark, an evaluation and a study do around a decode, written once.

    task.py       the Task declaration: a task's problem format, prompt and grading
    synthetic.py  the model's own problem family (the bundled synthetic one): a Task
    gsm8k.py      GSM8K and GSM8K-format files: a Task
    humaneval.py  HumanEval: its problems, prompts, program text and grade in the sandbox: a Task
    mbpp.py       MBPP: local copies of its test split, lm-eval's question, its asserts in the sandbox: a Task
    hendrycks_math.py  MATH: local copies of the seven subjects, graded by lm-eval's minerva check: a Task
    evalplus.py   HumanEval+ and MBPP+: EvalPlus files, graded by EvalPlus's evaluator in bubblewrap: two Tasks
    sources.py    where problems come from: the data-file map, fresh problems of a model's family,
                  GSM8K-format files, a split's JSONL or Parquet files, the study's loader
    prompts.py    the GSM8K template, the few-shot prefix, a question's prompt ids
    grading.py    exact match on the `#### N` answer and the answer-line counts of a graded row
    sandbox.py    the code sandbox: generated code and its tests in two bubblewrap processes
                  (sandbox_child.py is what runs inside them)
    layout.py     the bundled model's layout: prompt template, answer blocks, block-causal attention
    timing.py     what a verify forward over B windows costs (the round benchmark, the adaptive study)
    hardware.py   the one line that says what the numbers ran on, and the software beside it
    results.py    rows and tables to CSV, Parquet and JSON, plots where matplotlib is installed
    turns.py      the Williams order in which configurations take their turns on each problem

Layer: imports the core and lopa.models; the harnesses (lopa.train, lopa.eval, lopa.bench, lopa.study)
import it, and nothing they share lives anywhere else.
"""

from __future__ import annotations

from pathlib import Path

from lopa.tasks import evalplus, gsm8k, hendrycks_math, humaneval, mbpp, sources, synthetic
from lopa.tasks.task import Task

TASKS: dict[str, Task] = {t.name: t for t in (synthetic.TASK, gsm8k.TASK, humaneval.TASK, mbpp.TASK,
                                              hendrycks_math.TASK, evalplus.HUMANEVAL_PLUS, evalplus.MBPP_PLUS)}


def task_for(data: str) -> Task:
    """The task a --data value names: a TASKS name, else by the file or folder it names: EvalPlus problems
    (HumanEval+ or MBPP+ by their task ids), an MBPP test split, a MATH copy, HumanEval problems, else the
    model's own family (synthetic, heldout, any GSM8K-format file or list of prompts)."""
    if data in TASKS:
        return TASKS[data]
    if not data:                  # no --data: the model's own family (Path("") would be the working folder)
        return synthetic.TASK
    row = sources.first_row(data) or {}
    if {"base_input", "plus_input"} <= set(row):
        return evalplus.MBPP_PLUS if str(row["task_id"]).startswith("Mbpp/") else evalplus.HUMANEVAL_PLUS
    if {"text", "test_list"} <= set(row) or Path(data).suffix == ".parquet" or (Path(data) / "full").is_dir():
        return mbpp.TASK
    if Path(data).is_dir():
        return hendrycks_math.TASK if any((Path(data) / name).is_dir() for pair in hendrycks_math.SUBJECTS.items()
                                          for name in pair) else mbpp.TASK
    return humaneval.TASK if humaneval.looks_like_humaneval(data) else synthetic.TASK
