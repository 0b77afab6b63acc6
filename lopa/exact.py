"""The exact conditionals of a problem whose right answers are known: what a perfect model predicts.

Given every right answer of a problem as token lists (with their weights: lopa.problems.phrasings lists
a likelier reading more often), the true distribution of the token at a masked position is the
weighted share, among the answers that agree with every filled token the position can see, of those
that have each token there. The oracle study decodes with it in place of a model
(lopa/study/oracle.py), and the trainer's on-policy rows use it as the target at the states the
model's own decodes reach (lopa/train/policy.py).

What a position can see follows the engine's layout: with the logit shift the output at position g-1
predicts g; under `block_causal` attention it sees the blocks up to its own (the first generated
position sees none: only the prompt), under `full` every filled position but g.

Shapes (notation in lopa/__init__.py): n generated positions, C distinct right answers, V vocabulary.
"""

from __future__ import annotations

from collections import Counter

import torch


def reading_table(answers: list[list[int]], n: int, eos: int, weights=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cands [C, n], weights [C]): the distinct answers, EOS-padded or cut to n, and how often each is
    listed (times its weight in `weights`, one per answer, when given)."""
    counts = Counter()
    for a, w in zip(answers, [1] * len(answers) if weights is None else weights):
        counts[tuple((a + [eos] * n)[:n])] += w
    cands = torch.tensor(list(counts), dtype=torch.long).reshape(len(counts), n)       # [C, n]
    return cands, torch.tensor(list(counts.values()), dtype=torch.float)               # [C]


def sees(n: int, g: int, block_size: int, attention: str) -> torch.Tensor:
    """Bool [n]: the generated positions the output that predicts position g can see (g itself excluded)."""
    pos = torch.arange(n)
    if attention == "block_causal":
        seen = pos // block_size <= ((g - 1) // block_size if g else -1)
    else:
        seen = torch.ones(n, dtype=torch.bool)
    return seen & (pos != g)


def exact_distribution(tokens: torch.Tensor, cands: torch.Tensor, weights: torch.Tensor, mask_id: int, vocab: int,
                       block_size: int, attention: str = "block_causal", positions=None):
    """(probs [n, V], defined [n] bool) for `tokens` [n] (mask_id where masked): each position's true
    distribution given what it sees. `defined` is False where no right answer agrees with what the
    position sees (a state no right answer passes through); its row is left zero. `positions` limits
    the result to those positions (the others' rows stay zero and undefined)."""
    n = tokens.numel()
    filled = tokens != mask_id                                                         # [n]
    seen = torch.stack([sees(n, g, block_size, attention) for g in range(n)]) & filled  # [n, n]
    wrong = (cands != tokens).float()                                                  # [C, n]
    agree = (seen.float() @ wrong.T) == 0                                              # [n, C]
    share = agree.float() * weights                                                    # [n, C]
    if positions is not None:
        keep = torch.zeros(n, dtype=torch.bool)
        keep[list(positions)] = True
        share = share * keep[:, None]
    probs = torch.zeros(n, vocab).scatter_add_(1, cands.T.contiguous(), share)        # [n, V]
    total = share.sum(1)                                                               # [n]
    defined = total > 0
    probs[defined] /= total[defined, None]
    return probs, defined


def exact_distribution_reference(tokens: torch.Tensor, cands: torch.Tensor, weights: torch.Tensor, mask_id: int,
                                 vocab: int, block_size: int, attention: str = "block_causal", positions=None):
    """exact_distribution one position at a time: the slow reference it is tested against."""
    n = tokens.numel()
    filled = tokens != mask_id                                                         # [n]
    probs = torch.zeros(n, vocab)
    defined = torch.zeros(n, dtype=torch.bool)
    for g in range(n) if positions is None else positions:
        seen = filled & sees(n, g, block_size, attention)
        agree = (cands[:, seen] == tokens[seen]).all(1)                                # [C]
        if agree.any():
            probs[g] = torch.zeros(vocab).index_add_(0, cands[agree, g], weights[agree])
            probs[g] /= probs[g].sum()
            defined[g] = True
    return probs, defined
