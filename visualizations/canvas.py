"""The token canvas: every generated position after one round, as an HTML grid (one row per block).

A cell's fill is its confidence (viridis on max prob: when it was committed, or what the last
forward predicts for a still-masked position); its border and corner tag say its state:

    cached          committed earlier, its block is in the prefix cache (faded)
    committed       committed in an earlier round, block still in the window (thin border)
    anchor (A)      committed by this round's anchor (thick solid blue)
    lookahead (+)   the winning branch's extra token (thick dashed orange)
    masked          still masked: pale, the current prediction in grey italics, its confidence as a
                    viridis stripe along the bottom
    edited (E)      rewritten by this round's token editing (thick solid purple); a cell edited in an
                    earlier round keeps its state with a purple underline. The hover names the old and new
                    token, the round of the edit and the new token's probability.
"""

from __future__ import annotations

import math

from .labels import token_label, token_repr, token_text
from .markup import esc
from .palette import (
    ANCHOR_COLOUR,
    EDIT_COLOUR,
    LOOKAHEAD_COLOUR,
    MISSING_COLOUR,
    faded,
    text_on,
    viridis,
    viridis_legend,
)
from .timeline import ANCHOR, edits, fills, predictions

CACHED, COMMITTED, MASKED, EDITED = "cached", "committed", "masked", "edited"
# Each state's look lives in CANVAS_CSS, once on the page, not in every cell: a live Run re-sends the
# whole canvas at every round it streams, to every browser watching, and inline styles made each
# cell about five times longer.
STATE_STYLE = {
    CACHED: ("1px solid #bbbbbb", "", ""),          # its fill faded (_fill), not the cell: its text stays at 4.5:1
    COMMITTED: ("1px solid #555555", "", ""),
    ANCHOR: (f"3px solid {ANCHOR_COLOUR}", "", "A"),
    "lookahead": (f"3px dashed {LOOKAHEAD_COLOUR}", "", "+"),
    MASKED: ("1px dotted #777777", "font-style:italic;cursor:pointer;", ""),   # a masked cell opens the what-if panel
    EDITED: (f"3px solid {EDIT_COLOUR}", "", "E"),
}
STATE_WORDS = {
    CACHED: "committed earlier, block cached",
    COMMITTED: "committed in an earlier round",
    ANCHOR: "committed by this round's anchor",
    "lookahead": "winning branch's lookahead token",
    MASKED: "still masked: current prediction, its max prob as the bottom stripe (click: what if it were filled first?)",
    EDITED: "rewritten by this round's token editing (underlined: edited earlier)",
}
# Why a dependency-aware rule (commit=dawn) committed a position or held it back, from the round's recorded sets
# (extra["commit_reasons"], lopa.rules.dawn_anchor), said in the hover of this round's cells.
REASON_WORDS = {"sure": "the rule: sure (max prob at least τ_conf)",
                "induced": "the rule: it leans, by the round's attention, on a sure decoded token",
                "free": "the rule: in the set of which no two lean on each other",
                "fallback": "the block's fallback (the rule chose nothing there)",
                "conflict": "the rule held it back: it leans on, or is leaned on by, a more probable one it committed",
                "leans": "the rule held it back: it leans on a token committed as sure and induced"}
BLOCK_WORDS = {"cached": "cached", "complete": "complete", "active_full": "active (full)",
               "active_semi": "active (semi)"}
MASKED_BACKGROUND = "#f7f7f7"
MASKED_TEXT = "#444444"
# The cell grows with its token (a long one was cut) and keeps room on the right for the A / + tag.
CANVAS_CSS = (
    ".lopa-cell{position:relative;box-sizing:border-box;min-width:40px;height:30px;padding:0 3px;margin:1px;"
    "border-radius:3px;font:11px/26px monospace;text-align:center;overflow:hidden;white-space:nowrap}"
    ".lopa-cell.lopa-tagged{padding:0 11px 0 3px}"
    ".lopa-tag{position:absolute;top:-1px;right:2px;font-size:9px;font-weight:700;font-style:normal}"
    + "".join(f".lopa-{state}{{border:{border};{extra}}}" for state, (border, extra, _) in STATE_STYLE.items())
    # Not committed: a pale cell with the prediction's confidence (--fill) as a thick bottom stripe.
    + f".lopa-cell.lopa-masked{{color:{MASKED_TEXT};"
      f"background:linear-gradient(0deg,var(--fill,{MISSING_COLOUR}) 0 7px,{MASKED_BACKGROUND} 7px)}}"
    # a kept chain (lookahead_depth > 1): a double border, each token numbered in its tag
    + f".lopa-cell.lopa-chain{{border:4px double {LOOKAHEAD_COLOUR}}}"
    f".lopa-cell.lopa-rewritten{{box-shadow:inset 0 -3px 0 {EDIT_COLOUR}}}"
    ".lopa-block{display:flex;align-items:center;border-left:4px solid transparent;padding-left:4px;margin:2px 0}"
    ".lopa-block.lopa-in-window{border-left-color:#333333}"
    ".lopa-block-label{width:78px;font-size:11px;line-height:1.1;flex:none}"
    ".lopa-block-cells{display:flex;flex-wrap:wrap}"
)


