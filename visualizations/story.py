"""The app's arrival view and guided tour card: pure HTML from two traces (vanilla D2F and LoPA of
the same prompt), nothing hard-coded about what they contain.

`story_facts` reads the two traces (forwards, tokens, answers, the rounds a lookahead branch won);
`story_sentence` says the difference in one sentence built from those facts only, so it stays true
when the traces are re-recorded on another model; `arrival_html` draws both answers token by token,
each token coloured by the round that filled it (one colour scale for both), under that sentence.
"""

from __future__ import annotations

from lopa.trace import metrics

from .glossary import PEER_RULES, rule_name
from .labels import token_text
from .markup import esc
from .palette import LOOKAHEAD_COLOUR, VIRIDIS, text_on, viridis
from .timeline import LOOKAHEAD, fills


def story_facts(d2f, lopa) -> dict:
    """What the sentence and the header of each side say, from the traces alone."""
    md, ml = metrics(d2f), metrics(lopa)
    rounds_with_branches = [r for r in lopa.records if r.kind == "round" and r.lookahead_positions]
    return {"d2f_forwards": md["forwards"], "lopa_forwards": ml["forwards"],
            "d2f_tokens": md["tokens_useful"], "lopa_tokens": ml["tokens_useful"],
            "d2f_tpf": md["tpf_useful"], "lopa_tpf": ml["tpf_useful"], "k": int(lopa.settings.get("k", 0)),
            "lookahead_wins": sum(r.winner > 0 for r in rounds_with_branches),
            "lopa_rounds_with_branches": len(rounds_with_branches), "same_answer": d2f.text == lopa.text}


def story_sentence(d2f, lopa) -> str:
    """One sentence (plain text, not yet escaped) on the difference between the two runs."""
    f = story_facts(d2f, lopa)
    nd, nl = f["d2f_forwards"], f["lopa_forwards"]
    if f["same_answer"]:
        tokens = f"the same {f['lopa_tokens']}-token answer"
    elif f["lopa_tokens"] == f["d2f_tokens"]:
        tokens = f"a {f['lopa_tokens']}-token answer each (the two answers differ)"
    else:
        tokens = f"{f['lopa_tokens']} tokens against D2F's {f['d2f_tokens']} (the two answers differ)"
    share = ("in every one" if f["lookahead_wins"] == f["lopa_rounds_with_branches"] else f"in {f['lookahead_wins']}")
    wins = (f"{share} of its {f['lopa_rounds_with_branches']} rounds with branches, one extra "
            "token placed by a lookahead branch made the model sure of more positions at once, so it filled "
            "the answer in another order" if f["lookahead_wins"] else
            "no lookahead branch ever beat the anchor, so it filled the answer in D2F's order")
    if nl < nd:
        return f"LoPA needed {nl} forwards where vanilla D2F needed {nd} ({nd / nl:.1f}× fewer) for {tokens}: {wins}."
    if nl == nd:
        return f"LoPA needed {nl} forwards, as many as vanilla D2F, for {tokens}: {wins}."
    return f"LoPA needed {nl} forwards, more than vanilla D2F's {nd}, for {tokens}: {wins}."


def _useful_positions(run) -> int:
    """Positions up to and including the first EOS (the whole sequence when there is none)."""
    eos = set(run.spec.get("eos_token_ids") or ())
    end = next((i for i, t in enumerate(run.tokens) if t in eos), None)
    return len(run.tokens) if end is None else end + 1


def _token_cell(p: int, fill, names, top: int) -> str:
    if fill is None:                                          # a stopped run's still-masked position
        return f'<span class="lopa-tok" data-position="{p}" data-round="" title="position {p}: never filled">▢</span>'
    text = token_text(fill.token, names)
    shown = text.replace("\n", "⏎").strip() or "␣"
    bg = viridis((fill.round - 1) / max(top - 1, 1))
    how = "a winning lookahead branch" if fill.how == LOOKAHEAD else "the anchor"
    outline = f"outline:2px dashed {LOOKAHEAD_COLOUR};outline-offset:-2px;" if fill.how == LOOKAHEAD else ""
    cell = (f'<span class="lopa-tok" data-position="{p}" data-round="{fill.round}" data-how="{fill.how}" '
            f'title="position {p}: {esc(repr(text))}, filled in round {fill.round} by {how}" '
            f'style="background:{bg};color:{text_on(bg)};{outline}">{esc(shown)}<sub>{fill.round}</sub></span>')
    # A newline token ends its line, so the answer reads as the text it is.
    return cell + ('<span class="lopa-break"></span>' if "\n" in text else "")


