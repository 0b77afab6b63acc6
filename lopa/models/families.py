"""Real checkpoints: Dream, LLaDA and SDAR directories on stock transformers classes, D2F LoRA
adapters merged with peft. The D2F presets of the paper (Table 5) and the CLI's model arguments
are in lopa.models.presets.

- Dream, Dream-Instruct, DiffuCoder (config `model_type: "Dream"`, remote `DreamModel`) are Qwen2
  with bidirectional attention: same parameter names (`model.layers.N.self_attn.q_proj.weight`,
  q/k/v with bias, `lm_head.weight`), same RoPE. We translate config.json to a `Qwen2Config` and
  load the safetensors (single or sharded) into `Qwen2ForCausalLM`: no remote code.
- LLaDA (`model_type: "llada"`, remote `LLaDAModelLM`, OLMo-derived) is LLaMA with other names
  (`model.transformer.blocks.N.q_proj`, `attn_out`, `ff_proj` = gate, `up_proj`, `ff_out` = down,
  `attn_norm`, `ff_norm`, `wte`, `ln_f`, top-level `ff_out` = lm head). The configurations of
  LLaDA-8B-Base/Instruct map onto `LlamaForCausalLM`; any other variant loads through its remote
  code only with trust_remote_code, restricted to what that code supports (see `_remote_llada`).
- A D2F adapter (peft LoRA) is merged into the base weights once, at load time, so decoding runs
  a plain model at full speed.
- SDAR (dense and MoE) and LLaDA-MoE map onto Qwen3 / Qwen3-MoE (lopa.models.sdar_llada_moe);
  LLaDA 1.5 is LLaDA-8B's architecture. Each family's published decode settings (block size,
  threshold, commit rule) go into the spec (ModelSpec.block_size / .decode), which resolve() applies.
- LLaDA 2.x (`llada2_moe`) loads into our own class (lopa.models.llada2_moe; lopa.models.llada2_family
  says which configs it computes and reads the family's settings).
- DiffusionGemma is not a masked diffusion LM: it is refused here, pointing at its own sampler
  (lopa.models.diffusion_gemma).

Spec: mask id from the config, EOS ids from config + generation_config + tokenizer, logit shift
for Dream-family (initialised from Qwen2.5, an AR model) and none for LLaDA, the chat template as
prompt template for instruct models. Nothing is downloaded unless the caller allows it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lopa.models.diffusion_gemma import check_diffusion_gemma
from lopa.models.folder import read_config, read_json
from lopa.models.llada2_family import LLADA2_BLOCK_SIZE, is_llada2, llada2_config, llada2_generation, llada2_special_ids
from lopa.models.loading import (
    LoadedModel,
    check_weights,
    from_pretrained_kwargs,
    load_tokenizer,
    pick_device,
    pick_dtype,
)
from lopa.models.sdar_llada_moe import (
    LLADA_BLOCK_SIZE,
    LLADA_DECODE,
    SDAR_BLOCK_SIZE,
    SDAR_DECODE,
    SDAR_MODEL_TYPES,
    is_llada_moe,
    llada_moe_mask_id,
    llada_moe_to_qwen3_moe_config,
    llada_moe_unsupported,
    sdar_to_qwen3_config,
    sdar_unsupported,
)
from lopa.settings import ModelSpec

# Instruct chat templates end a turn with one of these; a chat model stops there, not at <|endoftext|>.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>")
# A directory whose name holds one of these is a chat model (prompts go through its chat template):
# Dream-v0-Instruct, SDAR-1.7B-Chat, LLaDA-MoE-7B-A1B-Instruct, and LLaDA-1.5 (LLaDA-8B-Instruct
# further aligned with VRPO, published without "Instruct" in its name).
CHAT_NAMES = ("instruct", "chat", "llada-1.5", "llada_1.5")
_SENTINEL = "LOPAPROMPTSENTINEL"
# The spec fields lopa.models.loading.spec_from_pretrained reads back from config.lopa.
SPEC_IN_CONFIG = ("mask_token_id", "eos_token_ids", "logit_shift", "pad_token_id", "block_size", "prompt_template",
                  "attention", "decode")


# -- which checkpoint family ------------------------------------------------------------------------
def checkpoint_family(path: Path) -> str:
    """"dream" (Dream, Dream-Instruct, DiffuCoder), "llada" (LLaDA-8B, LLaDA 1.5), "llada_moe", "llada2",
    "sdar" (dense and MoE), "diffusion_gemma", or "hf" (a stock transformers directory). Reads
    config.json within its bounds (lopa.models.folder.read_config: ValueError naming what is wrong)."""
    raw = read_config(path)
    model_type = str(raw.get("model_type", "")).lower()
    if is_llada2(raw):
        return "llada2"
    if is_llada_moe(raw):
        return "llada_moe"
    if model_type in SDAR_MODEL_TYPES:
        return "sdar"
    return model_type if model_type in ("dream", "llada", "diffusion_gemma") else "hf"


# -- config translation ---------------------------------------------------------------------------
_DREAM_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_DREAM_COPIED = _DREAM_REQUIRED + ("num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps",
                                   "tie_word_embeddings", "rope_theta", "rope_scaling", "attention_dropout",
                                   "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id")


def dream_to_qwen2_config(raw: dict):
    """Dream config.json (dict) -> Qwen2Config. Dream's attention is bidirectional over the whole
    sequence and never applies a sliding window, so neither does the translation."""
    from transformers import Qwen2Config
    missing = [k for k in _DREAM_REQUIRED if k not in raw]
    if missing:
        raise ValueError(f"Dream config.json lacks {', '.join(missing)}: not a Dream-family checkpoint")
    fields = {k: raw[k] for k in _DREAM_COPIED if raw.get(k) is not None}
    config = Qwen2Config(**fields, use_sliding_window=False)
    config.is_causal = False       # masks built by transformers (no 4-D mask given) are bidirectional
    return config


# LLaDA's config must have these values for the LLaMA mapping to compute the same function. A key
# missing from config.json takes the default of LLaDA's own ModelConfig (second value), not ours.
_LLADA_REQUIRED = {"block_type": ("llama", "sequential"), "activation_type": ("silu", "swiglu"),
                   "layer_norm_type": ("rms", "default"), "rope": (True, False), "alibi": (False, False),
                   "include_bias": (False, False), "include_qkv_bias": (False, False),
                   "attention_layer_norm": (False, False), "input_emb_norm": (False, False),
                   "scale_logits": (False, False), "block_group_size": (1, 1), "layer_norm_with_affine": (True, True)}
LLADA_KEY_MAPPING = {   # regex on LLaDA's parameter names -> LlamaForCausalLM's
    r"^model\.transformer\.wte\.": "model.embed_tokens.",
    r"^model\.transformer\.ln_f\.": "model.norm.",
    r"^model\.transformer\.ff_out\.": "lm_head.",
    **{rf"^model\.transformer\.blocks\.(\d+)\.{src}\.": rf"model.layers.\1.{dst}." for src, dst in [
        ("q_proj", "self_attn.q_proj"), ("k_proj", "self_attn.k_proj"), ("v_proj", "self_attn.v_proj"),
        ("attn_out", "self_attn.o_proj"), ("ff_proj", "mlp.gate_proj"), ("up_proj", "mlp.up_proj"),
        ("ff_out", "mlp.down_proj"), ("attn_norm", "input_layernorm"), ("ff_norm", "post_attention_layernorm")]},
}


def llada_unsupported(raw: dict) -> list[str]:
    """Config values that keep this LLaDA checkpoint off the LLaMA mapping (empty = mappable)."""
    value = lambda k, default: bool(raw[k]) if k == "include_qkv_bias" and raw.get(k) is None else raw.get(k, default)
    bad = [f"{k}={value(k, default)!r} (need {need!r})" for k, (need, default) in _LLADA_REQUIRED.items()
           if value(k, default) != need]
    return bad + [f"{k} missing" for k in ("d_model", "n_heads", "n_layers", "vocab_size") if k not in raw]


def llada_to_llama_config(raw: dict):
    """LLaDA config.json (dict) -> LlamaConfig. Identical math: RMSNorm in fp32, SwiGLU with
    ff_proj as gate, RoPE on the two halves of each head; LLaDA applies RoPE in fp32
    (rope_full_precision), LLaMA in the model dtype, so bf16 logits differ in the last bits."""
    from transformers import LlamaConfig
    bad = llada_unsupported(raw)
    if bad:
        raise ValueError(f"this LLaDA variant does not map onto LLaMA: {', '.join(bad)}")
    n_kv = 1 if raw.get("multi_query_attention") else (raw.get("n_kv_heads") or raw["n_heads"])
    config = LlamaConfig(   # defaults below are LLaDA ModelConfig's, for keys its config.json leaves out
        vocab_size=raw.get("embedding_size", 50304) or raw["vocab_size"], hidden_size=raw["d_model"],
        intermediate_size=raw.get("mlp_hidden_size") or raw.get("mlp_ratio", 4) * raw["d_model"],
        num_hidden_layers=raw["n_layers"], num_attention_heads=raw["n_heads"], num_key_value_heads=n_kv,
        hidden_act="silu", max_position_embeddings=raw.get("max_sequence_length", 1024),
        rms_norm_eps=raw.get("rms_norm_eps", 1e-5), rope_theta=raw.get("rope_theta", 10000.0),
        tie_word_embeddings=bool(raw.get("weight_tying", True)), attention_bias=False, mlp_bias=False,
        bos_token_id=raw.get("bos_token_id"), eos_token_id=raw.get("eos_token_id"), pad_token_id=raw.get("pad_token_id"))
    config.is_causal = False
    return config


# -- tokenizer and spec ---------------------------------------------------------------------------
def load_family_tokenizer(path: Path, trust_remote_code: bool = False):
    """Dream ships a remote `DreamTokenizer` (Qwen2's BPE under another name) and LLaDA a generic
    tokenizer.json: load them with stock classes, never through AutoTokenizer's remote-code prompt."""
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer
    if (path / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        return Qwen2Tokenizer.from_pretrained(path, local_files_only=True)
    return load_tokenizer(path, trust_remote_code)


def chat_prompt_template(tokenizer) -> str:
    """The tokenizer's chat template for one user turn + the assistant's generation prompt, as a
    ModelSpec prompt_template ("...{prompt}..."), so every prompt path (CLI, app, bench) applies it."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat_template, so an instruct prompt cannot be built")
    text = tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False,
                                         add_generation_prompt=True)
    if text.count(_SENTINEL) != 1:
        raise ValueError("the chat template does not place the user message verbatim; cannot build a prompt template")
    return text.replace("{", "{{").replace("}", "}}").replace(_SENTINEL, "{prompt}")


def _ids(value) -> list[int]:
    return [] if value is None else [int(value)] if isinstance(value, int) else [int(v) for v in value]


def family_spec(path: Path, raw: dict, tokenizer, *, logit_shift: bool, attention: str, chat: bool,
                name: str | None = None, block_size: int | None = None, extra: dict | None = None,
                decode: dict | None = None) -> ModelSpec:
    """ModelSpec of a Dream/LLaDA checkpoint from its config.json, generation_config.json and tokenizer."""
    mask = raw.get("mask_token_id", getattr(tokenizer, "mask_token_id", None))
    if mask is None:
        raise ValueError(f"{path}: no mask_token_id in config.json and no tokenizer mask token")
    tok_mask = getattr(tokenizer, "mask_token_id", None)
    if tok_mask is not None and int(tok_mask) != int(mask):
        raise ValueError(f"{path}: config mask_token_id {mask} != the tokenizer's mask token id {tok_mask}")
    generation = path / "generation_config.json"
    gen = read_json(generation) if generation.is_file() else {}
    gen = gen if isinstance(gen, dict) else {}
    eos = _ids(raw.get("eos_token_id")) + _ids(gen.get("eos_token_id")) + _ids(getattr(tokenizer, "eos_token_id", None))
    if chat:
        vocab = tokenizer.get_vocab()
        eos += [vocab[t] for t in END_OF_TURN if t in vocab]
    chat_template = getattr(tokenizer, "chat_template", None)
    # What this checkpoint asks for beyond its family's values: config.json "lopa" (the key a stock
    # directory's config uses too): its attention, trained block size and other decode settings.
    own = raw.get("lopa") if isinstance(raw.get("lopa"), dict) else {}
    return ModelSpec(
        mask_token_id=int(mask), eos_token_ids=tuple(dict.fromkeys(eos)), logit_shift=logit_shift,
        pad_token_id=raw.get("pad_token_id", gen.get("pad_token_id")), block_size=own.get("block_size", block_size),
        prompt_template=chat_prompt_template(tokenizer) if chat else "{prompt}",
        max_context=int(raw.get("max_position_embeddings") or raw.get("max_sequence_length") or 4096),
        attention=own.get("attention", attention), name=name or path.name,
        decode={**(decode or {}), **(own.get("decode") or {})},
        extra={"chat_template": chat_template, "family": checkpoint_family(path), **(extra or {})})


# -- weights --------------------------------------------------------------------------------------
def _from_pretrained(cls, path: Path, config, device: torch.device, key_mapping=None):
    """Load safetensors (single file or sharded with an index) into a stock class; every parameter
    must be found, so a checkpoint in an unexpected layout fails here instead of running random weights."""
    check_weights(path)
    kwargs = dict(config=config, output_loading_info=True, **from_pretrained_kwargs(device))
    if key_mapping:
        kwargs["key_mapping"] = key_mapping
    try:
        model, info = cls.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ValueError(f"could not load the weights in {path}: {err}") from err
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    missing = sorted(set(info["missing_keys"]) - tied)
    if missing or info["mismatched_keys"]:
        raise ValueError(f"{path}: the weights do not match a {cls.__name__} built from its config.json: "
                         f"missing {missing[:4]}{'...' if len(missing) > 4 else ''}, "
                         f"mismatched {sorted(info['mismatched_keys'])[:4]}")
    if info["unexpected_keys"]:
        raise ValueError(f"{path}: unexpected parameters {sorted(info['unexpected_keys'])[:4]}")
    return _bidirectional(model.to(device).eval())


def _bidirectional(model):
    """Diffusion LMs attend in both directions: a forward without a 4-D mask must not be causal."""
    model.config.is_causal = False
    for module in model.modules():
        if hasattr(module, "is_causal") and hasattr(module, "layer_idx"):
            module.is_causal = False
    return model


def merge_lora(model, adapter: Path):
    """Merge a peft LoRA adapter directory into `model` (in place) and return the plain model."""
    from peft import PeftModel
    adapter = Path(adapter)
    config_file = adapter / "adapter_config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"no LoRA adapter at {adapter}: expected adapter_config.json and adapter weights")
    adapter_config = read_json(config_file)
    peft_type = adapter_config.get("peft_type", "LORA") if isinstance(adapter_config, dict) else None
    if peft_type != "LORA":
        raise ValueError(f"{adapter} is a {peft_type} adapter; only LoRA adapters can be merged")
    try:
        merged = PeftModel.from_pretrained(model, adapter, is_trainable=False).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ValueError(f"could not apply the adapter {adapter} to this model: {err}") from err
    return _bidirectional(merged.eval())


class MaskIgnoringModel(torch.nn.Module):
    """Adapts a remote-code model that takes no 4-D mask and no position ids (LLaDA's remote
    code ignores attention masks and asserts there is no KV cache) to the engine's call."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **_):
        return self.inner(input_ids=input_ids)


def _remote_llada(path: Path, device: torch.device):
    """A checkpoint through its own modeling code (LLaDA's and LLaDA-MoE's register the LM as
    AutoModel, SDAR's as AutoModelForCausalLM)."""
    from transformers import AutoModel, AutoModelForCausalLM
    check_weights(path)
    auto = AutoModelForCausalLM if "AutoModelForCausalLM" in (read_config(path).get("auto_map") or {}) else AutoModel
    try:
        inner = auto.from_pretrained(path, trust_remote_code=True, dtype=pick_dtype(device), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as err:
        raise ValueError(f"could not load {path} through its remote code: {err}") from err
    return MaskIgnoringModel(inner.to(device).eval())


# -- loading --------------------------------------------------------------------------------------
def load_family(path: str | Path, device: str | None = None, trust_remote_code: bool = False,
                lora: str | Path | None = None, chat: bool | None = None, name: str | None = None) -> LoadedModel:
    """Load a Dream-family or LLaDA directory, optionally merging a LoRA adapter. A leaf loader:
    lopa.models.load decides that `path` is one of these families.

    chat: apply the tokenizer's chat template to prompts (default: when the directory name says
    "instruct"). spec.attention is the authors' `full` for every family, D2F adapters included
    (see below).
    """
    path = Path(path)
    check_weights(path)         # first: the tokenizer below opens files too (a named pipe would block it)
    family, raw, dev = checkpoint_family(path), read_config(path), pick_device(device)
    if family == "hf":
        raise ValueError(f"{path} is a stock transformers directory, not a Dream, LLaDA or SDAR checkpoint")
    if family == "diffusion_gemma":
        check_diffusion_gemma(path)         # a config that only says so is refused as what it is
        raise ValueError(f"{path} is a DiffusionGemma checkpoint: it is not a masked diffusion LM (it denoises a "
                         "random-token canvas with its own sampler), so the LoPA engine cannot decode it; "
                         "decode it with lopa.models.diffusion_gemma.decode (docs/checkpoints.md)")
    tokenizer = load_family_tokenizer(path, trust_remote_code)
    if chat is None:    # every published LLaDA 2.x is instruction-tuned, whatever its name
        chat = any(n in path.name.lower() for n in CHAT_NAMES) or (
            family == "llada2" and bool(getattr(tokenizer, "chat_template", None)))
    extra, shift, block_size, decode, own = {}, False, None, {}, {}
    # Dream and LLaDA were trained with full bidirectional attention. A D2F adapter was trained
    # block-causal, but the authors decode D2F checkpoints with full attention (their evaluation
    # class defaults to use_full_attention=True and no published script changes it): the paper's
    # numbers were made that way, so it is the default here too; --attention block_causal gives
    # D2F's training mask. SDAR is a block diffusion model: trained and decoded block-causal.
    attention = "full"
    if family == "dream":
        from transformers import Qwen2ForCausalLM
        model = _from_pretrained(Qwen2ForCausalLM, path, dream_to_qwen2_config(raw), dev)
        shift = True
    elif family == "sdar":
        model = _stock_or_remote(path, raw, dev, trust_remote_code, "SDAR", sdar_unsupported(raw),
                                 lambda: sdar_to_qwen3_config(raw))
        extra = _remote_extra(model)
        block_size, decode = int(raw.get("block_size") or SDAR_BLOCK_SIZE), SDAR_DECODE
        attention = "full" if extra else "block_causal"     # its own code is given no mask here
    elif family == "llada2":
        from lopa.models.llada2_moe import LLaDA2MoeModelLM
        mask, eos = llada2_special_ids(raw, tokenizer)
        raw = {**raw, "mask_token_id": mask, "eos_token_id": raw["eos_token_id"] if raw.get("eos_token_id") is not None
               else eos}
        decode, editing = llada2_generation(path)          # its settings and its config refuse before a weight is read
        model = _from_pretrained(LLaDA2MoeModelLM, path, llada2_config(raw), dev)
        block_size, attention, own = LLADA2_BLOCK_SIZE, "block_causal", {"token_editing": editing} if editing else {}
    elif family == "llada_moe":
        raw = {**raw, "mask_token_id": llada_moe_mask_id(raw, tokenizer)}
        model = _stock_or_remote(path, raw, dev, trust_remote_code, "LLaDA-MoE", llada_moe_unsupported(raw),
                                 lambda: llada_moe_to_qwen3_moe_config(raw))
        extra = _remote_extra(model)
        block_size, decode = LLADA_BLOCK_SIZE, LLADA_DECODE
    else:
        from transformers import LlamaForCausalLM
        bad = llada_unsupported(raw)
        block_size, decode = LLADA_BLOCK_SIZE, LLADA_DECODE
        if not bad:
            model = _from_pretrained(LlamaForCausalLM, path, llada_to_llama_config(raw), dev, LLADA_KEY_MAPPING)
        elif not trust_remote_code:
            raise ValueError(f"{path}: this LLaDA variant does not map onto a stock architecture ({', '.join(bad)}); "
                             "loading it runs the checkpoint's own Python code: pass --trust-remote-code to allow it "
                             "(it then supports only the uncached executor with full attention)")
        else:
            model = _remote_llada(path, dev)
            extra = _remote_extra(model)
    if lora:
        if extra:
            raise ValueError("a LoRA adapter cannot be merged into a remote-code model")
        model = merge_lora(model, Path(lora))
    spec = family_spec(path, raw, tokenizer, logit_shift=shift, attention=attention, chat=chat,
                       name=name or (f"{path.name}+{Path(lora).name}" if lora else path.name), extra={**extra, **own},
                       block_size=block_size, decode=decode)
    # The stock model carries the spec it was loaded with (config.lopa, as a stock directory's does),
    # so transformers' generate() through lopa.hf decodes it with the settings `lopa generate` uses.
    model.config.lopa = {k: v for k, v in spec.to_dict().items() if k in SPEC_IN_CONFIG}
    return LoadedModel(model, tokenizer, spec, path)


def _remote_extra(model) -> dict:
    """What a model run through its own code restricts: masks ignored, so uncached + full only."""
    return {"executors": ("uncached",), "ignores_attention_mask": True} if isinstance(model, MaskIgnoringModel) else {}


def _stock_or_remote(path: Path, raw: dict, device, trust_remote_code: bool, label: str, bad: list[str], config):
    """The stock class that `config()` describes (Qwen3 / Qwen3-MoE), with the checkpoint's own
    parameter names; a variant that does not map loads only through its own code, when allowed."""
    if not bad:
        from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM
        stock = config()
        cls = Qwen3MoeForCausalLM if stock.model_type == "qwen3_moe" else Qwen3ForCausalLM
        return _from_pretrained(cls, path, stock, device)
    if not trust_remote_code:
        raise ValueError(f"{path}: this {label} variant does not map onto a stock architecture ({', '.join(bad)}); "
                         "loading it runs the checkpoint's own Python code: pass --trust-remote-code to allow it "
                         "(it then supports only the uncached executor with full attention)")
    return _remote_llada(path, device)
