"""The pure decision helpers, on hand-made values with exact expected results."""

import math

import pytest
import torch

from lopa.rules import (
    SCORE_WINDOW,
    branch_score,
    branch_scores,
    choose_k,
    confidence,
    fit_gain,
    lookahead_positions,
    score_split,
    select_winner,
    summarize,
    threshold_commit,
    top1_commit,
)


def test_confidence_metrics():
    probs = torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]])
    assert confidence(probs, "max_prob").tolist() == [0.5, 1.0]
    assert confidence(probs, "margin").tolist() == [0.25, 1.0]
    ent = confidence(probs, "neg_entropy")
    assert ent[0].item() == pytest.approx(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert ent[1].item() == pytest.approx(0.0)


def test_summarize_greedy_is_argmax():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    token, max_prob, conf = summarize(logits, "max_prob", 0.0)
    assert token.tolist() == [1]
    assert max_prob.item() == pytest.approx(torch.softmax(logits, -1).max().item())
    assert conf.item() == max_prob.item()


def test_summarize_sampling_is_seeded():
    logits = torch.randn(50, 7)
    a = summarize(logits, "max_prob", 1.0, torch.Generator().manual_seed(3))[0]
    b = summarize(logits, "max_prob", 1.0, torch.Generator().manual_seed(3))[0]
    assert torch.equal(a, b)


@pytest.mark.parametrize("T", [0.5, 2.0])
def test_summarize_at_temperature_reads_the_tempered_probabilities(T):
    """At T > 0, max_prob is the sampled token's probability under softmax(logits / T) and Conf comes from that
    same distribution, as in the authors' sample_tokens; Fast-dLLM's code reads the untempered softmax(logits)
    at the sampled token instead (docs/method.md, departure 4 and "Peers")."""
    logits = torch.tensor([[0.0, 2.0, 1.0]]).repeat(40, 1)
    token, max_prob, conf = summarize(logits, "neg_entropy", T, torch.Generator().manual_seed(0))
    tempered, untempered = torch.softmax(logits / T, -1), torch.softmax(logits, -1)
    assert len(set(token.tolist())) > 1                                  # sampled, not the argmax
    assert torch.allclose(max_prob, tempered.gather(-1, token[:, None])[:, 0])
    assert not torch.allclose(max_prob, untempered.gather(-1, token[:, None])[:, 0])
    assert torch.allclose(conf, (tempered * tempered.log()).sum(-1))


# Hand-made distributions where the mask token (id 0) carries mass: row 0 ranks it first, row 1 second.
MASK = 0
MASKY = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.3, 0.6, 0.1, 0.0]], dtype=torch.float64)


def test_probabilities_and_conf_come_from_the_raw_logits_when_the_mask_carries_mass():
    """Not renormalised over the other tokens (the old -inf on the mask logit gave row 1
    max_prob 0.6 / 0.7 = 0.857 and a different entropy); as the authors' sample_tokens."""
    logits = MASKY.log()
    for rule in ("next_best", "authors"):
        token, max_prob, conf = summarize(logits, "neg_entropy", 0.0, mask_token_id=MASK, mask_argmax=rule)
        assert token[1].item() == 1 and max_prob[1].item() == pytest.approx(0.6, abs=1e-7)
        want = [sum(p * math.log(p) for p in row if p > 0) for row in MASKY.tolist()]
        assert conf.tolist() == pytest.approx(want, abs=1e-6)
    conf = summarize(logits, "max_prob", 0.0, mask_token_id=MASK)[2]
    assert conf.tolist() == pytest.approx([0.5, 0.6], abs=1e-7)          # Conf is max p, the mask's included
    margin = summarize(logits, "margin", 0.0, mask_token_id=MASK)[2]
    assert margin.tolist() == pytest.approx([0.2, 0.3], abs=1e-7)


