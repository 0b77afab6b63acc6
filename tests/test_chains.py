"""Lookahead chains (lopa/chains.py, lookahead_depth): proposals, the rows that verify them, the cut, on
hand-made predictions; depth 1 is LoPA exactly; a chain token is never kept on less evidence than a
LoPA token; and through the engine, depth 1 equals LoPA token for token in both attention modes."""

import pytest
import torch
from tiny import tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings
from lopa.blocks import Branch
from lopa.chains import (
    adjacent_chains,
    candidate_rows,
    chain_plan,
    kept_lengths,
    plan_branches,
    plan_chains,
    ranked_chains,
)
from lopa.rules import select_winner

M = 99                                                       # the mask token id
LOOK = torch.tensor([5, 2, 7])                               # lookahead positions, best first
FREE = torch.tensor([False, True, True, True, False, True, True, True])


def test_proposals_rank_or_run_left_to_right_and_leave_their_inputs_alone():
    look, free = LOOK.clone(), FREE.clone()
    assert [c.tolist() for c in ranked_chains(look, free, 3)] == [[5, 2, 7], [2, 5, 7], [7, 5, 2]]
    assert [c.tolist() for c in ranked_chains(look, free, 1)] == [[5], [2], [7]]
    assert [c.tolist() for c in adjacent_chains(look, free, 3)] == [[5, 6, 7], [2, 3, 5], [7]]
    assert torch.equal(look, LOOK) and torch.equal(free, FREE)


def test_every_prefix_is_one_row_and_rows_filling_the_same_positions_are_shared():
    plan = plan_chains(ranked_chains(LOOK, FREE, 2))          # (5, 2), (2, 5), (7, 5)
    assert plan.rows == [(), (5,), (2,), (7,), (2, 5), (5, 7)]
    assert plan.row_of == [[1, 4], [2, 4], [3, 5]]
    one = plan_chains(ranked_chains(LOOK, FREE, 1))
    assert one.rows == [(), (5,), (2,), (7,)] and one.row_of == [[1], [2], [3]]
    assert plan_chains([]).rows == [()]


def test_each_row_is_the_anchor_plus_the_proposed_tokens_at_its_positions():
    anchor = Branch(torch.tensor([4, M, M, M]), 0, 4, M)
    tokens = torch.tensor([40, 41, 42, 43])                   # [W] the last winner's predictions
    rows = plan_branches(anchor, plan_chains(ranked_chains(torch.tensor([3, 1]), torch.ones(4, dtype=torch.bool), 2)),
                         tokens)
    assert [b.tokens.tolist() for b in rows] == [[4, M, M, M], [4, M, M, 43], [4, 41, M, M], [4, 41, M, 43]]
    assert anchor.tokens.tolist() == [4, M, M, M]


def predictions(rows: dict[int, dict[int, tuple[int, float]]], width: int = 8):
    """Per row, [W] argmax and max prob from {row: {position: (token, max prob)}}; -1 / 0 elsewhere."""
    n = max(rows) + 1
    token, max_prob = torch.full((n, width), -1), torch.zeros(n, width)
    for r, seen in rows.items():
        for p, (t, q) in seen.items():
            token[r, p], max_prob[r, p] = t, q
    return list(token), list(max_prob)


TOKENS = torch.tensor([0, 12, 22, 0, 0, 55, 0, 77])          # [W] proposed tokens at the chain positions


