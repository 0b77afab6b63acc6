"""Real tiny Qwen2 models with random weights: fast paths against reference paths."""

import pytest
import torch
from tiny import LIVELY, decisions, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, decoder_settings
from lopa.blocks import Branch
from lopa.forward import BatchedExecutor, PerBranchExecutor

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(seed=1)


@pytest.mark.parametrize("attention", ["block_causal", "full", "full_prompt_blind"])
@pytest.mark.parametrize("k", [0, 3, 6])
def test_batched_equals_one_branch_at_a_time(model, attention, k):
    settings = DecodeSettings(k=k, attention=attention, cache_schedule="authors" if attention == "full" else "eager",
                              **LIVELY)
    fast = Decoder(model, tiny_spec(), settings, executor="batched").run(PROMPT)
    ref = Decoder(model, tiny_spec(), settings, executor="per_branch").run(PROMPT)
    assert fast.tokens == ref.tokens
    assert decisions(fast) == decisions(ref)
    for a, b in zip(fast.records, ref.records):
        assert a.branch_scores == pytest.approx(b.branch_scores, rel=1e-4, abs=1e-5)
    assert any(r.winner > 0 for r in fast.records) or k == 0


@pytest.mark.parametrize("schedule", ["eager", "authors"])
@pytest.mark.parametrize("attention", ["block_causal", "full", "full_prompt_blind"])
@pytest.mark.parametrize("k", [0, 4])
def test_cached_matches_uncached(model, k, attention, schedule):
    """In every attention mode and cache schedule: in the full modes the uncached reference keeps each
    caching forward as a frozen group (the prompt's K/V saw the first window in `full`)."""
    settings = DecodeSettings(k=k, attention=attention, cache_schedule=schedule, **LIVELY)
    cached = Decoder(model, tiny_spec(), settings, executor="batched").run(PROMPT)
    uncached = Decoder(model, tiny_spec(), settings, executor="uncached").run(PROMPT)
    assert cached.tokens == uncached.tokens
    assert decisions(cached) == decisions(uncached)
    for a, b in zip(cached.records, uncached.records):
        for pa, pb in zip(a.branch_max_prob, b.branch_max_prob):
            assert pa == pytest.approx(pb, rel=1e-4, abs=1e-5)
    assert cached.records[-1].n_cached_blocks > 0 or len(cached.tokens) <= 8


