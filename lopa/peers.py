"""The commit rules of LoPA's peers, as pure tensor helpers over one block's masked positions.

Each takes what one block's still-masked positions predict ([M] tensors, window order) and whether
the block is fully activated, and returns which of them to commit (bool [M]). A fully activated block
always commits at least one position, as under D2F's fallback; a semi-activated block commits only
what the rule itself accepts, nothing forced (docs/method.md, "Peers"). The engine applies them block
by block through lopa.rules.COMMIT_RULES; tests/test_peers.py pins each to the published formula.

    eb       entropy-bounded unmasking (EB-Sampler): the lowest-entropy positions while their summed
             entropy, less the largest of them, stays within eb_gamma
    factor   Fast-dLLM's factor rule: the n most probable while c_(n) >= 1 - factor_f / (n + 1)
    frechet  Fast-dLLM++'s Fréchet profile: the largest n whose Fréchet lower bound on "all n right",
             less the best competitor's upper bound, exceeds frechet_margin
    joint    SGLang's JointThreshold, its mask-to-token step: every max prob > tau_conf, else the most
             probable (its token-to-token edits are not taken: docs/method.md)
    stable   after LESS: max prob > tau_conf, the same predicted token as the round before, and a
             Jensen–Shannon divergence between the two rounds' (that token, the rest) splits within stable_js
    learned  after Learn2PD: every position a filter trained on the model's own decodes (lopa/filter.py)
             calls final with probability > learned_threshold
    dawn     DAWN's dependency-aware rule, over the whole window at once: the sure positions, those a sure
             decoded position induces, and an independent set of the window's attention dependency graph
             (dawn_sets; the attention comes from the round's own forward, lopa/dependency.py)
"""

from __future__ import annotations

import math

import torch


def _leading(accepted: torch.Tensor) -> int:
    """How many of a sorted profile's conditions hold before the first that fails. bool [M] -> int."""
    return int(torch.cumprod(accepted.to(torch.int64), 0).sum())


def _first(sorted_index: torch.Tensor, n: int, size: int) -> torch.Tensor:
    """bool [size]: True at the first n entries of sorted_index."""
    chosen = torch.zeros(size, dtype=torch.bool)
    chosen[sorted_index[:n]] = True
    return chosen


def eb_commit(entropy: torch.Tensor, gamma: float, fully_activated: bool) -> torch.Tensor:
    """EB-Sampler. entropy [M] (nats) -> bool [M]. Sorted by entropy, lowest first (earlier position
    on ties), commit the longest prefix of n whose summed entropy less its largest, H_(1) + ... +
    H_(n-1), is <= gamma: the first is free in a fully activated block. A semi-activated block has
    no free position, so its whole sum H_(1) + ... + H_(n) must stay within gamma."""
    M = entropy.numel()
    if M == 0:
        return torch.zeros(0, dtype=torch.bool)
    order = torch.sort(entropy.double(), stable=True)
    spent = torch.cumsum(order.values, 0)                                        # [M] H_(1) + ... + H_(n)
    if fully_activated:
        n = 1 + _leading(spent[:-1] <= gamma)
    else:
        n = _leading(spent <= gamma)
    return _first(order.indices, n, M)


def factor_commit(max_prob: torch.Tensor, factor: float, fully_activated: bool) -> torch.Tensor:
    """Fast-dLLM's factor rule. max_prob [M] -> bool [M]. Sorted by max prob, highest first, commit
    the longest prefix whose n-th value (1-based) has c_(n) >= 1 - factor / (n + 1), the paper's
    (n + 1)(1 - c_(n)) < f in the published code's non-strict form; the first is free in a fully
    activated block. The published loop also commits the last position when only it fails, so it commits
    both of a two-position block whatever their max probs; this rule does not (docs/method.md, "Peers")."""
    M = max_prob.numel()
    if M == 0:
        return torch.zeros(0, dtype=torch.bool)
    order = torch.sort(max_prob.double(), descending=True, stable=True)
    n = torch.arange(1, M + 1, dtype=torch.float64)
    accepted = order.values >= 1 - factor / (n + 1)                              # [M]
    if fully_activated:
        accepted[0] = True
    return _first(order.indices, _leading(accepted), M)


