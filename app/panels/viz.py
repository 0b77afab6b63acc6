"""The visualizations package, under the name it has where the app runs.

In a checkout and on a Space, `app/` and `visualizations/` are top-level folders; an installed
wheel puts them under `lopa_explorer.` so that nothing lands in site-packages under a generic
name. This module becomes whichever of the two is the app's sibling, so the app imports its
figures as `from .viz import token_canvas` in both. Only names exported by
`visualizations/__init__.py` can be imported this way.
"""

import importlib
import sys

_parent = __package__.rpartition(".")[0]          # "" in a checkout, "lopa_explorer" installed
sys.modules[__name__] = importlib.import_module(f"{_parent}.visualizations" if _parent else "visualizations")
