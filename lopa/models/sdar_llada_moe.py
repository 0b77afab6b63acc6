"""SDAR (dense and MoE) and LLaDA-MoE checkpoints on stock transformers classes, and the decode
settings each family publishes. lopa.models.families dispatches here; this module only translates.

- SDAR (JetAstra/SDAR; config `model_type: "sdar"` / `"sdar_moe"`, remote `SDARForCausalLM` /
  `SDARMoeForCausalLM`) is Qwen3 / Qwen3-MoE trained as a block diffusion model: the same parameter
  names (`model.layers.N.self_attn.q_norm`, `mlp.experts.E.gate_proj`, `lm_head`), q/k RMSNorm on
  the head dimension, the same RoPE. Its modeling file differs from Qwen3's only in the attention
  mask it is given (block-causal) and in training-time code, so config.json translates to a
  `Qwen3Config` / `Qwen3MoeConfig`. Its training loss reads the logit at the noised position
  itself: no logit shift. config.json carries `block_size` (4) and `mask_token_id` (151669).
- LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B-*; config `model_type: "llada"` like the dense LLaDA,
  told apart by `architectures: ["LLaDAMoEModelLM"]`, remote `modeling_lladamoe.py`) is an
  OLMoE-derived body whose attention normalises q and k per head (as Qwen3 does, not over the
  whole projection as OLMoE does) and whose router is softmax, top-k, never renormalised (its
  code hard-codes `norm_topk_prob = False` whatever config.json says). That is `Qwen3MoeConfig`
  with `norm_topk_prob=False`, dense layers (`moe_layer_freq` 0) as `mlp_only_layers`. What
  Qwen3-MoE cannot compute (a shared expert, an expert bias, a non-softmax router, qkv clipping,
  partial RoPE, no q/k norm) keeps a checkpoint off the mapping: `llada_moe_unsupported`.
  Its config.json has no mask id; the model card's `generate(..., mask_id=156895)` is the value.
"""

from __future__ import annotations

# Decode settings as each family publishes them, in the engine's terms (ModelSpec.decode; block
# size and attention have their own spec fields). The user, a preset, then these, then defaults.
# SDAR: JetAstra/SDAR generate.py decodes one block of 4 at a time (the next block starts when
# this one is complete: tau_add = 1), remasking `low_confidence_dynamic` with threshold 0.85:
# every masked position whose sampled token's probability is > 0.85 is committed, else the
# single most probable one (4 steps for 4 tokens), which is the engine's threshold rule on max_prob.
SDAR_DECODE = {"tau_conf": 0.85, "confidence": "max_prob", "tau_add": 1.0, "commit": "threshold"}
SDAR_BLOCK_SIZE = 4
# LLaDA (8B, 1.5, MoE): the published generate() examples use block_length 32 with steps equal to
# gen_length (one token per step, `remasking="low_confidence"`: the highest softmax probability),
# blocks strictly one after another.
LLADA_DECODE = {"commit": "top1", "confidence": "max_prob", "tau_add": 1.0}
LLADA_BLOCK_SIZE = 32
LLADA_MOE_MASK_ID = 156895

SDAR_MODEL_TYPES = ("sdar", "sdar_moe")
LLADA_MOE_ARCHITECTURES = ("LLaDAMoEModelLM", "LLaDAMoEModel")

_QWEN3_COPIED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
                 "tie_word_embeddings", "rope_theta", "rope_scaling", "attention_bias", "attention_dropout",
                 "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id")
_QWEN3_MOE_COPIED = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                     "decoder_sparse_step", "mlp_only_layers")
_SDAR_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


def is_llada_moe(raw: dict) -> bool:
    model_type = str(raw.get("model_type", "")).lower()
    return model_type in ("lladamoe", "llada_moe") or any(
        a in LLADA_MOE_ARCHITECTURES for a in raw.get("architectures") or ())


def sdar_unsupported(raw: dict) -> list[str]:
    """Config values that keep this SDAR checkpoint off the Qwen3 mapping (empty = mappable)."""
    bad = [f"{k} missing" for k in _SDAR_REQUIRED if k not in raw]
    if raw.get("use_sliding_window"):
        bad.append("use_sliding_window=True (SDAR decodes with full block-causal attention)")
    if raw.get("model_type") == "sdar_moe" and not raw.get("num_experts"):
        bad.append("num_experts missing")
    return bad


def sdar_to_qwen3_config(raw: dict):
    """SDAR config.json (dict) -> Qwen3Config, or Qwen3MoeConfig for `sdar_moe`."""
    from transformers import Qwen3Config, Qwen3MoeConfig
    bad = sdar_unsupported(raw)
    if bad:
        raise ValueError(f"this SDAR checkpoint does not map onto Qwen3: {', '.join(bad)}")
    moe = raw.get("model_type") == "sdar_moe"
    keys = _QWEN3_COPIED + (_QWEN3_MOE_COPIED if moe else ())
    fields = {k: raw[k] for k in keys if raw.get(k) is not None}
    config = (Qwen3MoeConfig if moe else Qwen3Config)(**fields, use_sliding_window=False)
    config.is_causal = False        # the engine gives every forward its block mask; none means bidirectional
    return config


