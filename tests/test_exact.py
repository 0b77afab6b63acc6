"""The exact conditionals (lopa/exact.py): hand-made answers, and the fast path against the reference."""

import random

import torch

from lopa.exact import exact_distribution, exact_distribution_reference, reading_table

M, EOS, V = 1, 0, 12


def test_share_of_agreeing_answers_weighted_by_how_often_each_is_listed():
    # three readings of 4 tokens (block 2): [5 6 7 8] listed twice, [5 9 7 8], [3 6 10 11]
    cands, w = reading_table([[5, 6, 7, 8], [5, 6, 7, 8], [5, 9, 7, 8], [3, 6, 10, 11]], 4, EOS)
    assert cands.shape == (3, 4) and sorted(w.tolist()) == [1.0, 1.0, 2.0]
    state = torch.tensor([5, M, M, M])
    probs, defined = exact_distribution(state, cands, w, M, V, block_size=2)
    # position 1 is predicted by the output at 0, which sees block 0 only: token 5 there
    assert torch.allclose(probs[1, [6, 9]], torch.tensor([2 / 3, 1 / 3]))
    # position 2 starts block 1; its predictor (position 1) sees block 0 too
    assert probs[2, 7] == 1.0 and defined[1:].all()
    # the first position sees nothing: the prior over all readings
    assert torch.allclose(probs[0, [5, 3]], torch.tensor([3 / 4, 1 / 4]))


def test_no_agreeing_answer_is_undefined_and_block_causal_hides_later_blocks():
    cands, w = reading_table([[5, 6, 7, 8], [3, 6, 10, 11]], 4, EOS)
    state = torch.tensor([4, M, M, 9])      # 4 fits no reading
    probs, defined = exact_distribution(state, cands, w, M, V, block_size=2)
    assert not defined[1] and probs[1].sum() == 0
    # position 0 is predicted from the prompt alone, so the impossible 4 does not reach it
    assert defined[0]
    # under full attention position 2 sees position 3's 9 (no reading has it) and position 0's 4
    _, defined_full = exact_distribution(state, cands, w, M, V, block_size=2, attention="full")
    assert not defined_full[2]


def test_fast_path_equals_the_reference_on_random_states():
    rng = random.Random(3)
    answers = [[rng.randrange(2, V) for _ in range(rng.randrange(5, 9))] for _ in range(6)]
    answers += answers[:2]                      # some listed twice
    cands, w = reading_table(answers, 10, EOS)
    for trial in range(40):
        truth = cands[rng.randrange(len(cands))]
        state = torch.where(torch.rand(10, generator=torch.Generator().manual_seed(trial)) < 0.6, M, truth)
        if trial % 5 == 0:
            state[rng.randrange(10)] = rng.randrange(2, V)      # sometimes a token no reading explains there
        for attention in ("block_causal", "full"):
            positions = sorted(rng.sample(range(10), 4)) if trial % 2 else None
            fast = exact_distribution(state, cands, w, M, V, 4, attention, positions)
            slow = exact_distribution_reference(state, cands, w, M, V, 4, attention, positions)
            assert torch.equal(fast[1], slow[1])
            assert torch.allclose(fast[0], slow[0])
