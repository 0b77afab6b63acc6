"""Grading a generated answer against a GSM8K-format problem: exact match on the `#### N` answer,
and for the synthetic family the counts of answer lines that copy the question's names and that the
family could have written. (Generated code is graded by running it: lopa.tasks.sandbox.)
"""

from __future__ import annotations

from lopa.problems import copied_names, final_answer, grammatical_lines

ANSWER_END = "Question:"    # under GSM8K's template a base model goes on to write the next shot


def answer_text(text: str) -> str:
    """The answer part of a decode: up to the next "Question:" it starts writing, if any."""
    return text.split(ANSWER_END)[0]


def exact_match(text: str, reference: str | None) -> tuple[int | None, str | None, str | None]:
    """(correct 0/1, predicted, expected): the last `#### N` of `text` against the reference answer's;
    correct is None where there is no reference (a bare prompt)."""
    predicted = final_answer(text)
    if reference is None:
        return None, predicted, None
    expected = final_answer(reference)
    return int(predicted is not None and predicted == expected), predicted, expected


def score_answer(problem: dict, text: str, phrasing: str | None = None) -> dict:
    """Exact match on the `#### N` answer, the problem's reasoning steps (its calculator annotations),
    how many answer lines name the question's person and object (lopa.problems.copied_names), and,
    when the model's problem family is known, how many lines that family could have written
    (lopa.problems.grammatical_lines: a spliced line fails it)."""
    correct, predicted, expected = exact_match(text, problem["answer"])
    names_right, lines = copied_names(problem["question"], text)
    well_formed, all_lines = grammatical_lines(text, phrasing) if phrasing else (0, 0)
    return {"correct": correct, "predicted": predicted, "expected": expected, "steps": problem["answer"].count("<<"),
            "lines": lines, "names_right": names_right, "grammar_ok": well_formed, "grammar_lines": all_lines}