def _fmt(x: float) -> str:
    return "?" if x is None or math.isnan(x) else f"{x:.3f}"


def _fill(state: str, max_prob: float) -> str:
    """A cell's fill: viridis of its max prob, faded for a cached block's cell."""
    fill = viridis(max_prob) if not math.isnan(max_prob) else MISSING_COLOUR
    return faded(fill) if state == CACHED else fill


def _cell(pos: int, state: str, token: int, max_prob: float, conf: float, names, mask_id: int, why: str,
          chain: tuple[int, int] | None = None, rewritten: bool = False) -> str:
    """One cell; `chain` (i, n): token i of the n the winning chain kept (lookahead_depth > 1), numbered in
    its tag instead of one "+"."""
    tag = STATE_STYLE[state][2] + (str(chain[0]) if chain else "")
    fill = _fill(state, max_prob)
    style = f"--fill:{fill}" if state == MASKED else f"background:{fill};color:{text_on(fill)}"
    label = token_label(token, names, mask_id) if token is not None else "▢"
    # The hover says what the legend cannot (when, by whom, which token); the state's own words are in
    # the legend, sent once.
    title = ((f"token {chain[0]} of the {chain[1]} the winning chain kept&#10;" if chain else "") +
             f"position {pos}: {esc(why)}&#10;"
             f"token {esc(token_repr(token, names)) if token is not None else 'unknown'}&#10;"
             f"max prob {_fmt(max_prob)} · Conf {_fmt(conf)}")
    corner = f'<span class="lopa-tag">{tag}</span>' if tag else ""
    classes = (f"lopa-{state}" + (" lopa-chain" if chain else "") + (" lopa-tagged" if tag else "")
               + (" lopa-rewritten" if rewritten else ""))
    numbered = f' data-chain="{chain[0]}"' if chain else ""
    return (f'<div class="lopa-cell {classes}" data-position="{pos}" data-state="{state}"{numbered} '
            f'title="{title}" style="{style}">{esc(label)}{corner}</div>')


def canvas_legend(editing: bool = False) -> str:
    # Each swatch is a cell of its state (the same classes, so the same border, fill, stripe and tag), holding a
    # token-like "ab" as the cells hold their tokens. The edited state only for a run that edits.
    swatches = []
    for state, words in STATE_WORDS.items():
        if state == EDITED and not editing:
            continue
        tag = STATE_STYLE[state][2]
        fill = _fill(state, 0.5)
        style = f"--fill:{fill}" if state == MASKED else f"background:{fill};color:{text_on(fill)}"
        corner = f'<span class="lopa-tag" style="color:{text_on(fill)}">{tag}</span>' if tag else ""
        swatches.append(f'<span style="display:inline-flex;align-items:center;gap:4px;margin-right:12px;font-size:12px">'
                        f'<span class="lopa-cell lopa-{state}{" lopa-tagged" if tag else ""} lopa-swatch" '
                        f'data-swatch="{state}" style="{style};display:inline-block;cursor:default">ab{corner}</span>'
                        f'{esc(words)}</span>')
    return (f'<div class="lopa-legend" style="margin:4px 0 6px 0">{"".join(swatches)}'
            f'{viridis_legend("fill = max prob")}</div>')


