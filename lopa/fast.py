"""The batched executor's fast path: the model's forward as a few plain tensor ops, and on CUDA that
forward captured once per shape bucket as a CUDA graph (lopa.graphs).

Why a forward of our own: transformers' forward wraps every call in output classes, keyword plumbing,
mask preparation and per-layer dispatch. On a 4-layer model that is a third of a verify's time on a CPU;
on a GPU at batch 1 it is the time, since every kernel waits for Python to launch it (the bundled model
takes 6 ms a forward on an H200 whose arithmetic takes microseconds: assets/bench/gpu/h200.md). The
lean forward runs the same modules' weights through the same operations in the same order, and its
attention is the very function the eager path registers (lopa.attention.shared_prefix_attention), so on
a CPU its logits are bit for bit the eager path's (tests/test_fast.py). It skips the LM head over the
rows no decision reads (the prompt's, but its last, in the prefill).

It runs the families with the Llama layout (Qwen2, Qwen3, Llama, Mistral without sliding windows: the
bundled models, Dream, and the random Dream-7B shape of the GPU report); lean_support says why not for
anything else, and the executor then runs the model's own forward (`batched_eager`, the reference).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from lopa.attention import shared_prefix_attention

LAYOUTS = ("qwen2", "qwen3", "llama", "mistral")     # model_type values whose modules the lean forward knows


def lean_support(model) -> str | None:
    """None where LeanForward runs `model` exactly as its own forward does, else the reason it cannot."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in LAYOUTS:
        return f"model_type {kind!r} is not one of the lean forward's layouts {LAYOUTS}"
    body = getattr(model, "model", None)
    if not all(hasattr(body, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")) or not hasattr(model, "lm_head"):
        return f"{type(model).__name__} does not have the Llama module layout (model.layers, lm_head)"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "sliding-window attention is not in the lean forward"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return "layers other than full attention are not in the lean forward"
    layer = body.layers[0]
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    if not all(hasattr(layer.self_attn, n) for n in names) or not all(
            hasattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return f"{type(layer).__name__} does not have the Llama attention and MLP modules"
    return None


class LeanForward:
    """The forward of a Llama-layout model, reading its modules' weights in place (nothing is copied),
    with the shared-prefix attention of the batched executor. Call lean_support first."""

    def __init__(self, model):
        self.model, self.body = model, model.model
        self.layers = list(self.body.layers[: model.config.num_hidden_layers])
        attn = self.layers[0].self_attn
        self.head_dim = getattr(attn, "head_dim", model.config.hidden_size // model.config.num_attention_heads)
        # The modules this forward runs without calling them: a hook on one of them would not fire here
        self.skipped = [model, self.body, *self.layers, *(layer.self_attn for layer in self.layers),
                        *(layer.mlp for layer in self.layers)]

    def hooked(self) -> bool:
        """Whether a forward hook waits on a module this forward does not call (the model, a layer, its
        attention or MLP; torch's global hooks): the executor then runs the model's own forward, so the hook
        fires as it would without LoPA (counting forwards, capturing activations)."""
        from torch.nn.modules import module as torch_module
        if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
            return True
        return any(m._forward_hooks or m._forward_pre_hooks for m in self.skipped)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
                 prefix, window_lengths=None, keep_from: int = 0) -> torch.Tensor:
        """input_ids, position_ids: [B, L]; attention_mask: [B, 1, L, L] bool over the window (True = attend);
        prefix: the executor's PrefixKV (each layer pre-writes its window K/V there and reads the prefix).
        -> logits [B, L - keep_from, V]: the LM head runs only from input position keep_from on."""
        B, L = input_ids.shape
        h = self.body.embed_tokens(input_ids)                                  # [B, L, hidden]
        cos, sin = self.body.rotary_emb(h, position_ids)                       # [B, L, D] each
        shape = (B, L, -1, self.head_dim)
        for layer in self.layers:
            attn, residual = layer.self_attn, h
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(shape)                                     # [B, L, H, D]
            k = attn.k_proj(x).view(shape)                                     # [B, L, Hkv, D]
            if hasattr(attn, "q_norm"):                                        # Qwen3: per-head norm before RoPE
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)   # [B, H(kv), L, D]
            v = attn.v_proj(x).view(shape).transpose(1, 2)                     # [B, Hkv, L, D]
            out, _ = shared_prefix_attention(attn, q, k, v, attention_mask, scaling=attn.scaling,
                                             lopa_prefix=prefix, lopa_window_lengths=window_lengths)
            h = residual + attn.o_proj(out.reshape(B, L, -1))                  # [B, L, hidden]
            mlp, residual = layer.mlp, h
            x = layer.post_attention_layernorm(h)
            h = residual + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        h = self.body.norm(h[:, keep_from:])
        return F.linear(h, self.model.lm_head.weight, getattr(self.model.lm_head, "bias", None))   # [B, L', V]