def frechet_commit(max_prob: torch.Tensor, margin: float, fully_activated: bool) -> torch.Tensor:
    """Fast-dLLM++'s Fréchet profile rule. max_prob [M] -> bool [M]. With c_(1) >= ... >= c_(M) sorted,
    L_n = c_(1) + ... + c_(n) - (n - 1) bounds from below the chance that all n top tokens are right
    (Fréchet), U_n = 1 - c_(n) bounds from above the best competitor at the n-th; commit the n
    largest for the n with L_n - U_n > margin (a decreasing profile, so a prefix). The first is free
    in a fully activated block."""
    M = max_prob.numel()
    if M == 0:
        return torch.zeros(0, dtype=torch.bool)
    order = torch.sort(max_prob.double(), descending=True, stable=True)
    lower = torch.cumsum(order.values, 0) - torch.arange(M, dtype=torch.float64)     # [M] L_n
    score = lower - (1.0 - order.values)                                             # [M] L_n - U_n
    accepted = score > margin
    if fully_activated:
        accepted[0] = True
    return _first(order.indices, int(accepted.sum()), M)


def joint_commit(max_prob: torch.Tensor, tau: float, fully_activated: bool) -> torch.Tensor:
    """SGLang JointThreshold's mask-to-token step. max_prob [M] -> bool [M]: every max_prob > tau
    (strictly); if none and the block is fully activated, the most probable position (first on ties).
    D2F's threshold rule with its fallback ranked by max prob rather than by Conf."""
    chosen = max_prob > tau
    if chosen.numel() and fully_activated and not bool(chosen.any()):
        chosen[max_prob.argmax()] = True
    return chosen


