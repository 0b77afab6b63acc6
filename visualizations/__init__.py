"""Pure functions from a trace (lopa.RunResult) to plotly Figures or HTML/Markdown strings.

Nothing here runs the model or imports gradio: the app calls these with a live snapshot or a
loaded trace file, and the tests call them with a trace made by the engine.
"""

from .answer_mark import answer_mark
from .branches import branches_table, detail_note, explain_round
from .canvas import CANVAS_CSS, canvas_text, token_canvas
from .charts import tfo_map, tokens_per_round_chart
from .compare import comparison_summary, run_diff, tfo_diff_html
from .counters import counters_html
from .glossary import (
           COMMIT_RULE_NAMES,
           FEWER_FORWARDS_SLOWER,
           GLOSSARY_CSS,
           PEER_RULES,
           glossary_html,
           rule_name,
           term_link,
)
from .heatmap import confidence_heatmap
from .labels import token_label, token_repr
from .markup import esc
from .palette import THEME_COLOURS
from .ranks import rank_lanes
from .round_marks import ROUND_MARKS_CSS, round_marks
from .story import STORY_CSS, arrival_html, story_facts, story_sentence, tour_card
from .timeline import detail_round, fills, last_forward_round, predictions

__all__ = ["CANVAS_CSS", "COMMIT_RULE_NAMES", "FEWER_FORWARDS_SLOWER", "GLOSSARY_CSS", "PEER_RULES", "glossary_html", "rule_name", "term_link", "esc", "answer_mark", "branches_table", "detail_note", "explain_round", "token_canvas", "canvas_text", "tfo_map", "tokens_per_round_chart",
           "comparison_summary", "run_diff", "tfo_diff_html", "counters_html", "confidence_heatmap", "rank_lanes",
           "token_label", "token_repr", "detail_round", "fills", "last_forward_round", "predictions", "STORY_CSS", "arrival_html", "story_facts", "story_sentence",
           "tour_card"]
__all__ += ["THEME_COLOURS", "ROUND_MARKS_CSS", "round_marks"]