def _side(run, title: str, forwards: int, most: int, names, top: int, key: str) -> str:
    m = metrics(run)
    done = fills(run.records)
    cells = "".join(_token_cell(p, done.get(p), names, top) for p in range(_useful_positions(run)))
    width = 100 * forwards / max(most, 1)
    return (f'<div class="lopa-story-side" data-run="{key}" data-forwards="{forwards}">'
            f'<div class="lopa-story-head"><b>{esc(title)}</b>: <b class="lopa-story-forwards">{forwards} forwards</b>'
            f' · {m["tokens_useful"]} tokens · {m["tpf_useful"]:.1f} tokens per forward</div>'
            f'<div class="lopa-story-bar" title="forwards (model passes): fewer is faster" '
            f'style="width:{width:.0f}%"></div><div class="lopa-story-tokens">{cells}</div></div>')


def _legend(top: int) -> str:
    stops = ", ".join(VIRIDIS)
    return (f'<div class="lopa-story-legend">Each token is coloured by the round (forward) that filled it: '
            f'<span class="lopa-story-scale">1 <span style="background:linear-gradient(90deg, {stops})"></span> '
            f'{top}</span>, the round also written small after it; '
            f'<span class="lopa-tok" style="outline:2px dashed {LOOKAHEAD_COLOUR};outline-offset:-2px">dashed</span>'
            ' = the extra token a winning lookahead branch placed. <span class="lopa-hover-words">Hover</span>'
            '<span class="lopa-tap-words">Tap</span> a token for its position.</div>')


STORY_CSS = """
.lopa-story {font-size: 15px; line-height: 1.4}
.lopa-story-sentence {font-size: 17px; margin: 0 0 8px 0}
.lopa-story-sides {display: flex; flex-wrap: wrap; gap: 10px 18px}
.lopa-story-side {flex: 1 1 300px; min-width: 0}
.lopa-story-bar {height: 8px; background: #0072B2; border-radius: 4px; margin: 3px 0 6px 0}
.lopa-story-tokens {display: flex; flex-wrap: wrap; gap: 2px; align-items: baseline}
.lopa-tok {display: inline-block; padding: 1px 4px; border-radius: 3px; font: 13px/20px monospace; background: #f2f2f2}
/* The round number takes its token's colour (text_on the token's fill), not the page's prose colour. */
.lopa-tok sub {font-size: 10px; margin-left: 2px; color: inherit}
.lopa-break {flex-basis: 100%; height: 0}
.lopa-story-legend {font-size: 13px; margin-top: 8px; color: #333}
.lopa-story-scale {display: inline-flex; align-items: center; gap: 4px}
.lopa-story-scale span {display: inline-block; width: 90px; height: 11px; border-radius: 2px}
"""


def arrival_html(d2f, lopa, names: dict | None = None, d2f_title: str = "Vanilla D2F (k = 0)",
                 lopa_title: str | None = None, note: str = "") -> str:
    """The first screen: the sentence, then both answers token by token on one colour scale.
    `note` (plain text) says where the traces come from."""
    f = story_facts(d2f, lopa)
    lopa_title = lopa_title or f"LoPA (k = {f['k']})"
    top = max(max((fl.round for fl in fills(run.records).values()), default=1) for run in (d2f, lopa))
    most = max(f["d2f_forwards"], f["lopa_forwards"])
    sides = (_side(d2f, d2f_title, f["d2f_forwards"], most, names, top, "d2f")
             + _side(lopa, lopa_title, f["lopa_forwards"], most, names, top, "lopa"))
    foot = f'<div class="lopa-story-note">{esc(note)}</div>' if note else ""
    foot = f'<p class="lopa-story-others">{others_line()}</p>' + foot
    return (f'<div class="lopa-story" data-d2f-forwards="{f["d2f_forwards"]}" data-lopa-forwards="{f["lopa_forwards"]}">'
            f'<p class="lopa-story-sentence">{esc(story_sentence(d2f, lopa))}</p>'
            f'<div class="lopa-story-sides">{sides}</div>{_legend(top)}{foot}</div>')


def others_line() -> str:
    """HTML: D2F and LoPA are two decoders among several, named (the app's Compare decodes each beside LoPA)."""
    peers = ", ".join(f'<a href="#term-rule-{rule}">{esc(rule_name(rule))}</a>' for rule in PEER_RULES)
    return ("D2F and LoPA are two decoders of several. Compare (below) also decodes single-block D2F, one token a "
            f"round, and the commit rules of other decoders ({peers}), each alone; LoPA's lookahead can run over any "
            "of their rules (the settings' commit rule).")


def tour_card(index: int, total: int, title: str, text: str, target: str) -> str:
    """One step of the guided tour: its title and words (`text` is HTML built from escaped values by
    the caller), and which panel to point at (`target`, a CSS id selector the page script scrolls
    to and outlines)."""
    return (f'<div class="lopa-tour-card" data-step="{index}" data-target="{esc(target)}">'
            f'<div class="lopa-tour-title">Step {index + 1} of {total}: {esc(title)}</div>'
            f'<div class="lopa-tour-text">{text}</div></div>')
