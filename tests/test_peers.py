"""The peers' commit rules (lopa/peers.py) on hand-made logits, each pinned to a transcription of its
published formula. The transcriptions live here, cited by repository, commit, file and lines; the
rules under test are lopa's own."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lopa.peers import eb_commit, factor_commit, frechet_commit, joint_commit, js_top1, learned_commit, stable_commit
from lopa.rules import summarize


def block_logits(seed: int, M: int = 12, V: int = 40, sharp=(0.0, 9.0)) -> torch.Tensor:
    """[M, V] logits for one block's masked positions, each with its own sharpness, so the profile
    of max probs and entropies spreads from near-uniform to near-certain."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.empty(M, 1).uniform_(*sharp, generator=g)
    return (torch.randn(M, V, generator=g, dtype=torch.float64) * scale)


def ours(logits: torch.Tensor):
    """What the engine's rules read: max prob and Conf = neg_entropy, as summarize computes them."""
    _, max_prob, conf = summarize(logits, "neg_entropy", 0.0)
    return max_prob, conf


def chosen(mask: torch.Tensor) -> set[int]:
    return set(mask.nonzero().flatten().tolist())


# -- transcriptions of the published code (one block, batch 1) -------------------------------------------
def sglang_eb(logits: torch.Tensor, gamma: float) -> set[int]:
    """sgl-project/sglang @ 43aaa1c900e829d9776f4f36a21c665617514ff8,
    python/sglang/srt/dllm/algorithm/eb_sampling.py lines 71-89 (EBSampling.run), every position masked."""
    masked_positions = torch.arange(logits.shape[0])
    masked_log_probs = F.log_softmax(logits, dim=-1)
    masked_entropies = -(masked_log_probs.exp() * masked_log_probs).sum(dim=-1)
    sort_index = torch.argsort(masked_entropies, dim=0)
    sorted_positions, sorted_entropies = masked_positions[sort_index], masked_entropies[sort_index]
    reveal_count, entropy_budget = 1, 0.0
    for entropy in sorted_entropies[:-1]:
        entropy_budget += float(entropy.item())
        if entropy_budget <= gamma:
            reveal_count += 1
        else:
            break
    return set(sorted_positions[:reveal_count].tolist())


def fast_dllm_factor(logits: torch.Tensor, factor: float) -> set[int]:
    """Ringo-Star/FastdLLM_plusplus @ 29fd03401acced3cc3ba89d7f2e2e371058d1b54, v1/llada/generate.py
    lines 139-180 (get_transfer_index_dynamic: Fast-dLLM's factor rule), greedy, every position masked."""
    p = F.softmax(logits.to(torch.float64), dim=-1)
    confidence = p.max(-1).values
    n_masked = confidence.numel()
    threshs = [1 - factor / (n + 1) for n in range(1, n_masked + 1)]
    threshs[0] = -1
    sorted_confidence = torch.sort(confidence, descending=True)[0]
    for top_i in range(len(threshs)):
        if sorted_confidence[top_i] < threshs[top_i]:
            break
    if top_i == 0 or top_i == len(threshs) - 1:
        top_i += 1
    return set(torch.topk(confidence, k=top_i).indices.tolist())


def fast_dllm_pp_frechet(logits: torch.Tensor, margin: float) -> set[int]:
    """Ringo-Star/FastdLLM_plusplus @ 29fd03401acced3cc3ba89d7f2e2e371058d1b54, v1/llada/generate.py
    lines 183-255 (get_transfer_index_frechet_profile), greedy, batch 1, every position masked."""
    p = F.softmax(logits.to(torch.float64), dim=-1)
    confidence = p.max(-1).values[None]                              # [1, L]
    values, idx = torch.sort(confidence, dim=1, descending=True)
    L = confidence.shape[1]
    cols = torch.arange(L).unsqueeze(0)
    cum = torch.cumsum(values, dim=1)
    score = (cum - cols.to(cum.dtype)) - (1.0 - values)
    score[:, 0] = torch.inf
    topn = (score > margin).sum(dim=1).clamp(min=1)
    return set(idx[0, :int(topn)].tolist())