def test_a_chain_is_kept_while_the_row_before_each_token_still_predicts_it():
    plan = plan_chains(ranked_chains(LOOK, FREE, 3))          # (5, 2, 7), (2, 5, 7), (7, 5, 2)
    row = {key: i for i, key in enumerate(plan.rows)}
    token, max_prob = predictions({
        row[(5,)]: {2: (22, 0.6)},                 # chain 0: agrees at 2 ...
        row[(2, 5)]: {7: (70, 0.9)},               # ... but not at 7: cut after two
        row[(2,)]: {5: (55, 0.2)},                 # chain 1: agrees at 5, then the shared row (2, 5) disagrees at 7
        row[(7,)]: {5: (55, 0.05)},                # chain 2: agrees at 5 (max prob 0.05) ...
        row[(5, 7)]: {2: (22, 0.8)},               # ... and at 2: all three kept
        row[(2, 5, 7)]: {}})
    before = [t.clone() for t in token], [q.clone() for q in max_prob]
    kept = kept_lengths(plan, TOKENS, token, max_prob)
    assert kept == [2, 2, 3]
    assert candidate_rows(plan, kept) == [0, row[(2, 5)], row[(2, 5)], row[(2, 5, 7)]]
    assert kept_lengths(plan, TOKENS, token, max_prob, floor=0.1) == [2, 2, 1]      # the floor holds at every depth
    assert all(torch.equal(a, b) for a, b in zip(token + max_prob, before[0] + before[1]))


def test_depth_1_is_lopa_exactly_on_hand_made_predictions():
    """At depth 1 the rows are LoPA's k + 1 branches in its order, every branch keeps its one token whatever
    the forward predicted, and the winner is select_winner over all of them."""
    anchor = Branch(torch.tensor([4, M, M, M, M, M, M, M]), 0, 8, M)
    plan = chain_plan(LOOK, FREE, 1)
    rows = plan_branches(anchor, plan, TOKENS)
    assert [b.tokens.tolist() for b in rows[1:]] == [anchor.with_tokens(p.view(1), TOKENS[p].view(1)).tokens.tolist()
                                                      for p in LOOK]
    token, max_prob = torch.zeros(4, 8, dtype=torch.long), torch.zeros(4, 8)     # predictions that agree with nothing
    kept = kept_lengths(plan, TOKENS, list(token), list(max_prob), floor=0.9)
    assert kept == [1, 1, 1] and candidate_rows(plan, kept) == [0, 1, 2, 3]
    scores = torch.tensor([-1.0, -0.5, -0.2, -0.2])
    assert candidate_rows(plan, kept)[int(select_winner(scores[candidate_rows(plan, kept)]))] == int(select_winner(scores))


@pytest.mark.parametrize("seed", range(20))
def test_a_kept_chain_token_has_at_least_a_lopa_token_s_evidence(seed):
    """A LoPA token is the last winner's prediction at its position (its argmax; sampled at temperature > 0).
    Every kept chain token past the first is that too, and also the prediction of the row holding the chain
    before it, at a max prob of at least the floor: on random hand-made predictions, and never more tokens at
    a higher floor. What it covers for the first token: the test after this one."""
    g = torch.Generator().manual_seed(seed)
    W, depth = 10, 4
    free = torch.rand(W, generator=g) < 0.8
    look = free.nonzero().flatten()[torch.randperm(int(free.sum()), generator=g)][:3]
    tokens = torch.randint(0, 3, (W,), generator=g)
    for propose in (ranked_chains, adjacent_chains):
        plan = plan_chains(propose(look, free, depth))
        token = list(torch.randint(0, 3, (len(plan.rows), W), generator=g))
        max_prob = list(torch.rand(len(plan.rows), W, generator=g))
        for floor in (0.0, 0.3):
            kept = kept_lengths(plan, tokens, token, max_prob, floor)
            for chain, rows, n in zip(plan.chains, plan.row_of, kept):
                assert 1 <= n <= chain.numel()
                for i in range(1, n):
                    p, parent = chain[i], rows[i - 1]
                    assert p not in chain[:i] and bool(free[p]) and int(p) not in plan.rows[parent]
                    assert token[parent][p] == tokens[p] and max_prob[parent][p] >= floor
            assert all(a <= b for a, b in zip(kept_lengths(plan, tokens, token, max_prob, 0.6), kept))


