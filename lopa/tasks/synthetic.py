"""The model's own problem family: the bundled models' synthetic GSM-style problems (lopa.problems; their
held-out file, or fresh ones drawn with a seed) and any GSM8K-format file given to a model. Prompted and
graded as GSM8K (lopa.tasks.gsm8k), and where the model names its family (config.lopa.problems), each
answer's lines are also counted against what that family could have written (its phrasing)."""

from __future__ import annotations

from lopa.tasks import gsm8k
from lopa.tasks.task import Task


def phrasing(loaded) -> str | None:
    """The answer phrasing of the family the model was trained on, None where it names none."""
    family = loaded.spec.extra.get("problems")
    return family.get("phrasing", "plain") if family else None


def grade(loaded, problem: dict, reply: str, allow_fallback: bool = False) -> dict:
    return gsm8k.graded(problem, reply, phrasing(loaded))


TASK = Task("synthetic", gsm8k.problems, gsm8k.prompt, grade)
