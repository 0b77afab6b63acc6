"""Each rule of the method, checked through the whole engine on a scripted fake model."""

import numpy as np
import pytest
import torch
from fake_model import EOS, MASK, FakeDLLM, table_script

from lopa import Decoder, DecodeSettings, ModelSpec
from lopa.engine import DecodeStalled
from lopa.rules import summarize

PROMPT = torch.tensor([7, 8, 9])
SPEC = ModelSpec(mask_token_id=MASK, eos_token_ids=(EOS,), logit_shift=True, max_context=4096)


def run(table, shift=True, spec=SPEC, **settings):
    model = FakeDLLM(len(PROMPT), table_script(table), shift=shift)
    decoder = Decoder(model, spec, DecodeSettings(**settings), executor="uncached")
    return decoder.run(PROMPT)


def max_prob_of(p):
    """The max_prob the engine computes for a fake position scripted with probability p."""
    probs = torch.full((16,), (1 - p) / 15, dtype=torch.float64)
    probs[5] = p
    return float(summarize(probs.log(), "max_prob", 0.0, mask_token_id=MASK)[1])    # raw logits, as the engine


def test_commit_threshold_is_strict():
    exact = max_prob_of(0.6)
    table = {0: (5, 0.6), 1: (6, 0.9), 2: (7, 0.3), 3: (8, 0.3)}
    strict = run(table, k=0, tau_conf=exact, block_size=4, max_new_tokens=4)
    assert strict.records[1].anchor_positions == [1]            # 0.6 is not > 0.6
    below = run(table, k=0, tau_conf=float(np.nextafter(np.float32(exact), np.float32(0))), block_size=4,
                max_new_tokens=4)
    assert below.records[1].anchor_positions == [0, 1]


def test_fallback_only_for_fully_activated_blocks():
    table = {0: (5, 0.95), 1: (6, 0.3), 2: (7, 0.4), 3: (8, 0.35), 4: (9, 0.5), 5: (9, 0.3), 6: (9, 0.3), 7: (9, 0.3)}
    res = run(table, k=0, tau_conf=0.9, tau_add=0.25, tau_act=1.0, block_size=4, max_new_tokens=8,
              confidence="max_prob")
    r1, r2 = res.records[1], res.records[2]
    assert r1.anchor_positions == [0] and r1.block_states == ["active_full", "active_semi"]
    assert r2.anchor_positions == [2]                  # fallback in block 0 (highest Conf); none in semi block 1
    assert res.records[3].anchor_positions == [3]
    assert res.records[4].anchor_positions == [1]      # block 0 completes
    assert res.records[5].anchor_positions == [4]      # block 1 is now fully activated: its own fallback


def test_lookahead_top_k_by_conf_excluding_anchor_commits():
    table = {0: (5, 0.95), 1: (6, 0.5), 2: (7, 0.7), 3: (8, 0.6), 4: (9, 0.8), 5: (10, 0.4), 6: (2, 0.3), 7: (2, 0.3)}
    res = run(table, k=2, tau_conf=0.9, block_size=8, max_new_tokens=8, confidence="max_prob")
    r1 = res.records[1]
    assert r1.anchor_positions == [0]
    assert r1.lookahead_positions == [4, 2] and r1.lookahead_tokens == [9, 7]
    assert len(r1.branch_tokens) == 3
    assert r1.branch_tokens[1][4] == 9 and r1.branch_tokens[2][2] == 7 and r1.branch_tokens[0][4] == MASK


