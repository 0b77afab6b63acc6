"""LLaDA 2.x checkpoints (inclusionAI LLaDA2.0-mini / -flash, LLaDA2.1-mini / -flash): which configs
our own class (lopa.models.llada2_moe) computes, their special token ids, and the decode settings
the family publishes. lopa.models.families dispatches here; this module only translates.

Settings. LLaDA 2.x is a block diffusion model: trained and decoded with blocks of 32, bidirectional
inside a block and causal across blocks, a block's K/V cached once it is finished. The published
`generate()` (the checkpoint's modeling_llada2_moe.py) commits, each step, every masked position of
the block whose sampled token's probability is above `threshold`, else the most probable one
(`num_to_transfer` 1): the engine's threshold rule on max_prob, one block at a time (tau_add 1).
LLaDA2.1's `generate()` adds token editing: a committed (non-prompt) position whose prediction
changed is replaced when its probability is above `editing_threshold`, and once the block has no
mask left up to `max_post_steps` more forwards keep editing it. Those two become the engine's
edit_threshold and edit_post_steps (lopa/editing.py), so a LLaDA2.1 folder decodes with its edits; the spec
records them and where they came from (`extra["token_editing"]`, "applied" true when they turn editing on).

The values come from the checkpoint: generation_config.json (keys named as generate()'s arguments),
else the defaults of generate() in the folder's own modeling_llada2_moe.py (read as text with `ast`,
never run), else LLaDA2.0's published generate(): threshold 0.95, no editing.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lopa.models.folder import quoted, read_json
from lopa.models.sdar_llada_moe import special_id
from lopa.settings import MAX_EDIT_POST_STEPS

LLADA2_MODEL_TYPES = ("llada2_moe",)
LLADA2_ARCHITECTURES = ("LLaDA2MoeModelLM",)
LLADA2_MASK_ID = 156895          # generate(mask_id=156895), SGLang's DllmConfig
LLADA2_EOS_ID = 156892           # generate(eos_id=156892)
LLADA2_MASK_TOKEN = "<|mask|>"
LLADA2_BLOCK_SIZE = 32
LLADA2_THRESHOLD = 0.95          # LLaDA2.0's generate(threshold=0.95)
MAX_MODELING_BYTES = 1 << 20     # the published modeling file is ~60 KB
_GENERATE_ARGUMENTS = ("threshold", "editing_threshold", "max_post_steps")

# Keys this class needs, and the values it computes (a key left out takes the published
# LLaDA2MoeConfig's default, second value). Each refusal names the key.
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "num_experts", "num_experts_per_tok", "moe_intermediate_size")
_SUPPORTED = {
    "hidden_act": (lambda v: v == "silu", "silu"),
    # the published HF code's dense layer has a bias when use_bias, SGLang's MLPs and qkv too: they disagree
    "use_bias": (lambda v: not v, True),
    # SGLang normalises lm_head's columns when norm_head; the published HF code does not: they disagree
    "norm_head": (lambda v: not v, False),
    "use_sliding_window": (lambda v: not v, False),
    "score_function": (lambda v: v in (None, "sigmoid"), None),
    "scoring_func": (lambda v: v in (None, "sigmoid"), None),
    "moe_router_enable_expert_bias": (lambda v: v is not False, None),
    # the published HF code always normalises the top-k weights; SGLang only when norm_topk_prob
    "norm_topk_prob": (lambda v: v is not False, None),
    "router_dtype": (lambda v: v in (None, "fp32", "float32"), None),
    "rope_scaling": (lambda v: v is None or (isinstance(v, dict) and
                                            (v.get("rope_type") or v.get("type")) == "default"), None),
    # transformers 5's spelling of the same: the default type, with at most its theta
    "rope_parameters": (lambda v: v is None or (isinstance(v, dict) and v.get("rope_type", "default") == "default"
                                                and set(v) <= {"rope_type", "rope_theta"}), None),
    "partial_rotary_factor": (lambda v: isinstance(v, (int, float)) and 0 < v <= 1, 0.5),
    "first_k_dense_replace": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, 0),
    "routed_scaling_factor": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, 2.5),
}


def is_llada2(raw: dict) -> bool:
    return str(raw.get("model_type", "")).lower() in LLADA2_MODEL_TYPES or any(
        a in LLADA2_ARCHITECTURES for a in raw.get("architectures") or ())


def llada2_unsupported(raw: dict) -> list[str]:
    """What keeps this LLaDA 2.x config off our class, each naming its key (empty = loadable)."""
    bad = [f"{k} missing" for k in _REQUIRED if raw.get(k) in (None, 0)]
    bad += [f"{k}={raw.get(k, default)!r}" for k, (ok, default) in _SUPPORTED.items() if not ok(raw.get(k, default))]
    if str(raw.get("model_type", "")).lower() not in LLADA2_MODEL_TYPES:
        bad.append(f"model_type={raw.get('model_type')!r} (need 'llada2_moe')")
    architectures = raw.get("architectures") or list(LLADA2_ARCHITECTURES)
    if not any(a in LLADA2_ARCHITECTURES for a in architectures):
        bad.append(f"architectures={architectures!r} (need LLaDA2MoeModelLM)")
    shared = raw.get("moe_shared_expert_intermediate_size")
    if shared is not None and shared != raw.get("moe_intermediate_size"):
        bad.append(f"moe_shared_expert_intermediate_size={shared!r} (the published HF code sizes the shared "
                   "expert by moe_intermediate_size)")
    theta = (raw.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None and raw.get("rope_theta") not in (None, theta):
        bad.append(f"rope_parameters.rope_theta={theta!r} differs from rope_theta={raw['rope_theta']!r}")
    if bad:
        return bad
    heads, kv, experts = raw["num_attention_heads"], raw["num_key_value_heads"], raw["num_experts"]
    head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
    n_group, topk_group = raw.get("n_group") or 1, raw.get("topk_group") or 1
    if heads % kv:
        bad.append(f"num_key_value_heads={kv} does not divide num_attention_heads={heads}")
    if int(head_dim * raw.get("partial_rotary_factor", 0.5)) % 2:
        bad.append(f"partial_rotary_factor={raw.get('partial_rotary_factor', 0.5)} gives an odd rotary dimension")
    if experts % n_group or not 0 < topk_group <= n_group:
        bad.append(f"n_group={n_group} / topk_group={topk_group} do not group num_experts={experts}")
    if raw["num_experts_per_tok"] > experts:
        bad.append(f"num_experts_per_tok={raw['num_experts_per_tok']} exceeds num_experts={experts}")
    if raw.get("first_k_dense_replace", 0) and not raw.get("intermediate_size"):
        bad.append("intermediate_size missing (first_k_dense_replace > 0 needs the dense layers' size)")
    return bad


def llada2_config(raw: dict):
    """config.json (dict) -> LLaDA2MoeConfig with the published defaults filled in; ValueError naming
    the keys of a variant our class does not compute."""
    from lopa.models.llada2_moe import LLaDA2MoeConfig
    bad = llada2_unsupported(raw)
    if bad:
        raise ValueError(f"this LLaDA 2.x variant is not supported: {', '.join(bad)}")
    fields = {k: v for k, v in raw.items() if k not in ("architectures", "auto_map", "model_type", "torch_dtype",
                                                        "dtype", "transformers_version", "rope_scaling",
                                                        "rope_parameters")}
    fields["head_dim"] = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    fields["rope_theta"] = raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta")
    for key, default in (("partial_rotary_factor", 0.5), ("first_k_dense_replace", 0), ("rope_theta", 10000.0),
                         ("rms_norm_eps", 1e-5), ("use_qk_norm", True), ("use_qkv_bias", False),
                         ("routed_scaling_factor", 2.5), ("n_group", 8), ("topk_group", 4),
                         ("num_shared_experts", 0), ("max_position_embeddings", 16384)):
        if fields.get(key) is None:
            fields[key] = default
    config = LLaDA2MoeConfig(**fields)
    config.is_causal = False        # the engine gives every forward its block mask; none means bidirectional
    return config


def llada2_special_ids(raw: dict, tokenizer) -> tuple[int, int]:
    """(mask id, EOS id): config.json's, else the tokenizer's (its mask token, or `<|mask|>` in its
    vocabulary), else the published 156895 / 156892 when the vocabulary holds them."""
    vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else {}
    size = int(raw.get("vocab_size") or 0)

    def pick(name, values, published):
        return special_id(values, size, published, f"this LLaDA 2.x checkpoint names no {name} token (config.json or "
                          f"tokenizer) and its vocabulary ({size}) is too small for the published id {published}")
    mask = pick("mask", (raw.get("mask_token_id"), getattr(tokenizer, "mask_token_id", None),
                         vocab.get(LLADA2_MASK_TOKEN)), LLADA2_MASK_ID)
    eos = pick("end-of-text", (raw.get("eos_token_id"), getattr(tokenizer, "eos_token_id", None)), LLADA2_EOS_ID)
    return mask, eos


def generate_defaults(source: str) -> dict:
    """The literal defaults of threshold / editing_threshold / max_post_steps in the `generate`
    methods of a modeling file's text (parsed, never run). {} when it has none."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "generate":
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults) + \
                list(node.args.kw_defaults)
            for arg, default in zip(args, defaults):
                if arg.arg in _GENERATE_ARGUMENTS and isinstance(default, ast.Constant) and default.value is not None:
                    found.setdefault(arg.arg, default.value)
    return found


