"""Example prompts and the answers known for them, so a finished run can say whether it is right.

The default list holds held-out synthetic problems, the family the bundled models were trained on, which they
answer (tests/test_teach_words.py decodes each): first those on which the filling order matters (picked by
scripts/pick_examples.py: LoPA's token filling order differs from vanilla D2F's), then more held-out problems.
Real GSM8K test questions are apart (checkpoint_examples), marked as what a real D2F checkpoint is for: the
bundled models cannot answer them, so a newcomer's first pick is never one of them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from lopa.models import ASSETS
from lopa.problems import final_answer

ORDER_SENSITIVE = ASSETS / "data" / "synthetic" / "examples.jsonl"   # scripts/pick_examples.py
HELDOUT = ASSETS / "data" / "synthetic" / "heldout.jsonl"
GSM8K_TEST = ASSETS / "data" / "gsm8k" / "test.jsonl"

SYNTHETIC_LABEL = ("examples: held-out synthetic problems (the bundled model's family), first those where "
                   "LoPA fills the answer in another order than vanilla D2F")
GSM8K_LABEL = ("for a real D2F checkpoint: GSM8K test questions. The bundled models were not trained on these and "
               "cannot answer them; load a real checkpoint (model panel), or replay a trace recorded from one")


def _read(path: Path, limit: int | None = None) -> list[dict]:
    """Rows {"question", "answer"} of a JSONL file; [] when it is missing or unreadable."""
    try:
        with path.open() as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []
    rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("question"), str) and r["question"].strip()]
    return rows[:limit] if limit is not None else rows


def example_groups(per_file: int = 4) -> list[tuple[str, list[str]]]:
    """[(label, prompts)]: the default examples, those the bundled models answer (the synthetic ones,
    order-sensitive first)."""
    picked = [r["question"] for r in _read(ORDER_SENSITIVE)]
    more = [r["question"] for r in _read(HELDOUT, per_file + len(picked)) if r["question"] not in picked]
    synthetic = picked + more[: max(per_file - len(picked), 0) + 2]
    return [(SYNTHETIC_LABEL, synthetic)] if synthetic else []


def checkpoint_examples(per_file: int = 4) -> tuple[str, list[str]]:
    """(label, prompts): real GSM8K questions, for a real checkpoint (the page keeps them in a closed folder
    under the default examples)."""
    return GSM8K_LABEL, [r["question"] for r in _read(GSM8K_TEST, per_file)]


@functools.lru_cache(maxsize=1)
def _references() -> dict[str, str]:
    refs = {}
    for path in (GSM8K_TEST, HELDOUT, ORDER_SENSITIVE):
        for r in _read(path):
            answer = final_answer(str(r.get("answer", "")))
            if answer is not None:
                refs[" ".join(r["question"].split())] = answer
    return refs


def reference_answer(prompt: str) -> str | None:
    """The known final answer (`#### N`) of a prompt from the example files, else None."""
    return _references().get(" ".join(str(prompt).split()))


def check_answer(prompt: str, text: str) -> tuple[bool, str] | None:
    """(right?, reference answer) for a prompt with a known answer; None for any other prompt."""
    reference = reference_answer(prompt)
    if reference is None:
        return None
    return final_answer(text or "") == reference, reference
