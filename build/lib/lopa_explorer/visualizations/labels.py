"""Token ids to short readable labels. `names` maps id -> decoded string; without it (a replayed
trace whose tokenizer is not available) ids are shown as `#id`."""

from __future__ import annotations

MASK_GLYPH = "▢"


def token_text(token: int, names: dict[int, str] | None) -> str:
    """The decoded string of a token, or `#id` when unknown."""
    if names and token in names:
        return names[token]
    return f"#{token}"


def token_label(token: int, names: dict[int, str] | None, mask_id: int | None = None) -> str:
    """A compact visible label: whitespace made visible, long tokens shortened."""
    if mask_id is not None and token == mask_id:
        return MASK_GLYPH
    text = token_text(token, names)
    if not text.strip():
        return text.replace("\n", "⏎").replace(" ", "␣").replace("\t", "⇥") or "∅"
    text = text.strip().replace("\n", "⏎")
    return text if len(text) <= 8 else text[:7] + "…"


def token_repr(token: int, names: dict[int, str] | None) -> str:
    """Exact string for hover text: quoted, with the id."""
    if names and token in names:
        return f"{names[token]!r} (id {token})"
    return f"id {token}"