def test_a_winning_chain_s_first_token_may_score_below_the_anchor_alone():
    """What a chain token's evidence covers: the committed set wins the branch score, not each token alone. The
    chain (5, 6) keeps both tokens; its one-token row (5,) scores below the anchor, but it is not a candidate (a
    chain's candidate is its kept prefix), and the row (5, 6) beats the anchor, so token 5 is committed though
    LoPA at depth 1 would have kept the anchor."""
    plan = plan_chains(adjacent_chains(torch.tensor([5]), FREE, 2))            # rows: (), (5,), (5, 6)
    assert plan.rows == [(), (5,), (5, 6)]
    tokens = torch.tensor([0, 0, 0, 0, 0, 55, 66, 0])
    token, max_prob = predictions({1: {6: (66, 0.7)}, 2: {}})                   # row (5,) still predicts 66 at 6
    kept = kept_lengths(plan, tokens, token, max_prob)
    assert kept == [2] and candidate_rows(plan, kept) == [0, 2]
    scores = torch.tensor([-1.0, -1.3, -0.4])                                   # anchor, (5,), (5, 6)
    candidates = candidate_rows(plan, kept)
    assert candidates[int(select_winner(scores[candidates]))] == 2              # the chain wins ...
    assert int(select_winner(scores[:2])) == 0                                   # ... where depth 1 keeps the anchor


PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
SETTINGS = DecodeSettings(k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                          confidence="max_prob")


def lopa_reference(model, spec, s: DecodeSettings) -> list[tuple]:
    """LoPA's round as the note states it, with the engine's own phases but one token per branch and no
    chain machinery: (anchor, lookahead, winner) per round and the tokens. The engine's depth 1 must match."""
    from lopa import engine
    decoder = Decoder(model, spec, s)
    rounds = []
    gen = decoder._prefill(PROMPT)
    try:
        while True:
            next(gen)
    except StopIteration as done:
        predictions = done.value
    while True:
        view = decoder._view(len(rounds) + 1, predictions)
        commits = decoder.order.anchor(view)
        anchor = decoder.state.with_tokens(decoder.state.window_start + commits.positions, commits.tokens)
        if anchor.finished(s, spec):
            return rounds, anchor.tokens.tolist()
        look = decoder.order.lookahead(view, engine.free_positions(anchor, commits.positions))
        branches = [anchor] + [anchor.with_tokens(anchor.window_start + p.view(1), predictions[0][p].view(1))
                               for p in look]
        branches = [b.with_block_added(s, spec) for b in branches]
        verified = decoder.executor.verify(branches)
        winner = int(select_winner(engine.score_branches(branches, verified, s)))
        predictions = decoder._commit(branches, verified, winner)
        rounds.append((commits.positions.tolist(), look.tolist(), winner))
        if decoder.state.finished(s, spec):
            return rounds, decoder.state.tokens.tolist()


@pytest.mark.parametrize("attention", ["block_causal", "full"])
@pytest.mark.parametrize("k", [1, 3])
def test_depth_1_equals_lopa_token_for_token_and_deeper_chains_change_the_run(attention, k):
    spec, model = tiny_spec(attention=attention), tiny_qwen2(seed=1)
    s = SETTINGS.replace(attention=attention, k=k, lookahead_depth=1)
    run = Decoder(model, spec, s).run(PROMPT)
    rounds, tokens = lopa_reference(model, spec, s)
    assert run.tokens == tokens
    assert [(sorted(r.anchor_positions), r.lookahead_positions, r.winner) for r in run.records if r.kind == "round"] == \
        [([p + r.window_start for p in a], [p + r.window_start for p in look], w)
         for (a, look, w), r in zip(rounds, [r for r in run.records if r.kind == "round"])]
    assert all(not r.chain_positions for r in run.records)      # depth 1 traces are LoPA's, field for field
    if k > 1:
        deeper = Decoder(model, spec, s.replace(lookahead_depth=3)).run(PROMPT)
        assert [r.branch_tokens for r in deeper.records] != [r.branch_tokens for r in run.records]