def test_branch_score_is_mean_over_all_masked_positions_of_all_active_blocks():
    # Filling position 2 makes positions 3..5 certain: the branch that fills it must win.
    dep = lambda visible: (3, 0.85) if 2 in visible else (3, 0.2)
    table = {0: (5, 0.95), 1: (6, 0.5), 2: (7, 0.7), 3: dep, 4: dep, 5: dep, 6: (2, 0.6), 7: (2, 0.6)}
    res = run(table, k=2, tau_conf=0.9, tau_add=0.1, block_size=4, max_new_tokens=8, confidence="max_prob")
    r1 = res.records[1]
    assert r1.lookahead_positions == [2, 1]
    for j in range(3):
        # every still-masked position of both blocks (block 1 was just added) enters the mean
        assert set(r1.branch_positions[j]) >= {4, 5, 6, 7}
        assert r1.branch_scores[j] == pytest.approx(float(np.mean(r1.branch_conf[j])))
    assert r1.winner == 1 and r1.committed == 2


def test_ties_prefer_lookahead_branches_in_rank_order():
    table = {g: (4 + g, 0.5) for g in range(8)}     # nothing depends on anything: every branch scores 0.5
    res = run(table, k=3, tau_conf=0.9, block_size=8, max_new_tokens=8, confidence="max_prob")
    r1 = res.records[1]
    assert len(set(r1.branch_scores)) == 1 and r1.winner == 1


def test_add_and_activation_thresholds():
    table = {g: (4 + g, 0.3 + 0.01 * (10 - g)) for g in range(8)}   # one fallback commit per block per round
    res = run(table, k=0, tau_conf=0.9, tau_add=0.5, tau_act=0.75, block_size=4, max_new_tokens=8,
              confidence="max_prob")
    states = [r.block_states for r in res.records[:5]]
    assert states[0] == ["active_full"]                  # prefill
    assert states[1] == ["active_full"]                  # 1/4 decoded < tau_add
    assert states[2] == ["active_full", "active_semi"]   # 2/4 >= tau_add: block added, 2/4 < tau_act
    assert states[3] == ["active_full", "active_full"]   # 3/4 >= tau_act: fully activated
    assert res.records[3].anchor_positions == [2]        # block 1 was semi when this anchor ran
    assert res.records[4].anchor_positions == [3, 4]     # both blocks fully activated: one fallback each


def test_stops_at_eos_and_adds_no_block_after_it():
    table = {0: (5, 0.99), 1: (6, 0.99), 2: (EOS, 0.99), 3: (EOS, 0.99)}
    res = run(table, k=0, tau_conf=0.9, tau_add=0.1, block_size=4, max_new_tokens=16)
    assert res.tokens == [5, 6, EOS, EOS]
    assert res.records[-1].kind == "final"
    assert res.metrics()["tokens_useful"] == 3 and res.metrics()["tokens_paper"] == 4


def test_done_turns_true_with_the_round_that_completes_the_sequence():
    table = {0: (5, 0.95), 1: (6, 0.5), 2: (EOS, 0.5), 3: (EOS, 0.5)}
    model = FakeDLLM(len(PROMPT), table_script(table), shift=True)
    decoder = Decoder(model, SPEC, DecodeSettings(k=0, tau_conf=0.9, tau_add=0.25, block_size=4, max_new_tokens=16),
                      executor="uncached")
    assert not decoder.done                                     # nothing decoded yet
    seen = [decoder.done for _ in decoder.stream(PROMPT)]       # after each record
    assert seen[-1] and not any(seen[:-1])


def test_appended_blocks_are_finished_after_eos():
    table = {0: (5, 0.95), 1: (6, 0.5), 2: (EOS, 0.5), 3: (EOS, 0.5)}   # default: EOS at 0.99
    res = run(table, k=0, tau_conf=0.9, tau_add=0.25, block_size=4, max_new_tokens=16)
    assert len(res.tokens) == 8 and MASK not in res.tokens            # block 1 was appended before EOS
    assert res.useful_tokens == [5, 6, EOS]