def llada_moe_unsupported(raw: dict) -> list[str]:
    """Config values that keep this LLaDA-MoE checkpoint off the Qwen3-MoE mapping (empty = mappable).
    Defaults are those of the published LLaDAMoEConfig for keys its config.json leaves out."""
    bad = [f"{k} missing" for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "num_experts", "num_experts_per_tok", "expert_intermediate_size", "rope_theta")
           if raw.get(k) in (None, -1)]
    checks = {
        "qk_layernorm": (raw.get("qk_layernorm"), lambda v: v is True),
        "clip_qkv": (raw.get("clip_qkv"), lambda v: v is None),
        "moe_router_score_function": (raw.get("moe_router_score_function"), lambda v: v in (None, "softmax")),
        "moe_router_enable_expert_bias": (raw.get("moe_router_enable_expert_bias"), lambda v: not v),
        "shared_expert_intermediate_size": (raw.get("shared_expert_intermediate_size"), lambda v: v in (None, 0)),
        "partial_rotary_factor": (raw.get("partial_rotary_factor", 1.0), lambda v: v in (1, 1.0)),
        "routed_scaling_factor": (raw.get("routed_scaling_factor", 1), lambda v: v in (1, 1.0)),
        "hidden_act": (raw.get("hidden_act", "silu"), lambda v: v == "silu"),
    }
    bad += [f"{k}={v!r}" for k, (v, ok) in checks.items() if not ok(v)]
    freq = raw.get("moe_layer_freq") or []
    if freq and (len(freq) != raw.get("num_hidden_layers") or any(f not in (0, 1) for f in freq)):
        bad.append("moe_layer_freq is not one 0/1 per layer")
    if 0 in freq and raw.get("dense_intermediate_size") in (None, -1):
        bad.append("dense layers without dense_intermediate_size")
    return bad


def llada_moe_to_qwen3_moe_config(raw: dict):
    """LLaDA-MoE config.json (dict) -> Qwen3MoeConfig computing the published code's function."""
    from transformers import Qwen3MoeConfig
    bad = llada_moe_unsupported(raw)
    if bad:
        raise ValueError(f"this LLaDA-MoE variant does not map onto Qwen3-MoE: {', '.join(bad)}")
    freq = raw.get("moe_layer_freq") or [1] * raw["num_hidden_layers"]
    heads = raw["num_attention_heads"]
    config = Qwen3MoeConfig(
        vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"], num_hidden_layers=raw["num_hidden_layers"],
        num_attention_heads=heads, num_key_value_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw["hidden_size"] // heads,     # LLaDAMoEAttention: hidden_size // num_heads, no head_dim key
        intermediate_size=raw.get("dense_intermediate_size") if 0 in freq else raw["expert_intermediate_size"],
        moe_intermediate_size=raw["expert_intermediate_size"], num_experts=raw["num_experts"],
        num_experts_per_tok=raw["num_experts_per_tok"], norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[i for i, f in enumerate(freq) if f == 0], hidden_act="silu",
        max_position_embeddings=raw.get("max_position_embeddings", 4096), rms_norm_eps=raw.get("rms_norm_eps", 1e-5),
        rope_theta=raw["rope_theta"], rope_scaling=raw.get("rope_scaling"),
        attention_bias=bool(raw.get("attention_bias", False)), tie_word_embeddings=bool(raw.get("tie_word_embeddings")),
        bos_token_id=raw.get("bos_token_id"), eos_token_id=raw.get("eos_token_id"),
        pad_token_id=raw.get("pad_token_id"), use_sliding_window=False)
    config.is_causal = False
    return config


def special_id(values, vocab_size: int, published: int, missing: str) -> int:
    """A special token's id as the inclusionAI families resolve it (LLaDA-MoE, LLaDA 2.x): the first of `values`
    given (config.json's, then the tokenizer's; a list counts by its first id), else the published id where the
    vocabulary holds it; else ValueError(missing)."""
    for value in values:
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    if vocab_size > published:
        return published
    raise ValueError(missing)


def llada_moe_mask_id(raw: dict, tokenizer) -> int:
    """config.json's mask_token_id, else the tokenizer's mask token, else the model card's 156895
    when the vocabulary holds it."""
    return special_id((raw.get("mask_token_id"), getattr(tokenizer, "mask_token_id", None)),
                      int(raw.get("vocab_size", 0)), LLADA_MOE_MASK_ID,
                      "this LLaDA-MoE checkpoint names no mask token (config.json mask_token_id or a tokenizer "
                      f"mask token) and its vocabulary is too small for the published id {LLADA_MOE_MASK_ID}")
