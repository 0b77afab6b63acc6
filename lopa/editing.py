"""Token editing: a committed token is not final (LLaDA2.1's token-to-token edits; SGLang's JointThreshold).

The rule (docs/method.md, "Token editing"). Each round, before the anchor and from the same predictions the anchor
decides on (the last winner's forward), every committed position of the window (generated, not masked, its block
not yet cached) whose predicted token differs from its token, is not the mask token and has max_prob above
edit_threshold (strict) takes the predicted token. A block that is full, with every block before it full, stays in the
window while its latest forward proposes an edit there, for at most edit_post_steps rounds that edit it (its post-edit
rounds), and then joins the cache as D2F's step 5 says: a position can be edited exactly while its block is uncached,
and a block is cached once it stops changing (or its budget is spent), so the prefix cache never holds a stale token.
Once every position is committed, the rounds that only edit are "post" rounds; the decode ends when no uncached block
wants an edit any more: "no_change" (its last forward proposes none) or "budget" (what it proposes lies in blocks
whose post-edit rounds are spent). Every lookahead branch carries the round's edits (they are decided before the
branches are built), so the branch score compares branches on their masked positions as without editing.

Off at edit_threshold 1 (no probability is above 1): then nothing here acts, and a decode is what it is without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lopa.blocks import Branch
from lopa.settings import DecodeSettings

NO_CHANGE, BUDGET = "no_change", "budget"
EDIT_STOPS = (NO_CHANGE, BUDGET)


def editing_on(settings: DecodeSettings) -> bool:
    return settings.edit_threshold < 1.0


# -- pure helpers: no model, no decoder state; inputs never changed --------------------------------------------
def edit_proposals(window: torch.Tensor, token: torch.Tensor, max_prob: torch.Tensor, threshold: float,
                   mask_id: int) -> torch.Tensor:
    """[W] bool: the committed positions of a window (tokens [W]) whose prediction (token [W], max_prob [W]) is
    another token than theirs, not the mask token (an edit never takes a commit back), and sure above threshold."""
    return (window != mask_id) & (token != window) & (token != mask_id) & (max_prob > threshold)


def full_prefix(window: torch.Tensor, block_size: int, mask_id: int) -> int:
    """How many blocks of the window (tokens [W], whole blocks), from its front, hold no mask."""
    full = (window != mask_id).view(-1, block_size).all(-1).tolist()
    return next((b for b, f in enumerate(full) if not f), len(full))


def spent_blocks(post_rounds: dict[int, int], first: int, n_blocks: int, n_full: int, budget: int) -> torch.Tensor:
    """[n_blocks] bool: which window blocks (the first is block `first` of the sequence) may be edited no more: those
    of the full prefix (n_full blocks) that had `budget` post-edit rounds (post_rounds: {block: rounds})."""
    return torch.tensor([b < n_full and post_rounds.get(first + b, 0) >= budget for b in range(n_blocks)],
                        dtype=torch.bool)


@dataclass(frozen=True)
class Edits:
    """One round's edits: generated positions, the token each held, the token it took and that token's probability."""
    positions: list[int]
    old: list[int]
    new: list[int]
    prob: list[float]


NO_EDITS = Edits([], [], [], [])


class Editor:
    """The editing phase of the engine's loop, and the block budget it keeps (post_rounds: {block: post-edit rounds},
    saved with every resumable state). Off when settings.edit_threshold is 1: then edit, cacheable, settled, close
    and fields change nothing and record nothing."""

    def __init__(self, settings: DecodeSettings, mask_id: int):
        self.on = editing_on(settings)
        self.threshold, self.budget = settings.edit_threshold, settings.edit_post_steps
        self.block_size, self.mask_id = settings.block_size, mask_id
        self.post_rounds: dict[int, int] = {}

    def wanted(self, branch: Branch, token: torch.Tensor, max_prob: torch.Tensor) -> torch.Tensor:
        """[W] bool: the edits the predictions over branch's window (token [W], max_prob [W]) propose, less those in
        blocks whose post-edit rounds are spent."""
        window, N = branch.window(), self.block_size
        proposed = edit_proposals(window, token, max_prob, self.threshold, self.mask_id)
        spent = spent_blocks(self.post_rounds, branch.n_cached, window.numel() // N,
                             full_prefix(window, N, self.mask_id), self.budget)
        return proposed & ~spent.repeat_interleave(N)

    def edit(self, state: Branch, predictions) -> tuple[Branch, Edits]:
        """The round's edit phase: the state with every wanted edit made, and the edits. A block of the full prefix
        that takes one spends a post-edit round."""
        if not self.on:
            return state, NO_EDITS
        token, max_prob = predictions[0], predictions[1]
        at = self.wanted(state, token, max_prob).nonzero().flatten()            # [E] window indices
        if not at.numel():
            return state, NO_EDITS
        n_full = full_prefix(state.window(), self.block_size, self.mask_id)
        for b in sorted(set((at // self.block_size).tolist())):
            if b < n_full:
                self.post_rounds[state.n_cached + b] = self.post_rounds.get(state.n_cached + b, 0) + 1
        w0 = state.window_start
        edits = Edits((at + w0).tolist(), state.window()[at].tolist(), token[at].tolist(), max_prob[at].tolist())
        return state.with_tokens(at + w0, token[at]), edits

    def cacheable(self, branch: Branch, predictions, n_blocks: int) -> int:
        """Of the n_blocks leading blocks the cache schedule would cache, those before the first that still wants an
        edit by the predictions over branch's window (the winner's, from the round's forward)."""
        if not self.on or not n_blocks:
            return n_blocks
        wants = self.wanted(branch, predictions[0], predictions[1]).view(-1, self.block_size).any(-1).tolist()
        return next((b for b in range(n_blocks) if wants[b]), n_blocks)

    def settled(self, state: Branch, predictions) -> bool:
        """Whether no block of the window wants an edit any more (always, with editing off)."""
        return not self.on or not bool(self.wanted(state, predictions[0], predictions[1]).any())

    def stop(self, state: Branch, predictions) -> str:
        """Why editing ended: budget when the predictions over the window of the last forward (state: the winner as
        verified, before the blocks it completed were cached) still propose an edit, else no_change. (A final round,
        at edit_post_steps 0, ends on budget: no forward checks its last commits.)"""
        proposed = edit_proposals(state.window(), predictions[0], predictions[1], self.threshold, self.mask_id)
        return BUDGET if bool(proposed.any()) else NO_CHANGE

    def close(self, state: Branch, predictions, finished: bool, edits: Edits, winner: Branch, verified) -> tuple:
        """After a round's commit: whether the decode is done (the sequence finished and, editing, settled) and the
        round's record fields (fields(), with the stop reason when done). state: the new state, predictions: over
        its window; winner: the winning branch as verified, verified: its predictions."""
        done = finished and self.settled(state, predictions)
        return done, self.fields(edits, winner, verified, self.stop(winner, verified) if done and self.on else "")

    def fields(self, edits: Edits, branch: Branch | None = None, predictions=None, stop: str = "") -> dict:
        """The RoundRecord fields of editing: the round's edits, the winner's predictions at its committed window
        positions (what the next round's edits are decided on; branch: the winner as verified, predictions: over its
        window) and, in the decode's last round, why editing stopped. {} with editing off."""
        if not self.on:
            return {}
        out = {"edit_positions": edits.positions, "edit_old": edits.old, "edit_tokens": edits.new,
               "edit_prob": edits.prob, "edit_stop": stop}
        if branch is not None:
            seen = (branch.window() != self.mask_id).nonzero().flatten()        # [S] window indices
            out.update(edit_seen_positions=(seen + branch.window_start).tolist(),
                       edit_seen_argmax=predictions[0][seen].tolist(), edit_seen_max_prob=predictions[1][seen].tolist())
        return out


