"""LLaDA 2.x (inclusionAI LLaDA2.0-mini / -flash, LLaDA2.1; config `model_type: "llada2_moe"`,
`architectures: ["LLaDA2MoeModelLM"]`) as a model class of our own: no released transformers has
one, and the checkpoint's own `modeling_llada2_moe.py` is remote code. Written from the published
architecture (the Hub's modeling_llada2_moe.py, as dInfer and dllm copy it, and SGLang's
`srt/models/llada2.py`); the names below are the checkpoint's parameter names.

- `model.word_embeddings`, `model.layers.N`, `model.norm`, `lm_head` (tied to the embeddings
  when `tie_word_embeddings`).
- Attention: one fused `attention.query_key_value` [(H + 2 Hkv) D, hidden] whose output splits per
  head into H query, Hkv key and Hkv value heads; `attention.query_layernorm` / `key_layernorm`,
  RMSNorms over the head dimension (`use_qk_norm`); RoPE on the first `partial_rotary_factor` x D
  dimensions of each head only (0.5 in the published configs), the two halves of that slice
  rotated against each other (rotate_half, GPT-NeoX style), the rest passed through;
  `attention.dense` back to the hidden size. Scaling D^-0.5. Never causal by itself: the engine's
  4-D mask says who sees whom.
- MLP: SwiGLU `gate_proj` / `up_proj` / `down_proj`, no bias. The first `first_k_dense_replace`
  layers are dense (`intermediate_size`), the rest MoE (`moe_intermediate_size` per expert).
- MoE router (`mlp.gate.weight` [E, hidden], `mlp.gate.expert_bias` [E]): logits in float32,
  sigmoid scores; the expert bias is added for *selection only*: the experts are grouped in
  `n_group` groups, a group scores the sum of its two best biased scores, the best `topk_group`
  groups stay, and the top `num_experts_per_tok` biased scores among their experts are chosen. The
  weights are the *unbiased* sigmoid scores of the chosen experts, normalised to sum to 1 (when more
  than one is chosen), times `routed_scaling_factor`. `mlp.shared_experts` (an MLP of
  `moe_intermediate_size * num_shared_experts`) is added for every token.
- RMSNorm: x * rsqrt(mean(x^2) + eps) in float32, cast back, times the weight.

What the config may say that this class does not compute is refused before a weight is read
(lopa.models.llada2_family.llada2_unsupported), naming the key.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


class LLaDA2MoeConfig(PreTrainedConfig):
    """The checkpoint's config.json as published, keys unchanged (lopa.models.llada2_family builds it)."""
    model_type = "llada2_moe"


class LLaDA2RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class LLaDA2Rotary(nn.Module):
    """cos, sin [B, L, R] for the rotated slice R = int(D * partial_rotary_factor) of each head."""

    def __init__(self, config):
        super().__init__()
        self.rotary_dim, self.theta = int(config.head_dim * config.partial_rotary_factor), float(config.rope_theta)

    @torch.no_grad()
    def forward(self, like: torch.Tensor, position_ids: torch.Tensor):
        # Computed per forward, not kept as a buffer: from_pretrained builds modules on the meta device
        # and would leave a non-persistent buffer uninitialised.
        exponents = torch.arange(0, self.rotary_dim, 2, device=like.device).float() / self.rotary_dim
        inv_freq = 1.0 / (self.theta ** exponents)                                                   # [R/2]
        freqs = position_ids[:, :, None].float() * inv_freq[None, None]                              # [B, L, R/2]
        angles = torch.cat([freqs, freqs], dim=-1)                                                    # [B, L, R]
        return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_partial_rotary(x, cos, sin):
    """x [B, H, L, D]; cos, sin [B, L, R]: RoPE on x[..., :R], x[..., R:] unchanged."""
    R = cos.shape[-1]
    cos, sin = cos[:, None], sin[:, None]
    rotated, passed = x[..., :R], x[..., R:]
    return torch.cat([rotated * cos + rotate_half(rotated) * sin, passed], dim=-1)


def eager_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_):
    """Plain attention. query [B, H, L, D]; key, value [B, Hkv, K, D]; attention_mask [B, 1, L, K]
    bool (True = attend) or additive float, or None. -> ([B, L, H, D], None)"""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = (query @ key.transpose(-1, -2)) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        mask = attention_mask[..., :key.shape[-2]]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    return (probs @ value).transpose(1, 2).contiguous(), None


class LLaDA2Attention(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx, self.is_causal = config, layer_idx, False
        self.num_heads, self.num_kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                            config.head_dim)
        self.num_key_value_groups = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim ** -0.5
        self.query_key_value = nn.Linear(config.hidden_size, (self.num_heads + 2 * self.num_kv_heads) * self.head_dim,
                                         bias=bool(config.use_qkv_bias))
        if config.use_qk_norm:
            self.query_layernorm = LLaDA2RMSNorm(self.head_dim, config.rms_norm_eps)
            self.key_layernorm = LLaDA2RMSNorm(self.head_dim, config.rms_norm_eps)
        self.dense = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden, position_embeddings, attention_mask=None, past_key_values=None, **kwargs):
        B, L, _ = hidden.shape
        qkv = self.query_key_value(hidden).view(B, L, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
        query, key, value = (t.transpose(1, 2) for t in qkv.split([self.num_heads, self.num_kv_heads,
                                                                   self.num_kv_heads], dim=2))   # [B, H(kv), L, D]
        if self.config.use_qk_norm:
            query, key = self.query_layernorm(query), self.key_layernorm(key)
        cos, sin = position_embeddings
        query, key = apply_partial_rotary(query, cos, sin), apply_partial_rotary(key, cos, sin)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention)
        out, _ = attend(self, query, key, value, attention_mask, scaling=self.scaling, dropout=0.0, **kwargs)
        return self.dense(out.reshape(B, L, -1))