def test_a_mask_argmax_is_the_next_best_token_or_the_mask_as_the_authors_do():
    logits = MASKY.log()
    token, max_prob, _ = summarize(logits, "max_prob", 0.0, mask_token_id=MASK, mask_argmax="next_best")
    assert token.tolist() == [1, 1] and max_prob.tolist() == pytest.approx([0.3, 0.6], abs=1e-7)
    token, max_prob, _ = summarize(logits, "max_prob", 0.0, mask_token_id=MASK, mask_argmax="authors")
    assert token.tolist() == [MASK, 1] and max_prob.tolist() == pytest.approx([0.5, 0.6], abs=1e-7)


def test_sampling_never_draws_the_mask_unless_as_the_authors_do():
    logits = torch.tensor([[0.99, 0.01, 0.0, 0.0]]).clamp_min(1e-30).log().expand(400, 4)
    g = torch.Generator().manual_seed(0)
    token, max_prob, _ = summarize(logits, "max_prob", 1.0, g, mask_token_id=MASK)
    assert set(token.tolist()) == {1} and max_prob.tolist() == pytest.approx([0.01] * 400, abs=1e-7)
    token = summarize(logits, "max_prob", 1.0, g, mask_token_id=MASK, mask_argmax="authors")[0]
    assert MASK in token.tolist()


def test_commit_threshold_is_strict():
    max_prob = torch.tensor([0.9, 0.9000001, 0.95, 0.2])
    chosen = threshold_commit(max_prob, max_prob, 0.9, fully_activated=True)
    assert chosen.tolist() == [False, True, True, False]


def test_fallback_only_in_fully_activated_blocks():
    max_prob = torch.tensor([0.3, 0.5, 0.4])
    conf = torch.tensor([-2.0, -1.0, -1.5])
    assert threshold_commit(max_prob, conf, 0.9, fully_activated=True).tolist() == [False, True, False]
    assert threshold_commit(max_prob, conf, 0.9, fully_activated=False).tolist() == [False, False, False]


def test_fallback_not_used_when_something_qualifies():
    max_prob = torch.tensor([0.3, 0.95])
    conf = torch.tensor([5.0, 0.0])    # the fallback would pick index 0
    assert threshold_commit(max_prob, conf, 0.9, fully_activated=True).tolist() == [False, True]


def test_top1_commits_exactly_one_in_fully_activated_block():
    max_prob = torch.tensor([0.99, 0.98, 0.1])
    conf = torch.tensor([0.1, 0.9, 0.2])
    assert top1_commit(max_prob, conf, 0.5, fully_activated=True).tolist() == [False, True, False]
    assert top1_commit(max_prob, conf, 0.5, fully_activated=False).tolist() == [False, False, False]


def test_lookahead_takes_top_k_candidates_in_conf_order():
    conf = torch.tensor([0.9, 0.2, 0.7, 0.8, 0.7])
    candidate = torch.tensor([False, True, True, True, True])   # index 0 was committed by the anchor
    assert lookahead_positions(conf, candidate, 3).tolist() == [3, 2, 4]    # tie 2/4: earlier first
    assert lookahead_positions(conf, candidate, 10).tolist() == [3, 2, 4, 1]
    assert lookahead_positions(conf, candidate, 0).tolist() == []


def test_branch_score_is_mean_and_inf_when_done():
    assert branch_score(torch.tensor([-1.0, -3.0])).item() == -2.0
    assert branch_score(torch.zeros(0)).item() == float("inf")


def test_select_winner_highest_score():
    assert select_winner(torch.tensor([0.5, 0.4, 0.7, 0.6])).item() == 2


def test_select_winner_ties_prefer_lookahead_in_rank_order():
    assert select_winner(torch.tensor([0.7, 0.5, 0.7, 0.7])).item() == 2
    assert select_winner(torch.tensor([0.7, 0.7, 0.7])).item() == 1
    assert select_winner(torch.tensor([0.7])).item() == 0
    assert select_winner(torch.tensor([0.9, 0.7])).item() == 0