def token_canvas(run, r: int, names: dict[int, str] | None = None) -> str:
    """HTML grid of every generated position after round `r` of `run` (a RunResult)."""
    if not run.records:
        return '<div class="lopa-canvas lopa-empty">No rounds yet: press Run or Step.</div>'
    r = max(0, min(r, len(run.records) - 1))
    record = run.records[r]
    N, mask_id = int(run.settings["block_size"]), int(run.spec["mask_token_id"])
    done, changed = fills(run.records, r), edits(run.records, r)
    predicted = predictions(record)
    first_window_block = record.window_start // N
    editing = float(run.settings.get("edit_threshold", 1.0)) < 1.0
    chain = [p for p, _, ahead in record.filled() if ahead]                      # the winner's kept chain ...
    chain = chain if len(chain) > 1 else []                                      # ... of more than one token
    reason = {p: REASON_WORDS[k] for k, ps in record.extra.get("commit_reasons", {}).items() for p in ps if k in REASON_WORDS}
    rows = []
    for b, block_state in enumerate(record.block_states):
        cells = []
        for pos in range(b * N, (b + 1) * N):
            fill = done.get(pos)
            if fill is not None:
                state = fill.how if fill.round == r else (CACHED if b < record.n_cached_blocks else COMMITTED)
                who = "anchor" if fill.how == ANCHOR else "winning branch's lookahead"
                why = (f"committed by this round's {who}" if fill.round == r else
                       f"committed in round {fill.round} by the {who}" + (", block cached" if state == CACHED else ""))
                link = (chain.index(pos) + 1, len(chain)) if fill.round == r and pos in chain else None
                why += f"; {reason[pos]}" if fill.round == r and fill.how == ANCHOR and pos in reason else ""
                edit, token, max_prob = changed.get(pos), fill.token, fill.max_prob
                if edit is not None:                # token editing rewrote it: the cell holds the new token
                    state = EDITED if edit.round == r else state
                    token, max_prob = edit.new, edit.max_prob
                    why += (f"; {'edited by this round' if edit.round == r else f'edited in round {edit.round}'}: "
                            f"{token_repr(edit.old, names)} → {token_repr(edit.new, names)} (max prob {_fmt(edit.max_prob)})")
                cells.append(_cell(pos, state, token, max_prob, fill.conf, names, mask_id, why, link,
                                   rewritten=edit is not None and edit.round < r))
            else:
                guess = predicted.get(pos)
                why = ("still masked, predicted by the winning branch's forward (click: what if it were filled "
                       "first?)" if guess else "still masked, not predicted yet") + (f"; {reason[pos]}" if pos in reason else "")
                cells.append(_cell(pos, MASKED, guess.token if guess else None,
                                   guess.max_prob if guess else float("nan"),
                                   guess.conf if guess else float("nan"), names, mask_id, why))
        in_window = " lopa-in-window" if b >= first_window_block else ""
        label = f"block {b}<br><small>{esc(BLOCK_WORDS.get(block_state, block_state))}</small>"
        rows.append(f'<div class="lopa-block{in_window}" data-block="{b}"><div class="lopa-block-label">{label}</div>'
                    f'<div class="lopa-block-cells">{"".join(cells)}</div></div>')
    kind = {"prefill": " (the prompt's forward: nothing committed yet)",
            "final": " (the final round: the anchor's last commits, no forward)",
            "post": " (a post-edit round: every position is committed; it only edits and checks)"}.get(record.kind, "")
    note = (f'<div style="font-size:12px;margin-bottom:4px">Round {r}{esc(kind)} — rows with a dark left bar '
            f'were in the window this round (recomputed by the forward); rows before it were read from the cache.'
            f' <span class="lopa-hover-words">Hover</span><span class="lopa-tap-words">Tap</span> a cell for its token and '
            f'probabilities.</div>')
    return f'<div class="lopa-canvas" data-round="{r}">{note}{canvas_legend(editing)}{"".join(rows)}</div>'


def canvas_text(run, r: int, names: dict[int, str] | None = None) -> str:
    """The answer as the canvas holds it after round `r`: the committed tokens in position order, a ▢ for
    each position still masked before the last committed one, up to the first committed EOS. Once the
    last round holds no masked position, the run's own text (the tokenizer's decode of the whole answer,
    which joins tokens that one-token decodes would split).

    The latest round is read from the run's tokens (what the canvas holds now), not rebuilt from every
    round's commits: a live Run asks for it at each round it streams."""
    if not run.records:
        return ""
    r = max(0, min(r, len(run.records) - 1))
    last, eos = r == len(run.records) - 1, set(run.spec.get("eos_token_ids") or ())
    if last:
        held = {p: t for p, t in enumerate(run.tokens) if t != run.spec.get("mask_token_id")}
    else:
        held = {p: fill.token for p, fill in fills(run.records, r).items()}
        held.update({p: edit.new for p, edit in edits(run.records, r).items()})
    out = []
    for p in range(max(held, default=-1) + 1):
        if held.get(p) in eos:
            break
        out.append(token_text(held[p], names) if p in held else "▢")
    if last and "▢" not in out:
        return run.text
    return "".join(out)
