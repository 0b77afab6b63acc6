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


# Corruption by wrong tokens (Recipe.wrong_prob): hand-made token ids on the one-row layout above.
# Pools: digits 10..19, names 20..22, the rest of the answers' tokens (here 30, 31 and 40).
IDS = torch.tensor([[5, 6, 7, 10, 14, 30, 20, 31, 40, 2]])
DIGITS = torch.zeros(50, dtype=torch.bool)
DIGITS[10:20] = True
NAMES = torch.zeros(50, dtype=torch.bool)
NAMES[20:23] = True


def _wrong(n=2000, wrong_prob=0.25, t=None, masked=None, seed=0):
    S = n
    ids = IDS.expand(S, -1)
    t = torch.full((S, 10), 0.5) * ((BLOCK_ID > 0) & VALID) if t is None else t  # every answer position noisy
    masked = torch.zeros(S, 10, dtype=torch.bool) if masked is None else masked
    pools = noise.replacement_pools(IDS, (BLOCK_ID > 0) & VALID, [DIGITS, NAMES])
    wrong, out = noise.sample_wrong(ids, t, masked, pools, Recipe(wrong_prob=wrong_prob), torch.Generator().manual_seed(seed))
    return ids, t, masked, wrong, out


def test_replacement_pools_are_the_classes_and_the_other_answer_tokens():
    pools = noise.replacement_pools(IDS, (BLOCK_ID > 0) & VALID, [DIGITS, NAMES])
    assert [p.tolist() for p in pools] == [list(range(10, 20)), [20, 21, 22], [30, 31, 40]]  # 2 (pad) and the prompt left out


def test_wrong_tokens_take_their_share_of_the_visible_noisy_positions():
    _, _, _, wrong, _ = _wrong(wrong_prob=0.25)
    assert not wrong[:, :3].any() and not wrong[:, 9].any()  # never the prompt or the padding
    share = wrong[:, 3:9].float().mean().item()
    assert 0.23 < share < 0.27
    assert not _wrong(wrong_prob=0.0)[3].any()


def test_a_wrong_token_differs_from_the_truth_and_stays_in_its_class():
    ids, _, _, wrong, out = _wrong(wrong_prob=1.0)
    assert wrong[:, 3:9].all()
    assert (out[wrong] != ids[wrong]).all()
    assert torch.equal(out[~wrong], ids[~wrong])
    assert DIGITS[out[:, 3:5]].all()  # another digit for a digit
    assert set(out[:, 6].tolist()) == {21, 22}  # another name for the name 20, each of the others drawn
    assert set(out[:, 5].tolist()) == {31, 40} and set(out[:, 8].tolist()) == {30, 31}
    assert (out[:, 3] != 10).all() and len(set(out[:, 3].tolist())) == 9  # the nine other digits


def test_masked_and_clean_positions_are_never_replaced():
    S = 500
    masked = torch.zeros(S, 10, dtype=torch.bool)
    masked[:, 4] = True
    t = torch.tensor([[0, 0, 0, 0, 0, 0, 0.5, 0.5, 0.5, 0]]).expand(S, -1)  # a clean block part (t = 0) at 3..5
    _, _, _, wrong, _ = _wrong(n=S, wrong_prob=1.0, t=t, masked=masked)
    assert not wrong[:, :6].any() and wrong[:, 6:9].all()


def test_a_token_alone_in_its_pool_stays():
    ids = torch.tensor([[5, 6, 7, 10, 10, 10, 10, 10, 10, 2]])
    pools = noise.replacement_pools(ids, (BLOCK_ID > 0) & VALID, [])  # one pool: {10}
    wrong, out = noise.sample_wrong(ids, torch.full((1, 10), 0.5), torch.zeros(1, 10, dtype=torch.bool), pools,
                                    Recipe(wrong_prob=1.0), torch.Generator().manual_seed(0))
    assert not wrong.any() and torch.equal(out, ids)