def llada2_generation(path: Path) -> tuple[dict, dict]:
    """(decode settings in the engine's terms, token editing values and where they came from) of a
    LLaDA 2.x folder: generation_config.json, else its modeling file's generate() defaults, else
    LLaDA2.0's published threshold. Values of the wrong type or range are refused naming the file."""
    path, values, source = Path(path), {}, "LLaDA2.0's published generate()"
    generation = path / "generation_config.json"
    gen = read_json(generation) if generation.is_file() else {}
    if isinstance(gen, dict) and any(k in gen for k in _GENERATE_ARGUMENTS):
        values, source = {k: gen[k] for k in _GENERATE_ARGUMENTS if gen.get(k) is not None}, "generation_config.json"
    else:
        modeling = path / "modeling_llada2_moe.py"
        if modeling.is_file() and modeling.stat().st_size <= MAX_MODELING_BYTES:
            try:
                values = generate_defaults(modeling.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                values = {}
            source = "generate() in modeling_llada2_moe.py" if values else source
    threshold = values.get("threshold", LLADA2_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise ValueError(f"{quoted(path)}: threshold {threshold!r} ({source}) must be a number from 0 to 1")
    decode = {"tau_conf": float(threshold), "confidence": "max_prob", "tau_add": 1.0, "commit": "threshold"}
    editing, edit, post = {}, values.get("editing_threshold"), values.get("max_post_steps")
    if edit is not None:
        if isinstance(edit, bool) or not isinstance(edit, (int, float)) or not 0 <= edit <= 1:
            raise ValueError(f"{quoted(path)}: editing_threshold {edit!r} ({source}) must be a number from 0 to 1")
        if post is not None and (isinstance(post, bool) or not isinstance(post, int)
                                 or not 0 <= post <= MAX_EDIT_POST_STEPS):
            raise ValueError(f"{quoted(path)}: max_post_steps {post!r} ({source}) must be a whole number from 0 to "
                             f"{MAX_EDIT_POST_STEPS}")
        # generate() edits where the probability is above editing_threshold (strict), as edit_threshold does; at 1
        # nothing is above it, so the checkpoint asks for no editing
        editing = {"editing_threshold": edit, "max_post_steps": post, "source": source, "applied": edit < 1}
        if edit < 1:
            decode.update(edit_threshold=float(edit), **({"edit_post_steps": post} if post is not None else {}))
    return decode, editing