class LLaDA2MLP(nn.Module):
    def __init__(self, config, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LLaDA2Gate(nn.Module):
    """Sigmoid router with grouped top-k; the expert bias steers the choice, not the weights."""

    def __init__(self, config):
        super().__init__()
        self.top_k, self.scale = config.num_experts_per_tok, float(config.routed_scaling_factor)
        self.n_group, self.topk_group = config.n_group or 1, config.topk_group or 1
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))
        self.expert_bias = nn.Parameter(torch.zeros(config.num_experts), requires_grad=False)

    def forward(self, x):
        """x [T, hidden] -> (experts [T, k], weights [T, k] float32)."""
        scores = torch.sigmoid(nn.functional.linear(x.float(), self.weight.float()))           # [T, E]
        biased = scores + self.expert_bias.float()
        T, E = biased.shape
        grouped = biased.view(T, self.n_group, E // self.n_group)                               # [T, G, E/G]
        group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)            # [T, G]
        kept = torch.zeros_like(group_score, dtype=torch.bool).scatter(
            1, group_score.topk(self.topk_group, dim=-1).indices, True)                         # [T, G]
        allowed = kept[:, :, None].expand_as(grouped).reshape(T, E)
        experts = biased.masked_fill(~allowed, float("-inf")).topk(self.top_k, dim=-1).indices  # [T, k]
        weights = scores.gather(1, experts)
        if self.top_k > 1:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return experts, weights * self.scale


class LLaDA2SparseMoe(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate = LLaDA2Gate(config)
        self.experts = nn.ModuleList([LLaDA2MLP(config, config.moe_intermediate_size)
                                      for _ in range(config.num_experts)])
        shared = config.num_shared_experts or 0
        self.shared_experts = LLaDA2MLP(config, config.moe_intermediate_size * shared) if shared else None

    def forward(self, hidden):
        B, L, H = hidden.shape
        x = hidden.reshape(-1, H)                                                   # [T, hidden]
        experts, weights = self.gate(x)                                             # [T, k] each
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in experts.unique().tolist():
            token, slot = (experts == e).nonzero(as_tuple=True)
            out.index_add_(0, token, self.experts[e](x[token]).float() * weights[token, slot, None])
        out = out.to(x.dtype).view(B, L, H)
        return out + self.shared_experts(hidden) if self.shared_experts is not None else out


class LLaDA2DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.input_layernorm = LLaDA2RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attention = LLaDA2Attention(config, layer_idx)
        self.post_attention_layernorm = LLaDA2RMSNorm(config.hidden_size, config.rms_norm_eps)
        sparse = config.num_experts is not None and layer_idx >= config.first_k_dense_replace
        self.mlp = LLaDA2SparseMoe(config) if sparse else LLaDA2MLP(config, config.intermediate_size)

    def forward(self, hidden, position_embeddings, **kwargs):
        hidden = hidden + self.attention(self.input_layernorm(hidden), position_embeddings, **kwargs)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LLaDA2PreTrainedModel(PreTrainedModel):
    config_class = LLaDA2MoeConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDA2DecoderLayer"]
    _supports_sdpa = True
    _supports_attention_backend = True
    # The router's bias only ranks experts (scores near each other): kept in float32 as SGLang keeps it,
    # whatever dtype the rest loads in.
    _keep_in_fp32_modules_strict = ["expert_bias"]

    @torch.no_grad()
    def _init_weights(self, module):
        std = getattr(self.config, "initializer_range", 0.02)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, std)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, LLaDA2RMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, LLaDA2Gate):
            module.weight.normal_(0.0, std)
            module.expert_bias.zero_()


class LLaDA2MoeModel(LLaDA2PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LLaDA2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LLaDA2RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = LLaDA2Rotary(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.word_embeddings

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        hidden = self.word_embeddings(input_ids)                                   # [B, L, hidden]
        if position_ids is None:
            seen = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(seen, seen + input_ids.shape[1], device=hidden.device)[None]
        position_embeddings = self.rotary_emb(hidden, position_ids.expand(input_ids.shape[0], -1))
        mask = _four_d(attention_mask, input_ids.shape[1])
        for layer in self.layers:
            hidden = layer(hidden, position_embeddings, attention_mask=mask, past_key_values=past_key_values,
                           **kwargs)
        return self.norm(hidden)


def _four_d(mask, length: int):
    """The engine's [B, 1, L, K] masks pass as they are; a 2-D padding mask [B, K] (1 = a real token)
    becomes [B, 1, L, K] bool; None stays None (every position sees every other)."""
    if mask is None or mask.dim() == 4:
        return mask
    if mask.dim() != 2:
        raise ValueError(f"attention_mask must be [B, 1, L, K] or [B, K], got shape {tuple(mask.shape)}")
    return mask.bool()[:, None, None, :].expand(-1, 1, length, -1)


class LLaDA2MoeModelLM(LLaDA2PreTrainedModel):
    """The LM. forward(input_ids [B, L], attention_mask [B, 1, L, K] bool (True = attend) or None,
    position_ids [B, L], past_key_values (a transformers Cache, updated in place), and the engine's
    keyword arguments, which reach the attention function (lopa.attention) -> .logits [B, L, V]."""
    _tied_weights_keys = {"lm_head.weight": "model.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = LLaDA2MoeModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.word_embeddings

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                **kwargs):
        for unused in ("output_attentions", "output_hidden_states", "return_dict", "cache_position"):
            kwargs.pop(unused, None)
        hidden = self.model(input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, **kwargs)
        return CausalLMOutputWithPast(logits=self.lm_head(hidden), past_key_values=past_key_values)
