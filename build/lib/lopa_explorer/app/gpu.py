"""ZeroGPU on Hugging Face Spaces: `@gpu` asks for a GPU for the duration of a call there, and is
the identity everywhere else (the `spaces` package only exists on Spaces)."""

from __future__ import annotations

try:  # pragma: no cover - depends on the hosting environment
    import spaces
    gpu = spaces.GPU
except ImportError:
    def gpu(fn=None, **_kwargs):
        """No-op stand-in for spaces.GPU: usable as @gpu and as @gpu(duration=...)."""
        if fn is None:
            return lambda f: f
        return fn
