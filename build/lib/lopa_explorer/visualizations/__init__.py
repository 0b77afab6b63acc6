"""Pure functions from a trace (lopa.RunResult) to plotly Figures or HTML/Markdown strings.

Nothing here runs the model or imports gradio: the app calls these with a live snapshot or a
loaded trace file, and the tests call them with a trace made by the engine.
"""

from .branches import branches_table, explain_round
from .canvas import token_canvas
from .charts import tfo_map, tokens_per_round_chart
from .counters import comparison_summary, counters_html
from .heatmap import confidence_heatmap
from .ranks import rank_lanes

__all__ = ["branches_table", "explain_round", "token_canvas", "tfo_map", "tokens_per_round_chart",
           "comparison_summary", "counters_html", "confidence_heatmap", "rank_lanes"]
