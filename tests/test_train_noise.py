import dataclasses

import torch

from lopa.train import noise
from lopa.train.recipe import Recipe

# one row: a prompt of 3, an answer block of 6, then padding; positions 4 and 6 are computed numbers
BLOCK_ID = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 0]])
VALID = torch.tensor([[True] * 9 + [False]])
COMPUTED = torch.tensor([[False] * 4 + [True, False, True] + [False] * 3])


def _draw(n=400, **kw):
    recipe = dataclasses.replace(Recipe(), **kw)
    S = n
    gen = torch.Generator().manual_seed(0)
    return noise.sample_mask(BLOCK_ID.expand(S, -1), VALID.expand(S, -1), COMPUTED.expand(S, -1), recipe, gen)


def test_without_new_patterns_the_noise_is_the_blocks_pattern_unchanged():
    S = 50
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    masked, t = noise.sample_mask(BLOCK_ID.expand(S, -1), VALID.expand(S, -1), COMPUTED.expand(S, -1), Recipe(), gen_a)
    t_old = noise.block_mask_ratios(BLOCK_ID.expand(S, -1), VALID.expand(S, -1), Recipe(), gen_b)
    assert torch.equal(t, t_old)
    assert torch.equal(masked, (torch.rand((S, 10), generator=gen_b) < t_old) & (t_old > 0))


def test_cut_rows_are_clean_before_the_cut_and_never_touch_prompt_or_padding():
    masked, t = _draw(cut_prob=1.0)
    assert not masked[:, :3].any() and not masked[:, 9].any()
    for row in masked:  # a clean prefix of the answer, then noise only after it
        hits = row.nonzero().flatten().tolist()
        if hits:
            first = hits[0]
            assert first >= 3
    # the cut lands between the answer start (3) and the last computed number (6): some rows keep
    # 3..5 clean, none keeps 3..6 clean while masking only 7..8 and nothing at 6 or before
    t_first = (t > 0).float().argmax(1)
    assert set(t_first.tolist()) <= {3, 4, 5, 6}
    assert len(set(t_first.tolist())) == 4
    assert ((t[:, 3:9] > 0).sum(1) >= 3).all()  # everything after the cut is noisy


def test_computed_rows_mask_only_computed_numbers():
    masked, t = _draw(computed_prob=1.0)
    assert not masked[:, ~COMPUTED[0]].any()
    assert masked[:, 4].any() and masked[:, 6].any()
    assert (t[:, COMPUTED[0]] > 0).all()


def test_patterns_mix_by_their_probabilities():
    _, t = _draw(n=2000, cut_prob=0.3, computed_prob=0.3)
    only_computed = ((t > 0) == COMPUTED).all(1)
    clean_start = t[:, 3] == 0
    assert 0.2 < only_computed.float().mean() < 0.4
    assert clean_start.float().mean() > 0.3  # cut rows (and computed rows) keep the answer's first token


def test_computed_positions_from_dependencies_and_inputs_untouched():
    deps = torch.tensor([[0, 4, 3], [0, 6, 4], [1, 2, 1]])
    before = deps.clone()
    c = noise.computed_positions(deps, (2, 10))
    assert c.nonzero().tolist() == [[0, 4], [0, 6], [1, 2]]
    assert torch.equal(deps, before)
    assert not noise.computed_positions(None, (2, 10)).any()


def test_forced_rows_take_the_computed_pattern_and_the_others_keep_theirs():
    S = 400
    forced = torch.arange(S) % 2 == 0  # [S]
    recipe = Recipe()
    masked, t = noise.sample_mask(BLOCK_ID.expand(S, -1), VALID.expand(S, -1), COMPUTED.expand(S, -1), recipe,
                                  torch.Generator().manual_seed(0), forced)
    assert ((t[forced] > 0) == COMPUTED).all()  # forced rows: computed numbers only
    assert not masked[forced][:, ~COMPUTED[0]].any()
    assert (t[~forced][:, 7:9] > 0).any()  # the others: the blocks pattern, words included
    # no row forced is the same draw as no `forced` at all
    none = torch.zeros(S, dtype=torch.bool)
    a = noise.sample_mask(BLOCK_ID.expand(S, -1), VALID.expand(S, -1), COMPUTED.expand(S, -1), recipe,
                          torch.Generator().manual_seed(1), none)
    b = noise.sample_mask(BLOCK_ID.expand(S, -1), VALID.expand(S, -1), COMPUTED.expand(S, -1), recipe,
                          torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
