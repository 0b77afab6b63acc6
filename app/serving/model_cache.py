"""The one cache of loaded models every session decodes with (MODELS), and what reads it.

A session picks its own model (app/serving/session.py: `Session.model`, a folder); a decode job names that
folder and the decoding side takes the model from MODELS, a cache shared by every session and bounded
by the models' bytes (LOPA_MODEL_CACHE_BYTES). A model is only read, never changed, so sessions share
it safely. The least recently used model goes first when the bound is passed, never one that a decode
still holds (a lease: `MODELS.lease(folder)`). Loads are serialised by a lock so two first clicks do
not load one model twice; a failed load changes nothing. A model the LoPA engine does not decode (a
DiffusionGemma checkpoint, app/panels/denoise/) lives in the same cache, in the same bound, under its own
loader (`MODELS.lease(folder, load=...)`): an entry is only ever served to the loader that made it.
The branch-parallel backend is one persistent lopa.distributed.group.BPGroup beside the cache, over
the model of the job that asks for it, started on first use, restarted when the worker count or the
model changes, closed at exit. Which folders name a model, and which a server may load, is
app/serving/models.py's; this module builds on it, never the other way round.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lopa.models import DEFAULT_MODEL, load
from lopa.models.folder import check_folder, check_name
from lopa.models.loading import load_tokenizer
from lopa.resolution import resolve

from .gpu import zero_gpu
from .models import (
    MODELS_DIR,
    RENAMED,
    bundled_folder,
    bundled_models,
    check_model_dir,
    safetensors_param_count,
    short_path,
)

# The bytes the loaded models may hold together (parameters and buffers) unless LOPA_MODEL_CACHE_BYTES
# says otherwise: 16 GiB holds both bundled models (a few MB) and one 7B-class checkpoint in bfloat16
# (Dream-v0-7B: 7.6 G parameters, 15.2 GB) on a GPU box. A single model larger than the bound still
# loads (it is the one asked for); it then leaves as soon as another model is needed.
DEFAULT_CACHE_BYTES = 16 * 2**30
CACHE_ENV = "LOPA_MODEL_CACHE_BYTES"


def cache_bytes() -> int:
    """The cache's bound in bytes: LOPA_MODEL_CACHE_BYTES (a whole number, `16e9` or `16_000_000_000`
    alike), else DEFAULT_CACHE_BYTES. Raises ValueError naming the variable for anything else."""
    text = os.environ.get(CACHE_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_BYTES
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0 and value.is_integer()):
        raise ValueError(f"{CACHE_ENV} must be a whole number of bytes (e.g. 16e9), got {text[:40]!r}")
    return int(value)


def model_bytes(loaded) -> int:
    """Bytes a loaded model holds: its parameters and buffers (shared tensors counted once)."""
    seen, total = set(), 0
    for t in (*loaded.model.parameters(), *loaded.model.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


@dataclass
class _Entry:
    loaded: object              # lopa.models.loading.LoadedModel
    nbytes: int
    leases: int = 0             # decodes holding it right now: never evicted while > 0
    warmed: bool = False
    load: object = None         # the loader of a model of another kind (app/panels/denoise/); None: a LoPA model (_load)


class ModelCache:
    """The loaded models of this process by folder, least recently used first, within `max_bytes`.

    `get(folder)` loads (or finds) a model; `lease(folder)` holds it for the length of a decode;
    `folder(choice)` turns a model box value, a bundled name or "" (the default) into the folder
    that names a model in jobs and runs. `load` (get, peek, lease, acquire) names the loader of a
    model of another kind, `load(folder)` -> an object with `.model` and `.tokenizer` (None: a LoPA
    model, lopa.models.load); the folder keys the entry either way."""

    def __init__(self, default: Path = DEFAULT_MODEL, max_bytes: int | None = None):
        self.default = Path(default)
        self.max_bytes = max_bytes      # None: cache_bytes(), read when needed (tests set the variable)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()   # key(folder) -> entry, oldest use first
        self._lock = threading.RLock()      # the entries; held briefly
        self._loading = threading.Lock()    # one load at a time; cached models are served meanwhile
        self.on_evict: list = []            # callbacks(key) when a model leaves (app/serving/boundary.py drops its paused decodes)
        self.bp = None              # lopa.distributed.group.BPGroup of the branch-parallel backend, once started

    # -- naming a model ------------------------------------------------------------------------
    def folder(self, choice: str | Path | None = None) -> Path:
        """The folder a model choice names: "" or None is the default model, a bundled model's name is
        its folder under assets/models, anything else a folder path. Raises ValueError naming the choice
        when its name fits no file system, the server may not load it (check_model_dir), or it is no
        folder a loader may read (lopa.models.folder.check_folder: no config.json, a file that is not a
        regular one or is too large). Looks at names and `stat` only: nothing here can block."""
        text = str(choice if choice is not None else "").strip()
        if not text:
            return self.default
        bundled = bundled_folder(text)
        if bundled is not None:
            return bundled
        check_name(text)                            # before any lookup: ENAMETOOLONG would be an OSError
        path = Path(os.path.expanduser(text))       # (Path.expanduser raises for an unknown ~user)
        check_model_dir(path)                       # then nothing outside the allowed folders is looked at
        check_folder(path)
        return path

    def servable(self, folder: str | Path) -> Path:
        """`folder`, or ValueError where this process cannot serve it: on ZeroGPU only the models loaded at
        startup (preload, below), because GPU workers only see what was loaded before they fork and a
        model must never load inside a GPU call."""
        if zero_gpu() and self.peek(folder) is None:
            raise ValueError("this ZeroGPU Space serves the models it loaded at startup (the bundled ones); run "
                             "the app locally to load another one")
        return Path(folder)

    @staticmethod
    def key(folder: str | Path) -> str:
        return str(Path(folder).expanduser().resolve())

    # -- the cache -----------------------------------------------------------------------------
    def get(self, folder: str | Path | None = None, load=None):
        """The model in `folder` (default: the default model), loading it if it is not cached, and
        marking it most recently used. Raises ValueError if it does not load (nothing changes)."""
        return self._find_or_load(folder, lease=False, load=load).loaded

    def peek(self, folder: str | Path | None = None, load=None):
        """The model in `folder` if it is cached right now (by `load`), else None; loads nothing, uses nothing."""
        with self._lock:
            entry = self._entries.get(self.key(folder if folder is not None else self.default))
            return entry.loaded if entry is not None and entry.load is load else None

    @contextmanager
    def lease(self, folder: str | Path | None = None, load=None):
        """The model in `folder`, held (not evicted) until the block ends."""
        loaded = self.acquire(folder, load=load)
        try:
            yield loaded
        finally:
            self.release(folder if folder is not None else self.default)

    def acquire(self, folder: str | Path | None = None, load=None):
        """get(), and hold the model until release(folder): for a decode that outlives one block."""
        return self._find_or_load(folder, lease=True, load=load).loaded

    def release(self, folder: str | Path) -> None:
        """Give back one acquire() of the model in `folder`; the cache then trims to its bound."""
        with self._lock:
            entry = self._entries.get(self.key(folder))
            if entry is not None and entry.leases > 0:
                entry.leases -= 1
            evicted = self._trim()
        self._evicted(evicted)

    def _find_or_load(self, folder, lease: bool, load=None) -> _Entry:
        key = self.key(folder if folder is not None else self.default)
        entry = self._use(key, lease, load)
        if entry is not None:
            return entry
        with self._loading:
            entry = self._use(key, lease, load)      # loaded by another session while we waited
            if entry is not None:
                return entry
            loaded = (load or _load)(Path(folder if folder is not None else self.default))
            with self._lock:
                entry = self._entries[key] = _Entry(loaded, model_bytes(loaded), leases=int(lease), load=load)
                evicted = self._trim(keep=key)
        self._evicted(evicted)
        return entry

    def _use(self, key: str, lease: bool, load=None) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.load is not load:
                # One folder holds one kind of checkpoint, whose loader refuses the other kind's folders:
                # an entry of the other kind here is never handed to a caller that cannot use it.
                raise ValueError(f"the model in `{Path(key).name}` is loaded here as another kind of model "
                                 "(a DiffusionGemma checkpoint decodes in its own panel, not by LoPA)")
            if entry is not None:
                self._entries.move_to_end(key)
                entry.leases += int(lease)
            return entry

    def _trim(self, keep: str | None = None) -> list[str]:
        """Evict least recently used models without leases until the rest fit; `keep` (default: the most
        recently used, so that one model over the bound is not reloaded for every decode) stays. Under the lock."""
        bound = self.max_bytes if self.max_bytes is not None else cache_bytes()
        keep = keep if keep is not None else next(reversed(self._entries), None)
        evicted = []
        for key in list(self._entries):
            if sum(e.nbytes for e in self._entries.values()) <= bound:
                break
            if key != keep and self._entries[key].leases == 0:
                del self._entries[key]
                evicted.append(key)
        return evicted

    def _evicted(self, keys: list[str]) -> None:
        for key in keys:
            if self.bp is not None and self.bp.model_dir == key:
                self.close_bp()                      # its ranks hold the evicted model
            for callback in self.on_evict:
                callback(key)

    def held(self) -> dict[str, tuple[int, int]]:
        """{folder: (bytes, leases)} of the cached models, least recently used first (tests; the docs' figures)."""
        with self._lock:
            return {key: (e.nbytes, e.leases) for key, e in self._entries.items()}

    def clear(self) -> None:
        """Forget every model without a lease (tests; a process switching its default)."""
        with self._lock:
            evicted = [k for k, e in self._entries.items() if e.leases == 0]
            for key in evicted:
                del self._entries[key]
        self._evicted(evicted)

    def cached_tokenizer(self, name: str):
        """The tokenizer of a cached model whose spec (another kind: its folder) is called `name`, else None;
        loads nothing."""
        with self._lock:
            for entry in reversed(self._entries.values()):
                own = entry.loaded.spec.name if entry.load is None else Path(entry.loaded.path).name
                if own == name:
                    return entry.loaded.tokenizer
        return None

    # -- the branch-parallel backend -------------------------------------------------------------
    def bp_group(self, workers: int, folder: str | Path | None = None):
        """The shared branch-parallel group of `workers` ranks over the model in `folder` (the job's
        model), started (about 10 s the first time) or restarted when the worker count or the model
        changed. Raises RuntimeError (from BPGroup) when the ranks do not start."""
        from lopa.distributed.group import BPGroup  # not at import: the app may never use it
        with self._lock:
            model_dir = self.key(folder if folder is not None else self.default)
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

    # -- warm-up and description -----------------------------------------------------------------
    def warm_up(self, folder: str | Path | None = None):
        """Two rounds of a throw-away decode on a freshly loaded model, so the first user's first round
        does not pay for lazy initialisation (about a second on a small CPU). Returns that decode's
        RunResult (for warming the figures too), or None if this model was warmed before."""
        with self.lease(folder) as loaded:
            with self._lock:
                entry = self._entries.get(self.key(folder if folder is not None else self.default))
                if entry is None or entry.warmed:
                    return None
                entry.warmed = True
            N = resolve({"k": 2}, loaded.spec).block_size      # the model's own block size and attention
            decoder = loaded.decoder(resolve({"k": 2, "max_new_tokens": 2 * N}, loaded.spec))
            stream = decoder.stream("1 + 1 = ?")
            try:
                for _, _round in zip(stream, range(2)):
                    pass
            finally:
                stream.close()
            return decoder.result()

    def describe(self, folder: str | Path | None = None) -> str:
        """Markdown line for the model panel about the model in `folder` (default: the default model);
        does not load anything."""
        folder = Path(folder) if folder is not None else self.default
        m = self.peek(folder)
        if m is not None:
            block = f", trained block size {m.spec.block_size}" if m.spec.block_size else ""
            return (f"**Model:** `{m.spec.name}` — {m.n_params / 1e6:.2f} M parameters, "
                    f"{next(m.model.parameters()).device}{block}, context {m.spec.max_context} tokens "
                    f"(loaded from `{short_path(m.path)}`)")
        n = safetensors_param_count(folder)
        size = f"{n / 1e6:.2f} M parameters, " if n else ""
        return f"**Model:** `{folder.name}` — {size}not loaded yet (loads on first use)"


def _load(path: Path):
    try:
        return load(path)
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None
    except (OSError, RuntimeError, KeyError) as err:    # e.g. a half-written safetensors file
        raise ValueError(f"could not load the model in {path}: {err}") from None



MODELS = ModelCache()
atexit.register(MODELS.close_bp)


def tokenizer_for_trace(spec: dict):
    """The tokenizer of the model a replayed trace names, if it is available locally, else None.

    The name comes from an uploaded file, so it is only used as a plain folder name under
    assets/models (or matched against the models in the cache): never as a path.
    """
    name = str(spec.get("name", ""))
    name = RENAMED.get(name, name)
    cached = MODELS.cached_tokenizer(name)
    if cached is not None:
        return cached
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", name) or ".." in name:
        return None
    folder = MODELS_DIR / name
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        return load_tokenizer(folder)
    except (OSError, ValueError):
        return None


def preload() -> None:
    """On a ZeroGPU Space, load the bundled models into the cache now, at import: on the CPU, then
    `.to("cuda")`, which `spaces` records and replays in each GPU worker (its documented pattern; the
    server process itself has no GPU). They are the models a visitor may pick there (app.panels.model.
    pick_model). Elsewhere a model loads on first use. Called by app.py before launch."""
    if zero_gpu():  # pragma: no cover - only on a ZeroGPU Space
        for _, folder in bundled_models():
            MODELS.get(folder).model.to("cuda")
