"""Facts re-derived from a trace without the model: who filled which position, when, how sure.

Every figure reads a RunResult (live snapshot or loaded file) through these helpers, so the
bookkeeping of "round r's anchor was decided from round r-1's winner predictions" lives in one
place. Positions are generated-sequence indices (0 = first position after the prompt).
"""

from __future__ import annotations

from dataclasses import dataclass

ANCHOR, LOOKAHEAD = "anchor", "lookahead"


@dataclass(frozen=True)
class Fill:
    """How one generated position got its token."""
    round: int          # round whose decisions committed it
    token: int
    how: str            # ANCHOR or LOOKAHEAD (the winning branch's extra token)
    max_prob: float     # probability of the token when it was chosen (nan if unknown)
    conf: float         # Conf of the position when it was chosen (nan if unknown)


@dataclass(frozen=True)
class Prediction:
    """What one forward predicted at a still-masked position."""
    token: int
    max_prob: float
    conf: float


def predictions(record, branch: int | None = None) -> dict[int, Prediction]:
    """Position -> prediction of `branch` (default: the winner) in this record's forward."""
    j = record.winner if branch is None else branch
    if j >= len(record.branch_positions):
        return {}
    return {p: Prediction(t, mp, c) for p, t, mp, c in zip(record.branch_positions[j], record.branch_argmax[j],
                                                          record.branch_max_prob[j], record.branch_conf[j])}


def commits(record) -> list[tuple[int, int, str]]:
    """(position, token, how) committed by this round: the anchor's, then the winning lookahead."""
    return [(p, t, LOOKAHEAD if ahead else ANCHOR) for p, t, ahead in record.filled()]


def fills(records, upto: int | None = None) -> dict[int, Fill]:
    """Position -> Fill for every position committed in rounds 0..upto (default: all)."""
    out: dict[int, Fill] = {}
    last = len(records) - 1 if upto is None else min(upto, len(records) - 1)
    for r in range(1, last + 1):
        # Round r's anchor and lookahead were chosen from round r-1's winner predictions.
        before = predictions(records[r - 1])
        for pos, token, how in commits(records[r]):
            seen = before.get(pos)
            out[pos] = Fill(r, token, how, seen.max_prob if seen else float("nan"), seen.conf if seen else float("nan"))
    return out


def last_forward_round(records) -> int:
    """Index of the last round that ran a forward (the final, forward-less round has nothing to show)."""
    return max((i for i, r in enumerate(records) if r.kind != "final"), default=0)


def n_positions(record, block_size: int) -> int:
    """Generated positions appended so far (all blocks, cached or not) after this record."""
    return len(record.block_states) * block_size


def committed_per_round(records) -> list[tuple[int, int]]:
    """(anchor commits, lookahead commits) per round."""
    return [(len(r.anchor_positions), int(r.winner > 0 and r.kind == "round")) for r in records]
