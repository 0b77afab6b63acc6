"""LLaDA 2.x (`llada2_moe`, LLaDA2MoeModelLM) on our own class: a tiny random checkpoint written here in
the published on-disk format (config.json keys, parameter names, sharded safetensors with an index, a
tokenizer with `<|mask|>`), loaded through lopa.models.load and `lopa generate`, and compared with a
forward written here as plain functional torch from the published modeling code
(modeling_llada2_moe.py: fused qkv, per-head q/k RMSNorm, RoPE on the first half of each head,
sigmoid router with the expert bias used for selection only, grouped top-k, normalised and scaled
weights, shared expert, dense first layers)."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from lopa.forward import attention_mask
from lopa.models import load
from lopa.models.llada2_family import (
    LLADA2_EOS_ID,
    LLADA2_MASK_ID,
    generate_defaults,
    llada2_generation,
    llada2_special_ids,
    llada2_unsupported,
)
from lopa.models.tiny import tiny_tokenizer
from lopa.resolution import resolution

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 48, 32, 4, 2, 8, 3
EXPERTS, TOP_K, MOE_INTER, DENSE_INTER = 8, 2, 16, 40
# The keys of LLaDA2.0-mini's config.json (sizes shrunk).
CONFIG = {
    "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
    "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                 "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                 "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
    "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": DENSE_INTER, "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "hidden_act": "silu",
    "use_qkv_bias": False, "use_qk_norm": True, "use_bias": False, "rms_norm_eps": 1e-6, "norm_head": False,
    "tie_word_embeddings": False, "embedding_dropout": 0.0, "attention_dropout": 0.0, "output_dropout": 0.0,
    "initializer_range": 0.02, "max_position_embeddings": 512, "rope_theta": 600000, "use_cache": False,
    "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28, "rope_scaling": None,
    "pad_token_id": 2, "eos_token_id": 1, "num_experts": EXPERTS, "num_shared_experts": 1,
    "num_experts_per_tok": TOP_K, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
    "moe_intermediate_size": MOE_INTER, "first_k_dense_replace": 1, "output_router_logits": False,
    "partial_rotary_factor": 0.5, "score_function": "sigmoid", "moe_router_enable_expert_bias": True,
    "norm_topk_prob": True, "router_dtype": "fp32", "torch_dtype": "float32"}


def published_weights(seed=0) -> dict:
    """Random weights under the published parameter names."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, scale=0.2: torch.randn(*shape, generator=g) * scale
    w = {"model.word_embeddings.weight": r(VOCAB, HIDDEN, scale=1.0), "model.norm.weight": 1 + r(HIDDEN),
         "lm_head.weight": r(VOCAB, HIDDEN)}
    mlp = lambda p, inter: {f"{p}.gate_proj.weight": r(inter, HIDDEN), f"{p}.up_proj.weight": r(inter, HIDDEN),
                            f"{p}.down_proj.weight": r(HIDDEN, inter)}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        w |= {f"{p}.input_layernorm.weight": 1 + r(HIDDEN), f"{p}.post_attention_layernorm.weight": 1 + r(HIDDEN),
              f"{p}.attention.query_key_value.weight": r((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
              f"{p}.attention.query_layernorm.weight": 1 + r(HEAD_DIM),
              f"{p}.attention.key_layernorm.weight": 1 + r(HEAD_DIM),
              f"{p}.attention.dense.weight": r(HIDDEN, HEADS * HEAD_DIM)}
        if i < CONFIG["first_k_dense_replace"]:
            w |= mlp(f"{p}.mlp", DENSE_INTER)
        else:
            w |= {f"{p}.mlp.gate.weight": r(EXPERTS, HIDDEN, scale=1.0), f"{p}.mlp.gate.expert_bias": r(EXPERTS),
                  **mlp(f"{p}.mlp.shared_experts", MOE_INTER)}
            for e in range(EXPERTS):
                w |= mlp(f"{p}.mlp.experts.{e}", MOE_INTER)
    return w


def save_llada2_dir(path, config=None, weights=None, tokenizer=None, generation=None):
    """A LLaDA 2.x folder as published: config.json, two safetensors shards with their index, a tokenizer."""
    path.mkdir(parents=True, exist_ok=True)
    weights = weights if weights is not None else published_weights()
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: weights[k].contiguous() for k in keys}, path / file, metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * 4 for t in weights.values())},
             "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    (path / "config.json").write_text(json.dumps(config or CONFIG))
    if generation is not None:
        (path / "generation_config.json").write_text(json.dumps(generation))
    (tokenizer or tiny_tokenizer()).save_pretrained(path)
    return path