def sglang_joint_m2t(logits: torch.Tensor, threshold: float) -> set[int]:
    """sgl-project/sglang @ cabd4543152087d411785114ef0b2d8db7bfd80e,
    python/sglang/srt/dllm/algorithm/joint_threshold.py lines 85-106 (JointThreshold.run, mask to
    token), every position masked."""
    x = torch.argmax(logits, dim=-1)
    p = torch.gather(F.softmax(logits, dim=-1), dim=-1, index=x[:, None]).squeeze(-1)
    confidence = torch.where(torch.ones_like(p, dtype=torch.bool), p, -np.inf)
    transfer = confidence > threshold
    if not transfer.any():
        transfer[torch.topk(confidence, k=1).indices] = True
    return chosen(transfer)


# -- equality with the published formulas ----------------------------------------------------------------
SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [0.0, 0.05, 0.5, 2.0, 8.0])
def test_eb_equals_sglang_eb_sampling(seed, gamma):
    logits = block_logits(seed)
    _, conf = ours(logits)
    assert chosen(eb_commit(-conf, gamma, fully_activated=True)) == sglang_eb(logits, gamma)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0])
def test_factor_equals_fast_dllm_where_its_loop_stops_before_the_last(seed, factor):
    """The published loop also commits the last position when only the last fails (its `top_i ==
    len - 1` step); the profiles here are drawn until that case is absent, and
    test_factor_departs_from_the_published_loop_only_at_the_last_position pins the difference."""
    logits = block_logits(seed)
    max_prob, _ = ours(logits)
    mine = chosen(factor_commit(max_prob, factor, fully_activated=True))
    if len(mine) == logits.shape[0] - 1:
        pytest.skip("the published loop's last-position case")
    assert mine == fast_dllm_factor(logits, factor)


def test_factor_departs_from_the_published_loop_only_at_the_last_position():
    """Three positions at 0.99, 0.99, 0.5, f = 1: c_(3) = 0.5 < 1 - 1/4, so the rule commits two; the
    published loop breaks at the last index and then adds one, committing all three."""
    logits = torch.tensor([[0.99, 0.01], [0.99, 0.01], [0.5, 0.5]], dtype=torch.float64).log()
    max_prob, _ = ours(logits)
    assert chosen(factor_commit(max_prob, 1.0, fully_activated=True)) == {0, 1}
    assert fast_dllm_factor(logits, 1.0) == {0, 1, 2}


def block_of(max_probs, V: int = 20) -> torch.Tensor:
    """[M, V] logits whose rows have exactly these max probs: the rest of each row's mass spread evenly."""
    rows = [[c] + [(1 - c) / (V - 1)] * (V - 1) for c in max_probs]
    return torch.tensor(rows, dtype=torch.float64).log()


@pytest.mark.parametrize("second, f, ours_full, ours_semi", [
    (0.5, 1.0, {1}, {1}),            # c_(2) = 0.5 < 1 - 1/3: the second waits
    (0.7, 1.0, {0, 1}, {0, 1}),      # 0.7 >= 2/3: both
    (0.1, 2.0, {1}, {1}),            # f = 2: c_(2) must reach 1 - 2/3; 0.1 does not
    (0.34, 2.0, {0, 1}, {0, 1}),
    (0.3, 0.05, {1}, set()),         # f = 0.05: even c_(1) = 0.95 < 1 - 0.05/2, so a semi block commits nothing
])
def test_factor_on_a_two_position_block(second, f, ours_full, ours_semi):
    """A block with two masked positions: the published loop's first is free and its second is its last, so
    its `top_i == len - 1` step commits both whatever their max probs. Ours commits the second only when
    c_(2) >= 1 - f / 3; a semi-activated block frees neither (c_(1) >= 1 - f / 2 first)."""
    logits = block_of([second, 0.95])
    max_prob, _ = ours(logits)
    assert fast_dllm_factor(logits, f) == {0, 1}
    assert chosen(factor_commit(max_prob, f, fully_activated=True)) == ours_full
    assert chosen(factor_commit(max_prob, f, fully_activated=False)) == ours_semi


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("margin", [-0.5, 0.0, 0.05, 0.3])
def test_frechet_equals_fast_dllm_plus_plus(seed, margin):
    logits = block_logits(seed, sharp=(2.0, 14.0))
    max_prob, _ = ours(logits)
    assert chosen(frechet_commit(max_prob, margin, fully_activated=True)) == fast_dllm_pp_frechet(logits, margin)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.9, 0.999])