# -- the trace's side: edits re-derived from the recorded predictions alone (lopa.schema checks every trace) ----------
def derive_edits(records, threshold: float, budget: int, block_size: int, mask_id: int) -> list[list[tuple]]:
    """Each record's edits [(position, old token, new token, probability)], re-derived from the trace: round r's
    from round r - 1's winner (its window tokens after the round and its predictions at their committed positions,
    edit_seen_*), the window round r starts at, and the post-edit rounds the earlier edits spent. Plain lists, not the
    engine's tensors: an independent reading of the same rule. records: RoundRecords or the schema's records."""
    out: list[list[tuple]] = [[] for _ in records]
    if threshold >= 1.0:
        return out
    above = float(np.float32(threshold))          # the engine compares float32 probabilities in float32
    post: dict[int, int] = {}
    for r in range(1, len(records)):
        prev, start = records[r - 1], records[r].window_start
        if prev.kind == "final" or prev.winner >= len(prev.branch_tokens):
            continue
        tokens = prev.branch_tokens[prev.winner]
        window = tokens[start - prev.window_start:] if start >= prev.window_start else []
        blocks = [window[i:i + block_size] for i in range(0, len(window), block_size)]
        n_full = next((b for b, block in enumerate(blocks) if mask_id in block), len(blocks))
        first = start // block_size
        for p, t, q in zip(prev.edit_seen_positions, prev.edit_seen_argmax, prev.edit_seen_max_prob):
            b = (p - start) // block_size
            inside = max(start, prev.window_start) <= p < prev.window_start + len(tokens)
            if not inside or (b < n_full and post.get(first + b, 0) >= budget):
                continue
            old = tokens[p - prev.window_start]
            if old != mask_id and t != old and t != mask_id and q > above:
                out[r].append((p, old, t, q))
        for b in sorted({(p - start) // block_size for p, *_ in out[r]}):
            if b < n_full:
                post[first + b] = post.get(first + b, 0) + 1
    return out


def recorded_edits(record) -> list[tuple]:
    """A record's edits as derive_edits gives them."""
    return list(zip(record.edit_positions, record.edit_old, record.edit_tokens, record.edit_prob))
