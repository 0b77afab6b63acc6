"""LoPA Explorer, the Gradio app: panels (app/panels.py), callbacks (app/callbacks.py,
app/traces.py, app/model_and_settings.py, app/compare.py), per-user session state (app/session.py), the shared lazily loaded models
(app/model_cache.py), the page (app/page.py) and the one wiring site (app/wiring.py)."""

import os

from .page import LAUNCH_KWARGS, build_demo

__all__ = ["build_demo", "LAUNCH_KWARGS", "serve", "server_threads", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0")
DEFAULT_PORT = int(os.environ.get("GRADIO_SERVER_PORT", "7860"))


def server_threads() -> int:
    """The torch threads the server decodes on: LOPA_TORCH_THREADS, default 1. A server's CPU is shared (other
    visitors' requests, a study beside a Run, the pages themselves where they run on the same machine), and
    torch threads that wait for each other by spinning lose most when a core is taken: the figures are
    `python scripts/bench_threads.py`'s (docs/deployment.md, "Threads")."""
    text = os.environ.get("LOPA_TORCH_THREADS", "1")
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise SystemExit(f"LOPA_TORCH_THREADS must be a whole number of threads in 1..256, got {text[:40]!r}")
    return int(text)


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, demo=None) -> None:
    """Build the app (unless given) and serve it until interrupted: `python app.py`, `lopa app`."""
    import torch
    torch.set_num_threads(server_threads())
    (demo or build_demo()).launch(server_name=host, server_port=port, **LAUNCH_KWARGS)
