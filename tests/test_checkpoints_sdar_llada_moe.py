"""SDAR (dense and MoE), LLaDA-MoE and LLaDA 1.5 checkpoints, built tiny in their published on-disk
formats (config keys and parameter names as their Hugging Face repositories publish them), loaded
through lopa.models.load, and compared with a stock transformers model holding the same weights.
LLaDA-MoE is also compared with its forward as its published modeling code computes it, written
here from reading that code (modeling_lladamoe.py)."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_checkpoints import CHAT, block_mask, logits, save_llada_dir, write_dream_tokenizer
from tiny import save_tiny_model_dir
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from lopa.models import load
from lopa.models.sdar_llada_moe import LLADA_DECODE, SDAR_DECODE
from lopa.resolution import resolution, resolve

QWEN3 = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
             tie_word_embeddings=False)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True)


def per_expert_state(model) -> dict:
    """A stock model's weights with the experts as the published checkpoints store them, one
    tensor per expert and projection (`mlp.experts.E.gate_proj.weight`); transformers fuses them
    in memory ([E, 2I, H] gate_up, [E, H, I] down)."""
    state = {}
    for name, value in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix, inter = name[: -len("gate_up_proj")], value.shape[1] // 2
            for e in range(value.shape[0]):
                state[f"{prefix}{e}.gate_proj.weight"] = value[e, :inter]
                state[f"{prefix}{e}.up_proj.weight"] = value[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):
            for e in range(value.shape[0]):
                state[f"{name[: -len('down_proj')]}{e}.down_proj.weight"] = value[e]
        else:
            state[name] = value
    return {k: v.contiguous() for k, v in state.items()}


def save_sdar_dir(path, moe=False):
    """SDAR's layout (JetLM/SDAR-1.7B-Chat's config.json keys; SDAR-30B-A3B's for `sdar_moe`):
    Qwen tokenizer files with a mask token, Qwen3 parameter names, block_size and mask id in config."""
    path.mkdir(parents=True)
    ids = write_dream_tokenizer(path)
    vocab = max(ids.values()) + 8
    torch.manual_seed(5)
    cls, config_cls = (Qwen3MoeForCausalLM, Qwen3MoeConfig) if moe else (Qwen3ForCausalLM, Qwen3Config)
    reference = cls(config_cls(vocab_size=vocab, **QWEN3, **(MOE if moe else {}))).eval()
    save_file(per_expert_state(reference), path / "model.safetensors", metadata={"format": "pt"})
    kind = "SDARMoe" if moe else "SDAR"
    config = {
        "architectures": [f"{kind}ForCausalLM"], "model_type": "sdar_moe" if moe else "sdar",
        "auto_map": {"AutoConfig": f"configuration_{kind.lower()}.{kind}Config",
                     "AutoModel": f"modeling_{kind.lower()}.{kind}Model",
                     "AutoModelForCausalLM": f"modeling_{kind.lower()}.{kind}ForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "attn_implementation": "flex_attention",
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|endoftext|>"], "block_size": 4,
        "mask_token_id": ids["<|mask|>"], "ep_size": 1, "fuse_cross_entropy": True, "head_dim": 8,
        "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 48,
        "max_position_embeddings": 256, "max_window_layers": 2, "micro_forward": False, "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000, "skip_checkpoint": False, "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "float32", "use_cache": False, "use_deepep": False, "use_sliding_window": False,
        "vocab_size": vocab}
    if moe:
        config.update({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": True,
                       "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False})
    (path / "config.json").write_text(json.dumps(config))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": ids["<|endoftext|>"]}))
    return path, ids, reference


@pytest.mark.parametrize("moe", [False, True])
def test_sdar_loads_into_stock_qwen3_with_identical_logits_and_its_own_decode_settings(tmp_path, moe):
    path, ids, reference = save_sdar_dir(tmp_path / "SDAR-1.7B-Chat", moe=moe)
    loaded = load(path, device="cpu")
    assert type(loaded.model) is (Qwen3MoeForCausalLM if moe else Qwen3ForCausalLM)
    x = torch.randint(0, 290, (2, 12))
    for mode in ("block_causal", "full"):
        mask = block_mask(12, mode).expand(2, 1, 12, 12)
        assert torch.equal(logits(loaded.model, x, mask), logits(reference, x, mask))
    spec = loaded.spec
    assert spec.mask_token_id == ids["<|mask|>"] and not spec.logit_shift
    assert spec.eos_token_ids == (ids["<|endoftext|>"], ids["<|im_end|>"])        # a Chat model stops at end of turn
    assert spec.prompt_template == "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    assert (spec.attention, spec.block_size, spec.decode) == ("block_causal", 4, SDAR_DECODE)
    # SDAR's published settings reach every surface through resolve(), under what the user sets.
    settings, sources = resolution({"k": 2}, spec)
    assert (settings.block_size, settings.tau_conf, settings.tau_add, settings.confidence, settings.attention) == (
        4, 0.85, 1.0, "max_prob", "block_causal")
    assert sources["tau_conf"] == sources["block_size"] == "model" and sources["k"] == "user"
    assert resolve({"tau_conf": 0.5}, spec).tau_conf == 0.5
    # LoPA decodes it unchanged, in every filling order: the batched executor agrees with one forward per branch.
    for order in ("confidence", "random", "left_to_right"):
        settings = settings.replace(max_new_tokens=16, tau_conf=0.2, order=order)
        runs = {ex: loaded.decoder(settings, executor=ex).run("def add(a, b):") for ex in ("batched", "per_branch")}
        assert runs["batched"].tokens == runs["per_branch"].tokens and len(runs["batched"].tokens) == 16


def test_sdar_with_sliding_window_is_refused_without_remote_code(tmp_path):
    path, _, _ = save_sdar_dir(tmp_path / "SDAR-sw")
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "use_sliding_window": True, "sliding_window": 8}))
    with pytest.raises(ValueError, match="SDAR variant does not map.*use_sliding_window.*--trust-remote-code"):
        load(path)


def save_llada_moe_dir(path, **overrides):
    """LLaDA-MoE's layout (inclusionAI/LLaDA-MoE-7B-A1B-*: model_type "llada", LLaDAMoEModelLM,
    LLaDAMoEConfig's keys, OLMoE-style parameter names that are Qwen3-MoE's, experts one by one)."""
    path.mkdir(parents=True)
    save_tiny_model_dir(path / "tok")                 # a generic tokenizer.json with a mask token (id 0)
    for f in (path / "tok").iterdir():
        if f.name.startswith(("tokenizer", "special")):
            f.rename(path / f.name)
    shutil.rmtree(path / "tok")
    torch.manual_seed(7)
    reference = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=40, hidden_size=32, intermediate_size=16, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=False, rms_norm_eps=1e-5, rope_theta=50000.0, tie_word_embeddings=False)).eval()
    save_file(per_expert_state(reference), path / "model.safetensors", metadata={"format": "pt"})
    config = {
        "architectures": ["LLaDAMoEModelLM"], "model_type": "llada",
        "auto_map": {"AutoConfig": "configuration_lladamoe.LLaDAMoEConfig",
                     "AutoModel": "modeling_lladamoe.LLaDAMoEModelLM"},
        "attention_bias": False, "attention_dropout": 0.0, "clip_qkv": None, "dense_intermediate_size": 64,
        "eos_token_id": 1, "expert_intermediate_size": 16, "hidden_act": "silu", "hidden_size": 32,
        "initializer_range": 0.02, "max_position_embeddings": 256, "moe_layer_freq": [1, 1],
        "moe_router_enable_expert_bias": False, "moe_router_score_function": "softmax", "norm_topk_prob": True,
        "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_key_value_heads": 4, "output_router_logits": False, "pad_token_id": 2, "partial_rotary_factor": 1.0,
        "qk_layernorm": True, "rms_norm_eps": 1e-5, "rope_scaling": None, "rope_theta": 50000,
        "routed_scaling_factor": 1, "router_aux_loss_coef": 0.01, "router_num_group": -2, "router_topk_group": -2,
        "shared_expert_intermediate_size": None, "tie_word_embeddings": False, "torch_dtype": "float32",
        "use_cache": False, "vocab_size": 40}
    (path / "config.json").write_text(json.dumps({**config, **overrides}))
    return path, reference


def llada_moe_forward(state, ids, heads=4, top_k=2, theta=50000.0, eps=1e-5):
    """LLaDA-MoE's forward as modeling_lladamoe.py computes it (LLaDAMoEDecoderLayer, no mask):
    RMSNorm in fp32; q and k RMS-normalised per head; RoPE on the two halves of each head; softmax
    router, top-k, weights NOT renormalised (norm_topk_prob hard-coded False); SiLU-gated experts.
    Written from reading that code, not from transformers'. logits: [B, L, V]."""
    w = lambda name: state[f"model.{name}.weight"]
    norm = lambda x, weight: weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    B, L = ids.shape
    x = w("embed_tokens")[ids]                                            # [B, L, d]
    hs = x.shape[-1] // heads
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2).float() / hs)
    angles = torch.arange(L).float()[:, None] * inv_freq[None]            # [L, hs/2]
    sin, cos = torch.cat([angles, angles], -1).sin(), torch.cat([angles, angles], -1).cos()
    rope = lambda t: t * cos + torch.cat([-t[..., hs // 2:], t[..., : hs // 2]], -1) * sin
    for i in range(2):
        b = f"layers.{i}"
        h = norm(x, w(f"{b}.input_layernorm"))
        q = norm((h @ w(f"{b}.self_attn.q_proj").T).view(B, L, heads, hs), w(f"{b}.self_attn.q_norm"))
        k = norm((h @ w(f"{b}.self_attn.k_proj").T).view(B, L, heads, hs), w(f"{b}.self_attn.k_norm"))
        v = (h @ w(f"{b}.self_attn.v_proj").T).view(B, L, heads, hs)
        q, k, v = rope(q.transpose(1, 2)), rope(k.transpose(1, 2)), v.transpose(1, 2)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
        x = x + att.transpose(1, 2).reshape(B, L, -1) @ w(f"{b}.self_attn.o_proj").T
        h = norm(x, w(f"{b}.post_attention_layernorm")).reshape(B * L, -1)
        weights, chosen = torch.softmax(h @ w(f"{b}.mlp.gate").T, dim=-1).topk(top_k, dim=-1)
        out = torch.zeros_like(h)
        for slot in range(top_k):
            for e in chosen[:, slot].unique().tolist():
                rows = chosen[:, slot] == e
                ex = lambda p: w(f"{b}.mlp.experts.{e}.{p}")              # noqa: B023 (used at once)
                y = (torch.nn.functional.silu(h[rows] @ ex("gate_proj").T) * (h[rows] @ ex("up_proj").T)) @ ex("down_proj").T
                out[rows] += weights[rows, slot, None] * y
        x = x + out.view(B, L, -1)
    return norm(x, w("norm")) @ state["lm_head.weight"].T


def test_llada_moe_maps_onto_stock_qwen3_moe_and_computes_its_published_forward(tmp_path):
    path, reference = save_llada_moe_dir(tmp_path / "LLaDA-MoE-7B-A1B-Base")
    loaded = load(path, device="cpu")
    assert type(loaded.model) is Qwen3MoeForCausalLM and loaded.model.config.norm_topk_prob is False
    x = torch.randint(3, 40, (1, 12))
    for mode in ("block_causal", "full"):
        assert torch.equal(logits(loaded.model, x, block_mask(12, mode)), logits(reference, x, block_mask(12, mode)))
    expected = llada_moe_forward(load_file(path / "model.safetensors"), x)
    torch.testing.assert_close(logits(loaded.model, x), expected, atol=1e-5, rtol=1e-5)
    spec = loaded.spec
    assert spec.mask_token_id == 0 and spec.eos_token_ids == (1,) and not spec.logit_shift
    assert (spec.attention, spec.block_size, spec.decode, spec.extra["family"]) == ("full", 32, LLADA_DECODE, "llada_moe")
    settings = resolve({"k": 2, "max_new_tokens": 32}, spec)
    assert (settings.commit, settings.block_size, settings.tau_add) == ("top1", 32, 1.0)
    runs = {ex: loaded.decoder(settings, executor=ex).run("how many apples") for ex in ("batched", "per_branch")}
    assert runs["batched"].tokens == runs["per_branch"].tokens


@pytest.mark.parametrize("change, named", [({"shared_expert_intermediate_size": 32}, "shared_expert_intermediate_size"),
                                           ({"moe_router_enable_expert_bias": True}, "moe_router_enable_expert_bias"),
                                           ({"qk_layernorm": False}, "qk_layernorm"),
                                           ({"partial_rotary_factor": 0.5}, "partial_rotary_factor")])
def test_unmappable_llada_moe_is_refused_without_remote_code(tmp_path, change, named):
    path, _ = save_llada_moe_dir(tmp_path / "LLaDA-MoE-variant", **change)
    with pytest.raises(ValueError, match=f"LLaDA-MoE variant does not map.*{named}.*--trust-remote-code"):
        load(path)


def test_llada_1_5_is_llada_8b_with_a_chat_template_and_llada_decode_settings(tmp_path):
    path, reference = save_llada_dir(tmp_path / "LLaDA-1.5")
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT}))
    loaded = load(path, device="cpu")
    x = torch.randint(3, 40, (1, 12))
    assert torch.equal(logits(loaded.model, x, block_mask(12, "full")), logits(reference, x, block_mask(12, "full")))
    spec = loaded.spec
    assert "{prompt}" in spec.prompt_template and spec.prompt_template != "{prompt}"     # chat, by its name
    assert (spec.block_size, spec.decode) == (32, LLADA_DECODE)


def test_lopa_generate_decodes_sdar_with_its_own_settings_unless_told_otherwise(tmp_path, capsys):
    from lopa.cli import main
    path, _, _ = save_sdar_dir(tmp_path / "SDAR-1.7B-Chat")
    assert main(["generate", "--model", str(path), "--prompt", "def add", "--max-new-tokens", "8", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for shown in ("'block_size': 4", "'tau_conf': 0.85", "'tau_add': 1.0", "'confidence': 'max_prob'",
                  "'attention': 'block_causal'"):
        assert shown in out
    assert main(["generate", "--model", str(path), "--prompt", "def add", "--max-new-tokens", "8", "--device", "cpu",
                 "--tau-conf", "0.5", "--block-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "'tau_conf': 0.5" in out and "'block_size': 8" in out
