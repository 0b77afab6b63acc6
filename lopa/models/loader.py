"""`load()`: the one entry point that turns a model argument into a LoadedModel. The CLI, the app,
the benchmarks and the branch-parallel ranks all call it; the leaf loaders never dispatch.

    load()                                   the bundled model
    load("path/to/dir")                      a stock transformers, Dream-family or LLaDA directory
    load("path/to/dir", lora="adapter/")     ... with a LoRA adapter merged in
    load("d2f-dream-base")                   a paper preset (base + D2F adapter), found on disk
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lopa.filter import filter_folder
from lopa.models.families import checkpoint_family, load_family, merge_lora
from lopa.models.folder import check_name
from lopa.models.loading import DEFAULT_MODEL, LoadedModel, bundled_folder, load_hf
from lopa.models.presets import CHECKPOINTS_DIR, PRESETS, resolve_preset


def load(model: str | Path | None = None, device: str | None = None, trust_remote_code: bool = False,
         lora: str | Path | None = None, base_path=None, lora_path=None, allow_download: bool = False) -> LoadedModel:
    """A preset name or a directory (default: the bundled model), plus an optional LoRA adapter.
    base_path / lora_path point a preset at local copies; allow_download lets a preset fetch them."""
    model = model or DEFAULT_MODEL
    if str(model) in PRESETS and not Path(str(model)).is_dir():
        base, adapter = resolve_preset(str(model), base_path or None, lora_path or lora, allow_download)
        return load_family(base, device=device, lora=adapter, chat=PRESETS[str(model)].chat, name=str(model))
    if base_path or lora_path:
        raise ValueError("--base-path/--lora-path go with a preset name (--model d2f-dream-base); "
                         "for a directory use --model DIR [--lora ADAPTER_DIR]")
    path = Path(model)
    check_name(path)                # a name no file system holds fails every lookup below with an OSError
    if not path.is_dir():
        path = bundled_folder(str(model)) or path   # a bundled model by its name: --model sure-gsm-dllm
    if not (path / "config.json").is_file():
        if (path / "adapter_config.json").is_file():
            raise ValueError(f"{path} is a LoRA adapter, not a model: pass the base model and the adapter "
                             f"(--model BASE_DIR --lora {path})")
        raise FileNotFoundError(
            f"no model at {path}: expected a Hugging Face directory with config.json and weights "
            f"(the bundled model lives in {DEFAULT_MODEL}), a bundled model's name, or a preset name: {', '.join(PRESETS)}")
    if checkpoint_family(path) != "hf":
        return with_commit_filter(load_family(path, device=device, trust_remote_code=trust_remote_code, lora=lora),
                                  path, lora)
    loaded = load_hf(path, device=device, trust_remote_code=trust_remote_code)
    if lora:
        loaded.model = merge_lora(loaded.model, Path(lora))
        loaded.spec = dataclasses.replace(loaded.spec, name=f"{path.name}+{Path(lora).name}")
    return with_commit_filter(loaded, path, lora)


def with_commit_filter(loaded: LoadedModel, path: Path, lora=None) -> LoadedModel:
    """The model with the commit filter its folder holds (lopa/filter.py) named in spec.extra["commit_filter"],
    which commit=learned reads. A LoRA-merged model is another model: the base's filter is not its own."""
    folder = None if lora else filter_folder(path)
    if folder:
        loaded.spec = dataclasses.replace(loaded.spec, extra={**loaded.spec.extra, "commit_filter": folder})
    return loaded


def add_model_arguments(parser) -> None:
    """The checkpoint arguments every command line shares (besides --model and --device)."""
    g = parser.add_argument_group("checkpoints (presets: " + ", ".join(PRESETS) + ")")
    g.add_argument("--lora", help="LoRA adapter directory to merge into --model (e.g. a D2F adapter)")
    g.add_argument("--base-path", help="local base checkpoint for a preset --model (default: look in "
                                       f"{CHECKPOINTS_DIR} and the Hugging Face cache)")
    g.add_argument("--lora-path", help="local adapter directory for a preset --model")
    g.add_argument("--allow-download", action="store_true",
                   help=f"let a preset download missing checkpoints from the Hugging Face Hub into {CHECKPOINTS_DIR}")


def load_from_args(args) -> LoadedModel:
    return load(args.model, device=args.device, trust_remote_code=getattr(args, "trust_remote_code", False),
                lora=args.lora, base_path=args.base_path, lora_path=args.lora_path, allow_download=args.allow_download)
