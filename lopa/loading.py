"""Load a masked diffusion LM from a local Hugging Face directory, with its ModelSpec.

The spec (mask id, EOS ids, logit shift, prompt template, trained block size) comes from the
checkpoint: our own models store it as `config.lopa`; other checkpoints fall back to the
config's and tokenizer's special tokens. Nothing is downloaded and no remote code is trusted
unless the caller asks for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from lopa.settings import DecodeSettings, ModelSpec

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "assets" / "models" / "tiny-gsm-dllm"
# Architectures initialised from autoregressive LMs predict token i at output i - 1.
SHIFTED_MODEL_TYPES = {"qwen2", "dream", "llama", "mistral"}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    spec: ModelSpec
    path: Path

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def describe(self) -> str:
        return f"{self.spec.name} ({self.n_params / 1e6:.1f}M parameters, {next(self.model.parameters()).device})"

    def decoder(self, settings: DecodeSettings, executor="batched"):
        from lopa.engine import Decoder
        return Decoder(self.model, self.spec, settings, self.tokenizer, executor)


def spec_from_pretrained(config, tokenizer, name: str) -> ModelSpec:
    """Build the ModelSpec from a transformers config (+ tokenizer)."""
    stored = dict(getattr(config, "lopa", None) or {})
    mask = stored.get("mask_token_id", getattr(config, "mask_token_id", None))
    if mask is None and tokenizer is not None:
        mask = getattr(tokenizer, "mask_token_id", None)
    if mask is None:
        raise ValueError(f"{name}: the model has no mask token (no config.lopa.mask_token_id, config.mask_token_id "
                         "or tokenizer mask token), so it is not a masked diffusion LM this engine can decode")
    eos = stored.get("eos_token_ids") or getattr(config, "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    shift = stored.get("logit_shift", str(getattr(config, "model_type", "")).lower() in SHIFTED_MODEL_TYPES)
    context = int(getattr(config, "max_position_embeddings", 2048) or 2048)
    return ModelSpec(
        mask_token_id=int(mask), eos_token_ids=tuple(eos), logit_shift=bool(shift),
        pad_token_id=stored.get("pad_token_id", getattr(config, "pad_token_id", None)),
        block_size=stored.get("block_size"), prompt_template=stored.get("prompt_template", "{prompt}"),
        max_context=context, attention=stored.get("attention", "block_causal"), name=name)


def load_tokenizer(path: Path, trust_remote_code: bool = False):
    """The tokenizer exactly as saved. A generic `tokenizer.json` (tokenizer_class TokenizersBackend or
    PreTrainedTokenizerFast) is loaded as is: for a qwen2 config, AutoTokenizer would otherwise
    rebuild it as a Qwen2Tokenizer with Qwen2's own pre-tokenizer, silently changing the ids."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = path / "tokenizer_config.json"
    declared = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast") and (path / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(path: str | Path | None = None, device: str | None = None,
               trust_remote_code: bool = False) -> LoadedModel:
    """Load model, tokenizer and spec from a local directory (default: the bundled model)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path) if path else DEFAULT_MODEL
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no model at {path}: expected a Hugging Face directory with config.json and weights "
            f"(the bundled model lives in {DEFAULT_MODEL})")
    dev = pick_device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32   # fp16 matmuls are slow on CPU
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
        tokenizer = load_tokenizer(path, trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype,
                                                     trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"could not load the model in {path}: {err}") from err
    spec = spec_from_pretrained(config, tokenizer, path.name)
    return LoadedModel(model.to(dev).eval(), tokenizer, spec, path)
