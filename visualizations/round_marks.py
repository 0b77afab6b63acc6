"""Where token editing happened on the round slider: a thin strip drawn under it (Gradio's Slider has no marks).

Post-edit rounds (records of kind "post": every position is committed, the round only edits and checks) are a
purple band, each round that rewrote a token a tick, at the slider's own positions (round i at i / last), and a
line in words names them, so a visitor scrubbing a run sees where its editing sits before reaching it. A run
that never edits gets nothing (""): the strip takes no room.
"""

from __future__ import annotations

from .markup import esc
from .palette import EDIT_COLOUR

POST_WORDS = "post-edit (only editing, nothing filled)"
SHOWN = 6          # edit rounds named one by one in the line; more are counted
# The track lines up with the slider's range input above it (measured in Gradio 6.31 at 1366 px: the input starts
# 17 px right of the strip's text box, past the slider's "0", and ends 19 px before it, past a one-digit max), and
# positions run between the thumb's centres at the two ends (THUMB_PX in). A longer max label shifts it a little.
THUMB_PX = 8
ROUND_MARKS_CSS = (
    ".lopa-round-marks{font-size:12px;margin:-6px 0 0 0}"
    ".lopa-round-track{position:relative;height:8px;background:#eeeeee;border-radius:2px;margin:0 19px 2px 17px}"
    f".lopa-round-post{{position:absolute;top:0;bottom:0;background:{EDIT_COLOUR};opacity:.55}}"
    f".lopa-round-edit{{position:absolute;top:-2px;bottom:-2px;width:3px;margin-left:-1px;background:{EDIT_COLOUR}}}"
    ".lopa-round-words{margin-left:17px}"
)


def spans(rounds) -> list[tuple[int, int]]:
    """Round numbers as runs of consecutive rounds, in order: [3, 4, 5, 9] -> [(3, 5), (9, 9)]."""
    out: list[list[int]] = []
    for r in sorted(set(rounds)):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return [(a, b) for a, b in out]


def span_words(a: int, b: int) -> str:
    return f"round {a}" if a == b else f"rounds {a}–{b}"


def _at(i: float, last: int) -> float:
    """Where round i sits along the slider, 0 to 1 (the slider runs from 0 to max(last, 1)), clipped to its ends."""
    return min(max(i / max(last, 1), 0.0), 1.0)


def _left(f: float) -> str:
    return f"calc({THUMB_PX}px + (100% - {2 * THUMB_PX}px) * {f:.4f})"


def round_marks(run) -> str:
    """HTML strip for the round slider of `run` (a RunResult, or anything with .records of RoundRecords): a band
    per stretch of post-edit rounds, a tick per round with an edit, and a line naming both; "" when none."""
    records = list(getattr(run, "records", None) or [])
    post = spans(i for i, rec in enumerate(records) if rec.kind == "post")
    edited = [i for i, rec in enumerate(records) if rec.edit_positions]
    if not (post or edited):
        return ""
    last = len(records) - 1
    marks = []
    for a, b in post:           # half a round either side: the band covers its rounds' slider stops
        left, right, title = _at(a - 0.5, last), _at(b + 0.5, last), f"{span_words(a, b)}: {POST_WORDS}"
        marks.append(f'<div class="lopa-round-post" data-rounds="{a}-{b}" title="{esc(title)}" '
                     f'style="left:{_left(left)};width:calc((100% - {2 * THUMB_PX}px) * {right - left:.4f})"></div>')
    for i in edited:
        n = len(records[i].edit_positions)
        marks.append(f'<div class="lopa-round-edit" data-round="{i}" title="round {i}: {n} token(s) edited" '
                     f'style="left:{_left(_at(i, last))}"></div>')
    words = [f"{span_words(a, b)}: {POST_WORDS}" for a, b in post]
    if edited:
        named = ", ".join(str(i) for i in edited[:SHOWN]) + (f" and {len(edited) - SHOWN} more" if len(edited) > SHOWN else "")
        words.append(f"edits in round{'s' if len(edited) > 1 else ''} {named} (ticks)")
    return (f'<div class="lopa-round-marks" data-post-rounds="{sum(b - a + 1 for a, b in post)}" '
            f'data-edit-rounds="{len(edited)}"><div class="lopa-round-track">{"".join(marks)}</div>'
            f'<div class="lopa-round-words">{esc("; ".join(words))}</div></div>')
