"""A ✓ / ✗ mark for a finished answer whose reference answer is known. Pure: strings in, HTML out."""

from __future__ import annotations

from .markup import esc


def answer_mark(check: tuple[bool, str] | None) -> str:
    """HTML for `check` = (right?, reference answer), as app.serving.examples.check_answer returns it;
    "" when nothing is known about the prompt (nothing is claimed then)."""
    if check is None:
        return ""
    right, reference = check
    glyph, word, colour = ("✓", "right", "#1a7f37") if right else ("✗", "wrong", "#cf222e")
    return (f'<div class="lopa-answer-mark" data-correct="{str(bool(right)).lower()}" '
            f'style="margin-top:4px;font-weight:600;color:{colour}">{glyph} {word}: the reference answer is '
            f'{esc(reference)}</div>')
