"""The app's own inputs, read in one place: every value an endpoint receives that is not a decode
setting (the prompt, the backend and its workers, a study's problem count, a round, a choice among
the page's options). Decode settings are read by the registry (lopa.settings.Setting.parse, through
resolve); everything else by these helpers, with the same kind of message: it names the input, says
what it may be and quotes at most a short prefix of what was given.

The wiring passes raw values to the callbacks (preprocess=False: app.panels.events.Wiring.on): Gradio's own checks
would answer a string in a number box with a traceback, and a 100 KB value outside a dropdown's
choices with that value in full, before any of this code could name the input.
"""

from __future__ import annotations

import math

MAX_PROMPT_CHARS = 100_000          # a prompt longer than this is refused before it is tokenized
QUOTE_CHARS = 60                    # the most of a bad value any message quotes


def shown(value) -> str:
    """`value` as a message quotes it: its repr, cut to QUOTE_CHARS (with its length when cut)."""
    text = repr(value) if not isinstance(value, (list, dict, tuple)) else f"a {type(value).__name__}"
    if len(text) <= QUOTE_CHARS:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[:QUOTE_CHARS - 3] + "..." + size


def text(name: str, value, limit: int = MAX_PROMPT_CHARS) -> str:
    """A text input (a string of at most `limit` characters); None reads as empty."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text (a string of at most {limit} characters), got {shown(value)}")
    if len(value) > limit:
        raise ValueError(f"{name} must be at most {limit} characters, got {len(value)}")
    return value


MAX_LISTED = 300      # characters of choices an error message lists; past it, it counts them


def choice(name: str, value, choices) -> str:
    """One of `choices` (strings), or ValueError naming the input and the choices."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        if len(choices) > 12 or len(listed) > MAX_LISTED:       # a message stays short: count them instead
            listed = f"{len(choices)} choices"
        raise ValueError(f"{name} must be one of {listed}; got {shown(value)}")
    return value


def whole(name: str, value, low: int, high: int) -> int:
    """A whole number in low..high, from a number or its text (a whole float is fine: number boxes send them)."""
    number = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and len(value) <= 40:
        try:
            parsed = float(value.strip())
        except ValueError:
            parsed = math.nan
        number = int(parsed) if math.isfinite(parsed) and parsed.is_integer() else None
    if number is None or not low <= number <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {shown(value)}")
    return number
