"""Markdown tables for the benchmark reports (lopa.bench.gpu and the sections it draws on)."""

from __future__ import annotations


def table(rows: list[dict], columns: dict[str, str]) -> str:
    """A Markdown table: columns maps a row key to its heading; floats to 3 significant digits."""
    cell = lambda v: f"{v:.3g}" if isinstance(v, float) else "" if v is None else str(v)  # noqa: E731
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(r.get(key)) for key in columns) + " |" for r in rows])
