"""The page's glossary: every abbreviation and symbol the app shows, in one short list the counters,
the tour and the studies link to (`#glossary`), plus one-line glosses for where a term first appears."""

from __future__ import annotations

from .markup import esc

# (term, anchor, what it means) in the order a visitor meets them.
TERMS = (
    ("forward", "forward", "one pass of the model over the text: the unit of cost. Fewer forwards for the same "
     "answer is faster."),
    ("D2F", "d2f", "Discrete Diffusion Forcing, the decoder LoPA builds on: each forward commits every masked position "
     "the model is sure of. \"Vanilla D2F\" is LoPA with k = 0 (no lookahead)."),
    ("LoPA", "lopa", "Lookahead Parallel Decoding: D2F's commit (the anchor) plus k lookahead branches that each fix "
     "one more token; all k + 1 are checked in one batched forward and the surest wins."),
    ("anchor", "anchor", "the round's D2F commit: every position whose max prob clears τ_conf (tag A on the canvas)."),
    ("k", "k", "the number of lookahead branches per round; k = 0 is vanilla D2F."),
    ("τ_conf (tau_conf)", "tau-conf", "the confidence threshold: a masked position whose max prob is above it is "
     "committed."),
    ("max prob", "max-prob", "the probability the model gives its top guess at a position."),
    ("Conf", "conf", "a position's confidence score, by the chosen rule (max prob, negative entropy or margin); the "
     "branch score C(B) is the mean Conf of the positions a branch leaves masked."),
    ("TPF", "tpf", "tokens per forward: answer tokens (up to the first EOS) divided by forwards. Higher means fewer "
     "model passes for the same text."),
    ("EOS", "eos", "the end-of-sequence token: the answer ends at the first one."),
    ("verified/forward", "verified", "positions the model checks per forward, all branches together (k + 1 windows "
     "× window length): the work a round batches."),
    ("TFO", "tfo", "token filling order: which position is committed in which round. The TFO maps colour each "
     "position by the round that filled it."),
    ("AFP", "afp", "average finalization parallelism (studies): tokens over the distinct rounds that committed "
     "any; 1 is one token a round."),
    ("tau(LTR)", "tau-ltr", "Kendall's tau between an order and left to right (studies): 1 fills strictly left to "
     "right, 0 unrelated, below 0 right to left."),
    ("AUP", "aup", "accuracy under parallelism (studies): TPF weighted by how much accuracy it keeps."),
)
ABBREVIATIONS = {**{term.split(" (")[0]: anchor for term, anchor, _ in TERMS}, "tau_conf": "tau-conf"}

GLOSSARY_CSS = """
#glossary dl {display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; font-size: 14px}
#glossary dt {font-weight: 700}
#glossary dd {margin: 0}
#glossary :target {background: #fff3c4}
@media (max-width: 640px) {#glossary dl {grid-template-columns: 1fr} #glossary dd {margin-bottom: 6px}}
"""


def glossary_html() -> str:
    """The glossary as a definition list; each term has an id (`term-<anchor>`) a link can point at."""
    items = "".join(f'<dt id="term-{anchor}">{esc(term)}</dt><dd>{esc(words)}</dd>' for term, anchor, words in TERMS)
    return f'<div class="lopa-glossary"><dl>{items}</dl></div>'


def term_link(term: str, text: str | None = None) -> str:
    """`text` (default: the term) linking to the term's entry in the glossary."""
    anchor = ABBREVIATIONS.get(term, term.lower())
    return f'<a href="#term-{anchor}" class="lopa-term">{esc(text or term)}</a>'
