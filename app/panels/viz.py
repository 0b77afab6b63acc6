"""The visualizations package, under the name it has where the app runs.

In a checkout and on a Space, `app/` and `visualizations/` are top-level folders; an installed
wheel puts them under `lopa_explorer.` so that nothing lands in site-packages under a generic
name. This module becomes whichever of the two is the app's sibling, so the panels import their
figures as `from .viz import token_canvas` in both (`from ..viz` in a panel's own folder). Only names exported by
`visualizations/__init__.py` can be imported this way.
"""

import importlib
import sys

_root = __name__.removesuffix("app.panels.viz").rstrip(".")     # "" in a checkout, "lopa_explorer" installed
sys.modules[__name__] = importlib.import_module(f"{_root}.visualizations" if _root else "visualizations")
