"""Load a stock Hugging Face directory (a masked diffusion LM on a transformers class) with its
ModelSpec, and the helpers every loader shares: device, dtype, tokenizer, spec, where the bundled
assets live. This is a leaf loader: it never dispatches. `lopa.models.load` is the one entry point
that picks a loader (this one, a Dream / LLaDA family loader, or a D2F preset).

The spec (mask id, EOS ids, logit shift, prompt template, trained block size) comes from the
checkpoint: our own models store it as `config.lopa`; other checkpoints fall back to the config's
and tokenizer's special tokens. Nothing is downloaded and no remote code is trusted unless the
caller asks for it.

Hardware: `torch.accelerator` picks the device (cuda, npu once `torch_npu` is imported, xpu, mps),
else the CPU; bf16 on accelerators. A model loads with SDPA attention, or on CUDA with `flash_attn`
installed with `FLASH_OR_SDPA` (FlashAttention-2 for mask-free forwards, SDPA otherwise). The
engine's batched executor then switches the model to lopa.attention's shared-prefix attention,
which makes the same choice per forward (FlashAttention for full-attention rounds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from lopa.models.folder import check_fits, check_folder, quoted, read_config, read_json
from lopa.settings import DecodeSettings, ModelSpec, check_settings

PACKAGE = Path(__file__).resolve().parents[1]            # the lopa/ folder
# The bundled model and data: `assets/` beside the package in a checkout (and on a Space), shipped
# inside the package as `lopa/assets/` by the wheel (pyproject.toml maps one onto the other).
_INSTALLED = (PACKAGE / "assets").is_dir()
ASSETS = PACKAGE / "assets" if _INSTALLED else PACKAGE.parent / "assets"
ROOT = Path.cwd() if _INSTALLED else PACKAGE.parent       # the checkout, or where an installed lopa runs
DEFAULT_MODEL = ASSETS / "models" / "open-gsm-dllm"
# Traces and links recorded before a bundled model was renamed still find its tokenizer.
RENAMED = {"tiny-gsm-dllm": "sure-gsm-dllm"}
# Architectures initialised from autoregressive LMs predict token i at output i - 1.
SHIFTED_MODEL_TYPES = {"qwen2", "dream", "llama", "mistral"}


def bundled_folder(name: str) -> Path | None:
    """The folder of the bundled model called `name` (a plain name, never a path), else None."""
    name = RENAMED.get(name, name)
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", name) and ".." not in name \
            and (ASSETS / "models" / name / "config.json").is_file():
        return ASSETS / "models" / name
    return None


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

    def decoder(self, settings: DecodeSettings, executor=None, order=None):
        """A Decoder for this model. executor None = the model's default ("batched" unless the spec
        restricts it: checkpoints run through remote code that ignores attention masks only support
        "uncached" with full attention). order: an order policy object (default: the one settings name)."""
        from lopa.engine import Decoder
        allowed = self.spec.extra.get("executors")
        if executor is None:
            executor = allowed[0] if allowed else "batched"
        elif allowed and isinstance(executor, str) and executor not in allowed:
            raise ValueError(f"{self.spec.name} runs through its own modeling code, which ignores attention masks and "
                             f"the KV cache: only the {'/'.join(allowed)} executor works with it (got {executor!r})")
        if self.spec.extra.get("ignores_attention_mask") and settings.attention != "full":
            raise ValueError(f"{self.spec.name} ignores attention masks (its remote code always attends to every "
                             f"position), so only attention='full' is honest; got {settings.attention!r}")
        return Decoder(self.model, self.spec, settings, self.tokenizer, executor, order=order)


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
    decode = stored.get("decode") or {}
    if not isinstance(decode, dict):
        raise ValueError(f"{name}: config.lopa.decode must be a {{setting: value}} object, got {str(decode)[:40]!r}")
    try:
        check_settings(decode, parse=False)      # the registry's names, types and ranges, before any decode
    except ValueError as err:
        raise ValueError(f"{name}: config.lopa.decode: {err}") from None
    return ModelSpec(
        mask_token_id=int(mask), eos_token_ids=tuple(eos), logit_shift=bool(shift),
        pad_token_id=stored.get("pad_token_id", getattr(config, "pad_token_id", None)),
        block_size=stored.get("block_size"), prompt_template=stored.get("prompt_template", "{prompt}"),
        max_context=context, attention=stored.get("attention", "block_causal"), name=name, decode=decode,
        extra={"problems": stored["problems"]} if stored.get("problems") else {})


def load_tokenizer(path: Path, trust_remote_code: bool = False):
    """The tokenizer exactly as saved. A generic `tokenizer.json` (tokenizer_class TokenizersBackend or
    PreTrainedTokenizerFast) is loaded as is: for a qwen2 config, AutoTokenizer would otherwise
    rebuild it as a Qwen2Tokenizer with Qwen2's own pre-tokenizer, silently changing the ids."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = path / "tokenizer_config.json"
    declared = read_json(config_file) if config_file.is_file() else None
    declared = declared.get("tokenizer_class") if isinstance(declared, dict) else None
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast") and (path / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)


def _register_npu() -> None:
    """Ascend NPUs come through the optional `torch_npu` package (extra `.[npu]`): importing it
    registers the "npu" device (and torch.accelerator support) with torch."""
    import importlib.util
    if importlib.util.find_spec("torch_npu") is not None:
        try:
            import torch_npu  # noqa: F401
        except (ImportError, RuntimeError):
            pass


