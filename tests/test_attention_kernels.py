"""Which attention kernel each forward uses, and that the FlashAttention path computes the same
attention. On CPU the real kernel cannot run, so a stand-in with flash_attn's signatures and
outputs (plain torch, log-sum-exps included) takes its place; on a GPU the real kernel is checked
against SDPA."""

import pytest
import torch
from tiny import LIVELY, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, attention
from lopa.forward import BatchedExecutor

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])


def dense(q, k, v, softmax_scale, causal, return_attn_probs):
    """flash_attn_func: q [b, s, H, D], k, v [b, t, Hkv, D] -> out [b, s, H, D], lse [b, H, s]."""
    assert not causal and return_attn_probs
    G = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(G, dim=2), v.repeat_interleave(G, dim=2)
    scores = torch.einsum("bshd,bthd->bhst", q.float(), k.float()) * softmax_scale
    out = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v.float())
    return out.to(q.dtype), scores.logsumexp(-1), None


def varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal, return_attn_probs):
    """flash_attn_varlen_func: packed [T, H, D] sequences -> out [T, H, D], lse [H, T]."""
    assert torch.equal(cu_q, cu_k) and cu_q.dtype == torch.int32
    parts = [dense(q[None, a:b], k[None, a:b], v[None, a:b], softmax_scale, causal, True)
             for a, b in zip(cu_q[:-1].tolist(), cu_q[1:].tolist())]
    assert max(b - a for a, b in zip(cu_q[:-1].tolist(), cu_q[1:].tolist())) == max_q
    return torch.cat([o[0] for o, _, _ in parts]), torch.cat([lse[0] for _, lse, _ in parts], dim=1), None


@pytest.fixture
def stand_in(monkeypatch):
    """The stand-in kernels, used wherever the real ones would be (any device, any dtype)."""
    calls = []
    monkeypatch.setattr(attention, "flash_kernels", lambda: (dense, varlen))

    def counting(query, window_lengths, kernels):           # the real rule, minus "CUDA half precision only"
        chosen = "flash" if kernels is not None and window_lengths is not None else "sdpa"
        calls.append(chosen)
        return chosen
    monkeypatch.setattr(attention, "window_kernel", counting)
    return calls


def test_the_dispatch_rule():
    cuda_bf16 = type("Q", (), {"is_cuda": True, "dtype": torch.bfloat16})()
    cpu = torch.zeros(1)
    kernels = (dense, varlen)
    assert attention.window_kernel(cuda_bf16, [8, 9], kernels) == "flash"
    assert attention.window_kernel(cuda_bf16, None, kernels) == "sdpa"        # a block mask is needed
    assert attention.window_kernel(cuda_bf16, [8], None) == "sdpa"            # flash_attn not installed
    assert attention.window_kernel(cpu, [8], kernels) == "sdpa"               # not on CPU


@pytest.mark.parametrize("attention_mode", ["full", "full_prompt_blind"])
@pytest.mark.parametrize("k", [0, 3])
def test_full_attention_rounds_take_flash_and_decode_identically(stand_in, k, attention_mode):
    """Full attention: every round uses the flash path (full_prompt_blind: every round after the
    prefill, whose prompt rows need a mask); tokens, decisions and scores equal the per-branch reference."""
    model = tiny_qwen2(seed=1)
    settings = DecodeSettings(k=k, attention=attention_mode, **LIVELY)
    flash = Decoder(model, tiny_spec(), settings, executor="batched").run(PROMPT)
    used = list(stand_in)
    layers = model.config.num_hidden_layers
    prefill = ["flash" if attention_mode == "full" else "sdpa"] * layers   # the authors' prefill has no mask at all
    assert used[:layers] == prefill
    assert set(used[layers:]) == {"flash"} and len(used) > layers
    ref = Decoder(model, tiny_spec(), settings, executor="per_branch").run(PROMPT)
    assert flash.tokens == ref.tokens
    assert [r.winner for r in flash.records] == [r.winner for r in ref.records]
    for a, b in zip(flash.records, ref.records):
        assert a.branch_scores == pytest.approx(b.branch_scores, rel=1e-4, abs=1e-5)


def test_block_causal_never_takes_flash(stand_in):
    Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=3, attention="block_causal", **LIVELY)).run(PROMPT)
    assert set(stand_in) == {"sdpa"}


def test_flash_shared_prefix_equals_masked_attention_with_padding():
    """One forward's attention, directly: ragged windows (padding) over a shared prefix."""
    torch.manual_seed(0)
    B, H, Hkv, L, P, D = 3, 4, 2, 6, 5, 8
    q, key, value = torch.randn(B, H, L, D), torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    pk, pv = torch.randn(1, Hkv, P, D), torch.randn(1, Hkv, P, D)
    lengths = [6, 4, 5]
    out = attention.flash_shared_prefix(q, key, value, pk, pv, lengths, D ** -0.5, (dense, varlen))   # [B, L, H, D]
    for j, n in enumerate(lengths):
        kk = torch.cat([pk[0], key[j, :, :n]], dim=1).repeat_interleave(2, dim=0)     # [H, P + n, D]
        vv = torch.cat([pv[0], value[j, :, :n]], dim=1).repeat_interleave(2, dim=0)
        want = torch.softmax(q[j, :, :n] @ kk.transpose(-1, -2) * D ** -0.5, -1) @ vv   # [H, n, D]
        assert torch.allclose(out[j, :n].transpose(0, 1), want, atol=1e-5)
        assert not out[j, n:].any()


@pytest.mark.skipif(not torch.cuda.is_available() or attention.flash_kernels() is None,
                    reason="needs a CUDA GPU with flash_attn installed")
def test_real_flash_kernel_equals_sdpa_on_gpu():
    model = tiny_qwen2(seed=1).cuda().to(torch.bfloat16)
    settings = DecodeSettings(k=3, attention="full", **LIVELY)
    ex = BatchedExecutor(model, tiny_spec(), settings)
    flash = Decoder(model, tiny_spec(), settings, executor=ex).run(PROMPT)
    assert ex.kv.kernel == "flash"
    ref = Decoder(model, tiny_spec(), settings, executor="per_branch").run(PROMPT)
    assert flash.tokens == ref.tokens