def test_helpers_never_change_their_inputs():
    """Style habit 15: every pure helper leaves its arguments as it found them."""
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
    probs = logits.softmax(-1)
    max_prob, conf = torch.tensor([0.95, 0.3, 0.91]), torch.tensor([-0.1, -0.9, -0.2])
    candidate, scores = torch.tensor([True, True, False]), torch.tensor([0.2, 0.7, 0.7])
    before = [t.clone() for t in (logits, probs, max_prob, conf, candidate, scores)]
    for metric in ("max_prob", "neg_entropy", "margin"):
        confidence(probs, metric)
        summarize(logits, metric, 0.0)
        summarize(logits, metric, 0.7, torch.Generator().manual_seed(0))
        summarize(logits, metric, 0.0, mask_token_id=0)
        summarize(logits, metric, 0.7, torch.Generator().manual_seed(0), mask_token_id=0)
    threshold_commit(max_prob, conf, 0.9, True)
    top1_commit(max_prob, conf, 0.9, True)
    lookahead_positions(conf, candidate, 2)
    branch_score(conf)
    select_winner(scores)
    after = (logits, probs, max_prob, conf, candidate, scores)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def masked(positions, conf, max_prob=None):
    return torch.tensor(positions), torch.tensor(max_prob if max_prob is not None else conf), torch.tensor(conf)


def test_branch_score_rules_on_hand_made_scores():
    # B1 filled position 1, B2 filled position 2 and alone added a block (position 8)
    branches = [masked([0, 1, 2, 3], [0.5, 0.25, 0.75, 1.0]), masked([0, 2, 3], [0.5, 1.0, 1.0]),
                masked([0, 1, 3, 8], [0.25, 0.5, 0.75, 0.5])]
    before = [tuple(t.clone() for t in b) for b in branches]
    expect = {"mean": [0.625, 2.5 / 3, 0.5], "loo": [0.75, 0.75, 0.5], "min": [0.25, 0.5, 0.25],
              "window": [0.625, 2.5 / 3, 0.5], "segment": [0.625, 2.5 / 3, 0.5], "count": [1, 2, 0]}
    for rule, values in expect.items():
        assert branch_scores(branches, rule, tau=0.9).tolist() == pytest.approx(values), rule
    assert all(torch.equal(a, b) for x, y in zip(branches, before) for a, b in zip(x, y))   # inputs unchanged
    long = masked(list(range(2 * SCORE_WINDOW)), [1.0] * SCORE_WINDOW + [0.0] * SCORE_WINDOW)
    assert branch_scores([long], "window").tolist() == [1.0] and branch_scores([long], "segment").tolist() == [0.0]
    assert branch_scores([masked([], [])], "loo").tolist() == [float("inf")]
    with pytest.raises(ValueError, match="branch_score"):
        branch_scores(branches, "median")


def test_removal_and_change_add_up_to_the_gain_exactly():
    # dyadic values: every mean and difference is exact in binary floating point
    parts = score_split([1, 2, 3, 4], [0.5, 0.25, 0.75, 1.0], [1, 3, 4], [0.75, 0.75, 1.5], filled=2)
    assert parts == {"removal": 0.125, "change": 0.25, "delta": 0.375}
    assert parts["removal"] + parts["change"] == parts["delta"]
    # filling the least confident position gains by removal alone, with no change at all
    parts = score_split([0, 1], [0.5, 1.0], [1], [1.0], filled=0)
    assert parts == {"removal": 0.25, "change": 0.0, "delta": 0.25}
    assert score_split([0], [0.5], [], [], filled=0) is None