def pick_device(device: str | None = None) -> torch.device:
    """The requested device, checked; by default the current accelerator (cuda, npu, xpu, mps alike,
    via torch.accelerator), else the CPU."""
    _register_npu()
    if device:
        current = torch.accelerator.current_accelerator(check_available=True)
        here = ", ".join(["cpu"] + ([current.type] if current is not None else []))
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"unknown device {device!r}; available here: {here}") from None
        if dev.type != "cpu" and (current is None or current.type != dev.type):
            hint = " (pip install '.[npu]' for Ascend)" if dev.type == "npu" else ""
            raise ValueError(f"device {device!r} is not available here{hint}; available here: {here}")
        return dev
    return torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")


def pick_dtype(device: torch.device) -> torch.dtype:
    # bf16 on accelerators (the checkpoints are bf16); fp16 matmuls are slow on CPU, so fp32 there.
    return torch.float32 if device.type == "cpu" else torch.bfloat16


# No "flash" in the name: transformers treats any such name as a FlashAttention kernel to fetch and preload.
FLASH_OR_SDPA = "lopa_fa2_or_sdpa"


def flash_or_sdpa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """FlashAttention-2 for forwards without a mask (bidirectional: diffusion LMs are not causal),
    SDPA for everything else: a forward with a 4-D block mask (the per-branch and uncached
    executors, the shared-prefix attention's fallback) stays correct, where plain
    "flash_attention_2" would silently ignore the mask or fail. The batched executor's own flash
    path is lopa.attention.flash_shared_prefix.
    query: [B, H, L, D]; key, value: [B, Hkv, L, D]. Returns ([B, L, H, D], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if attention_mask is not None or not query.is_cuda or query.dtype not in (torch.float16, torch.bfloat16):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    from flash_attn import flash_attn_func
    out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), dropout_p=dropout,
                          softmax_scale=scaling, causal=bool(getattr(module, "is_causal", False)))
    return out, None


def attention_implementation(device: torch.device) -> str:
    """"sdpa", or on CUDA with `flash_attn` importable (extra `.[cuda]`) the flash-or-SDPA dispatcher,
    registered with transformers under FLASH_OR_SDPA. Detected at run time; no flash_attn, no change."""
    import importlib.util
    if device.type != "cuda" or importlib.util.find_spec("flash_attn") is None:
        return "sdpa"
    return register_flash_or_sdpa()


def register_flash_or_sdpa() -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(FLASH_OR_SDPA, flash_or_sdpa_attention)
    # 2-D padding masks are turned into 4-D SDPA masks (-> SDPA); no mask stays None (-> flash).
    ALL_MASK_ATTENTION_FUNCTIONS.register(FLASH_OR_SDPA, sdpa_mask)
    return FLASH_OR_SDPA


def check_weights(path: Path) -> None:
    """`path` must be a folder a loader may read (lopa.models.folder: regular files of bounded size, a
    config of sane sizes), and every weights file safetensors with a header that tells the truth (read by
    safe_open without loading a tensor), holding at least what the config describes. Pickled weights
    (pytorch_model.bin, *.pt) are refused, never unpickled. ValueError naming the file otherwise."""
    from safetensors import SafetensorError, safe_open
    check_folder(path)                  # first: safe_open would wait forever on a named pipe
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        pickled = sorted(f.name for pattern in ("*.bin", "*.pt", "*.pth", "*.ckpt") for f in Path(path).glob(pattern))
        raise ValueError(f"no safetensors weights in {path}" + (
            f": {', '.join(pickled)} {'is' if len(pickled) == 1 else 'are'} pickled, which can run code when loaded, "
            "so it is refused; convert it to safetensors" if pickled else ""))
    for file in files:
        try:
            with safe_open(file, framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{file} is not a valid safetensors file (corrupt, truncated, or its header does not "
                             f"match its size): {err}") from None
    check_fits(path, read_config(path))


def from_pretrained_kwargs(device: torch.device) -> dict:
    """How every loader places a model: its dtype, its attention, and on an accelerator straight
    to the device (no full-precision copy in host memory)."""
    kwargs = dict(dtype=pick_dtype(device), attn_implementation=attention_implementation(device), local_files_only=True,
                  use_safetensors=True)
    if device.type != "cpu":
        kwargs["device_map"] = {"": str(device)}
    return kwargs


def load_hf(path: Path, device: str | None = None, trust_remote_code: bool = False) -> LoadedModel:
    """A stock transformers directory (config.json + weights) with its spec. No dispatch: callers
    go through lopa.models.load, which sends Dream / LLaDA directories and presets elsewhere."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoModelForCausalLM

    path, dev = Path(path), pick_device(device)
    check_weights(path)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
        tokenizer = load_tokenizer(path, trust_remote_code)
        # trust_remote_code is for a config's own modeling code (auto_map) only: given to a stock
        # class, transformers would use it to run the folder's custom_generate/generate.py (which
        # replaces model.generate), and the engine never needs that (lopa.hf is its other way in).
        model = AutoModelForCausalLM.from_pretrained(
            path, config=config, trust_remote_code=trust_remote_code and bool(getattr(config, "auto_map", None)),
            **from_pretrained_kwargs(dev))
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"could not load the model in {path}: {err}") from err
    except StrictDataclassError as err:         # transformers' own checks of a config's fields
        raise ValueError(f"`config.json` in {quoted(path)}: {str(err).splitlines()[-1].strip()[:120]}") from None
    spec = spec_from_pretrained(config, tokenizer, path.name)
    return LoadedModel(model.to(dev).eval(), tokenizer, spec, path)