def js_top1(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence (nats) between two rounds' distributions at a position, each coarsened to
    two outcomes: the predicted token with probability p, the rest with 1 - p. [M], [M] -> [M] in [0, ln 2].
    At most the divergence of the full distributions (merging outcomes never adds divergence), and of any
    split that keeps the token apart and lumps the rest; a top-K divergence that renormalises each round's
    K tokens and drops the rest can be smaller (docs/method.md, "Peers", `stable`)."""
    p, q = p.double().clamp(0.0, 1.0), q.double().clamp(0.0, 1.0)
    P, Q = torch.stack([p, 1 - p], -1), torch.stack([q, 1 - q], -1)                  # [M, 2]
    mid = (P + Q) / 2

    def kl(a, b):
        return torch.where(a > 0, a * (a.clamp_min(1e-300).log() - b.clamp_min(1e-300).log()), 0.0).sum(-1)
    return (kl(P, mid) + kl(Q, mid)) / 2


def stable_commit(max_prob: torch.Tensor, rank: torch.Tensor, token: torch.Tensor, prev_token: torch.Tensor,
                  prev_max_prob: torch.Tensor, tau: float, js_bound: float, fully_activated: bool) -> torch.Tensor:
    """The stability rule after LESS. [M] each -> bool [M]. A position is committed when three tests
    agree: max_prob > tau (confidence), its predicted token equals the one the round before predicted
    there (top-1 persistence; prev_token -1 where the position had no prediction), and js_top1 of the
    two rounds' top-1 probabilities is <= js_bound (stability). If none passes and the block is fully
    activated, the best by `rank` (the order's fallback ranking, Conf under the paper's order)."""
    persistent = (prev_token >= 0) & (token == prev_token)
    stable = js_top1(max_prob, torch.where(persistent, prev_max_prob, max_prob)) <= js_bound
    chosen = (max_prob > tau) & persistent & stable
    if chosen.numel() and fully_activated and not bool(chosen.any()):
        chosen[rank.argmax()] = True
    return chosen


def learned_commit(final: torch.Tensor, rank: torch.Tensor, threshold: float, fully_activated: bool) -> torch.Tensor:
    """The learned filter's rule after Learn2PD. final [M] (the filter's probability that each position's
    prediction is already the token the decode ends with), rank [M] -> bool [M]: every final > threshold
    (strictly); if none and the block is fully activated, the best by `rank` (D2F's fallback)."""
    chosen = final > threshold
    if chosen.numel() and fully_activated and not bool(chosen.any()):
        chosen[rank.argmax()] = True
    return chosen


MAX_JS = math.log(2)      # the largest Jensen–Shannon divergence, in nats


def independent_set(conflict: torch.Tensor, score: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
    """Greedy maximal independent set: take the best-scoring node left (first on ties), drop its neighbours,
    repeat. conflict bool [M, M] (symmetric), score [M], node bool [M] -> bool [M], a subset of `node`.
    DAWN's select_parallel_tokens_conflict_mis (lizhuo-luo/DAWN, llada/gdllm_utils.py lines 10-32)."""
    left = node.clone()
    chosen = torch.zeros_like(node)
    score = score.double()
    while bool(left.any()):
        best = int(torch.where(left, score, torch.full_like(score, float("-inf"))).argmax())
        chosen[best] = True
        left[best] = False
        left &= ~conflict[best]
    return chosen


def dawn_sets(attention: torch.Tensor, max_prob: torch.Tensor, masked: torch.Tensor, sink: float, edge: float,
              tau: float, induce: float, low: float) -> dict[str, torch.Tensor]:
    """DAWN's dependency-aware selection over one window (lizhuo-luo/DAWN, llada/generate.py lines 432-494,
    `get_transfer_index_dawn`; lopa/dependency.py collects the attention). -> bool [W] each, subsets of `masked`.

    attention [W, C]: each window position's (query row's) head- and layer-mean attention over C keys, the
    decoded context first (cached prefix) and the window's own W positions last; max_prob, masked [W].
      1. sinks (lines 435-437; detect_attn_sinks_, llada/gdllm_utils.py lines 50-58): keys whose mean
         attention over the rows exceeds `sink` are zeroed, and so is each position's attention to itself
         (line 440);
      2. edges (lines 454-455): j depends on key i when attention[j, i] >= edge;
      3. sure (lines 458-459): masked with max prob >= tau (the published literal 0.9 is tau_conf here);
      4. induced (lines 462-467): masked, depending on a decoded key whose own prediction is sure (every
         context key counts as decoded and sure: its row is cached), with max prob >= induce;
      5. conflict-free (lines 469-482): the masked positions with max prob >= low that are neither sure nor
         induced and depend on no position that is both, committed as a greedy maximal independent set of
         the window's dependency graph (edges either way), the most probable first (independent_set).
    It commits sure | induced | free (line 484); the sets come back apart, for the trace and the page, with what
    it held back: "conflict" (nodes the independent set left out: each leans on, or is leaned on by, one it
    took) and "leans" (over `low`, but leaning on a position both induced and sure). The published fallback
    (lines 486-491, the most probable masked position when nothing is chosen) is the caller's, block by block
    (lopa.rules.dawn_anchor)."""
    return dawn_select(*dawn_graph(attention, max_prob, masked, sink, edge, tau), max_prob, masked, tau, induce, low)


def dawn_graph(attention: torch.Tensor, max_prob: torch.Tensor, masked: torch.Tensor, sink: float, edge: float,
               tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What dawn_sets reads of the attention (steps 1, 2 and 4's test): (anchored bool [W], the masked positions
    that depend on a sure decoded key; edges bool [W, W], j depends on i, both masked). All a round's trace
    needs to re-derive the rule's commits from the predictions it records (lopa.rules.dawn_anchor)."""
    W, C = attention.shape
    ctx = C - W                                                           # context keys before the window
    att = attention.double().clone()                                      # [W, C]
    att[:, att.mean(0) > sink] = 0.0                                      # attention sinks (column mean)
    att[torch.arange(W), ctx + torch.arange(W)] = 0.0                     # no self-dependence
    edges = att >= edge                                                   # [W, C] j depends on key i
    decoded = torch.cat([torch.ones(ctx, dtype=torch.bool), ~masked & (max_prob.double() >= tau)])   # [C]
    anchored = masked & (edges & decoded).any(1)                          # [W]
    return anchored, edges[:, ctx:] & masked[:, None] & masked[None, :]   # [W], [W, W]


def dawn_select(anchored: torch.Tensor, edges: torch.Tensor, max_prob: torch.Tensor, masked: torch.Tensor, tau: float,
                induce: float, low: float) -> dict[str, torch.Tensor]:
    """dawn_sets' steps 3 to 5 on its graph (dawn_graph). anchored, max_prob, masked [W]; edges [W, W]."""
    p = max_prob.double()
    sure = masked & (p >= tau)                                            # [W]
    induced = anchored & (p >= induce)                                    # [W]
    near_both = (edges & (induced & sure)[None, :]).any(1)                # depends on a position both induced and sure
    candidate = masked & (p >= low) & ~sure & ~induced
    node = candidate & ~near_both
    free = independent_set(edges | edges.T, p, node)
    return {"sure": sure, "induced": induced & ~sure, "free": free, "conflict": node & ~free,
            "leans": candidate & near_both}
