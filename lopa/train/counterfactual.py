"""Counterfactual answers: training rows in which only the answer's own numbers give its results.

The shipped model recomputes a later line's result from the question instead of reading the two
operands written on the line (model card: with the operands visible, 100% of line-1
results right, 29-45% of later-line results). On real answers both paths give the same target, so
nothing in the loss prefers the one that generalises. A counterfactual row pairs a question with
the answer of another problem of the same length, renamed to the question's person and object, and
masks only the numbers the answer computes or copies (lopa/train/noise.py, the computed pattern):
its operands are visible and disagree with the question, so recomputing from the question is
wrong and reading the line is right.

No wrong text is ever a target: in these rows the loss sees results, the copy after `>>`, a later
line's first operand (the previous result) and the `####` number, each determined by the answer's
visible numbers. The operands and words that disagree with the question are context only.
"""

from __future__ import annotations

import random
import re

from lopa.problems import is_heldout, make_problem

FIRST_SENTENCE = re.compile(r"^(\w+) has \d+ (\w+)\.")


def person_and_object(question: str) -> tuple[str, str]:
    """("Leo", "stickers") from a question of lopa.problems ("Leo has 7 stickers. ...")."""
    m = FIRST_SENTENCE.match(question)
    if not m:
        raise ValueError(f"not a lopa.problems question: {question[:60]!r}")
    return m.group(1), m.group(2)


def counterfactual(rng: random.Random, problem: dict, steps: int, max_value: int) -> dict:
    """`problem` with its answer replaced by a fresh `steps`-step problem's answer (another chain of
    numbers, all valid arithmetic), spoken of the question's person and object."""
    while True:
        other = make_problem(rng, steps, max_value)
        if not is_heldout(other["question"]) and other["answer"] != problem["answer"]:
            break
    name, obj = person_and_object(problem["question"])
    other_name, other_obj = person_and_object(other["question"])
    answer = re.sub(rf"\b{other_name}\b", name, other["answer"])
    answer = re.sub(rf"\b{other_obj}\b", obj, answer)
    return {"question": problem["question"], "answer": answer}