def test_choose_k_on_hand_made_costs():
    assert int(choose_k(5, 2, torch.ones(15))) == 5                             # free: every candidate
    assert int(choose_k(20, 2, torch.ones(15))) == 14                           # ... up to the cost curve's K
    assert int(choose_k(5, 0, torch.tensor([1.0] + [1e6] * 14))) == 0          # dear: none
    # a win saves 1 forward (1 s); one branch costs 0.2 s more, a second 8.8 s more:
    # saved 0, 0.5 - 0.2 = 0.3, 0.75 - 9 < 0 -> k = 1
    assert int(choose_k(2, 0, torch.tensor([1.0, 1.2, 10.0]), win=0.5, release=1.0)) == 1
    # the anchor's commits do not enter: what decides is what a win saves against what a branch costs
    assert int(choose_k(2, 0, torch.tensor([1.0, 1.6, 2.2]), win=0.5, release=1.0)) == 0     # 0.5 < 0.6
    # four near tau_conf: S = 2 forwards, saved 0.5 * 2 - 0.6 = 0.4 at k = 1 > 0.75 * 2 - 1.2 = 0.3 at k = 2
    assert int(choose_k(2, 4, torch.tensor([1.0, 1.6, 2.2]), win=0.5, release=1.0, lift=0.25)) == 1
    assert int(choose_k(0, 1, torch.ones(3))) == 0
    cost = torch.tensor([1.0, 1.2, 10.0])
    before = cost.clone()
    choose_k(2, 1, cost)
    assert torch.equal(cost, before)                                            # inputs unchanged


def rows(*problems):
    return [dict(zip(("saved", "rounds", "wins", "near_won"), p)) for p in problems]


def test_fit_gain_on_hand_made_calibrations():
    # every win saves 2 forwards whatever is near tau_conf: all release, no lift
    win, release, lift = fit_gain(rows((6, 4, 3, 5), (4, 3, 2, 0), (2, 2, 1, 7)))
    assert (win, release, lift) == (pytest.approx(6 / 9), pytest.approx(2.0), pytest.approx(0.0, abs=1e-9))
    # every win saves 0.5 per position near tau_conf and nothing else: all lift
    win, release, lift = fit_gain(rows((2, 4, 3, 4), (1, 3, 2, 2), (3, 2, 1, 6)))
    assert (release, lift) == (pytest.approx(0.0, abs=1e-9), pytest.approx(0.5))
    # both: saved = 1 * wins + 0.25 * near_won
    _, release, lift = fit_gain(rows((3 + 1, 4, 3, 4), (2 + 2, 3, 2, 8), (1 + 0.5, 2, 1, 2)))
    assert (release, lift) == (pytest.approx(1.0), pytest.approx(0.25))
    # k = 1 took more forwards than k = 0: a win saves nothing, never a negative amount
    assert fit_gain(rows((-2, 4, 2, 3), (-1, 3, 1, 1)))[1:] == (0.0, 0.0)
    assert fit_gain(rows((6, 4, 3, 1)), max_release=1.5)[1] == 1.5                 # clipped to the setting's range
    assert fit_gain(rows((0, 0, 0, 0))) == (0.0, 0.0, 0.0)                         # no branch ever verified
    assert fit_gain(rows((0, 5, 0, 0))) == (0.0, 0.0, 0.0)                         # never won


def test_a_fitted_gain_model_pays_where_branches_do_and_not_where_they_do_not():
    # cost of a round with B = 1, 2, 3 branches against one, as measured on this CPU (~1.47x per branch)
    cost = torch.tensor([1.0, 1.47, 1.95])
    # open-gsm-dllm under least_confident: 88% of branch rounds won, each win saving ~1 forward: k = 1
    win, release, lift = fit_gain(rows((4, 4, 4, 10), (3, 4, 3, 12), (4, 4, 3, 9), (3, 3, 3, 8)))
    assert int(choose_k(14, 2, cost, win=win, release=release, lift=lift)) == 1
    # sure-gsm-dllm: 31% won, a win saving ~0.2 forwards: a branch never pays on a CPU ...
    win, release, lift = fit_gain(rows((1, 5, 2, 1), (0, 5, 1, 1), (1, 6, 2, 2)))
    assert int(choose_k(14, 1, cost, win=win, release=release, lift=lift)) == 0
    # ... and every branch pays where they cost nothing (a GPU at batch 1)
    assert int(choose_k(14, 1, torch.ones(15), win=win, release=release, lift=lift)) == 14
