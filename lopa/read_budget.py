"""How much memory reading a trace may take, bounded before anything is parsed.

A trace file may come from anyone, so its read is priced first: read_cost bounds the peak bytes
that reading a JSON text takes (the text, what json.loads builds, the validated copy) from counts of
its characters alone, and check_read refuses a read over READ_BYTES, half of a session's trace
memory. lopa.trace (JSON), lopa.parquet_trace (Parquet) and the app's upload boxes call them;
lopa.schema then checks what the file holds.
"""

from __future__ import annotations

import os

# Memory first. A session may use TRACE_MEMORY_BYTES (LOPA_SESSION_MEMORY_MB) for traces: half to
# hold the ones it keeps (app/serving/budget.py charges each what it holds), half, READ_BYTES, to read the
# next one beside them, so the peak stays within the budget before the oldest are evicted and a
# file that fails to load costs no kept run. A read's peak (the text, what json.loads builds, the
# validated copy) is bounded before parsing by read_cost, from counts of the characters that make
# Python objects: READ_COST is the most bytes one occurrence becomes, measured on hostile shapes
# (nested empty lists, one-key dicts, unique keys, short strings; tests/test_app_budget.py).
TRACE_MEMORY_BYTES = int(os.environ.get("LOPA_SESSION_MEMORY_MB", "192")) << 20
READ_BYTES = TRACE_MEMORY_BYTES // 2
READ_COST = {"[": 120, "{": 320, ",": 52, ":": 130, '"': 22}
MAX_TRACE_BYTES = READ_BYTES // 2    # the file: its text and its strings already cost 2 bytes a character


def read_cost(text: str) -> int:
    """An upper bound on the bytes reading `text` takes at its peak (RunResult.from_json): the text
    and its strings (1 byte a character each when ASCII; up to 4 each otherwise, and a \\u escape
    can widen a whole string), plus READ_COST per structural character. Counts only, no parse."""
    return text_cost(len(text), not text.isascii() or "\\u" in text, text.count)


def text_cost(length, wide, count):
    """read_cost from a text's length in characters, whether it is wide, and `count(char)`, how often
    a character occurs in it: on one text (ints) or on many at once (numpy arrays, lopa.parquet_trace)."""
    return (2 + 6 * wide) * length + sum(cost * count(char) for char, cost in READ_COST.items())


def check_read(cost: int, reserve=None) -> None:
    """Go on with a read whose peak from here on is at most `cost` bytes: ValueError over READ_BYTES.
    `reserve(cost)`, the caller's own account (the app's budget, app/serving/budget.py), may refuse it too."""
    if cost > READ_BYTES:
        raise ValueError(f"reading this trace would take up to {cost / 2**20:.0f} MB of memory; a trace may take "
                         f"{READ_BYTES >> 20} MB to read (LOPA_SESSION_MEMORY_MB / 2): load a shorter run")
    if reserve is not None:
        reserve(cost)