def test_logit_shift():
    table = {g: (2 + g, 0.99) for g in range(8)}
    shifted = run(table, shift=True, k=0, block_size=8, max_new_tokens=8)
    assert shifted.tokens == [2, 3, 4, 5, 6, 7, 8, 9]
    unshifted = run(table, shift=False, spec=ModelSpec(MASK, (EOS,), logit_shift=False, max_context=4096),
                    k=0, block_size=8, max_new_tokens=8)
    assert unshifted.tokens == [2, 3, 4, 5, 6, 7, 8, 9]
    mismatched = run(table, shift=True, spec=ModelSpec(MASK, (EOS,), logit_shift=False, max_context=4096),
                     k=0, block_size=8, max_new_tokens=8)
    assert mismatched.tokens != shifted.tokens


def test_one_token_per_round_baseline_has_tpf_one():
    table = {g: (2 + g, 0.99) for g in range(8)}
    res = run(table, k=0, tau_add=1.0, commit="top1", block_size=4, max_new_tokens=8)
    assert all(r.committed == 1 for r in res.records[1:])
    assert res.tokens == [2, 3, 4, 5, 6, 7, 8, 9]


def test_a_committed_mask_token_leaves_the_position_masked_as_in_the_authors_loop():
    """Position 1 ranks the mask token first (p 0.95) until it sees position 2. The authors' loop
    commits the mask there (a no-op: the position stays masked, nothing is filled); ours predicts
    the best other token, whose probability is too low to commit."""
    table = {0: (7, 0.95), 1: lambda seen: (5, 0.95) if 2 in seen else (MASK, 0.95), 2: (6, 0.95)}
    authors = run(table, k=0, block_size=4, max_new_tokens=4, mask_argmax="authors")
    r1 = authors.records[1]
    assert r1.anchor_positions == [0, 1, 2, 3] and r1.anchor_tokens == [7, MASK, 6, EOS]
    assert r1.committed == 3 and r1.branch_positions == [[1]]      # position 1 is still masked
    ours = run(table, k=0, block_size=4, max_new_tokens=4)
    assert ours.records[1].anchor_positions == [0, 2, 3] and ours.records[1].committed == 3
    assert authors.tokens == ours.tokens == [7, 5, 6, EOS]
    assert [r.kind for r in authors.records] == [r.kind for r in ours.records] == ["prefill", "round", "final"]


# Position 1 ranks the mask token first (0.8, the most confident open position: the commit rule's pick once
# nothing passes tau_conf) until it sees position 3; positions 2 and 3 predict real tokens below tau_conf.
STALLS = {0: (5, 0.95), 1: lambda seen: (5, 0.8) if 3 in seen else (MASK, 0.8), 2: (6, 0.7), 3: (7, 0.2)}
AUTHORS = dict(k=1, tau_conf=0.9, block_size=4, max_new_tokens=4, confidence="max_prob", mask_argmax="authors")


def test_a_stall_is_named_at_the_round_it_begins_with_what_happened():
    """Round 2 commits the mask token at position 1 and its one lookahead branch (position 2, the most
    confident free one) loses: nothing changes, and under the paper's order every later round would be
    the same. The error comes right after round 2 and says that, not that every open position predicts
    the mask (positions 2 and 3 predict tokens 6 and 7)."""
    decoder = Decoder(FakeDLLM(len(PROMPT), table_script(STALLS)), SPEC, DecodeSettings(**AUTHORS), executor="uncached")
    with pytest.raises(DecodeStalled) as stalled:
        decoder.run(PROMPT)
    assert [r.round for r in decoder.records] == [0, 1, 2] and decoder.records[2].committed == 0
    message = str(stalled.value)
    assert "round 2" in message and "position 1, where the model's top token is the mask token" in message
    assert "lookahead branch did not win" in message and message.endswith("use mask_argmax='next_best'")
    assert "every open position" not in message


def test_a_round_that_fills_nothing_is_no_stall_when_a_later_round_may_differ():
    """Under the random order each round draws its lookahead afresh: rounds 2 and 3 fill nothing, round 4's
    draw (position 3) wins and the decode ends."""
    run_ = run(STALLS, order="random", order_seed=4, **AUTHORS)
    assert [r.committed for r in run_.records] == [0, 1, 0, 0, 1, 2] and run_.tokens == [5, 5, 6, 7]


