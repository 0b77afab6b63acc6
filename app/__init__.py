"""LoPA Explorer, the Gradio app, in two rooms:

    app/panels/    what shows: one place per panel (its build_<panel>() layout, its wire(w) events, its
                   callbacks; a folder where that is over 400 lines): round_view/, model, settings/ (with the
                   share link), compare, forks (what if), best_order, traces, studies/, tour/, denoise/, glossary
    app/serving/   what serves: the sessions and their runs, the models and their cache, the decode workers,
                   the GPU boundary and ZeroGPU, the budgets of memory and disk, input reading and the one
                   resolution of a request, the typed /decode API, and the workarounds for Gradio 6.31's own
                   behaviour (a module each, saying which)

and over both the page (app/page.py: where each panel sits) and the one wiring site (app/wiring.py: wire()
walks PANELS). Imports go one way, panels -> serving (tests/test_layers.py)."""

import gc
import os

from .page import LAUNCH_KWARGS, build_demo
from .serving.decode_pool import server_threads

__all__ = ["build_demo", "LAUNCH_KWARGS", "serve", "server_threads", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0")
DEFAULT_PORT = int(os.environ.get("GRADIO_SERVER_PORT", "7860"))


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, demo=None) -> None:
    """Build the app (unless given) and serve it until interrupted: `python app.py`, `lopa app`. The decode
    workers (app/serving/decode_pool.py) start first, warming the default model while the page is built."""
    import torch

    from .serving.decode_pool import POOL
    from .serving.model_cache import MODELS
    torch.set_num_threads(server_threads())
    POOL.start(MODELS.default, server_threads())
    demo = demo or build_demo()
    # The modules, the page's Blocks and the loaded model live as long as the process: out of the collector's
    # reach (gc.freeze), a full collection during a Run scans what the requests made, not all of them.
    gc.collect()
    gc.freeze()
    demo.launch(server_name=host, server_port=port, **LAUNCH_KWARGS)
