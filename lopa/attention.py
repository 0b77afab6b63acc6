"""Shared-prefix attention: k + 1 branch windows attend to one prefix K/V stored with batch 1.

Registered with transformers' AttentionInterface, so stock architectures (Qwen2, Llama) run it
without custom modeling code. When the forward is called with `lopa_prefix=PrefixKV`, each layer
pre-writes its window K/V there and attends to [prefix ; own window]; otherwise it is plain SDPA
(or whatever the model used before), so the same model object serves every executor.

FlashAttention-2 (the optional `flash_attn` package, extra `.[cuda]`) takes no arbitrary masks, so
it serves exactly the forwards whose window attention needs none: `full` attention after the
prefill, where every branch's window attends to all of [prefix ; own window]. Those run as two
kernel calls for all k + 1 branches together: the branches' queries, folded into one sequence,
against the shared prefix, and one variable-length call over the branches' own windows; the two
partial softmaxes are merged by their log-sum-exps. Everything with a block mask (block_causal,
the prefill's prompt segment) stays on the function below. `window_kernel` decides; the trace of
a forward's choice is PrefixKV.kernel.

Why not expand the cache to batch k + 1? A DynamicCache concatenates the prefix with each
branch's window, materialising k + 1 copies of the prefix every layer of every round. Here the
branch and head-group axes are folded into the query length instead, so the prefix is read
once and never copied (the scores [B, H, W, P] are the only per-branch cost, as in any attention).
"""

from __future__ import annotations

import functools

import torch

NAME = "lopa_shared_prefix"
_FALLBACK_ATTR = "_lopa_fallback_attn"


@functools.cache
def flash_kernels():
    """(flash_attn_func, flash_attn_varlen_func) where `flash_attn` imports, else None (detected once)."""
    try:
        from flash_attn import flash_attn_func, flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_func, flash_attn_varlen_func


def window_kernel(query: torch.Tensor, window_lengths, kernels) -> str:
    """"flash" where FlashAttention applies to this forward, else "sdpa": it needs the kernels, a
    CUDA half-precision query, and a window without a block mask (window_lengths given)."""
    if kernels is None or window_lengths is None:
        return "sdpa"
    return "flash" if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) else "sdpa"


