"""ZeroGPU on Hugging Face Spaces: `gpu(fn)` is `spaces.GPU(fn)` on a ZeroGPU Space and `fn` itself
everywhere else, so one code path runs locally and on a Space.

On ZeroGPU (the `spaces` package, 0.51: spaces/zero/wrappers.py) a decorated call runs in a worker
process forked from the server, on a pickled copy of its arguments; what it returns or yields is
pickled back. So the functions given to `gpu` (app/serving/boundary.py) take and return plain values, never
a session, a generator or a model, and the model is loaded before the worker forks: at import time
(app.serving.model_cache.preload, called by app.py), never inside a decorated call.

`spaces` is not in requirements.txt: Hugging Face installs it on every Gradio Space, and everywhere
else the decorator would be the identity anyway (spaces.GPU returns the function unchanged unless
SPACES_ZERO_GPU is set), so it would only be one more package to install for nothing.
"""

from __future__ import annotations

import os


def zero_gpu() -> bool:
    """Is this process a ZeroGPU Space? (the variable the `spaces` package itself reads)"""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def _decorator():
    if not zero_gpu():
        return None
    # Each decorated call decodes in a worker forked for it: CUDA graphs captured there would be replayed a few
    # times and thrown away with the worker, so the batched executor runs its lean forward uncaptured (lopa.graphs).
    os.environ.setdefault("LOPA_CUDA_GRAPHS", "0")
    try:  # pragma: no cover - only on a ZeroGPU Space
        import spaces
    except ImportError:  # pragma: no cover
        return None
    return spaces.GPU


def gpu(fn):
    """spaces.GPU(fn) on a ZeroGPU Space, else fn unchanged (also for generator functions)."""
    decorator = _decorator()
    return decorator(fn) if decorator is not None else fn