# -- the peers' commit rules through the engine: lookahead at k = 0 is the rule alone ----------------------
def drifting(g, visible):
    """A model that grows surer as it sees more, and changes its mind: position g predicts token 2 + g % 7
    with probability 0.72 + 0.05 * (tokens it sees), except that positions 2 and 5, until they see three
    tokens, predict a token that changes with every token they see, at 0.71 (over tau_conf 0.7 and
    unstable: what the stability rule waits out)."""
    seen = len(visible)
    if g in (2, 5) and seen < 3:
        return 9 + seen, 0.71
    return 2 + g % 7, min(0.72 + 0.05 * seen, 0.995)


def run_script(script, **settings):
    model = FakeDLLM(len(PROMPT), script)
    return Decoder(model, SPEC, DecodeSettings(**settings), executor="uncached").run(PROMPT)


def rule_alone(commit: str, settings: DecodeSettings, n_blocks: int, block: int, commit_filter=None) -> list[int]:
    """The commit rule decoding by itself, block after block, with no engine: each step predicts the
    current block's masked positions from what the model sees (every committed token up to the block's
    end, as block-causal attention shows it), applies lopa.rules.COMMIT_RULES[commit] to them, and
    commits what it chooses. The round before's predictions are those of the step before on the same
    block (none on a block's first step)."""
    from lopa.rules import COMMIT_RULES, BlockPredictions
    rule, tokens, previous = COMMIT_RULES[commit], {}, None
    for b in range(n_blocks):
        span = range(b * block, (b + 1) * block)
        previous = None
        while any(g not in tokens for g in span):
            masked = [g for g in span if g not in tokens]
            predicted = [drifting(g, dict(tokens)) for g in masked]
            logits = torch.stack([scripted_logits(t, p) for t, p in predicted])
            token, max_prob, conf = summarize(logits, settings.confidence, 0.0, mask_token_id=MASK)
            prev_token = torch.tensor([previous[g][0] if previous and g in previous else -1 for g in masked])
            prev_max_prob = torch.tensor([previous[g][1] if previous and g in previous else float("nan") for g in masked])
            offset = torch.tensor(masked) - b * block
            chosen = rule(BlockPredictions(token, max_prob, conf, conf, prev_token, prev_max_prob, offset, 0, commit_filter),
                          settings, True)
            previous = {g: (int(t), float(m)) for g, t, m in zip(masked, token, max_prob)}
            for g, t in zip(torch.tensor(masked)[chosen].tolist(), token[chosen].tolist()):
                tokens[g] = t
    return [tokens[g] for g in range(n_blocks * block)]


def scripted_logits(token: int, p: float, vocab: int = 16) -> torch.Tensor:
    """The logits FakeDLLM writes for a position scripted (token, p)."""
    probs = torch.full((vocab,), (1 - p) / (vocab - 1), dtype=torch.float64)
    probs[token] = p
    return probs.log()


PEER_KNOBS = {"threshold": {}, "eb": {"eb_gamma": 1.5}, "factor": {"factor_f": 1.5}, "frechet": {"frechet_margin": -0.2},
              "joint": {}, "stable": {"stable_js": 0.01}}


@pytest.mark.parametrize("commit", list(PEER_KNOBS))
def test_lookahead_at_k_0_over_each_rule_is_that_rule_alone(commit):
    """Single-block decoding (tau_add = 1) so the rule alone needs no pipeline: every round of the engine
    at k = 0 commits what the rule alone commits, token for token, and the rule commits several
    positions a round somewhere (it is not the one-token fallback throughout)."""
    settings = DecodeSettings(k=0, commit=commit, tau_conf=0.7, tau_add=1.0, block_size=4, max_new_tokens=8,
                              **PEER_KNOBS[commit])
    engine = run_script(drifting, **settings.to_dict())
    assert engine.tokens == rule_alone(commit, settings, n_blocks=2, block=4)
    assert max(len(r.anchor_positions) for r in engine.records) > 1, [len(r.anchor_positions) for r in engine.records]


