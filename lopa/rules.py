"""Pure tensor helpers for the decisions of a round. No model, no globals, no `.item()`.

Each function implements one rule of the design note (docs/method.md) and is tested on
hand-made values in tests/test_rules.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lopa import peers
from lopa.filter import block_features
from lopa.settings import BRANCH_SCORE_RULES, MAX_ADAPTIVE_LIFT, MAX_ADAPTIVE_RELEASE
from lopa.settings import COMMIT_RULES as COMMIT_RULE_NAMES


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
    and "max_prob" is the probability of the sampled token under that tempered softmax, so the commit
    threshold still asks "is the token we would write certain enough"; Conf comes from the same tempered
    probabilities. The authors' `sample_tokens` tempers alike; Fast-dLLM's code reads its confidence
    from the untempered softmax (docs/method.md, departure 4 and "Peers"). Where the token would be
    `mask_token_id`:
    mask_argmax "authors" keeps it (the authors' loop then writes the mask token back: the position
    stays masked); "next_best" takes the best other token (greedy) or draws among the others
    (sampling), with that token's own probability as max_prob; "excluded" sets its logit to -inf
    first, so probabilities and Conf are those of the other tokens alone.
    """
    logits = logits.float()
    if mask_token_id is not None and mask_argmax == "excluded":
        logits = logits.clone()                                  # the caller's logits stay as they are
        logits[..., mask_token_id] = float("-inf")
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


