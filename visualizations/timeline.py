"""Facts re-derived from a trace without the model: who filled which position, when, how sure.

Every figure reads a RunResult (live snapshot or loaded file) through these helpers and lopa.trace's
fills / predictions, where the bookkeeping of "round r's anchor was decided from round r-1's winner
predictions" lives (the studies read them there too). Positions are generated-sequence indices
(0 = first position after the prompt).
"""

from __future__ import annotations

from lopa.trace import ANCHOR, LOOKAHEAD, Edit, Fill, Prediction, edits, fills, predictions  # noqa: F401  (the figures' names)


def commits(record) -> list[tuple[int, int, str]]:
    """(position, token, how) committed by this round: the anchor's, then the winning lookahead."""
    return [(p, t, LOOKAHEAD if ahead else ANCHOR) for p, t, ahead in record.filled()]


def last_forward_round(records) -> int:
    """Index of the last round that ran a forward (the final, forward-less round has nothing to show)."""
    return max((i for i, r in enumerate(records) if r.kind != "final"), default=0)


def detail_round(records, r: int) -> int:
    """The round whose branches, heatmap and rank lanes stand for round r: r itself, except at the final
    round, which has no forward and no branches; there, the last round before it that had lookahead
    branches (r if none had)."""
    if not records or records[r].kind != "final":
        return r
    return max((i for i, x in enumerate(records[:r]) if x.kind == "round" and x.lookahead_positions), default=r)


def n_positions(record, block_size: int) -> int:
    """Generated positions appended so far (all blocks, cached or not) after this record."""
    return len(record.block_states) * block_size


def committed_per_round(records) -> list[tuple[int, int]]:
    """(anchor commits, lookahead commits) per round."""
    return [(len(r.anchor_positions), int(r.winner > 0 and r.kind == "round")) for r in records]
