"""The model shared by every session, loaded lazily; token names; example prompts.

One process holds one model: loading is guarded by a lock so two first clicks do not load it
twice, and a failed load of another directory keeps the previous model. The model's forwards are
serialised by the queue (every model event shares one concurrency group of size 1, see wiring).
The branch-parallel backend is one persistent lopa.distributed.group.BPGroup beside it, started on first
use, shared by every session, restarted when the worker count or model changes, closed at exit.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import threading
from pathlib import Path

from lopa import DecodeSettings
from lopa.models import ASSETS, DEFAULT_MODEL, load
from lopa.models.loading import ROOT, load_tokenizer

from .examples import example_groups

MODELS_DIR = ASSETS / "models"
# What each bundled model shows, for the model choice. The two side by side are the lesson: the same
# decoder is fast or not depending on whether the model leaves its filling order open (model cards).
SHOWS = {
    "open-gsm-dllm": "the paper's regime: where \"by now in total\" splits around a line is open, and one "
                     "committed token settles the rest of it, so the filling order sets the speed",
    "sure-gsm-dllm": "sure of every token: every filling order gives the same speed (the contrast)",
}


# Traces and links recorded before a bundled model was renamed still find its tokenizer.
RENAMED = {"tiny-gsm-dllm": "sure-gsm-dllm"}


def bundled_models() -> list[tuple[str, str]]:
    """(label, folder) of every model under assets/models, the default first, each labelled by what it shows."""
    folders = sorted((p for p in MODELS_DIR.iterdir() if (p / "config.json").is_file()),
                     key=lambda p: (p.resolve() != DEFAULT_MODEL.resolve(), p.name)) if MODELS_DIR.is_dir() else []
    return [(f"{p.name}: {SHOWS.get(p.name, 'bundled model')}", str(p)) for p in folders]


def allowed_model_roots() -> list[Path] | None:
    """Folders the model box may load from; None means anywhere.

    `LOPA_MODEL_DIRS` (paths joined by os.pathsep, or `*`) decides when set. Otherwise a local run
    may load any folder (it is the user's machine), while a Hugging Face Space (which sets
    SPACE_ID) only loads the bundled models: a public page must not let visitors read the
    server's disk or fill its memory with whatever checkpoint happens to be there.
    """
    env = os.environ.get("LOPA_MODEL_DIRS", "").strip()
    if env == "*":
        return None
    if env:
        return [Path(p).expanduser().resolve() for p in env.split(os.pathsep) if p.strip()]
    return [MODELS_DIR.resolve()] if os.environ.get("SPACE_ID") else None


def check_model_dir(path: Path) -> None:
    """Raise ValueError when `path` is outside the folders this server may load models from."""
    roots = allowed_model_roots()
    if roots is None:
        return
    resolved = Path(path).resolve()
    if not any(resolved == r or r in resolved.parents for r in roots):
        names = ", ".join(f"`{_short(r)}`" for r in roots)
        raise ValueError(f"this server only loads models from {names} (set LOPA_MODEL_DIRS to change that)")


class ModelCache:
    """Module-level holder of the one LoadedModel; `get()` loads the default on first use."""

    def __init__(self, default: Path = DEFAULT_MODEL):
        self.default = Path(default)
        self.loaded = None          # lopa.models.loading.LoadedModel once loaded
        self._lock = threading.Lock()
        self._warmed: set[int] = set()      # ids of LoadedModels that ran warm_up
        self.bp = None              # lopa.distributed.group.BPGroup of the branch-parallel backend, once started

    def get(self):
        """The current model, loading the default one the first time. Raises ValueError if it does not load."""
        with self._lock:
            if self.loaded is None:
                self.loaded = _load(self.default)
            return self.loaded

    def load(self, path: str | Path):
        """Switch to the model in `path`. On failure raise ValueError and keep the current model."""
        path = Path(str(path).strip()).expanduser()
        if not str(path).strip():
            raise ValueError("type a local model directory (a Hugging Face folder with config.json)")
        check_model_dir(path)
        with self._lock:
            self.loaded = _load(path)
            if self.bp is not None and Path(self.bp.model_dir) != Path(self.loaded.path).resolve():
                self._close_bp()           # its ranks hold the previous model
            return self.loaded

    def bp_group(self, workers: int):
        """The shared branch-parallel group of `workers` ranks over the current model directory,
        started (about 10 s the first time) or restarted when the worker count or directory
        changed. Raises RuntimeError (from BPGroup) when the ranks do not start."""
        from lopa.distributed.group import BPGroup  # not at import: the app may never use it
        with self._lock:
            model_dir = str(Path(self.loaded.path if self.loaded is not None else self.default).resolve())
            if self.bp is not None and (self.bp.world != workers or self.bp.model_dir != model_dir):
                self._close_bp()
            if self.bp is None:
                self.bp = BPGroup.start(model_dir, workers=workers, timeout_s=60, device="cpu", threads=1)
            return self.bp

    def close_bp(self) -> None:
        """Stop the branch-parallel ranks, if any (at exit; tests)."""
        with self._lock:
            self._close_bp()

    def _close_bp(self) -> None:
        group, self.bp = self.bp, None
        if group is not None:
            group.close()

    def warm_up(self):
        """Two rounds of a throw-away decode on a freshly loaded model, so the first user's first round
        does not pay for lazy initialisation (about a second on a small CPU). Returns that decode's
        RunResult (for warming the figures too), or None if this model was warmed before."""
        loaded = self.get()
        if id(loaded) in self._warmed:
            return None
        N = loaded.spec.block_size or 32
        decoder = loaded.decoder(DecodeSettings(k=2, block_size=N, max_new_tokens=2 * N))
        stream = decoder.stream("1 + 1 = ?")
        try:
            for _, _round in zip(stream, range(2)):
                pass
        finally:
            stream.close()
        self._warmed.add(id(loaded))
        return decoder.result()

    def describe(self) -> str:
        """Markdown line for the model panel; does not load anything."""
        if self.loaded is not None:
            m = self.loaded
            block = f", trained block size {m.spec.block_size}" if m.spec.block_size else ""
            return (f"**Model:** `{m.spec.name}` — {m.n_params / 1e6:.2f} M parameters, "
                    f"{next(m.model.parameters()).device}{block}, context {m.spec.max_context} tokens "
                    f"(loaded from `{_short(m.path)}`)")
        n = safetensors_param_count(self.default)
        size = f"{n / 1e6:.2f} M parameters, " if n else ""
        return f"**Model:** `{self.default.name}` — {size}not loaded yet (loads on first use)"


def _load(path: Path):
    try:
        return load(path)
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None
    except (OSError, RuntimeError, KeyError) as err:    # e.g. a half-written safetensors file
        raise ValueError(f"could not load the model in {path}: {err}") from None


def _short(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def safetensors_param_count(model_dir: Path) -> int:
    """Parameters stored in a directory's *.safetensors files, read from their headers only (no
    tensor is loaded); 0 if any file is unreadable."""
    from safetensors import SafetensorError, safe_open
    total = 0
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        skip = {"lm_head.weight"} if config.get("tie_word_embeddings") else set()   # stored, but shared
        for file in Path(model_dir).glob("*.safetensors"):
            with safe_open(file, framework="pt") as f:
                total += sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys() if name not in skip)
    except (OSError, ValueError, KeyError, SafetensorError):
        return 0
    return total


MODELS = ModelCache()
atexit.register(MODELS.close_bp)


# -- token names ---------------------------------------------------------------------------------
def token_names(tokenizer, ids) -> dict[int, str]:
    """id -> decoded string for the given ids (only those, so it stays cheap)."""
    return {int(i): tokenizer.decode([int(i)]) for i in set(ids)}


def trace_ids(run) -> set[int]:
    """Every token id a trace's figures may show."""
    ids = set(run.tokens) | {t for r in run.records for t in r.anchor_tokens + r.lookahead_tokens}
    for record in run.records:
        for row in record.branch_argmax:
            ids.update(row)
    return ids


def tokenizer_for_trace(spec: dict):
    """The tokenizer of the model a replayed trace names, if it is available locally, else None.

    The name comes from an uploaded file, so it is only used as a plain folder name under
    assets/models (or matched against the loaded model): never as a path.
    """
    name = str(spec.get("name", ""))
    name = RENAMED.get(name, name)
    loaded = MODELS.loaded
    if loaded is not None and loaded.spec.name == name:
        return loaded.tokenizer
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", name) or ".." in name:
        return None
    folder = MODELS_DIR / name
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        return load_tokenizer(folder)
    except (OSError, ValueError):
        return None


# -- example prompts -----------------------------------------------------------------------------
def example_prompts(per_file: int = 4) -> list[str]:
    """Every example prompt in list order: synthetic ones (order-sensitive first), then GSM8K (app.examples)."""
    return [prompt for _, prompts in example_groups(per_file) for prompt in prompts]