def pack_rows(token: torch.Tensor, max_prob: torch.Tensor, conf: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """A round's summaries as one tensor, [3, B, L] of `dtype`, so that they reach the host in one copy: one
    synchronisation per round. float64 holds every token id and float32 number exactly; float32 every token id
    below lopa.graphs.MAX_EXACT_TOKEN (what the executors copy back, lopa.forward.host_rows)."""
    return torch.stack([token.to(dtype), max_prob.to(dtype), conf.to(dtype)])


def unpack_rows(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pack_rows' tensor, on the host -> (token long, max_prob float32, conf float32), [B, L] each."""
    return packed[0].long(), packed[1].float(), packed[2].float()


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


@dataclass(frozen=True)
class BlockPredictions:
    """What one block's still-masked positions predict, as a commit rule reads them ([M] each, window
    order): the token and its max prob, Conf, the order policy's fallback ranking (Conf under the
    paper's order), and the token and max prob the round before predicted there (prev_token -1 where
    it predicted none: round 1, or a block added since). commit=learned also reads each position's place
    in its block (offset [M]), the block's place in the window (block, 0 = the first after the cache) and
    the model's commit filter (lopa.filter.CommitFilter; None under the other rules)."""
    token: torch.Tensor
    max_prob: torch.Tensor
    conf: torch.Tensor
    rank: torch.Tensor
    prev_token: torch.Tensor
    prev_max_prob: torch.Tensor
    offset: torch.Tensor | None = None
    block: int = 0
    commit_filter: object = None


def filter_final(b: BlockPredictions, block_size: int, full: bool) -> torch.Tensor:
    """[M]: the commit filter's probability that each masked position's prediction is final (lopa/filter.py)."""
    if b.commit_filter is None or b.offset is None:
        raise ValueError("commit=learned needs the model's commit filter: decode through lopa.engine.Decoder, "
                         "which loads it from the model folder (lopa.filter.filter_for)")
    return b.commit_filter.probability(filter_features(b, block_size, full))


def filter_features(b: BlockPredictions, block_size: int, full: bool) -> torch.Tensor:
    """[M, F]: the commit filter's features of one block's masked positions (lopa.filter.block_features), as the
    rule reads them and as its training records them (lopa.train.filter)."""
    return block_features(b.token, b.max_prob, b.conf, b.prev_token, b.prev_max_prob, b.offset, block_size,
                          b.block == 0, full)


# The commit rules by name (DecodeSettings.commit): each maps one block's BlockPredictions, the settings
# and whether the block is fully activated to the positions it commits, bool [M]. The peers' are
# lopa.peers'; eb reads the entropy as -Conf (DecodeSettings requires confidence=neg_entropy with it).
COMMIT_RULES = {
    "threshold": lambda b, s, full: threshold_commit(b.max_prob, b.rank, s.tau_conf, full),
    "top1": lambda b, s, full: top1_commit(b.max_prob, b.rank, s.tau_conf, full),
    "eb": lambda b, s, full: peers.eb_commit(-b.conf, s.eb_gamma, full),
    "factor": lambda b, s, full: peers.factor_commit(b.max_prob, s.factor_f, full),
    "frechet": lambda b, s, full: peers.frechet_commit(b.max_prob, s.frechet_margin, full),
    "joint": lambda b, s, full: peers.joint_commit(b.max_prob, s.tau_conf, full),
    "stable": lambda b, s, full: peers.stable_commit(b.max_prob, b.rank, b.token, b.prev_token, b.prev_max_prob,
                                                     s.tau_conf, s.stable_js, full),
    "learned": lambda b, s, full: peers.learned_commit(filter_final(b, s.block_size, full), b.rank,
                                                       s.learned_threshold, full),
}


def dawn_anchor(attention: torch.Tensor | None, max_prob: torch.Tensor, rank: torch.Tensor, masked: torch.Tensor,
                candidates: torch.Tensor, fully_activated: list[bool], s) -> tuple[torch.Tensor, dict[str, list[int]]]:
    """commit=dawn over a whole window (its dependency graph spans the blocks): lopa.peers.dawn_sets over the
    positions still `masked`, kept to the `candidates` (a script may hold some back), then D2F's fallback block
    by block: a fully activated block where it chose nothing commits its best candidate by `rank`, a
    semi-activated one nothing (as under every rule here; DAWN's own fallback is one position per sequence).
    attention [W, C] (lopa.dependency), max_prob, rank, masked, candidates [W] -> (chosen bool [W], why: each
    set's window positions, "fallback" included, and the graph it decided on, "anchored" positions and "edges"
    [j, i] pairs (lopa.peers.dawn_graph), for the trace: its commits re-derive from them)."""
    if attention is None:
        raise ValueError("commit=dawn reads the attention of the round's forward: decode with the batched executor "
                         "(executor batched or batched_eager), in one process")
    anchored, edges = peers.dawn_graph(attention, max_prob, masked, s.dawn_sink, s.dawn_edge, s.tau_conf)
    parts = {name: part & candidates for name, part in peers.dawn_select(
        anchored, edges, max_prob, masked, s.tau_conf, s.dawn_induce, s.dawn_low).items()}
    chosen = parts["sure"] | parts["induced"] | parts["free"]
    fallback = torch.zeros_like(chosen)
    N = s.block_size
    for b, full in enumerate(fully_activated):
        idx = candidates[b * N:(b + 1) * N].nonzero().flatten() + b * N      # [M] candidates of block b
        if full and idx.numel() and not bool(chosen[idx].any()):
            fallback[idx[rank[idx].argmax()]] = True
    parts["fallback"] = fallback
    why = {name: part.nonzero().flatten().tolist() for name, part in {**parts, "anchored": anchored}.items()}
    return chosen | fallback, {**why, "edges": edges.nonzero().tolist()}     # edges: [j, i], j depends on i


# Rules that decide over the whole window at once (the order policy calls them with its RoundView).
# -> (chosen bool [W], {reason: window positions}: why each was or was not committed, for the trace).
WINDOW_RULES = {"dawn": lambda view, rank: dawn_anchor(
    view.attention, view.max_prob, rank, view.unfilled if view.unfilled is not None else view.masked, view.masked,
    view.fully_activated, view.settings)}
assert tuple(COMMIT_RULES) + tuple(WINDOW_RULES) == COMMIT_RULE_NAMES


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


def choose_k(n_candidates: int, n_near: int, cost: torch.Tensor, win: float = 0.35, release: float = 0.2,
             lift: float = 0.0) -> torch.Tensor:
    """The adaptive branch budget: how many of the ranked lookahead candidates to verify this round.

    cost: [K + 1] seconds of a round with B = 1 .. K + 1 branches, measured on the running device.
    A round with k branches costs cost[k] - cost[0] more than one without. A won round saves
        S = release + lift * n_near
    forwards later in the decode (what the winner commits now and what it settles for later rounds;
    n_near = free positions just under tau_conf), each worth about a round without branches, cost[0].
    One of k branches wins with chance P(k) = 1 - (1 - win)^k. The budget is the k that saves the most
    expected seconds:
        P(k) * S * cost[0] - (cost[k] - cost[0])
    The anchor's commits this round do not enter: they are made with or without branches. win, release
    and lift are the model's own (fit_gain, from a calibration decode; settings adaptive_win,
    adaptive_release, adaptive_lift); the defaults, sure-gsm-dllm's win and what a win saves there.
    win is fitted at k = 1; branches are not independent (on sure-gsm-dllm, k = 2 won 71% of rounds
    against 1 - 0.65^2 = 58% predicted), so the model is conservative past k = 1.
    Returns k in 0..n_candidates; ties go to the larger k. Branches that cost nothing give the largest
    k; branches dearer than any saving, k = 0.
    """
    C = min(n_candidates, cost.numel() - 1)
    k = torch.arange(C + 1, dtype=torch.float64)                                      # [C + 1]
    c = cost[:C + 1].double()                                                         # [C + 1]
    saved = (1 - (1 - win) ** k) * (release + lift * n_near) * c[0] - (c - c[0])      # [C + 1] seconds
    return C - torch.flip(saved, [0]).argmax()                                         # the last maximum


def fit_gain(problems: list[dict], max_release: float = MAX_ADAPTIVE_RELEASE,
             max_lift: float = MAX_ADAPTIVE_LIFT) -> tuple[float, float, float]:
    """(win, release, lift) of choose_k's gain model, from a calibration of the running model: the same
    problems decoded at k = 0 and at k = 1, one dict per problem:
        saved     forwards the k = 1 decode saved against k = 0: what its wins settled in later rounds
                  counts, as the time of a decode sees it
        rounds    its rounds that verified a branch; wins: of those, won by the branch
        near_won  n_near (AdaptiveOrder's count) summed over the won rounds
    win = sum(wins) / sum(rounds); release and lift by least squares over the problems, both >= 0:
        saved_p = release * wins_p + lift * near_won_p
    Both are fitted because what a win is worth depends on the ranking: under top-Conf a win mostly
    tips positions just under tau_conf (lift), under least_confident it settles an open choice that
    decides others whatever sits near the threshold (release). No branch round or no win leaves nothing
    to fit: (0, 0, 0)."""
    rounds, wins = sum(p["rounds"] for p in problems), sum(p["wins"] for p in problems)
    if rounds <= 0 or wins <= 0:
        return 0.0, 0.0, 0.0
    X = torch.tensor([[p["wins"], p["near_won"]] for p in problems], dtype=torch.float64)   # [P, 2]
    y = torch.tensor([p["saved"] for p in problems], dtype=torch.float64)                   # [P]
    fits = [torch.linalg.lstsq(X, y[:, None]).solution[:, 0]]                                 # both free
    for col in (0, 1):                                   # one coefficient alone, the other at 0
        x, fit = X[:, col], torch.zeros(2, dtype=torch.float64)
        if x @ x > 0:
            fit[col] = x @ y / (x @ x)
        fits.append(fit)
    feasible = [f for f in fits if bool((f >= 0).all())] or [torch.zeros(2, dtype=torch.float64)]
    release, lift = min(feasible, key=lambda f: float(((X @ f - y) ** 2).sum())).tolist()
    return wins / rounds, min(release, max_release), min(lift, max_lift)
