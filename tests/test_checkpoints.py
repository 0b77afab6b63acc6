"""Real checkpoint formats, built tiny inside the tests: Dream-family directories (config.json with
model_type Dream + auto_map, Dream's tokenizer files, safetensors single and sharded), a peft LoRA
adapter, LLaDA directories. Each is loaded through the users' code path (lopa.models.load / the CLI)
and must compute exactly what a stock model with the same weights computes."""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file
from tiny import save_tiny_model_dir
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from lopa import DecodeSettings
from lopa.cli import main
from lopa.forward import attention_mask
from lopa.models import families, load, presets
from lopa.models.loading import FLASH_OR_SDPA, register_flash_or_sdpa

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEXT = ["def add(a, b):\n    return a + b\n", "Question: Tom has 3 apples. How many? Answer: #### 3\n"]


def write_dream_tokenizer(path):
    """Dream's layout: vocab.json + merges.txt (byte-level BPE), a remote DreamTokenizer class in
    tokenizer_config.json, special tokens (mask, EOS) as added tokens, a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(TEXT * 10, trainer)
    bpe.model.save(str(path))
    n = bpe.get_vocab_size()
    ids = {s: n + i for i, s in enumerate(SPECIALS)}
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "DreamTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for s, i in ids.items()},
        "bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "unk_token": None, "chat_template": CHAT}))
    return ids


def tiny_dream(vocab, seed=0):
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        tie_word_embeddings=False)).eval()


def save_dream_dir(path, sharded=True):
    path.mkdir(parents=True)
    ids = write_dream_tokenizer(path)
    vocab = max(ids.values()) + 8
    model = tiny_dream(vocab)
    c = model.config
    (path / "config.json").write_text(json.dumps({
        "architectures": ["DreamModel"], "model_type": "Dream",
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "mask_token_id": ids["<|mask|>"], "bos_token_id": ids["<|beginoftext|>"], "eos_token_id": ids["<|endoftext|>"],
        "pad_token_id": ids["<|endoftext|>"], "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 256,
        "max_window_layers": 2, "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_parameters["rope_theta"],
        "rope_scaling": None, "sliding_window": None, "use_sliding_window": False, "tie_word_embeddings": False,
        "torch_dtype": "float32", "vocab_size": vocab, "use_cache": False}))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": ids["<|endoftext|>"], "alg": "entropy"}))
    # Dream's remote DreamModel = `model.` (DreamBaseModel) + `lm_head`: Qwen2ForCausalLM's names.
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if not sharded:
        save_file(state, path / "model.safetensors", metadata={"format": "pt"})
        return path, ids
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, path / file, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path, ids


def block_mask(L, mode="block_causal"):
    segments = torch.tensor([[0] * (L - 8) + [1] * 4 + [2] * 4])      # prompt, two blocks of 4
    return attention_mask(segments, mode, True)                       # [1, 1, L, L]


def logits(model, ids, mask=None):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


@pytest.fixture(scope="module")
def dream(tmp_path_factory):
    path, ids = save_dream_dir(tmp_path_factory.mktemp("ckpt") / "Dream-v0-Base-7B")
    return path, ids


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, dream):
    """A peft LoRA adapter saved by peft itself; B is random (not zero) so merging changes the model."""
    from peft import LoraConfig, get_peft_model
    path = tmp_path_factory.mktemp("lora") / "D2F_Dream_Base_7B_Lora"
    base = tiny_dream(max(dream[1].values()) + 8)
    torch.manual_seed(1)
    config = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, task_type="CAUSAL_LM",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    peft_model = get_peft_model(base, config).eval()
    peft_model.save_pretrained(path)
    return path, peft_model


@pytest.fixture
def no_hf_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(presets, "_hf_cached", lambda repo_id: None)
    monkeypatch.setattr(presets, "CHECKPOINTS_DIR", tmp_path / "checkpoints")
    return tmp_path / "checkpoints"


@pytest.mark.parametrize("sharded", [True, False])
def test_dream_checkpoint_loads_into_stock_qwen2_with_identical_logits(tmp_path, sharded):
    path, ids = save_dream_dir(tmp_path / "Dream-v0-Base-7B", sharded=sharded)
    loaded = load(path, device="cpu")
    assert type(loaded.model) is Qwen2ForCausalLM
    reference = tiny_dream(max(ids.values()) + 8)
    x = torch.randint(0, 290, (1, 12))
    for mode in ("block_causal", "full"):
        assert torch.equal(logits(loaded.model, x, block_mask(12, mode)), logits(reference, x, block_mask(12, mode)))
    # Without a mask the model must attend both ways (Dream is not causal), like an all-True 4-D mask.
    torch.testing.assert_close(logits(loaded.model, x), logits(reference, x, torch.ones(1, 1, 12, 12, dtype=torch.bool)))
    spec = loaded.spec
    assert spec.mask_token_id == ids["<|mask|>"] and spec.eos_token_ids == (ids["<|endoftext|>"],)
    assert spec.logit_shift and spec.attention == "full" and spec.prompt_template == "{prompt}"
    assert spec.pad_token_id == ids["<|endoftext|>"] and spec.extra["chat_template"] == CHAT


def test_dream_tokenizer_special_tokens_and_chat_template(tmp_path, dream):
    path = tmp_path / "Dream-v0-Instruct-7B"
    shutil.copytree(dream[0], path)
    loaded = load(path, device="cpu")
    ids, tok = dream[1], loaded.tokenizer
    assert tok.mask_token_id == ids["<|mask|>"] and tok.eos_token_id == ids["<|endoftext|>"]
    assert tok("a<|mask|>b<|endoftext|>", add_special_tokens=False)["input_ids"][1] == ids["<|mask|>"]
    # Instruct: prompts go through the chat template; the end-of-turn token also stops decoding.
    assert loaded.spec.prompt_template == "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    assert loaded.spec.eos_token_ids == (ids["<|endoftext|>"], ids["<|im_end|>"])
    decoder = loaded.decoder(DecodeSettings(block_size=8, max_new_tokens=8))
    prompt = decoder.encode("add {1} and 2")
    assert prompt[0] == ids["<|im_start|>"] and prompt.tolist().count(ids["<|im_start|>"]) == 2
    assert prompt.tolist().count(ids["<|im_end|>"]) == 1
    assert tok.decode(prompt) == "<|im_start|>user\nadd {1} and 2<|im_end|>\n<|im_start|>assistant\n"


def test_dream_checkpoint_with_missing_shard_or_wrong_mask_is_refused(tmp_path, dream):
    broken = tmp_path / "broken"
    shutil.copytree(dream[0], broken)
    (broken / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match="could not load the weights"):
        load(broken)
    wrong = tmp_path / "wrong"
    shutil.copytree(dream[0], wrong)
    raw = json.loads((wrong / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps({**raw, "mask_token_id": 5}))
    with pytest.raises(ValueError, match="mask_token_id 5 != the tokenizer's mask token id"):
        load(wrong)


def test_lora_merge_equals_unmerged_peft_model(dream, adapter):
    loaded = load(str(dream[0]), device="cpu", lora=str(adapter[0]))
    assert type(loaded.model) is Qwen2ForCausalLM and loaded.spec.attention == "full"   # the authors' decoding, not the training mask
    x = torch.randint(0, 290, (2, 12))
    mask = block_mask(12).expand(2, 1, 12, 12)
    merged, unmerged = logits(loaded.model, x, mask), logits(adapter[1], x, mask)
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(merged, logits(tiny_dream(max(dream[1].values()) + 8), x, mask), atol=1e-3)


def test_preset_resolves_local_checkpoints_and_loads_through_load(dream, adapter, no_hf_cache):
    ok, message = presets.availability("d2f-dream-base")
    assert not ok and "hf download Dream-org/Dream-v0-Base-7B --local-dir" in message
    assert "SJTU-Deng-Lab/D2F_Dream_Base_7B_Lora" in message
    no_hf_cache.mkdir()
    (no_hf_cache / "Dream-v0-Base-7B").symlink_to(dream[0])
    (no_hf_cache / "D2F_Dream_Base_7B_Lora").symlink_to(adapter[0])
    assert presets.availability("d2f-dream-base")[0]
    assert {r["name"]: r["available"] for r in presets.list_presets()} == {
        "d2f-dream-instruct": False, "d2f-dream-base": True, "d2f-diffucoder": False}
    loaded = load("d2f-dream-base", device="cpu")
    assert loaded.spec.name == "d2f-dream-base" and loaded.spec.prompt_template == "{prompt}"
    x = torch.randint(0, 290, (1, 12))
    torch.testing.assert_close(logits(loaded.model, x, block_mask(12)), logits(adapter[1], x, block_mask(12)),
                               atol=1e-5, rtol=1e-5)
    # the engine's fast path and its reference agree on the translated, merged model
    settings = DecodeSettings(k=3, block_size=8, max_new_tokens=24, attention="full")
    tokens = {ex: loaded.decoder(settings, executor=ex).run("def add(a, b):").tokens for ex in ("batched", "per_branch")}
    assert tokens["batched"] == tokens["per_branch"]


def test_paper_presets_follow_the_paper_and_the_authors_scripts():
    """Table 5 through task_settings, Section 4.1's Instruct checkpoints, the authors' flags; the Base
    model has no accuracy row (it is only in the system tables)."""
    instruct = presets.PRESETS["d2f-dream-instruct"]
    assert instruct.base == "Dream-org/Dream-v0-Instruct-7B" and instruct.adapter.endswith("D2F_Dream_Instruct_7B_Lora")
    gsm8k = presets.task_settings("d2f-dream-instruct", "gsm8k")
    assert {k: gsm8k[k] for k in ("k", "block_size", "tau_add", "tau_act", "tau_conf", "confidence",
                                  "max_new_tokens", "attention")} == {
        "k": 14, "block_size": 32, "tau_add": 0.1, "tau_act": 0.95, "tau_conf": 0.9, "confidence": "neg_entropy",
        "max_new_tokens": 512, "attention": "full"}
    assert presets.task_settings("d2f-dream-instruct", "math")["block_size"] == 16
    assert (presets.task_settings("d2f-dream-instruct", "mbpp")["tau_add"],
            presets.task_settings("d2f-dream-instruct", "mbpp")["tau_conf"]) == (0.3, 0.95)
    assert instruct.tasks["mbpp"].shots == 3 and instruct.tasks["gsm8k"].shots == 4
    assert instruct.tasks["humaneval"].shots == 0 and not instruct.tasks["humaneval"].chat
    assert presets.task_settings("d2f-diffucoder", "humaneval+")["confidence"] == "max_prob"
    with pytest.raises(ValueError, match="system tables"):
        presets.task_settings("d2f-dream-base", "gsm8k")


def test_cli_runs_a_preset_from_explicit_paths_and_explains_a_missing_one(dream, adapter, no_hf_cache, capsys):
    code = main(["generate", "--model", "d2f-dream-base", "--base-path", str(dream[0]), "--lora-path", str(adapter[0]),
                 "--prompt", "def add(a, b):", "--k", "2", "--block-size", "8", "--max-new-tokens", "16"])
    out = capsys.readouterr().out
    assert code == 0 and "d2f-dream-base" in out and "tpf_useful" in out
    assert main(["generate", "--model", "d2f-diffucoder", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert "apple/DiffuCoder-7B-Instruct" in err and "hf download" in err


LLADA_NAMES = {"self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj", "self_attn.v_proj": "v_proj",
               "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj",
               "mlp.down_proj": "ff_out", "input_layernorm": "attn_norm", "post_attention_layernorm": "ff_norm"}


def save_llada_dir(path, **overrides):
    """LLaDA's layout, written by hand from its remote code's names (model.transformer.*)."""
    path.mkdir(parents=True)
    save_tiny_model_dir(path / "tok")                 # a generic tokenizer.json with a mask token
    for f in (path / "tok").iterdir():
        if f.name.startswith(("tokenizer", "special")):
            f.rename(path / f.name)
    torch.manual_seed(3)
    ref = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                                       rope_theta=500000.0, tie_word_embeddings=False)).eval()
    state = {}
    for name, value in ref.state_dict().items():
        parts = name.split(".")
        if parts[1] == "layers":
            state[f"model.transformer.blocks.{parts[2]}.{LLADA_NAMES['.'.join(parts[3:-1])]}.weight"] = value
        else:
            top = {"model.embed_tokens.weight": "wte", "model.norm.weight": "ln_f", "lm_head.weight": "ff_out"}[name]
            state[f"model.transformer.{top}.weight"] = value
    save_file({k: v.contiguous() for k, v in state.items()}, path / "model.safetensors", metadata={"format": "pt"})
    config = {"architectures": ["LLaDAModelLM"], "model_type": "llada",
              "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"},
              "activation_type": "silu", "alibi": False, "attention_layer_norm": False, "block_group_size": 1,
              "block_type": "llama", "d_model": 32, "embedding_size": 40, "vocab_size": 40, "include_bias": False,
              "include_qkv_bias": False, "input_emb_norm": False, "layer_norm_type": "rms", "mask_token_id": 0,
              "eos_token_id": 1, "pad_token_id": 2, "max_sequence_length": 256, "mlp_hidden_size": 48,
              "n_heads": 4, "n_kv_heads": 2, "n_layers": 2, "rms_norm_eps": 1e-5, "rope": True,
              "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False, "weight_tying": False}
    (path / "config.json").write_text(json.dumps({**config, **overrides}))
    return path, ref


def llada_forward(state, ids, heads=4, kv_heads=2, theta=500000.0, eps=1e-5):
    """LLaDA's forward as its remote code computes it (LLaDALlamaBlock, written from reading that
    code): RMSNorm in fp32; RoPE on the two halves of each head; no mask, not causal; SiLU on
    ff_proj times up_proj; block ff_out; ln_f; top-level ff_out as the head. logits: [B, L, V]."""
    w = lambda name: state[f"model.transformer.{name}.weight"]
    norm = lambda x, name: w(name) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    B, L = ids.shape
    x = w("wte")[ids]                                                      # [B, L, d]
    hs = x.shape[-1] // heads
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2).float() / hs)
    angles = torch.arange(L).float()[:, None] * inv_freq[None]             # [L, hs/2]
    sin, cos = torch.cat([angles, angles], -1).sin(), torch.cat([angles, angles], -1).cos()
    def rope(t):                                                           # [B, h, L, hs]
        t1, t2 = t.view(*t.shape[:3], 2, hs // 2).unbind(-2)
        return t * cos + torch.cat([-t2, t1], -1) * sin
    for i in range(2):
        b = f"blocks.{i}"
        h = norm(x, f"{b}.attn_norm")
        q = (h @ w(f"{b}.q_proj").T).view(B, L, heads, hs).transpose(1, 2)
        k = (h @ w(f"{b}.k_proj").T).view(B, L, kv_heads, hs).transpose(1, 2)
        v = (h @ w(f"{b}.v_proj").T).view(B, L, kv_heads, hs).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False)
        x = x + att.transpose(1, 2).reshape(B, L, -1) @ w(f"{b}.attn_out").T
        h = norm(x, f"{b}.ff_norm")
        x = x + (torch.nn.functional.silu(h @ w(f"{b}.ff_proj").T) * (h @ w(f"{b}.up_proj").T)) @ w(f"{b}.ff_out").T
    return norm(x, "ln_f") @ w("ff_out").T


def test_llada_checkpoint_maps_onto_stock_llama_without_logit_shift(tmp_path):
    path, reference = save_llada_dir(tmp_path / "LLaDA-8B-Base")
    loaded = load(path, device="cpu")
    assert type(loaded.model) is LlamaForCausalLM
    x = torch.randint(3, 40, (1, 12))
    assert torch.equal(logits(loaded.model, x, block_mask(12, "full")), logits(reference, x, block_mask(12, "full")))
    # the mapping computes LLaDA's own function: compare with its forward, unmasked and bidirectional
    from safetensors.torch import load_file
    expected = llada_forward(load_file(path / "model.safetensors"), x)
    torch.testing.assert_close(logits(loaded.model, x), expected, atol=1e-5, rtol=1e-5)
    spec = loaded.spec
    assert spec.mask_token_id == 0 and spec.eos_token_ids == (1,) and not spec.logit_shift and spec.attention == "full"
    result = loaded.decoder(DecodeSettings(k=2, block_size=8, max_new_tokens=16)).run("how many apples")
    assert result.records[0].kind == "prefill"


def test_unmappable_llada_is_refused_without_trust_remote_code(tmp_path, capsys):
    path, _ = save_llada_dir(tmp_path / "llada-sequential", block_type="sequential")
    with pytest.raises(ValueError, match="pass --trust-remote-code"):
        load(path)
    assert main(["generate", "--model", str(path), "--prompt", "hi"]) == 2
    assert "block_type='sequential'" in capsys.readouterr().err


def test_remote_code_model_is_restricted_to_uncached_full_attention(tmp_path):
    """What a --trust-remote-code LLaDA gets: its code ignores masks, so only uncached + full."""
    path, reference = save_llada_dir(tmp_path / "LLaDA-8B-Base")
    loaded = load(path, device="cpu")
    loaded.model = families.MaskIgnoringModel(reference)
    loaded.spec = loaded.spec.__class__(**{**loaded.spec.to_dict(), "extra": {
        "executors": ("uncached",), "ignores_attention_mask": True}})
    settings = DecodeSettings(k=1, block_size=8, max_new_tokens=16, attention="full")
    assert type(loaded.decoder(settings).executor).__name__ == "UncachedExecutor"
    assert loaded.decoder(settings).run("how many apples").tokens
    with pytest.raises(ValueError, match="only the uncached executor"):
        loaded.decoder(settings, executor="batched")
    with pytest.raises(ValueError, match="attention='full'"):
        loaded.decoder(settings.replace(attention="block_causal"))


def test_flash_or_sdpa_is_a_safe_fallback_for_the_engines_4d_masks(tmp_path):
    """With flash_attn installed the model's attention is the flash-or-SDPA dispatcher; the engine's
    shared-prefix attention falls back to it for the reference executors, which pass 4-D masks."""
    loaded = load(save_tiny_model_dir(tmp_path / "tiny"), device="cpu")
    settings = DecodeSettings(k=2, block_size=8, max_new_tokens=16, attention="block_causal")
    expected = loaded.decoder(settings, executor="per_branch").run("how many apples").tokens
    loaded.model.set_attn_implementation(register_flash_or_sdpa())
    assert loaded.model.config._attn_implementation == FLASH_OR_SDPA
    assert loaded.decoder(settings, executor="batched").run("how many apples").tokens == expected
    assert loaded.model.config._lopa_fallback_attn == FLASH_OR_SDPA
    assert loaded.decoder(settings, executor="per_branch").run("how many apples").tokens == expected