def flash_shared_prefix(query, key, value, prefix_k, prefix_v, window_lengths, scaling, kernels):
    """All branches in two kernel calls: queries against the shared prefix, and one varlen call over
    each branch's own window, merged by log-sum-exp. query [B, H, L, D]; key, value [B, Hkv, L, D];
    prefix_k, prefix_v [1, Hkv, P, D]; window_lengths [B] (padding excluded). -> [B, L, H, D]"""
    dense, varlen = kernels
    B, H, L, D = query.shape
    lengths = torch.as_tensor(window_lengths, device=query.device)
    valid = torch.arange(L, device=query.device)[None] < lengths[:, None]             # [B, L]
    q = query.transpose(1, 2)[valid]                                                # [T, H, D], T = sum(lengths)
    k, v = key.transpose(1, 2)[valid], value.transpose(1, 2)[valid]                 # [T, Hkv, D]
    cu = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)         # [B + 1]
    longest = int(lengths.max())
    out, lse, _ = varlen(q, k, v, cu, cu, longest, longest, softmax_scale=scaling, causal=False,
                         return_attn_probs=True)                                    # [T, H, D], [H, T]
    if prefix_k.shape[2]:
        out_p, lse_p, _ = dense(q[None], prefix_k.transpose(1, 2), prefix_v.transpose(1, 2), softmax_scale=scaling,
                                causal=False, return_attn_probs=True)              # [1, T, H, D], [1, H, T]
        total = torch.logaddexp(lse, lse_p[0])                                      # [H, T]
        out = (out.float() * torch.exp(lse - total).T[..., None]
               + out_p[0].float() * torch.exp(lse_p[0] - total).T[..., None])
    full = query.new_zeros(B, L, H, D)
    full[valid] = out.to(query.dtype)
    return full


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                            lopa_prefix=None, lopa_window_lengths=None, **kwargs):
    """query: [B, H, L, D]; key, value: [B, Hkv, L, D] (RoPE applied); attention_mask: [B, 1, L, L]
    bool over the window. lopa_window_lengths: each branch's window length [B] when the window
    needs no mask (full attention after the prefill), else None. Returns ([B, L, H, D], None)
    like transformers' attention functions."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if lopa_prefix is None:
        fallback = getattr(module.config, _FALLBACK_ATTR, "sdpa")
        fn = ALL_ATTENTION_FUNCTIONS[fallback if fallback in ALL_ATTENTION_FUNCTIONS else "sdpa"]
        return fn(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)

    layer = module.layer_idx
    lopa_prefix.prewrite(layer, key, value)                    # phase 1 of the two-phase cache
    prefix_k, prefix_v = lopa_prefix.prefix(layer, key)        # [1, Hkv, P, D] each
    B, H, L, D = query.shape
    Hkv = key.shape[1]
    G, P = H // Hkv, prefix_k.shape[2]
    scaling = D ** -0.5 if scaling is None else scaling
    # A fixed-capacity prefix (lopa.graphs.StaticPrefixKV) marks its cached positions in `valid`; the
    # FlashAttention path takes no such mask, so those forwards stay on the function below.
    valid = getattr(lopa_prefix, "valid", None)
    # A dependency-aware rule reads the attention probabilities (lopa.dependency): FlashAttention returns none.
    probe = getattr(lopa_prefix, "probe", None)
    kernels = flash_kernels() if valid is None and probe is None else None
    lopa_prefix.kernel = window_kernel(query, lopa_window_lengths, kernels)
    if lopa_prefix.kernel == "flash":
        return flash_shared_prefix(query, key, value, prefix_k, prefix_v, lopa_window_lengths, scaling, kernels), None

    # Query head h uses key/value head h // G (the repeat_kv convention).
    q = query.reshape(B, Hkv, G * L, D)                                     # [B, Hkv, G*L, D]
    q_folded = q.transpose(0, 1).reshape(1, Hkv, B * G * L, D)              # [1, Hkv, B*G*L, D]
    s_prefix = (q_folded @ prefix_k.transpose(-1, -2)).float() * scaling    # [1, Hkv, B*G*L, P]
    s_prefix = s_prefix.reshape(Hkv, B, G * L, P).transpose(0, 1)           # [B, Hkv, G*L, P]
    if valid is not None:
        s_prefix = s_prefix.masked_fill(~valid, float("-inf"))                 # past the cached length
    s_window = (q @ key.transpose(-1, -2)).float() * scaling                # [B, Hkv, G*L, L]
    mask = attention_mask[:, :, :, -L:].expand(B, G, L, L).reshape(B, 1, G * L, L)
    s_window = s_window.masked_fill(~mask, float("-inf"))

    probs = torch.softmax(torch.cat([s_prefix, s_window], dim=-1), dim=-1)   # [B, Hkv, G*L, P + L] float32
    if probe is not None:
        probe.add(layer, probs, B, Hkv, G, L)
    probs = probs.to(query.dtype)
    p_prefix, p_window = probs[..., :P], probs[..., P:]
    p_prefix = p_prefix.transpose(0, 1).reshape(1, Hkv, B * G * L, P)      # fold again: read prefix once
    out = (p_prefix @ prefix_v).reshape(Hkv, B, G * L, D).transpose(0, 1)  # [B, Hkv, G*L, D]
    out = out + p_window @ value                                            # [B, Hkv, G*L, D]
    out = out.reshape(B, Hkv, G, L, D).permute(0, 3, 1, 2, 4).reshape(B, L, H, D)
    return out.contiguous(), None


def install_shared_prefix_attention(model) -> None:
    """Register the function and switch `model` to it (idempotent). Raises TypeError for models
    that do not dispatch attention through transformers' AttentionInterface."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, shared_prefix_attention)
    config = model.config
    current = getattr(config, "_attn_implementation", None)
    if current == NAME:
        return
    if not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"{type(model).__name__} does not use transformers' AttentionInterface")
    # The fallback serves forwards without a prefix, which still carry the engine's 4-D masks:
    # FlashAttention cannot take those, so a flash model falls back to SDPA.
    setattr(config, _FALLBACK_ATTR, current if current and "flash" not in current else "sdpa")
    model.set_attn_implementation(NAME)
    if model.config._attn_implementation != NAME:
        raise TypeError(f"{type(model).__name__} cannot switch attention implementation; use the per_branch executor")