def _tiny_model_and_batch():
    import random

    from transformers import AutoTokenizer

    from lopa.train.data import make_batch
    from lopa.train.recipe import build_model

    tok = AutoTokenizer.from_pretrained("assets/models/open-gsm-dllm")
    torch.manual_seed(0)
    recipe = Recipe(layers=1, hidden=32, heads=2, kv_heads=1, ffn=64, batch=4, bf16=False, phrasing="ladder")
    return tok, build_model(recipe, tok).eval(), make_batch(tok, random.Random(0), recipe, progress=1.0)


def _by_hand(model, batch, noisy, targets, masked, t, n_answer):
    """The loss written out: CE toward the clean token at every target, 1/t on a masked one, 1 on a visible one."""
    import torch.nn.functional as F

    from lopa.tasks.layout import hidden_states

    h = hidden_states(model, noisy, batch.block_id, batch.valid)
    sel = targets[:, 1:]
    ce = F.cross_entropy(model.lm_head(h[:, :-1][sel]).float(), batch.ids[:, 1:][sel], reduction="none")
    return (ce / torch.where(masked[:, 1:][sel], t[:, 1:][sel], 1.0)).sum() / n_answer


def test_the_loss_covers_the_wrong_and_the_visible_positions_of_the_noisy_blocks():
    from lopa.train.losses import diffusion_loss, digit_ids, name_ids

    tok, model, batch = _tiny_model_and_batch()
    recipe = Recipe(wrong_prob=0.3, digit_weight=1, name_weight=1, object_weight=1)
    answer = (batch.block_id > 0) & batch.valid
    with torch.no_grad():
        got = diffusion_loss(model, batch, mask_id=tok.mask_token_id, recipe=recipe, gen=torch.Generator().manual_seed(4),
                             is_digit=digit_ids(tok), is_name=name_ids(tok))
        # replay the same draws
        gen = torch.Generator().manual_seed(4)
        masked, t = noise.sample_mask(batch.block_id, batch.valid, noise.computed_positions(batch.deps, batch.ids.shape),
                                      recipe, gen, batch.forced)
        noisy = torch.where(masked, tok.mask_token_id, batch.ids)
        pools = noise.replacement_pools(batch.ids, answer, [digit_ids(tok), name_ids(tok)])
        wrong, noisy = noise.sample_wrong(noisy, t, masked, pools, recipe, gen)
        assert wrong[:, 1:].sum() > 5 and ((t > 0) & ~masked & ~wrong).any()
        expected = _by_hand(model, batch, noisy, t > 0, masked, t, answer.sum())
        masked_only = _by_hand(model, batch, noisy, masked, masked, t, answer.sum())
    assert torch.allclose(got.loss, expected, rtol=1e-5) and not torch.allclose(got.loss, masked_only, rtol=1e-3)
    assert got.masked == int(masked[:, 1:].sum())  # the logged CE stays the masked targets'


def test_with_wrong_prob_off_the_loss_and_its_draws_are_the_masks_alone():
    from lopa.train.losses import diffusion_loss, digit_ids

    tok, model, batch = _tiny_model_and_batch()
    recipe = Recipe(digit_weight=1)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        got = diffusion_loss(model, batch, mask_id=tok.mask_token_id, recipe=recipe, gen=gen, is_digit=digit_ids(tok))
        replay = torch.Generator().manual_seed(4)
        masked, t = noise.sample_mask(batch.block_id, batch.valid, noise.computed_positions(batch.deps, batch.ids.shape),
                                      recipe, replay, batch.forced)
        expected = _by_hand(model, batch, torch.where(masked, tok.mask_token_id, batch.ids), masked, masked, t,
                            ((batch.block_id > 0) & batch.valid).sum())
    assert torch.equal(gen.get_state(), replay.get_state())  # nothing drawn after the masks
    assert torch.allclose(got.loss, expected, rtol=1e-6) and got.masked == int(masked[:, 1:].sum())
    # and the masks do not depend on wrong_prob: the wrong tokens are drawn after them
    a = noise.sample_mask(batch.block_id, batch.valid, None, Recipe(), torch.Generator().manual_seed(1))
    b = noise.sample_mask(batch.block_id, batch.valid, None, Recipe(wrong_prob=0.5), torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
