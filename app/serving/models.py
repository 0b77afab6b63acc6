"""The models a session may pick: the bundled ones, the folders a server may load from; token names;
example prompts.

A model choice names a folder: a bundled model under assets/models (by its plain name) or, where
LOPA_MODEL_DIRS allows, any local Hugging Face folder. Loading and holding the models is the cache's
(app/serving/model_cache.py, MODELS), which builds on this module; nothing here loads a model.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from lopa.models import ASSETS, DEFAULT_MODEL
from lopa.models.folder import check_folder, quoted, read_config, stored_shapes
from lopa.models.loading import RENAMED, ROOT, bundled_folder  # noqa: F401  (the app names them here)

from .examples import example_groups

MODELS_DIR = ASSETS / "models"
# What each bundled model shows, for the model choice. The two side by side are the lesson: the same
# decoder is fast or not depending on whether the model leaves its filling order open (model cards).
SHOWS = {
    "open-gsm-dllm": "the paper's regime: where \"by now in total\" splits around a line is open, and one "
                     "committed token settles the rest of it, so the filling order sets the speed",
    "sure-gsm-dllm": "sure of every token: every filling order gives the same speed (the contrast)",
    "edit-gsm-dllm": "open-gsm-dllm trained also on wrong tokens, so that at a committed position it names "
                     "the token that belongs there: the model for token editing",
}


def bundled_models() -> list[tuple[str, str]]:
    """(label, folder) of every model under assets/models, the default first, each labelled by what it shows."""
    folders = sorted((p for p in MODELS_DIR.iterdir() if (p / "config.json").is_file()),
                     key=lambda p: (p.resolve() != DEFAULT_MODEL.resolve(), p.name)) if MODELS_DIR.is_dir() else []
    return [(f"{p.name}: {SHOWS.get(p.name, 'bundled model')}", str(p)) for p in folders]


def allowed_model_roots() -> list[Path] | None:
    """Folders the model box may load from; None means anywhere.

    `LOPA_MODEL_DIRS` (paths joined by os.pathsep, or `*`) decides when set, beside the bundled models,
    which every server serves (a server set to one checkpoint's folder still opens on its default model).
    Otherwise a local run may load any folder (it is the user's machine), while a Hugging Face Space
    (which sets SPACE_ID) only loads the bundled models: a public page must not let visitors read the
    server's disk or fill its memory with whatever checkpoint happens to be there.
    """
    env = os.environ.get("LOPA_MODEL_DIRS", "").strip()
    if env == "*":
        return None
    bundled = MODELS_DIR.resolve()
    if env:
        roots = [Path(os.path.expanduser(p)).resolve() for p in env.split(os.pathsep) if p.strip()]
        return [bundled, *(r for r in roots if r != bundled)]
    return [bundled] if os.environ.get("SPACE_ID") else None


def check_model_dir(path: Path) -> None:
    """Raise ValueError when `path` is outside the folders this server may load models from, or cannot be
    followed to a folder (a looping link), naming it."""
    roots = allowed_model_roots()
    if roots is None:
        return
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError) as err:       # Python 3.11 raises RuntimeError for a looping link
        why = "a link in it loops" if isinstance(err, RuntimeError) else err.strerror
        raise ValueError(f"{quoted(path)} cannot be followed ({why}): check the path") from None
    if not any(resolved == r or r in resolved.parents for r in roots):
        names = ", ".join(f"`{short_path(r)}`" for r in roots)
        raise ValueError(f"this server only loads models from {names} (set LOPA_MODEL_DIRS to change that)")


def short_path(path: Path) -> str:
    """`path` relative to the repository where it lies inside it (how the page and commands name a folder), else as given."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def safetensors_param_count(model_dir: Path) -> int:
    """Parameters stored in a directory's *.safetensors files, read from their headers only (no
    tensor is loaded); 0 if the folder or any file is unreadable (lopa.models.folder's checks)."""
    try:
        check_folder(model_dir)         # first: only regular files of bounded size are opened
        config = read_config(model_dir)
        shapes = stored_shapes(model_dir)
    except ValueError:
        return 0
    skip = {"lm_head.weight"} if config.get("tie_word_embeddings") else set()    # stored, but shared
    return sum(math.prod(shape) for name, shape in shapes.items() if name not in skip)


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


# -- example prompts -----------------------------------------------------------------------------
def example_prompts(per_file: int = 4) -> list[str]:
    """Every default example prompt in list order: the synthetic ones the bundled models answer, order-sensitive
    first (app.serving.examples; the GSM8K ones for a real checkpoint are apart)."""
    return [prompt for _, prompts in example_groups(per_file) for prompt in prompts]