def test_joint_equals_sglang_joint_threshold_mask_to_token(seed, threshold):
    logits = block_logits(seed)
    max_prob, _ = ours(logits)
    assert chosen(joint_commit(max_prob, threshold, fully_activated=True)) == sglang_joint_m2t(logits, threshold)


# -- each rule on hand-made values, the semi-activated block included -------------------------------------
def test_eb_commits_while_the_bound_holds_and_a_semi_block_gets_no_free_position():
    entropy = torch.tensor([0.5, 0.125, 2.0, 0.25])          # sorted: 0.125, 0.25, 0.5, 2.0 (exact in binary)
    assert chosen(eb_commit(entropy, 0.375, True)) == {1, 3, 0}     # 0.125 + 0.25 <= 0.375: three (the third free)
    assert chosen(eb_commit(entropy, 0.25, True)) == {1, 3}         # 0.125 <= 0.25 < 0.375: two
    assert chosen(eb_commit(entropy, 0.0, True)) == {1}             # gamma 0: one token per round
    assert chosen(eb_commit(entropy, 0.375, False)) == {1, 3}       # semi: 0.125 + 0.25 <= 0.375, no free third
    assert chosen(eb_commit(entropy, 0.1, False)) == set()
    assert eb_commit(torch.zeros(0), 1.0, True).numel() == 0


def test_factor_rule_on_its_condition():
    """(n + 1)(1 - c_(n)) <= f: with f = 1, c_(2) >= 2/3, c_(3) >= 3/4, c_(4) >= 4/5."""
    max_prob = torch.tensor([0.7, 0.95, 0.76, 0.5])            # sorted 0.95, 0.76, 0.7, 0.5
    assert chosen(factor_commit(max_prob, 1.0, True)) == {1, 2}    # 0.76 >= 2/3; 0.7 < 3/4 stops
    assert chosen(factor_commit(max_prob, 2.0, True)) == {0, 1, 2}      # 0.7 >= 1/2; 0.5 < 3/5 stops
    assert chosen(factor_commit(torch.tensor([0.3, 0.2]), 1.0, True)) == {0}      # the first is free
    assert chosen(factor_commit(torch.tensor([0.3, 0.2]), 1.0, False)) == set()   # but not in a semi block


def test_frechet_rule_on_its_bound():
    """L_n - U_n = c_(1) + ... + c_(n) - (n - 1) - (1 - c_(n))."""
    max_prob = torch.tensor([0.9, 0.99, 0.6])                  # sorted 0.99, 0.9, 0.6
    # n = 1: 0.99 - 0.01 = 0.98; n = 2: 1.89 - 1 - 0.1 = 0.79; n = 3: 2.49 - 2 - 0.4 = 0.09
    assert chosen(frechet_commit(max_prob, 0.5, True)) == {0, 1}
    assert chosen(frechet_commit(max_prob, 0.05, True)) == {0, 1, 2}
    assert chosen(frechet_commit(max_prob, 0.99, True)) == {1}         # the first is free
    assert chosen(frechet_commit(max_prob, 0.99, False)) == set()      # not in a semi block


