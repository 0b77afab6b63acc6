"""Pure tensor helpers for the decisions of a round. No model, no globals, no `.item()`.

Each function implements one rule of the design note (docs/method.md) and is tested on
hand-made values in tests/test_rules.py.
"""

from __future__ import annotations

import torch

from lopa.settings import BRANCH_SCORE_RULES, MAX_ADAPTIVE_LIFT


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


def summarize(logits: torch.Tensor, metric: str, temperature: float, generator: torch.Generator | None = None,
              mask_token_id: int | None = None,
              mask_argmax: str = "next_best") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reduce logits to what the decisions need. logits: [..., V] -> token, max_prob, conf: [...].

    Probabilities and Conf come from the logits as they are, the mask token's included, as in the
    authors' `sample_tokens` (docs/method.md, departure 1). Greedy (temperature 0): token = argmax,
    max_prob = its probability. With temperature > 0 the token is sampled from softmax(logits / T)
    and "max_prob" is the probability of the sampled token, so the commit threshold still asks "is
    the token we would write certain enough". Where the token would be `mask_token_id`:
    mask_argmax "authors" keeps it (the authors' loop then writes the mask token back: the position
    stays masked); "next_best" takes the best other token (greedy) or draws among the others
    (sampling), with that token's own probability as max_prob.
    """
    logits = logits.float()
    probs = torch.softmax(logits / temperature if temperature > 0 else logits, dim=-1)      # [..., V]
    choose = probs
    if mask_token_id is not None and mask_argmax == "next_best":
        choose = probs.clone()
        choose[..., mask_token_id] = -1.0 if temperature == 0 else 0.0    # never chosen; probs untouched
    if temperature > 0:
        flat = choose.reshape(-1, choose.shape[-1])                                          # [*, V]
        token = torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
    else:
        token = choose.argmax(-1)
    max_prob = probs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
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


# -- branch score rules (the setting `branch_score`; "mean" is the paper's C(B)) ---------------------
# The paper scores a branch by the mean Conf of its still-masked positions "for simplicity" and names
# alternatives without testing them (Sec. 3); `python -m lopa.study calibration` compares these.
SCORE_WINDOW = 8        # positions of the sliding window and of the least-confident segment


def _front_window(conf: torch.Tensor) -> torch.Tensor:
    return conf[:SCORE_WINDOW].mean()


def _least_confident_segment(conf: torch.Tensor) -> torch.Tensor:
    if conf.numel() <= SCORE_WINDOW:
        return conf.mean()
    return conf.unfold(0, SCORE_WINDOW, 1).mean(-1).min()      # [M - w + 1] segment means


NOTHING_MASKED = float("inf")     # a branch with nothing left masked wins under every rule, as in branch_score


def _each(score):
    """A rule that scores each branch on its own: score(positions, max_prob, conf, tau) -> scalar."""
    return lambda masked, tau: [score(p, m, c.float(), tau) if c.numel() else torch.tensor(NOTHING_MASKED)
                                for p, m, c in masked]


def _leave_one_out(masked, tau: float) -> list[torch.Tensor]:
    common = masked[0][0]                                   # positions still masked in every branch
    for positions, _, _ in masked[1:]:
        common = common[torch.isin(common, positions)]
    scores = []
    for positions, _, conf in masked:
        conf, shared = conf.float(), torch.isin(positions, common)
        scores.append(torch.tensor(NOTHING_MASKED) if conf.numel() == 0
                      else conf[shared].mean() if bool(shared.any()) else conf.mean())
    return scores


# The rules by name (DecodeSettings.branch_score, docs/studies.md): each maps a round's branches,
# [(positions [M_j], max_prob [M_j], conf [M_j])], and tau to one score per branch.
BRANCH_SCORES = {
    "mean": _each(lambda p, m, conf, tau: branch_score(conf)),
    "loo": _leave_one_out,
    "min": _each(lambda p, m, conf, tau: conf.min()),
    "window": _each(lambda p, m, conf, tau: _front_window(conf)),
    "segment": _each(lambda p, m, conf, tau: _least_confident_segment(conf)),
    "count": _each(lambda p, max_prob, conf, tau: (max_prob > tau).sum().float()),
}
assert tuple(BRANCH_SCORES) == BRANCH_SCORE_RULES


def branch_scores(masked: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], rule: str = "mean",
                  tau: float = 0.9) -> torch.Tensor:
    """C(B_j) for every branch of a round under one rule. masked: per branch j, its still-masked
    window positions, their max_prob and their Conf, ([M_j], [M_j], [M_j]) in window order -> [B].

    mean     the paper's: mean Conf of the branch's masked positions (branch_score)
    loo      leave-one-out: mean Conf over the positions still masked in *every* branch, so all
             branches are compared on the same set (a branch no longer gains from dropping the
             low-confidence position it filled)
    min      the least confident masked position
    window   mean Conf of the first SCORE_WINDOW masked positions (the decoding front)
    segment  the least-confident run of SCORE_WINDOW consecutive masked positions (its mean)
    count    how many masked positions have max_prob > tau (what the next anchor would commit)
    A branch with nothing left masked scores +inf under every rule, as in branch_score.
    """
    if rule not in BRANCH_SCORES:
        raise ValueError(f"branch_score must be one of {BRANCH_SCORE_RULES}, got {rule!r}")
    return torch.stack(BRANCH_SCORES[rule](masked, tau))


def score_split(anchor_positions: list[int], anchor_conf: list[float], positions: list[int], conf: list[float],
                filled: int) -> dict | None:
    """What a lookahead branch's gain over the anchor under the mean rule is made of, from a trace's
    recorded lists. ΔC = C(B_j) - C(B_0) = removal + change, where
        removal = mean of the anchor's Conf without the filled position - C(B_0): what the branch
                  gains only because its own (usually low-confidence) position left the mean;
        change  = C(B_j) - that mean: what the extra token did to the other positions' Conf
                  (and to any block the branch alone added).
    Returns {"removal", "change", "delta"}, or None when a mean is undefined (nothing left masked)."""
    rest = [c for p, c in zip(anchor_positions, anchor_conf) if p != filled]
    if not anchor_conf or not rest or not conf:
        return None
    c0, c0_rest, cj = sum(anchor_conf) / len(anchor_conf), sum(rest) / len(rest), sum(conf) / len(conf)
    return {"removal": c0_rest - c0, "change": cj - c0_rest, "delta": cj - c0}


def choose_k(n_candidates: int, anchor_commits: int, n_near: int, cost: torch.Tensor, win: float = 0.35,
             release: float = 1.0, lift: float = 0.25) -> torch.Tensor:
    """The adaptive branch budget: how many of the ranked lookahead candidates to verify this round.

    cost: [K + 1] seconds of a round with B = 1 .. K + 1 branches, measured on the running device.
    Expected tokens committed this round and the next with k branches:
        E(k) = A + (1 - (1 - win)^k) * (release + lift * n_near)
    A = the anchor's commits this round; 1 - (1 - win)^k = the chance that one of k branches wins
    (each wins with chance `win`); a win commits its own token (`release` = 1) plus `lift` tokens per
    position of the n_near just under tau_conf. win and lift are the model's own (fit_gain, from a
    calibration decode; settings adaptive_win, adaptive_lift); the defaults: sure-gsm-dllm's win and an
    assumed lift. win is fitted at k = 1; branches are not independent (on sure-gsm-dllm, k = 2 won 71%
    of rounds against 1 - 0.65^2 = 58% predicted), so the model is conservative past k = 1.
    Returns k in 0..n_candidates maximising E(k) / cost[k], committed tokens per second; ties go to
    the larger k. Branches that cost nothing give the largest k; branches dearer than any gain, k = 0.
    """
    C = min(n_candidates, cost.numel() - 1)
    k = torch.arange(C + 1, dtype=torch.float64)                                      # [C + 1]
    expected = anchor_commits + (1 - (1 - win) ** k) * (release + lift * n_near)     # [C + 1]
    rate = expected / cost[:C + 1].double()
    return C - torch.flip(rate, [0]).argmax()                                          # the last maximum


def fit_gain(vanilla_tpf: float, one_tpf: float, one_forwards: int, branch_rounds: int, wins: int, near: int,
             release: float = 1.0, max_lift: float = MAX_ADAPTIVE_LIFT) -> tuple[float, float]:
    """(win, lift) of choose_k's gain model, from a calibration of the running model: the same problems
    decoded at k = 0 (tokens per forward `vanilla_tpf`) and at k = 1 (`one_tpf` over `one_forwards`
    forwards, of which `branch_rounds` verified a branch, `wins` won by it, `near` the n_near summed
    over those rounds).
        win  = wins / branch_rounds
        gain = (one_tpf - vanilla_tpf) * one_forwards / wins      tokens a won round adds in all
        lift = (gain - release) / (near / branch_rounds)          clipped to [0, max_lift]
    gain is the whole effect of a win, what it unlocks in later rounds included, which is what tokens
    per second sees; reading only the next round's commits would miss a cascade. No branch round, no
    win or no position near tau_conf leaves nothing to fit: lift 0 (a win is worth its own token)."""
    if branch_rounds <= 0 or wins <= 0:
        return 0.0, 0.0
    win = wins / branch_rounds
    gain = (one_tpf - vanilla_tpf) * one_forwards / wins
    mean_near = near / branch_rounds
    lift = (gain - release) / mean_near if mean_near > 0 else 0.0
    return win, min(max(lift, 0.0), max_lift)
