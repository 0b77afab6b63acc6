"""Lookahead chains (DecodeSettings.lookahead_depth = d): a branch commits up to d tokens beyond the anchor.

LoPA's branch j is the anchor plus one token, at its lookahead position q_j (depth 1). A chain extends
it: q_j, then d - 1 more positions, each holding the token the round's predictions (the last winner's
forward) put there. Every prefix of every chain is a row of the round's one batched forward, rows that
fill the same positions shared (a tree over sets of positions), so the row that holds a chain's first
i - 1 tokens predicts its i-th position conditioned on them. A chain's token i >= 2 stands when that
row still predicts it (its argmax; at temperature > 0 its sampled token: lopa.rules.summarize), at a
max prob of at least the lookahead floor; the branch keeps the longest prefix whose tokens all stand,
and its candidate for the round is that prefix's row. The winner is chosen among the anchor and these
candidates by the branch score, as in LoPA. A cut tail costs its rows in the batch and nothing else:
the kept prefix's row is in the batch, so the next round's predictions are the model's for exactly
the state it commits.

What the evidence covers (docs/method.md, "Deeper lookahead"): the tokens a winning chain commits won
the branch score together, as LoPA's one token wins it, and each past the first was predicted again by
the row before it. It is never less than a single LoPA token's for the committed set, not for each
token alone: a chain's one-token row is a candidate only when the chain keeps just that token, so a
winning chain's first token may have scored below the anchor on its own.

At d = 1 the rows are the anchor and the k one-token branches in rank order and every branch keeps its
one token: LoPA exactly. Pure helpers: no model, no `.item()` in the tensor helpers; inputs never changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lopa.blocks import Branch


def ranked_chains(look_pos: torch.Tensor, free: torch.Tensor, depth: int) -> list[torch.Tensor]:
    """The top positions at once: branch j's chain is q_j followed by the round's other lookahead
    proposals in rank order. look_pos: [K] window positions, best first -> K chains of [<= depth]."""
    return [torch.cat([q.view(1), look_pos[look_pos != q]])[:depth] for q in look_pos]


def adjacent_chains(look_pos: torch.Tensor, free: torch.Tensor, depth: int) -> list[torch.Tensor]:
    """Left to right from the branch's position: q_j followed by the next free positions after it (under the
    logit shift the model reads the token at p to predict p + 1). free: bool [W] -> K chains of [<= depth]."""
    after = free.nonzero().flatten()                                        # [F] ascending
    return [torch.cat([q.view(1), after[after > q]])[:depth] for q in look_pos]


# How a branch's chain continues past its lookahead position (docs/method.md, "Deeper lookahead", compares them).
CHAIN_PROPOSALS = {"ranked": ranked_chains, "adjacent": adjacent_chains}
PROPOSAL = "adjacent"


@dataclass(frozen=True)
class ChainPlan:
    """A round's chains and the rows that verify them.
    chains: per lookahead branch j (rank order), its window positions [<= d], q_j first.
    rows: per verified row, the window positions it fills beyond the anchor, ascending (row 0: the anchor,
    none; rows 1..K: the one-token branches, in rank order, as LoPA's; then the deeper prefixes).
    row_of: per branch j, the row of each prefix of its chain (row_of[j][i] holds its first i + 1 tokens)."""
    chains: list[torch.Tensor]
    rows: list[tuple[int, ...]]
    row_of: list[list[int]]


def plan_chains(chains: list[torch.Tensor]) -> ChainPlan:
    """The rows that verify `chains`: every prefix of every chain, once per distinct set of positions."""
    rows: list[tuple[int, ...]] = [()]
    index: dict[tuple[int, ...], int] = {(): 0}
    row_of: list[list[int]] = [[] for _ in chains]
    for i in range(max((c.numel() for c in chains), default=0)):           # depth by depth: rows 1..K one token each
        for j, chain in enumerate(chains):
            if i < chain.numel():
                key = tuple(sorted(chain[:i + 1].tolist()))
                if key not in index:
                    index[key] = len(rows)
                    rows.append(key)
                row_of[j].append(index[key])
    return ChainPlan(list(chains), rows, row_of)


def plan_branches(anchor: Branch, plan: ChainPlan, tokens: torch.Tensor) -> list[Branch]:
    """One Branch per row of the plan: the anchor plus the predicted tokens [W] at the row's positions."""
    w0 = anchor.window_start
    return [anchor] + [anchor.with_tokens(w0 + torch.tensor(row, dtype=torch.long), tokens[list(row)])
                       for row in plan.rows[1:]]


def kept_lengths(plan: ChainPlan, tokens: torch.Tensor, row_token: list[torch.Tensor],
                 row_max_prob: list[torch.Tensor], floor: float = 0.0) -> list[int]:
    """How many of each chain's tokens the verification stands behind. tokens: [W] the proposed token at every
    window position; row_token, row_max_prob: per row, the verify forward's predictions over its window [W_r].
    Token i >= 2 of chain j (at position p) stands when the row holding the chain's first i - 1 tokens
    predicts tokens[p] at p with max prob >= floor; the first token always stands (it is LoPA's)."""
    kept = []
    for chain, rows in zip(plan.chains, plan.row_of):
        n = min(1, chain.numel())
        while n < chain.numel():
            p, parent = chain[n], rows[n - 1]
            if not (row_token[parent][p] == tokens[p] and row_max_prob[parent][p] >= floor):
                break
            n += 1
        kept.append(n)
    return kept


def chain_cut(record, c: int, floor: float) -> dict | None:
    """Where chain c was cut, re-derived from the trace's numbers (kept_lengths, above): its first token
    not kept, the row holding the chain before it, and that row's prediction at its position. `failed` names the
    test it missed: "token" (the row predicts another token there), "floor" (the same token, at a max prob under
    the lookahead floor, the run's lookahead_min_prob) or "none" (the recorded numbers pass both). None when the
    chain was kept whole."""
    n, positions = record.chain_kept[c], record.chain_positions[c]
    if n >= len(positions):
        return None
    pos, token, row = positions[n], record.chain_tokens[c][n], record.chain_rows[c][n - 1]
    masked = record.branch_positions[row]
    at = masked.index(pos) if pos in masked else None          # a shared trace may hold no prediction there
    predicted = None if at is None else record.branch_argmax[row][at]
    max_prob = math.nan if at is None else record.branch_max_prob[row][at]
    failed = "none" if at is None else "token" if predicted != token else "floor" if max_prob < floor else "none"
    return {"kept": n, "proposed": len(positions), "position": pos, "token": token, "row": row,
            "predicted": predicted, "max_prob": max_prob, "floor": floor, "failed": failed}


def candidate_rows(plan: ChainPlan, kept: list[int]) -> list[int]:
    """The rows the branch score chooses among: the anchor (row 0), then each branch's kept prefix. A chain's
    shorter prefixes, its one-token row included, are verified and scored but are not candidates."""
    return [0] + [rows[n - 1] for rows, n in zip(plan.row_of, kept)]


def chain_plan(look_pos: torch.Tensor, free: torch.Tensor, depth: int) -> ChainPlan:
    """The round's chains (one per lookahead position, up to `depth` window positions each, drawn from
    `free` [W]) and the rows verifying them; depth 1: the anchor and one row per lookahead position."""
    return plan_chains(CHAIN_PROPOSALS[PROPOSAL](look_pos, free, depth))


def chain_fields(plan: ChainPlan, kept: list[int], branches: list[Branch]) -> dict:
    """A round's chains as the trace records them (RoundRecord.chain_*): generated positions and tokens of
    every branch's chain, the row of each of its prefixes, and how many of its tokens were kept."""
    w0 = branches[0].window_start
    return {"chain_positions": [(c + w0).tolist() for c in plan.chains],
            "chain_tokens": [branches[rows[-1]].window()[c].tolist() for c, rows in zip(plan.chains, plan.row_of)],
            "chain_rows": [list(rows) for rows in plan.row_of], "chain_kept": list(kept)}