def test_frechet_equals_factor_at_f_1_on_a_flat_profile():
    """Fast-dLLM++'s claim: with every c = 1 - eps, score_n = 1 - (n + 1) eps, so both rules commit the
    n < 1 / eps - 1 most probable (eps away from the boundary, where one is strict and one is not)."""
    for eps, n in ((0.12, 7), (0.3, 2), (0.07, 13)):
        max_prob = torch.full((n + 3,), 1 - eps, dtype=torch.float64)
        assert int(frechet_commit(max_prob, 0.0, True).sum()) == int(factor_commit(max_prob, 1.0, True).sum()) == n


def test_js_top1_never_exceeds_the_divergence_of_the_full_distributions():
    """Merging every token but the predicted one into one outcome never adds divergence (data processing), so
    the stable rule's test is never stricter than one over the full distributions. A top-K divergence that
    renormalises each round's K most probable tokens and drops the rest has no such order with it: at K = 1
    it is 0 while ours is not."""
    def js(P, Q):
        M = (P + Q) / 2
        return float((P * (P / M).log()).sum() + (Q * (Q / M).log()).sum()) / 2
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        P, Q = (torch.softmax(torch.randn(8, generator=g, dtype=torch.float64) * 3, -1) for _ in range(2))
        t = int(P.argmax())
        assert float(js_top1(P[t:t + 1], Q[t:t + 1])) <= js(P, Q) + 1e-12
    assert js(torch.ones(1), torch.ones(1)) == 0.0              # max probs 0.9 and 0.6, each renormalised to 1
    assert float(js_top1(torch.tensor([0.9]), torch.tensor([0.6]))) > 0.0


def test_joint_is_the_threshold_with_a_max_prob_fallback():
    max_prob = torch.tensor([0.4, 0.95, 0.6])
    assert chosen(joint_commit(max_prob, 0.9, True)) == {1}
    assert chosen(joint_commit(max_prob, 0.95, True)) == {1}            # strict, then the most probable
    assert chosen(joint_commit(torch.tensor([0.4, 0.3]), 0.9, False)) == set()


def test_js_top1_is_jensen_shannon_of_the_two_outcome_distributions():
    p, q = torch.tensor([0.9, 0.5, 0.7]), torch.tensor([0.9, 0.5, 0.2])
    js = js_top1(p, q)
    assert js[:2].tolist() == [0.0, 0.0]
    P, Q = np.array([0.7, 0.3]), np.array([0.2, 0.8])
    M = (P + Q) / 2
    want = 0.5 * sum(P * np.log(P / M)) + 0.5 * sum(Q * np.log(Q / M))
    assert float(js[2]) == pytest.approx(want)
    assert float(js_top1(torch.tensor([1.0]), torch.tensor([0.0]))) == pytest.approx(math.log(2))


def test_stable_needs_confidence_persistence_and_stability_together():
    max_prob = torch.tensor([0.95, 0.95, 0.95, 0.5, 0.95])
    token = torch.tensor([4, 4, 4, 4, 4])
    prev_token = torch.tensor([4, 5, 4, 4, -1])                # 1 changed its mind; 4 had no prediction
    prev_max_prob = torch.tensor([0.93, 0.95, 0.4, 0.5, float("nan")])   # 2 jumped from 0.4
    rank = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5])
    assert chosen(stable_commit(max_prob, rank, token, prev_token, prev_max_prob, 0.9, 0.01, True)) == {0}
    assert chosen(stable_commit(max_prob, rank, token, prev_token, prev_max_prob, 0.9, 0.7, True)) == {0, 2}
    nothing = torch.full((5,), -1)
    assert chosen(stable_commit(max_prob, rank, token, nothing, prev_max_prob, 0.9, 0.7, True)) == {4}   # fallback: best rank
    assert chosen(stable_commit(max_prob, rank, token, nothing, prev_max_prob, 0.9, 0.7, False)) == set()


