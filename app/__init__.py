"""LoPA Explorer, the Gradio app: panels (app/panels.py), callbacks (app/callbacks.py,
app/traces.py, app/model_and_settings.py, app/compare.py), per-user session state (app/session.py), the shared lazily loaded models
(app/model_cache.py), the page (app/page.py) and the one wiring site (app/wiring.py)."""

import os

from .page import LAUNCH_KWARGS, build_demo
from .serving.decode_pool import server_threads

__all__ = ["build_demo", "LAUNCH_KWARGS", "serve", "server_threads", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0")
DEFAULT_PORT = int(os.environ.get("GRADIO_SERVER_PORT", "7860"))


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, demo=None) -> None:
    """Build the app (unless given) and serve it until interrupted: `python app.py`, `lopa app`. The decode
    workers (app/decode_pool.py) start first, warming the default model while the page is built."""
    import torch

    from .serving.decode_pool import POOL
    from .serving.model_cache import MODELS
    torch.set_num_threads(server_threads())
    POOL.start(MODELS.default, server_threads())
    (demo or build_demo()).launch(server_name=host, server_port=port, **LAUNCH_KWARGS)
