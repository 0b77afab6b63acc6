"""The page's glossary: every abbreviation and symbol the app shows, in one short list the counters,
the tour and the studies link to (`#glossary`), plus one-line glosses for where a term first appears."""

from __future__ import annotations

from lopa.settings import COMMIT_RULES

from .markup import esc

# The commit rules a decode can take (the `commit` setting, lopa.settings.COMMIT_RULES): {rule: (its name on the
# page, what it does in a few words (the tour's line), what it commits (the glossary's line))}. The peers' rules
# are lopa/peers.py's; LoPA's lookahead (k > 0) runs over any of them.
COMMIT_RULE_NAMES = {
    "threshold": ("D2F threshold", "commits every position over τ_conf",
                  "D2F's and Fast-dLLM's threshold rule: every masked position whose max prob clears τ_conf, else "
                  "the single most confident (the default)."),
    "top1": ("one token per round", "commits the single most confident position",
             "exactly one position a round, the most confident."),
    "eb": ("EB-Sampler", "commits the surest positions within an entropy budget",
           "entropy-bounded unmasking (Ben-Hamu et al. 2025): the surest positions while their summed entropy, less "
           "the largest, stays within γ (eb_gamma)."),
    "factor": ("Fast-dLLM factor", "commits more positions the surer the n-th surest is",
               "Fast-dLLM's factor rule (Wu et al. 2025): the n most probable positions while (n + 1)(1 − c_(n)) "
               "stays within f (factor_f)."),
    "frechet": ("Fast-dLLM++ Fréchet", "commits n positions while a bound says all n are likely right",
                "Fast-dLLM++'s profile rule: the n most probable positions while the Fréchet bound that all n are "
                "right beats the best competitor by frechet_margin."),
    "joint": ("SGLang JointThreshold", "D2F's threshold with its fallback ranked by max prob",
              "SGLang's JointThreshold (its mask-to-token step): every max prob above τ_conf, else the single most "
              "probable position."),
    "stable": ("stability rule after LESS", "commits confident positions whose guess held since the round before",
               "a position whose max prob clears τ_conf, whose top token is the one the round before predicted and "
               "whose top probability barely moved (stable_js)."),
    "learned": ("learned filter (after Learn2PD)", "commits what a small filter trained on the model's decodes calls final",
                "after Learn2PD (Bao et al. 2025): a 2,000-parameter filter, trained on the model's own decodes, gives each "
                "position the chance its guess is already the final token; every chance above learned_threshold commits."),
    "dawn": ("dependency-aware (DAWN)", "commits positions that do not depend on each other, by the model's attention",
             "DAWN (arXiv 2602.06953): the round's own attention says which positions lean on which. It commits every "
             "position over τ_conf, those that lean on a sure decoded token (dawn_induce), and among the rest over "
             "dawn_low a set with no two leaning on each other, so two guesses that decide each other are never "
             "committed together."),
}
PEER_RULES = tuple(rule for rule in COMMIT_RULES if rule not in ("threshold", "top1"))
# Why a forward count alone can mislead about time: said where forwards and token-forwards sit side by side.
FEWER_FORWARDS_SLOWER = ("Fewer forwards can still be slower: a batched verify of k + 1 branches is one forward but "
                         "(k + 1)·W token-forwards (W = the window's positions), and a machine that is already busy "
                         "with one branch, a CPU above all, pays for every one of them.")


def rule_name(rule: str) -> str:
    """A commit rule's name on the page (COMMIT_RULE_NAMES), or the rule itself when it has none."""
    return COMMIT_RULE_NAMES.get(rule, (rule,))[0]


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
    ("lookahead depth", "lookahead-depth", "how many tokens a lookahead branch may fix beyond the anchor (the "
     "lookahead_depth setting): 1 is LoPA's one token; at d > 1 each branch grows a chain of up to d tokens."),
    ("chain", "chain", "at lookahead depth d > 1, a branch's run of up to d tokens, each the model's guess given the "
     "ones before it. Every prefix is verified in the same forward, and the chain is cut at the first token the row "
     "before it no longer predicts (or predicts under the lookahead floor); the branch is scored at its kept prefix, "
     "and the branches table shows one row per chain with why it was cut."),
    ("token editing", "token-editing", "a committed token is not final (LLaDA 2.1's token-to-token edits; the "
     "edit_threshold setting, off at 1): when the model later reads a committed position of an uncached block as "
     "another token with max prob above the editing threshold, that token replaces it (tag E on the canvas; an "
     "underline marks a cell edited earlier)."),
    ("post-edit round", "post-round", "a round after every position is committed that only edits and checks: a "
     "full block stays out of the cache while its last forward still reads a token otherwise, for at most "
     "edit_post_steps such rounds."),
    ("τ_conf (tau_conf)", "tau-conf", "the confidence threshold: a masked position whose max prob is above it is "
     "committed."),
    ("max prob", "max-prob", "the probability the model gives its top guess at a position."),
    ("Conf", "conf", "a position's confidence score, by the chosen rule (max prob, negative entropy or margin); the "
     "branch score C(B) is the mean Conf of the positions a branch leaves masked."),
    ("TPF", "tpf", "tokens per forward: answer tokens (up to the first EOS) divided by forwards. Higher means fewer "
     "model passes for the same text."),
    ("token-forwards", "token-forwards", "the positions every forward processed, summed: a batched verify of k + 1 "
     "branches over a window of W positions counts (k + 1)·W, the prompt counts once. The compute a forward count "
     "hides."),
    ("wall-clock", "wall-clock", "the engine's own seconds for a run (the sum of its rounds), on the device the "
     "counters name."),
    ("EOS", "eos", "the end-of-sequence token: the answer ends at the first one."),
    ("verified/forward", "verified", "positions the model checks per forward, all branches together (k + 1 windows "
     "× window length): the work a round batches."),
    ("TFO", "tfo", "token filling order: which position is committed in which round. The TFO maps colour each "
     "position by the round that filled it."),
    ("commit rule", "commit-rule", "what a round commits (the commit setting): D2F's threshold by default, or one "
     "of the peers below. LoPA's lookahead (k > 0) runs on top of any of them: the rule decides what each branch "
     "commits."),
    *((name, f"rule-{rule}", f"commit = {rule}: {words}") for rule, (name, _, words) in COMMIT_RULE_NAMES.items()
      if rule in PEER_RULES),
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