def test_learned_commits_every_final_chance_over_the_threshold_else_the_best_by_rank():
    """Learn2PD's acceptance (`torch.sigmoid(block_logits) > accept_thres`, ims-kdks/Learning-to-Parallel-Decoding
    llada/generate.py, generate_learn2parallel), strict, with D2F's fallback for a fully activated block."""
    final = torch.tensor([0.97, 0.96, 0.5, 0.99])
    rank = torch.tensor([0.4, 0.9, 0.1, 0.2])
    assert chosen(learned_commit(final, rank, 0.96, True)) == {0, 3}          # 0.96 is not > 0.96
    assert chosen(learned_commit(final, rank, 0.995, True)) == {1}            # none: the best by rank
    assert chosen(learned_commit(final, rank, 0.995, False)) == set()
    assert chosen(learned_commit(torch.zeros(0), torch.zeros(0), 0.5, True)) == set()


# -- DAWN (commit=dawn): the dependency-aware rule, on hand-made attention and logits ------------------------
def dawn_commit(*args, **kwargs) -> torch.Tensor:
    """What the rule commits (lopa.peers.dawn_sets): sure | induced | free, bool [W]."""
    from lopa.peers import dawn_sets
    parts = dawn_sets(*args, **kwargs)
    return parts["sure"] | parts["induced"] | parts["free"]


def dawn_published(logits: torch.Tensor, attn: torch.Tensor, mask_index: torch.Tensor, prompt_length: int,
                   block_length: int, tau_sink: float, tau_edge: float, tau_induce: float, tau_low: float) -> set[int]:
    """lizhuo-luo/DAWN @ ab42898, llada/generate.py lines 432-494 (get_transfer_index_dawn) with its helpers,
    llada/gdllm_utils.py lines 10-32 (select_parallel_tokens_conflict_mis) and 50-58 (detect_attn_sinks_),
    greedy, batch 1, the first block (num_block 0). logits [L, V], attn [L, L] (rows: queries), mask_index [L]
    -> the masked positions it commits (its MIS loop also marks position 0, a prompt token: left out here)."""
    def select_parallel_tokens_conflict_mis(edge_mask, node_mask, confidence, max_parallel=None):
        K = node_mask.sum().item()
        if K == 0:
            return []
        conflict = edge_mask | edge_mask.T
        select_index = []
        if max_parallel is None:
            max_parallel = K
        while len(select_index) < max_parallel:
            best_node_idx = torch.argmax(confidence).item()
            select_index.append(best_node_idx)
            confidence[best_node_idx] = -np.inf
            neigh_idx = torch.nonzero(conflict[best_node_idx], as_tuple=True)[0].tolist()
            node_mask[neigh_idx] = False
            confidence[neigh_idx] = -np.inf
        return select_index

    def detect_attn_sinks_(attn_scores, threshold=0.05):
        return attn_scores.mean(dim=1) > threshold

    avg_attn_scores, mask_index, num_block = attn[None].clone(), mask_index[None].clone(), 0
    sink_mask = detect_attn_sinks_(avg_attn_scores, threshold=tau_sink)
    avg_attn_scores = avg_attn_scores.masked_fill(sink_mask.unsqueeze(1), 0.0)
    B, _, _ = avg_attn_scores.shape
    avg_attn_scores.diagonal(dim1=1, dim2=2).zero_()
    x0 = torch.argmax(logits[None], dim=-1)
    p = F.softmax(logits[None].to(torch.float64), dim=-1)
    x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
    quantile_mask = (avg_attn_scores >= tau_edge).transpose(1, 2)
    confidence = torch.where(mask_index, x0_p, -np.inf)
    transfer_index_conf = confidence >= 0.9
    decoded_mask = (~mask_index & (x0_p >= 0.9)).unsqueeze(-1)
    decoded_mask[:, prompt_length + (num_block + 1) * block_length:] = False
    dependent_nodes = (quantile_mask & decoded_mask).any(dim=1) & mask_index
    conf_d = torch.where(dependent_nodes, x0_p, -np.inf)
    transfer_index_a = conf_d >= tau_induce
    adj_ti_mask = (quantile_mask & transfer_index_a.unsqueeze(-1) & transfer_index_conf.unsqueeze(-1)).any(dim=1)
    node_mask = mask_index & (x0_p >= tau_low) & ~transfer_index_conf & ~transfer_index_a & ~adj_ti_mask
    transfer_index_c = torch.zeros_like(x0, dtype=torch.bool)
    if node_mask.sum(dim=-1).min().item() != 0:
        edge_mask = node_mask.unsqueeze(2) & node_mask.unsqueeze(1) & quantile_mask
        confidence = torch.where(node_mask, x0_p, -np.inf)
        for j in range(B):
            transfer_index_c[j, select_parallel_tokens_conflict_mis(edge_mask[j], node_mask[j], confidence[j])] = True
    transfer_index = transfer_index_a | transfer_index_conf | transfer_index_c
    if transfer_index.sum(dim=-1).min().item() == 0:
        confidence = torch.where(mask_index, x0_p, -np.inf)
        transfer_index = transfer_index | torch.zeros_like(transfer_index).scatter_(
            1, torch.argmax(confidence, dim=1, keepdim=True), True)
    return chosen(transfer_index[0] & mask_index[0])