@torch.no_grad()
def reference_d2f(model, spec, s, prompt):
    """An independent, deliberately naive D2F vanilla decoder: recompute everything, commit by the
    note's rules block by block. Returns the per-round commit lists and the tokens."""
    N, mask = s.block_size, spec.mask_token_id
    gen = [mask] * N
    rounds = []
    for _ in range(s.max_new_tokens + 1):
        seq = torch.tensor([list(prompt.tolist()) + gen])
        P, L = len(prompt), seq.shape[1]
        blk = [-1] * P + [i // N for i in range(len(gen))]
        allowed = torch.tensor([[(blk[kk] == -1) if blk[q] == -1 else (blk[kk] <= blk[q]) for kk in range(L)]
                                for q in range(L)])
        logits = model(input_ids=seq, attention_mask=allowed[None, None], position_ids=torch.arange(L)[None]).logits[0]
        probs = torch.softmax(logits.float(), -1)[P - 1:P - 1 + len(gen)]          # the logit shift
        pick = probs.clone()
        pick[:, mask] = -1                                      # the mask token is never the prediction
        commits = []
        fracs = [sum(t != mask for t in gen[b * N:(b + 1) * N]) / N for b in range(len(gen) // N)]
        for b in range(len(fracs)):
            idx = [i for i in range(b * N, (b + 1) * N) if gen[i] == mask]
            if not idx:
                continue
            chosen = [i for i in idx if probs[i, pick[i].argmax()] > s.tau_conf]
            full = b == 0 or fracs[b - 1] >= s.tau_act
            if not chosen and full:
                chosen = [max(idx, key=lambda i: float(probs[i].max()))]          # Conf = max_prob (raw)
            commits += chosen
        for i in commits:
            gen[i] = int(pick[i].argmax())
        rounds.append(sorted(commits))
        done = mask not in gen
        eos = any(t in spec.eos_token_ids for t in gen)
        last = sum(t != mask for t in gen[-N:]) / N
        if done and (eos or len(gen) // N >= s.max_blocks):
            return rounds, gen
        if last >= s.tau_add and len(gen) // N < s.max_blocks and not eos:
            gen += [mask] * N
    raise AssertionError("reference decoder made no progress")


def test_k0_equals_an_independent_vanilla_d2f(model):
    settings = decoder_settings("d2f", DecodeSettings(**LIVELY))
    ours = Decoder(model, tiny_spec(), settings, executor="batched").run(PROMPT)
    rounds, tokens = reference_d2f(model, tiny_spec(), settings, PROMPT)
    assert ours.tokens == tokens
    assert [sorted(r.anchor_positions) for r in ours.records[1:]] == rounds


def test_stored_prefix_does_not_grow_with_k(model):
    sizes, pending = {}, {}
    for k in (0, 8):
        settings = DecodeSettings(k=k, **LIVELY)
        ex = BatchedExecutor(model, tiny_spec(), settings)
        ex.start(PROMPT)
        branch = Branch.start(settings, tiny_spec())
        ex.verify([branch])
        ex.commit(0, 0)
        branches = [branch] * (k + 1)
        ex.verify(branches)
        sizes[k] = ex.cache_nbytes()
        key = ex.kv.pending[0][0]     # [B, Hkv, L, D], or [1, Hkv, T, D] packed: per-branch memory is the window only
        assert key.shape[0] * key.shape[2] <= (k + 1) * branch.window().numel()
        pending[k] = key
    assert sizes[0] == sizes[8] > 0
    # the reference path, by contrast, holds one prefix copy per branch
    ex = PerBranchExecutor(model, tiny_spec(), DecodeSettings(k=8, **LIVELY))
    ex.start(PROMPT)
    branch = Branch.start(DecodeSettings(**LIVELY), tiny_spec())
    ex.verify([branch])
    ex.commit(0, 0)
    ex.verify([branch] * 9)
    assert len(ex.copies) == 9


def test_greedy_is_deterministic(model):
    settings = DecodeSettings(k=4, **LIVELY)
    a = Decoder(model, tiny_spec(), settings).run(PROMPT)
    b = Decoder(model, tiny_spec(), settings).run(PROMPT)
    assert a.tokens == b.tokens and decisions(a) == decisions(b)


def test_sampling_is_seeded(model):
    settings = DecodeSettings(k=2, temperature=1.0, seed=5, **LIVELY)
    a = Decoder(model, tiny_spec(), settings).run(PROMPT)
    b = Decoder(model, tiny_spec(), settings).run(PROMPT)
    assert a.tokens == b.tokens


def test_stream_can_be_stopped_after_one_round(model):
    decoder = Decoder(model, tiny_spec(), DecodeSettings(k=2, **LIVELY))
    stream = decoder.stream(PROMPT)
    next(stream), next(stream)
    stream.close()
    result = decoder.result()
    assert result.stopped and len(result.records) == 2


def test_packed_branches_equal_the_reference_and_cache_the_winner():
    """Under block_causal, a branch whose extra token lies in a later block feeds only that block and
    reads the anchor's K/V for the blocks before (lopa.kv.Packing): its predictions, and the cache after
    it wins, equal the per-branch reference's, with each branch of a different length and start."""
    model = tiny_qwen2(seed=2)
    settings = DecodeSettings(k=3, attention="block_causal", **LIVELY)      # block 8
    N, mask = settings.block_size, tiny_spec().mask_token_id
    anchor = Branch(torch.tensor([5, 6, mask, 7] + [mask] * 4 + [mask] * N + [mask] * N), 0, N, mask)   # 3 blocks
    branches = [anchor, anchor.with_tokens(torch.tensor([N + 3]), torch.tensor([9])),          # block 1: skip 8
                anchor.with_tokens(torch.tensor([2]), torch.tensor([11])),                      # block 0: skip 0
                anchor.with_tokens(torch.tensor([2 * N + 1]), torch.tensor([12]))]              # block 2: skip 16
    fast, ref = BatchedExecutor(model, tiny_spec(), settings), PerBranchExecutor(model, tiny_spec(), settings)
    for ex in (fast, ref):
        ex.start(PROMPT)
        ex.verify([Branch.start(settings, tiny_spec())])
        ex.commit(0, 0)
    got, want = fast.verify(branches), ref.verify(branches)
    assert fast.packing is not None and fast.packing.skip == [0, N, 0, 2 * N]
    assert fast.packing.length == 3 * N + 2 * N + 3 * N + N      # 72 fed tokens, not 4 x 24 = 96
    assert torch.equal(got.token, want.token)
    assert torch.allclose(got.max_prob, want.max_prob, atol=1e-5) and torch.allclose(got.conf, want.conf, atol=1e-5)
    for ex in (fast, ref):
        ex.commit(1, 2 * N)                                      # the block-1 branch wins; two blocks are cached
    after = [b.with_cached(2) for b in branches[1:2]]
    got, want = fast.verify(after), ref.verify(after)
    assert torch.allclose(got.max_prob, want.max_prob, atol=1e-5) and torch.equal(got.token, want.token)


def test_packing_plan_on_hand_made_windows():
    from lopa.kv import Packing
    a = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0])                          # block size 4, two blocks
    same, later, earlier, longer = a.clone(), a.clone(), a.clone(), torch.cat([a, torch.zeros(4, dtype=torch.long)])
    later[6], earlier[1] = 3, 3
    plan = Packing.plan([a, same, later, earlier, longer], 4)
    assert plan.skip == [0, 8, 4, 0, 8]                                 # an identical branch feeds nothing
    assert plan.length == 8 + 0 + 4 + 8 + 4
    assert plan.index[2].tolist() == [0, 1, 2, 3, 8, 9, 10, 11] + [0] * 4
    assert plan.index[4].tolist() == list(range(8)) + [20, 21, 22, 23]
    m = plan.mask(4)[0, 0]
    t = 8                                                               # "later"'s first fed token (its block 1)
    assert m[t, :4].all() and not m[t, 4:8].any()                      # sees the anchor's block 0, not its block 1
    assert m[t, 8:12].all() and not m[0, 8:].any()                     # its own block; the anchor sees no branch
    assert not plan.pays([a] * 2) or Packing.plan([a, a], 4).length < 16
