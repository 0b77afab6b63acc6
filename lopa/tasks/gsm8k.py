"""GSM8K (Cobbe et al. 2021) and any GSM8K-format file ({"question", "answer"}, the answer ending in
`#### N`): the question in the model's template (GSM8K's for a model without one) after the few-shot
examples, and the reply's answer part (up to a next "Question:") graded by exact match on the last
`#### N`. The paper's GSM8K numbers come from lm-eval (lopa.eval: lm-eval's gsm8k task, 4-shot, its strict
match on a local folder of train.jsonl and test.jsonl); the grade here is the quick mode."""

from __future__ import annotations

from pathlib import Path

from lopa.problems import final_answer
from lopa.tasks.grading import answer_text, score_answer
from lopa.tasks.prompts import question_ids
from lopa.tasks.sources import GSM8K_DIR, SPLITS, bench_problems
from lopa.tasks.task import Task


def problems(data: str, n: int, seed: int | None = None, family: dict | None = None) -> tuple[list[dict], str]:
    """lopa.tasks.sources.bench_problems: the first `n` of the file `data` names, or `n` fresh problems of
    the model's `family` drawn with `seed`."""
    return bench_problems(data, n, family, seed)


def prompt(loaded, problem: dict, data: str = "", shots: int = 0):
    """[P] ids of the problem's question as every command decodes it (lopa.tasks.prompts.question_ids)."""
    return question_ids(loaded, problem["question"], data, shots)


def graded(problem: dict, reply: str, phrasing: str | None = None) -> dict:
    """The row fields of a reply's answer part: lopa.tasks.grading.score_answer where the problem has a
    reference answer (`phrasing`: the problem family whose lines are counted), else the predicted answer
    alone (a bare prompt, correct None)."""
    text = answer_text(reply)
    if not problem.get("answer"):
        return {"correct": None, "predicted": final_answer(text), "expected": None}
    return score_answer(problem, text, phrasing)


def grade(loaded, problem: dict, reply: str, allow_fallback: bool = False) -> dict:
    return graded(problem, reply)


def lm_eval_files(data: str | Path | None = None) -> dict:
    """lm-eval's gsm8k task on the folder `data` (default: the shipped assets/data/gsm8k/) of
    {train,test}.jsonl."""
    folder = Path(data) if data else GSM8K_DIR
    if not all((folder / f"{split}.jsonl").is_file() for split in SPLITS):
        raise FileNotFoundError(f"GSM8K needs train.jsonl and test.jsonl in {folder}")
    return {"gsm8k/gsm8k.yaml": ("json", {split: [str((folder / f"{split}.jsonl").resolve())] for split in SPLITS})}


TASK = Task("gsm8k", problems, prompt, grade, lm_eval=lm_eval_files, metric="exact_match,strict-match")