def dawn_scene(seed: int, ctx: int = 6, W: int = 16, V: int = 30):
    """A prompt of ctx sure positions and one block of W, some already decoded: logits [L, V] and an attention
    [L, L] of spread rows with a few strong links (and a sink column). The prompt's rows are the mean of the
    block's, so a key's mean over all rows (the published sink test) is its mean over the block's rows (ours)."""
    g = torch.Generator().manual_seed(seed)
    L = ctx + W
    logits = block_logits(seed, M=L, V=V, sharp=(0.0, 7.0))
    logits[:ctx, 0] += 40.0                                          # the prompt: predicted with certainty
    mask_index = torch.zeros(L, dtype=torch.bool)
    mask_index[ctx:] = torch.rand(W, generator=g) < 0.75
    scores = torch.randn(L, L, generator=g, dtype=torch.float64)
    scores += 3.0 * (torch.rand(L, L, generator=g) < 0.12)           # strong links
    scores[:, int(torch.randint(0, ctx, (1,), generator=g))] += 2.5  # an attention sink in the prompt
    attn = torch.softmax(scores, -1)
    attn[:ctx] = attn[ctx:].mean(0)
    return logits, attn, mask_index, ctx


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("edge, induce, low", [(0.07, 0.7, 0.75), (0.05, 0.5, 0.3), (0.12, 0.8, 0.6)])
def test_dawn_equals_the_published_selection(seed, edge, induce, low):
    from lopa.rules import dawn_anchor
    from lopa.settings import DecodeSettings
    logits, attn, mask_index, ctx = dawn_scene(seed)
    W = attn.shape[0] - ctx
    published = dawn_published(logits, attn, mask_index, ctx, W, 0.1, edge, induce, low)
    p = F.softmax(logits.double(), -1).max(-1).values[ctx:]                  # [W] the block's max probs
    s = DecodeSettings(block_size=W, max_new_tokens=W, tau_conf=0.9, dawn_sink=0.1, dawn_edge=edge,
                       dawn_induce=induce, dawn_low=low)
    masked = mask_index[ctx:]
    ours_, why = dawn_anchor(attn[ctx:], p, p, masked, masked, [True], s)     # the fallback ranked by max prob, as published
    assert {ctx + i for i in chosen(ours_)} == published
    assert set(why["sure"]) | set(why["induced"]) | set(why["free"]) | set(why["fallback"]) == chosen(ours_)
    assert not set(why["conflict"]) & chosen(ours_) and not set(why["leans"]) & chosen(ours_)


