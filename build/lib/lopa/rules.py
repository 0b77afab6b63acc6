"""Pure tensor helpers for the decisions of a round. No model, no globals, no `.item()`.

Each function implements one rule of the design note (docs/method.md) and is tested on
hand-made values in tests/test_rules.py.
"""

from __future__ import annotations

import torch


def confidence(probs: torch.Tensor, metric: str) -> torch.Tensor:
    """Conf of each distribution. probs: [..., V] -> [...].

    max_prob = max p; neg_entropy = sum p log p (<= 0, higher = more certain); margin = p1 - p2.
    """
    if metric == "max_prob":
        return probs.amax(-1)
    if metric == "neg_entropy":
        return (probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
    if metric == "margin":
        top2 = probs.topk(2, dim=-1).values
        return top2[..., 0] - top2[..., 1]
    raise ValueError(f"unknown confidence metric {metric!r}")


def summarize(logits: torch.Tensor, metric: str, temperature: float,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reduce logits to what the decisions need. logits: [..., V] -> token, max_prob, conf: [...].

    Greedy (temperature 0): token = argmax, max_prob = its probability. With temperature > 0 the
    token is sampled from softmax(logits / T) and "max_prob" is the probability of the sampled
    token, so the commit threshold still asks "is the token we would write certain enough".
    """
    logits = logits.float()
    if temperature > 0:
        probs = torch.softmax(logits / temperature, dim=-1)
        flat = probs.reshape(-1, probs.shape[-1])
        token = torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
        max_prob = probs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    else:
        probs = torch.softmax(logits, dim=-1)
        max_prob, token = probs.max(-1)
    return token, max_prob, confidence(probs, metric)


def threshold_commit(max_prob: torch.Tensor, conf: torch.Tensor, tau: float,
                     fully_activated: bool) -> torch.Tensor:
    """D2F commit rule for one block's masked positions. [M] -> bool [M].

    Commit every position with max_prob > tau (strictly). If none qualifies and the block is
    fully activated, commit the single position with the highest Conf (first on ties); a
    semi-activated block may commit nothing (design note, D2F step 4).
    """
    chosen = max_prob > tau
    if chosen.numel() == 0:
        return chosen
    best = torch.zeros_like(chosen)
    best[conf.argmax()] = True
    fallback = best & ~chosen.any() & fully_activated
    return chosen | fallback


def top1_commit(max_prob: torch.Tensor, conf: torch.Tensor, tau: float,
                fully_activated: bool) -> torch.Tensor:
    """One token per round (classic low-confidence remasking): the highest-Conf position of a
    fully activated block. [M] -> bool [M]. `tau` is unused; the signature matches threshold_commit."""
    chosen = torch.zeros_like(max_prob, dtype=torch.bool)
    if chosen.numel() and fully_activated:
        chosen[conf.argmax()] = True
    return chosen


COMMIT_RULES = {"threshold": threshold_commit, "top1": top1_commit}


def lookahead_positions(conf: torch.Tensor, candidate: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k candidates with the highest Conf, best first. conf, candidate: [M] -> [<=k].

    Candidates are the masked positions left after the anchor's commits (LoPA step 2). Equal Conf
    is broken by position (earlier first), via a stable sort, so the order is deterministic.
    """
    scores = torch.where(candidate, conf.float(), torch.full_like(conf.float(), float("-inf")))
    order = torch.sort(scores, descending=True, stable=True).indices
    n = min(k, int(candidate.sum()))
    return order[:n]


def branch_score(conf: torch.Tensor) -> torch.Tensor:
    """C(B): mean Conf over every still-masked position of a branch's window (LoPA step 5).
    conf: [M] -> scalar. A branch with nothing left masked gets the highest possible score."""
    if conf.numel() == 0:
        return torch.tensor(float("inf"))
    return conf.float().mean()


def select_winner(scores: torch.Tensor) -> torch.Tensor:
    """Index of the winning branch. scores: [k + 1], index 0 = anchor, 1..k = lookahead by rank.

    Highest C wins. Ties prefer lookahead branches in rank order over the anchor, as the
    reference does: a tie means the extra token cost nothing, so keep it.
    """
    preference = torch.cat([torch.arange(1, scores.numel()), torch.zeros(1, dtype=torch.long)])
    return preference[scores[preference].argmax()]