@pytest.mark.parametrize("attention", ["block_causal", "full"])
def test_a_run_with_chains_forks_from_a_saved_state_as_it_replays_and_a_trace_script_reproduces_it(attention, tmp_path):
    """The chains of a round follow from its anchor, its lookahead positions and the state, so a fork that
    resumes from a saved state, one that replays the recorded decisions, and a replay of the trace as a
    script (which pins only anchors and lookahead positions) all decode the run again."""
    from lopa import RunResult
    from lopa.engine import fork
    from lopa.script import script_from_trace
    spec, model = tiny_spec(attention=attention), tiny_qwen2(seed=1)
    s = SETTINGS.replace(attention=attention, lookahead_depth=3)
    parent = Decoder(model, spec, s, keep_states=True).run(PROMPT)
    loaded = RunResult.load(parent.save(tmp_path / "run.json"))
    resumed, replayed = fork(parent, at_round=1), fork(loaded, at_round=1, model=Loaded(model, spec))
    scripted = Decoder(model, spec, s, script=script_from_trace(loaded)).run(PROMPT)
    for run in (resumed, replayed, scripted):
        assert run.tokens == parent.tokens
        assert [(r.chain_positions, r.chain_kept, r.winner) for r in run.records] == \
            [(r.chain_positions, r.chain_kept, r.winner) for r in parent.records]


class Loaded:
    """What fork() needs of a loaded model to replay a trace: a Decoder for given settings."""
    def __init__(self, model, spec):
        self.model, self.spec = model, spec

    def decoder(self, settings, order=None):
        return Decoder(self.model, self.spec, settings, order=order)


@pytest.mark.parametrize("attention", ["block_causal", "full"])
def test_chains_decode_the_same_on_the_batched_path_and_both_references(attention):
    """The deeper rows go through every executor: the batched forward, one forward per row on its own cache
    copy, and no cache at all decide the same chains, cuts and winners."""
    spec, model = tiny_spec(attention=attention), tiny_qwen2(seed=1)
    s = SETTINGS.replace(attention=attention, lookahead_depth=3)
    runs = [Decoder(model, spec, s, executor=e).run(PROMPT) for e in ("batched", "per_branch", "uncached")]
    for run in runs[1:]:
        assert run.tokens == runs[0].tokens
        assert [(r.chain_kept, r.winner, r.branch_tokens) for r in run.records] == \
            [(r.chain_kept, r.winner, r.branch_tokens) for r in runs[0].records]


def test_the_cut_on_hand_made_logits():
    """From logits to the cut: rows' logits [R, W, V] reduced as the engine does (lopa.rules.summarize); the
    row holding the chain's first token still prefers its second (kept), the row holding two prefers another
    token than the chain's third (cut there)."""
    from lopa.rules import summarize
    plan = plan_chains([torch.tensor([1, 2, 3])])             # rows: (), (1,), (1, 2), (1, 2, 3)
    tokens = torch.tensor([0, 4, 2, 3])                       # [W] proposed: 4 at 1, 2 at 2, 3 at 3
    logits = torch.zeros(4, 4, 5)                             # [R, W, V]
    logits[1, 2, 2] = 3.0                                     # row (1,): position 2 -> token 2, as proposed
    logits[2, 3, 1] = 3.0                                     # row (1, 2): position 3 -> token 1, not 3
    token, max_prob, _ = summarize(logits, "max_prob", 0.0)
    assert kept_lengths(plan, tokens, list(token), list(max_prob)) == [2]
    assert kept_lengths(plan, tokens, list(token), list(max_prob), floor=0.9) == [1]    # softmax: 0.83 < 0.9
    logits[2, 3, 3] = 4.0                                     # now row (1, 2) prefers token 3 too
    token, max_prob, _ = summarize(logits, "max_prob", 0.0)
    assert kept_lengths(plan, tokens, list(token), list(max_prob)) == [3]