def test_dawn_scene_reaches_every_branch_of_the_rule():
    """The scenes above are not all alike: sure, induced and conflict-free commits all occur, and some scene
    commits a conflict-free set that leaves out a conflicting node."""
    seen = {"sure": 0, "induced": 0, "free": 0, "left_out": 0}
    for seed in range(40):
        logits, attn, mask_index, ctx = dawn_scene(seed)
        p = F.softmax(logits.double(), -1).max(-1).values[ctx:]
        masked = mask_index[ctx:]
        out = dawn_commit(attn[ctx:], p, masked, 0.1, 0.07, 0.9, 0.7, 0.3)
        sure = masked & (p >= 0.9)
        low_nodes = masked & (p >= 0.3) & ~sure
        seen["sure"] += int(sure.any())
        seen["induced"] += int((out & masked & (p >= 0.7) & (p < 0.9)).any())
        seen["free"] += int((out & (p < 0.7)).any())
        seen["left_out"] += int((low_nodes & ~out).any())
    assert all(n > 0 for n in seen.values()), seen


def test_dawn_commits_an_independent_set_of_the_attention_graph():
    """Hand-made: no context, four masked positions with max probs 0.8, 0.6, 0.5, 0.4 (none sure, none
    induced), position 0 attends strongly to 1 and 2 to 3: the set takes 0 (its best), drops 1, takes 2, drops 3."""
    from lopa.peers import dawn_sets
    attention = torch.full((4, 4), 0.01, dtype=torch.float64)
    attention[0, 1] = attention[2, 3] = 0.5
    out = dawn_commit(attention, torch.tensor([0.8, 0.6, 0.5, 0.4]), torch.ones(4, dtype=torch.bool),
                      sink=0.2, edge=0.3, tau=0.9, induce=0.7, low=0.3)
    assert out.tolist() == [True, False, True, False]
    parts = dawn_sets(attention, torch.tensor([0.8, 0.6, 0.5, 0.4]), torch.ones(4, dtype=torch.bool),
                      sink=0.2, edge=0.3, tau=0.9, induce=0.7, low=0.3)
    assert parts["free"].tolist() == [True, False, True, False] and parts["conflict"].tolist() == [False, True, False, True]


def test_dawn_induces_a_position_that_depends_on_the_decoded_context():
    """One context key, four masked positions with max probs 0.95, 0.75, 0.6, 0.5. Position 0 is sure (> tau);
    position 1 attends strongly to the context key and is induced (0.75 >= induce 0.7); 2 attends to nothing and
    3 only to 1, which is induced but not sure, so both are conflict-free nodes, and with no edge between them
    both are committed. At induce 0.8, position 1 is a node instead, conflicting with 3 (3 attends to it): the
    set takes 1, the more probable, and leaves 3."""
    attention = torch.full((4, 5), 0.01, dtype=torch.float64)        # [W, ctx + W], ctx = 1
    attention[1, 0] = 0.6
    attention[3, 2] = 0.5                                             # 3 depends on window position 1
    p, masked = torch.tensor([0.95, 0.75, 0.6, 0.5]), torch.ones(4, dtype=torch.bool)
    out = dawn_commit(attention, p, masked, sink=0.3, edge=0.3, tau=0.9, induce=0.7, low=0.4)
    assert out.tolist() == [True, True, True, True]
    out = dawn_commit(attention, p, masked, sink=0.3, edge=0.3, tau=0.9, induce=0.8, low=0.4)
    assert out.tolist() == [True, True, True, False]


def test_dawn_leaves_a_sink_out_of_the_graph():
    """A key every row attends to (mean over the rows above `sink`) makes no dependency."""
    attention = torch.full((3, 4), 0.05, dtype=torch.float64)
    attention[:, 0] = 0.8                                             # the context key: a sink
    p = torch.tensor([0.75, 0.75, 0.75])
    out = dawn_commit(attention, p, torch.ones(3, dtype=torch.bool), sink=0.5, edge=0.3, tau=0.9, induce=0.7, low=0.9)
    assert not out.any()                                              # nothing induced: the only link was the sink
    out = dawn_commit(attention, p, torch.ones(3, dtype=torch.bool), sink=0.9, edge=0.3, tau=0.9, induce=0.7, low=0.9)
    assert out.all()                                                  # not a sink: every position is induced
