"""Token editing in words (lopa/editing.py): the line the round's explanation gives each round's edits, and why
editing stopped. The canvas marks the same edits (visualizations/canvas.py)."""

from __future__ import annotations

from .labels import token_label
from .markup import esc

STOP_WORDS = {"no_change": "the last forward proposes no edit", "budget": "the post-edit rounds are spent"}
SHOWN = 8          # edits named one by one; more are counted


def edit_line(rec, names: dict[int, str] | None, mask_id: int, threshold: float) -> str:
    """Markdown naming each edit of the round (position, old → new token, its probability), and, in the decode's
    last round, why editing stopped; "" for a round without either."""
    parts = []
    if rec.edit_positions:
        named = [f"position {p}: <code>{esc(token_label(old, names, mask_id))}</code> → "
                 f"<code>{esc(token_label(new, names, mask_id))}</code> ({q:.2f})"
                 for p, old, new, q in list(zip(rec.edit_positions, rec.edit_old, rec.edit_tokens, rec.edit_prob))[:SHOWN]]
        more = f" and {len(rec.edit_positions) - SHOWN} more" if len(rec.edit_positions) > SHOWN else ""
        parts.append(f"*Edits:* the model now reads {len(rec.edit_positions)} committed token(s) otherwise, with max "
                     f"prob above the editing threshold {threshold:g}, and rewrote them: {'; '.join(named)}{more}.")
    if rec.edit_stop:
        parts.append(f"Editing stopped: {STOP_WORDS.get(rec.edit_stop, esc(rec.edit_stop))}.")
    return " ".join(parts)


def post_round_text(rec, names: dict[int, str] | None, mask_id: int, threshold: float) -> str:
    """The explanation of a post-edit round: every position is committed, so the round only edits and checks."""
    return (f"**Round {rec.round} — post-edit round.** Every position is committed; a block whose last forward "
            f"still read a token otherwise stays out of the cache to be edited. "
            f"{edit_line(rec, names, mask_id, threshold)} The round's forward checks the edited text "
            f"({rec.forward_seconds * 1e3:.0f} ms); {rec.n_cached_blocks} block(s) now sit in the prefix cache.")