# -- the published forward, written as functions over the weights dict ---------------------------------
def rms(x, weight, eps=1e-6):
    return weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def swiglu(w, p, x):
    return F.linear(F.silu(F.linear(x, w[f"{p}.gate_proj.weight"])) * F.linear(x, w[f"{p}.up_proj.weight"]),
                    w[f"{p}.down_proj.weight"])


def published_moe(w, p, x):
    """LLaDA2MoeSparseMoeBlock.forward (moe_infer) for x [T, hidden]."""
    logits = F.linear(x.float(), w[f"{p}.gate.weight"].float())
    scores = torch.sigmoid(logits)
    for_routing = scores + w[f"{p}.gate.expert_bias"]
    T = x.shape[0]
    group_scores = for_routing.view(T, 4, -1).topk(2, dim=-1)[0].sum(-1)
    group_idx = torch.topk(group_scores, k=2, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(T, 4, EXPERTS // 4).reshape(T, -1)
    idx = torch.topk(for_routing.masked_fill(~score_mask.bool(), float("-inf")), k=TOP_K, dim=-1)[1]
    weight = torch.gather(scores, 1, idx)
    weight = weight / (weight.sum(-1, keepdim=True) + 1e-20) * 2.5
    out = torch.zeros_like(x)
    for t in range(T):
        for slot in range(TOP_K):
            out[t] += weight[t, slot] * swiglu(w, f"{p}.experts.{int(idx[t, slot])}", x[t])
    return out + swiglu(w, f"{p}.shared_experts", x)


def published_forward(w, ids, mask=None):
    """LLaDA2MoeModelLM.forward for ids [1, L], mask [L, L] bool or None -> logits [L, V]."""
    L = ids.shape[1]
    R = int(HEAD_DIM * 0.5)
    inv_freq = 1.0 / (600000 ** (torch.arange(0, R, 2).float() / R))
    freqs = torch.arange(L).float()[:, None] * inv_freq[None]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()        # [L, R]

    def rope(x):                                   # x [H, L, D]: rotate_half on the first R dims
        rot, keep = x[..., :R], x[..., R:]
        half = torch.cat([-rot[..., R // 2:], rot[..., :R // 2]], -1)
        return torch.cat([rot * cos + half * sin, keep], -1)

    h = w["model.word_embeddings.weight"][ids[0]]
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        x = rms(h, w[f"{p}.input_layernorm.weight"])
        qkv = F.linear(x, w[f"{p}.attention.query_key_value.weight"]).view(L, HEADS + 2 * KV_HEADS, HEAD_DIM)
        q, k, v = qkv[:, :HEADS].transpose(0, 1), qkv[:, HEADS:HEADS + KV_HEADS].transpose(0, 1), \
            qkv[:, HEADS + KV_HEADS:].transpose(0, 1)
        q = rope(rms(q, w[f"{p}.attention.query_layernorm.weight"]))
        k = rope(rms(k, w[f"{p}.attention.key_layernorm.weight"]))
        k, v = k.repeat_interleave(HEADS // KV_HEADS, 0), v.repeat_interleave(HEADS // KV_HEADS, 0)
        scores = q @ k.transpose(-1, -2) * HEAD_DIM ** -0.5
        if mask is not None:
            scores = scores + torch.zeros(L, L).masked_fill(~mask, float("-inf"))
        attn = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(L, -1)
        h = h + F.linear(attn, w[f"{p}.attention.dense.weight"])
        x = rms(h, w[f"{p}.post_attention_layernorm.weight"])
        h = h + (swiglu(w, f"{p}.mlp", x) if i < CONFIG["first_k_dense_replace"] else published_moe(w, f"{p}.mlp", x))
    return F.linear(rms(h, w["model.norm.weight"]), w["lm_head.weight"])


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    torch.set_num_threads(1)
    weights = published_weights()
    return save_llada2_dir(tmp_path_factory.mktemp("llada2") / "LLaDA2.0-tiny", weights=weights), weights


def test_logits_equal_the_published_forward_with_and_without_a_block_mask(llada2):
    path, weights = llada2
    loaded = load(str(path), device="cpu")
    model = loaded.model
    assert type(model).__name__ == "LLaDA2MoeModelLM" and next(model.parameters()).dtype == torch.float32
    ids = torch.randint(3, 33, (1, 12), generator=torch.Generator().manual_seed(1))
    block = (torch.arange(12)[:, None] // 4 >= torch.arange(12)[None] // 4)              # block-causal, blocks of 4
    with torch.no_grad():
        full = model(input_ids=ids).logits[0]
        masked = model(input_ids=ids, attention_mask=block[None, None], position_ids=torch.arange(12)[None]).logits[0]
    assert torch.allclose(full, published_forward(weights, ids), atol=1e-5, rtol=0)
    assert torch.allclose(masked, published_forward(weights, ids, block), atol=1e-5, rtol=0)
    # the mask is honoured: the first block cannot see the later ones, which change the rest
    assert torch.allclose(masked[:4], published_forward(weights, ids[:, :4]), atol=1e-5, rtol=0)
    assert not torch.allclose(masked[:4], full[:4], atol=1e-3)
    # a token changed in the last block reaches the first block under full attention only
    changed = ids.clone()
    changed[0, 10] = 5 if int(ids[0, 10]) != 5 else 6
    with torch.no_grad():
        changed_full = model(input_ids=changed).logits[0]
        changed_masked = model(input_ids=changed, attention_mask=block[None, None]).logits[0]
    assert torch.allclose(changed_masked[:8], masked[:8], atol=1e-6, rtol=0) and not torch.allclose(changed_full[:4], full[:4], atol=1e-3)


def test_the_spec_carries_the_family_settings_and_a_short_decode_runs_with_them(llada2):
    path, _ = llada2
    loaded = load(str(path), device="cpu")
    spec = loaded.spec
    assert (spec.mask_token_id, spec.eos_token_ids[0], spec.logit_shift) == (0, 1, False)
    assert (spec.block_size, spec.attention) == (32, "block_causal")
    assert spec.decode == {"tau_conf": 0.95, "confidence": "max_prob", "tau_add": 1.0, "commit": "threshold"}
    assert "token_editing" not in spec.extra                 # LLaDA2.0: its generate() does not edit
    settings, sources = resolution({"max_new_tokens": 32, "k": 0}, spec)
    assert (settings.block_size, settings.attention, settings.tau_conf, settings.commit) == \
        (32, "block_causal", 0.95, "threshold")
    assert sources["tau_conf"] == "model" and sources["block_size"] == "model"
    result = loaded.decoder(settings).run("how many apples")
    assert len(result.tokens) == 32 and loaded.spec.mask_token_id not in result.tokens
    # the batched executor (shared-prefix attention through AttentionInterface) equals both references:
    # one branch at a time on a transformers DynamicCache, and no cache at all
    lookahead, _ = resolution({"max_new_tokens": 32, "k": 2}, spec)
    runs = [loaded.decoder(lookahead, executor=e).run("how many apples") for e in ("batched", "per_branch", "uncached")]
    assert runs[0].tokens == runs[1].tokens == runs[2].tokens
    assert loaded.model.config._attn_implementation == "lopa_shared_prefix"


def test_lopa_generate_decodes_the_folder(llada2, capsys):
    from lopa.cli import main
    path, _ = llada2
    assert main(["generate", "--model", str(path), "--prompt", "Tom has 3 apples", "--max-new-tokens", "32",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "'block_size': 32" in out and "'attention': 'block_causal'" in out and "'tau_conf': 0.95" in out


def test_editing_values_come_from_the_checkpoint_and_turn_editing_on(tmp_path):
    path = save_llada2_dir(tmp_path / "LLaDA2.1-tiny", generation={"threshold": 0.7, "editing_threshold": 0.5,
                                                                    "max_post_steps": 16})
    spec = load(str(path), device="cpu").spec
    assert spec.decode["tau_conf"] == 0.7
    assert (spec.decode["edit_threshold"], spec.decode["edit_post_steps"]) == (0.5, 16)
    assert spec.extra["token_editing"] == {"editing_threshold": 0.5, "max_post_steps": 16,
                                           "source": "generation_config.json", "applied": True}
    # a decode of it edits with the checkpoint's values (the settings the trace records), and its trace says so
    from lopa import RunResult
    from lopa.cli import main
    assert main(["generate", "--model", str(path), "--prompt", "how many", "--max-new-tokens", "32", "--device", "cpu",
                 "--trace", str(tmp_path / "trace.json")]) == 0
    run = RunResult.load(tmp_path / "trace.json")
    assert run.settings["tau_conf"] == 0.7 and run.spec["extra"]["token_editing"]["applied"] is True
    assert (run.settings["edit_threshold"], run.settings["edit_post_steps"]) == (0.5, 16)
    # the user's value wins over the checkpoint's: --edit-threshold 1 turns editing off
    assert main(["generate", "--model", str(path), "--prompt", "how many", "--max-new-tokens", "32", "--device", "cpu",
                 "--edit-threshold", "1", "--trace", str(tmp_path / "off.json")]) == 0
    off = RunResult.load(tmp_path / "off.json")
    assert off.settings["edit_threshold"] == 1.0 and not any(r.edit_seen_positions for r in off.records)
    # without a generation config: the defaults of generate() in the folder's modeling file, read, never run
    (path / "generation_config.json").unlink()
    (path / "modeling_llada2_moe.py").write_text(
        "raise SystemExit('never run')\nclass M:\n    def generate(self, inputs=None, threshold: float = 0.8,\n"
        "                 editing_threshold: float = 0.6, max_post_steps: int = 12, mask_id=None):\n        pass\n")
    decode, editing = llada2_generation(path)
    assert decode["tau_conf"] == 0.8 and (editing["editing_threshold"], editing["max_post_steps"]) == (0.6, 12)
    assert generate_defaults("def generate(x, threshold=0.95, eos_id=1): pass") == {"threshold": 0.95}
    (path / "generation_config.json").write_text(json.dumps({"threshold": 0.7, "editing_threshold": 1.0}))
    decode, editing = llada2_generation(path)                 # nothing is above 1: recorded, no editing asked for
    assert "edit_threshold" not in decode and editing["applied"] is False
    (path / "generation_config.json").write_text(json.dumps({"editing_threshold": 0.5, "max_post_steps": -1}))
    with pytest.raises(ValueError, match="max_post_steps -1"):
        llada2_generation(path)
    (path / "generation_config.json").write_text(json.dumps({"threshold": 1.5}))
    with pytest.raises(ValueError, match="threshold 1.5"):
        llada2_generation(path)


@pytest.mark.parametrize("key, value", [("score_function", "softmax"), ("norm_head", True), ("use_bias", True),
                                        ("rope_scaling", {"rope_type": "yarn", "factor": 4.0}),
                                        ("rope_parameters", {"rope_type": "llama3", "factor": 8.0}),
                                        ("norm_topk_prob", False), ("num_key_value_heads", None),
                                        ("routed_scaling_factor", "2.5"), ("n_group", 3)])
def test_an_unknown_variant_is_refused_naming_the_key(tmp_path, key, value):
    config = {**CONFIG, key: value}
    assert any(key in reason for reason in llada2_unsupported(config))
    path = save_llada2_dir(tmp_path / "variant", config=config)
    with pytest.raises(ValueError, match=key):
        load(str(path), device="cpu")


def test_mask_and_eos_ids_come_from_config_else_tokenizer_else_the_published_ids():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    tokenizer = tiny_tokenizer()
    assert llada2_special_ids({**CONFIG, "mask_token_id": 7}, tokenizer) == (7, 1)
    no_eos = {k: v for k, v in CONFIG.items() if k != "eos_token_id"}
    assert llada2_special_ids(no_eos, tokenizer) == (0, 1)
    # `<|mask|>` in the vocabulary, not declared as the mask token
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<|mask|>": 5}, unk_token="a")))
    assert llada2_special_ids({**no_eos, "eos_token_id": 3}, plain) == (5, 3)
    big = {**no_eos, "vocab_size": 157184}
    assert llada2_special_ids(big, None) == (LLADA2_MASK_ID, LLADA2_EOS_ID)
    with pytest.raises(ValueError, match="mask"):
        llada2_special_ids(no_eos, None)


def test_the_engine_mask_reaches_the_model_as_the_stock_classes_take_it(llada2):
    """The engine's block_causal mask for prompt + two blocks: the model's logits equal the published
    forward under the same mask."""
    path, weights = llada2
    model = load(str(path), device="cpu").model
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]])
    mask = attention_mask(segments, "block_causal", True)                                # [1, 1, 11, 11]
    ids = torch.randint(3, 33, (1, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(11)[None]).logits[0]
    assert torch.allclose(logits, published_forward(weights, ids, mask[0, 0]), atol=1e-5, rtol=0)


def test_the_app_model_box_picks_the_folder_and_its_family_settings(llada2, monkeypatch, capsys):
    """Picked in the model box, the folder decodes with its family's settings where the visitor set none,
    the settings inputs show them, and the page's command runs the same settings through `lopa generate`."""
    import shlex

    from app.panels import model as model_panel
    from app.panels.round_view import callbacks as cb
    from app.panels.settings.share import command_line
    from app.serving.model_cache import MODELS
    from app.serving.request import follow_model
    from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session
    from lopa import DecodeSettings
    from lopa.cli import main
    monkeypatch.setenv("LOPA_MODEL_DIRS", "*")
    path, _ = llada2
    session = Session(touched=frozenset({"k", "max_new_tokens"}))
    values = [dict(APP_DEFAULTS, k=1, max_new_tokens=32)[n] for n in SETTING_NAMES]
    try:
        assert "now decodes with `LLaDA2.0-tiny`" in model_panel.pick_model(session, str(path))[1]
        shown = dict(zip(SETTING_NAMES, follow_model(MODELS.get(str(path)).spec, session.touched, *values)))
        assert (shown["block_size"], shown["attention"], shown["tau_conf"]) == (32, "block_causal", 0.95)
        for _ in cb.run_stream(session, "Tom has 3 apples", *values):
            pass
        run = session.run
        assert run.spec["name"] == "LLaDA2.0-tiny" and len(run.tokens) == 32
        assert (run.settings["block_size"], run.settings["attention"], run.settings["tau_conf"],
                run.settings["commit"], run.settings["k"]) == (32, "block_causal", 0.95, "threshold", 1)
        settings = DecodeSettings.from_dict(run.settings)
        command = command_line("Tom has 3 apples", settings, MODELS.get(str(path)).spec, path)
        capsys.readouterr()
        assert main(shlex.split(command)[3:]) == 0
        out = capsys.readouterr().out
        assert f"settings: {settings.to_dict()}" in out and run.text in out
    finally:
        session.close()
        MODELS.clear()


def test_in_bf16_the_router_bias_stays_float32(llada2):
    """The expert bias only ranks near-equal scores: bf16 would reorder experts, so it loads in float32
    whatever dtype the rest takes (as accelerators load it)."""
    from lopa.models.llada2_family import llada2_config
    from lopa.models.llada2_moe import LLaDA2MoeModelLM
    path, weights = llada2
    model = LLaDA2MoeModelLM.from_pretrained(path, config=llada2_config({**CONFIG, "mask_token_id": 0}),
                                             dtype=torch.bfloat16)
    gate = model.model.layers[1].mlp.gate
    assert gate.expert_bias.dtype == torch.float32 and gate.weight.dtype == torch.bfloat16
    assert torch.equal(gate.expert_bias, weights["model.layers.1.mlp.gate.expert_bias"])
    ids = torch.randint(3, 33, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    assert logits.dtype == torch.bfloat16 and logits.isfinite().all()


def test_tied_embeddings_and_the_chat_template(tmp_path):
    """A variant with `tie_word_embeddings` (no lm_head stored) computes the published forward with the
    embeddings as head; a tokenizer with a chat template makes prompts go through it, whatever the name."""
    weights = published_weights(seed=4)
    del weights["lm_head.weight"]
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}<role>HUMAN</role>{{ m['content'] }}<|role_end|>{% endfor %}"
                               "<role>ASSISTANT</role>")
    path = save_llada2_dir(tmp_path / "tied", config={**CONFIG, "tie_word_embeddings": True,
                                                      "rope_parameters": {"rope_type": "default", "rope_theta": 600000}},
                           weights=weights, tokenizer=tokenizer)
    loaded = load(str(path), device="cpu")
    ids = torch.randint(3, 33, (1, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[0]
    assert torch.allclose(logits, published_forward({**weights, "lm_head.weight": weights[
        "model.word_embeddings.weight"]}, ids), atol=1e-5, rtol=0)
    assert loaded.spec.prompt_template == "<role>HUMAN</role>{prompt}<|role_end|><role>ASSISTANT</role>"


def test_the_router_picks_in_the_best_groups_by_biased_scores_and_weighs_by_unbiased_ones():
    """Hand-made scores: 8 experts in 4 groups of 2, the best 2 groups kept, top 2 experts. Expert 0 has the
    best score but its group does not make it; the bias lifts expert 4's group and expert 4 itself, and the
    weights are the unbiased scores, normalised, times routed_scaling_factor."""
    from types import SimpleNamespace

    from lopa.models.llada2_moe import LLaDA2Gate
    config = SimpleNamespace(num_experts_per_tok=2, routed_scaling_factor=2.5, n_group=4, topk_group=2, num_experts=8,
                             hidden_size=8)
    gate = LLaDA2Gate(config)
    scores = torch.tensor([[0.9, 0.05, 0.7, 0.65, 0.6, 0.6, 0.1, 0.1]])
    with torch.no_grad():
        gate.weight.copy_(torch.eye(8))
        experts, weights = gate(torch.logit(scores))                 # sigmoid(logit(p)) = p
        assert experts.tolist() == [[2, 3]]                         # groups {2, 3} and {4, 5}; expert 0 left out
        assert torch.allclose(weights, torch.tensor([[0.7, 0.65]]) / 1.35 * 2.5)
        gate.expert_bias.copy_(torch.tensor([0, 0, 0, 0, 0.2, 0, 0, 0]))
        experts, weights = gate(torch.logit(scores))
    assert experts.tolist() == [[4, 2]]                             # chosen by 0.8 (biased) over 0.7
    assert torch.allclose(weights, torch.tensor([[0.6, 0.7]]) / 1.3 * 2.5)   # weighed by 0.6 (unbiased)


def test_the_dependency_aware_rule_reads_the_family_s_attention(llada2):
    """commit=dawn on LLaDA 2.x: its attention reaches the probe through the shared-prefix attention, and the fast
    path decodes what the eager reference decodes."""
    path, _ = llada2
    loaded = load(str(path), device="cpu")
    settings, _ = resolution({"max_new_tokens": 32, "k": 2, "commit": "dawn"}, loaded.spec)
    fast = loaded.decoder(settings).run("how many apples")
    eager = loaded.decoder(settings, executor="batched_eager").run("how many apples")
    assert fast.tokens == eager.tokens
    assert all("commit_reasons" in r.extra for r in fast.records if r.kind == "round")