def test_lookahead_at_k_0_over_the_learned_filter_is_that_rule_alone(tmp_path):
    """As above for commit=learned, with a hand-made filter that reads three of its features (max prob, the
    round before's agreement, the place in the block), loaded from a model's folder as a decode loads it."""
    import dataclasses

    from lopa.filter import FEATURES, FILTER_DIR, CommitFilter, save_filter
    f = CommitFilter(len(FEATURES), (1,))
    with torch.no_grad():
        for p in f.parameters():
            p.zero_()
        for name, weight in (("max_prob", 10.0), ("same_as_prev", 2.0), ("offset", -3.0)):
            f.net[0].weight[0, FEATURES.index(name)] = weight
        f.net[2].weight[0, 0], f.net[2].bias[0] = 1.0, -5.0
    save_filter(tmp_path, f, {"confidence": "neg_entropy"})
    settings = DecodeSettings(k=0, commit="learned", learned_threshold=0.9, tau_conf=0.7, tau_add=1.0, block_size=4,
                              max_new_tokens=8)
    spec = dataclasses.replace(SPEC, extra={"commit_filter": str(tmp_path / FILTER_DIR)})
    engine = Decoder(FakeDLLM(len(PROMPT), drifting), spec, settings, executor="uncached").run(PROMPT)
    assert engine.tokens == rule_alone("learned", settings, n_blocks=2, block=4, commit_filter=f.eval())
    assert max(len(r.anchor_positions) for r in engine.records) > 1
    assert engine.tokens != run_script(drifting, **settings.replace(commit="threshold").to_dict()).tokens


def test_the_stability_rule_waits_for_a_changed_mind():
    """Position 2 predicts another token with every token it sees until it sees three: the threshold rule
    commits its first guess at once, the stability rule only the token it settles on."""
    base = dict(k=0, tau_conf=0.7, tau_add=1.0, block_size=4, max_new_tokens=8)
    threshold = run_script(drifting, commit="threshold", **base)
    stable = run_script(drifting, commit="stable", stable_js=0.01, **base)
    assert threshold.tokens[2] == 9 and stable.tokens[2] == 2 + 2
    assert stable.tokens == rule_alone("stable", DecodeSettings(commit="stable", stable_js=0.01, **base), 2, 4)


@pytest.mark.parametrize("commit", ["stable", "eb"])
def test_a_peer_run_forked_from_a_saved_state_equals_one_replayed(commit):
    """Forks resume from a saved state, which keeps the predictions the round before decided on (the
    stability rule reads them), or replay the recorded decisions: the same rounds either way. The fork
    is taken just before a round whose anchor commits several positions, which under `stable` needs
    the round before's predictions."""
    from lopa.engine import fork
    settings = DecodeSettings(k=2, commit=commit, tau_conf=0.7, block_size=8, max_new_tokens=16, **PEER_KNOBS[commit])
    model = FakeDLLM(len(PROMPT), drifting)
    parent = Decoder(model, SPEC, settings, executor="uncached", keep_states=True).run(PROMPT)
    at = next(r.round - 1 for r in parent.records if r.round > 1 and len(r.anchor_positions) > 1)
    assert parent.decoder.states.get(at) is not None                  # the fork resumes, it does not replay
    resumed = fork(parent, at_round=at)
    fresh = Decoder(model, SPEC, settings, executor="uncached").run(PROMPT)
    assert resumed.tokens == parent.tokens == fresh.tokens
    assert [r.anchor_positions for r in resumed.records] == [r.anchor_positions for r in parent.records]
