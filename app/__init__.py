"""LoPA Explorer, the Gradio app: panels (app/panels.py), callbacks (app/callbacks.py,
app/compare.py), per-user session state (app/session.py), the shared lazily loaded model
(app/models.py) and the one wiring site (app/wiring.py)."""

from .wiring import LAUNCH_KWARGS, build_demo

__all__ = ["build_demo", "LAUNCH_KWARGS"]
