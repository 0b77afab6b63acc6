"""Any two runs side by side: where their token filling orders differ, and what that cost.

One comparison for every pair (vanilla vs LoPA, an order vs another, a run vs its fork): the
facts come from `run_diff`, the words from `comparison_summary`, the aligned TFO strip from
`tfo_diff_html`; the app's side-by-side TFO maps highlight `run_diff(...)["differs"]`.
"""

from __future__ import annotations

from lopa.problems import final_answer
from lopa.trace import metrics

from .glossary import FEWER_FORWARDS_SLOWER
from .labels import token_label
from .markup import esc
from .palette import SUBDUED_TEXT, text_on, viridis
from .timeline import commits, fills

DIFF_COLOUR = "#D55E00"       # Okabe-Ito vermillion: a position filled in a different round


def first_divergence(a, b) -> int | None:
    """The first round whose decisions (anchor, lookahead, winner) or verified windows differ;
    None when one run's rounds are a prefix of the other's with equal decisions."""
    for ra, rb in zip(a.records, b.records):
        if (commits(ra) != commits(rb) or ra.lookahead_positions != rb.lookahead_positions
                or ra.branch_tokens != rb.branch_tokens):
            return ra.round
    return None if len(a.records) == len(b.records) else min(len(a.records), len(b.records))


def run_diff(a, b) -> dict:
    """Position by position: the round each run filled it (None = never), the positions whose
    fill round or token differs, the first divergent round, and the metric deltas (b - a)."""
    fa, fb = fills(a.records), fills(b.records)
    positions = sorted(set(fa) | set(fb) | set(range(max(len(a.tokens), len(b.tokens)))))
    rounds = {p: (fa[p].round if p in fa else None, fb[p].round if p in fb else None) for p in positions}
    tokens = {p: (fa[p].token if p in fa else None, fb[p].token if p in fb else None) for p in positions}
    differs = [p for p in positions if rounds[p][0] != rounds[p][1] or tokens[p][0] != tokens[p][1]]
    ma, mb = metrics(a), metrics(b)
    return {"rounds": rounds, "tokens": tokens, "differs": differs, "first_divergence": first_divergence(a, b),
            "metrics": (ma, mb), "delta_rounds": mb["rounds"] - ma["rounds"],
            "delta_forwards": mb["forwards"] - ma["forwards"], "delta_tpf": mb["tpf_useful"] - ma["tpf_useful"],
            "same_answer": a.text == b.text}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 else "—"


def _change(before: float, after: float, fewer: str, more: str, same: str) -> str:
    """How `after` compares with `before`, in the direction it went: "2.43× fewer forwards" when it
    dropped, "1.40× more forwards" when it grew (a ratio under 1 with "fewer" read as a speed-up)."""
    if before <= 0 or after <= 0:
        return f"{same} —"
    if after < before:
        return f"{before / after:.2f}× {fewer}"
    if after > before:
        return f"{after / before:.2f}× {more}"
    return same


def answer_change(before: str, after: str) -> str:
    """In words: did the final `#### N` answer change, or only the working (the text before it)?"""
    if before == after:
        return "The two answers are identical."
    fa, fb = final_answer(before or ""), final_answer(after or "")
    if fa == fb:
        return (f"The working differs but the final answer is the same (#### {fa})." if fa is not None else
                "The texts differ; neither has a final #### answer.")
    return f"The final answers differ: {'none' if fa is None else '#### ' + fa} → {'none' if fb is None else '#### ' + fb}."


def comparison_summary(a, b, name_a: str, name_b: str | None = None) -> str:
    """Markdown: both runs' metrics, the speed-up of b over a in forwards and wall time, where the
    orders diverge and whether the answers agree."""
    name_a, name_b = esc(name_a), esc(name_b or f"LoPA (k = {b.settings.get('k', '?')})")
    d = run_diff(a, b)
    ma, mb = d["metrics"]
    rows = [("rounds", "rounds", "{}"), ("forwards", "forwards", "{}"),
            ("token-forwards (positions all forwards processed)", "token_forwards", "{}"),
            ("tokens (to first EOS)", "tokens_useful", "{}"),
            ("TPF (useful)", "tpf_useful", "{:.2f}"), ("TPF (paper count)", "tpf_paper", "{:.2f}"),
            ("TPF (authors': appended / (forwards + 1))", "tpf_authors", "{:.2f}"),
            ("fill spread (std. dev. of the round each answer token was filled in)", "fill_spread", "{:.2f}"),
            ("wall-clock (s)", "latency_s", "{:.2f}"), ("ms per forward", "ms_per_forward", "{:.1f}"),
            ("tokens/s", "tps", "{:.1f}")]
    cell = lambda text: str(text).replace("|", "\\|")
    table = [f"| | {cell(name_a)} | {cell(name_b)} | Δ |", "|---|---:|---:|---:|"]
    for label, key, fmt in rows:
        delta = mb[key] - ma[key]
        table.append(f"| {label} | {fmt.format(ma[key])} | {fmt.format(mb[key])} | "
                     f"{('{:+.2f}' if isinstance(delta, float) else '{:+d}').format(delta)} |")
    split = d["first_divergence"]
    where = ("The two runs take the same decisions in every round." if split is None else
             f"The runs first diverge in round {split}; {len(d['differs'])} positions are filled in a different "
             "round or with a different token (highlighted).")
    answers = answer_change(a.text, b.text)
    forwards = _change(ma["forwards"], mb["forwards"], "fewer forwards", "more forwards", "as many forwards")
    compute = _change(ma["token_forwards"], mb["token_forwards"], "fewer token-forwards", "more token-forwards",
                      "as many token-forwards")
    wall = _change(ma["latency_s"], mb["latency_s"], "less wall time", "more wall time", "the same wall time")
    # The headline says which way it went: a ratio under 1 written as "fewer" read as a speed-up.
    verdict = f"**Speed-up of {name_b} over {name_a}: {'' if mb['forwards'] < ma['forwards'] else 'none, '}{forwards}"
    return "\n".join([
        f"{verdict} (rounds {ma['rounds']} → {mb['rounds']}, Δ {d['delta_rounds']:+d}; TPF {ma['tpf_useful']:.2f} → "
        f"{mb['tpf_useful']:.2f}); {compute} ({ma['token_forwards']} → {mb['token_forwards']}); {wall} "
        f"({ma['latency_s']:.2f} s → {mb['latency_s']:.2f} s).**", "",
        *table, "",
        f"{where} {answers}", "",
        f"{expectation(ma, mb, name_a, name_b)} Wall-clock is each run's own engine time{_device(ma, mb)}. "
        f"{FEWER_FORWARDS_SLOWER}",
    ])


def _fewer(what: str, va: float, vb: float, name_a: str, name_b: str, fmt: str) -> tuple[str, str | None]:
    """("B needed fewer forwards (12 against 20)", "b"), or both the same and None."""
    unit = " s" if what == "seconds" else ""
    if format(va, fmt) == format(vb, fmt):
        return f"both needed as many {what} ({format(va, fmt)}{unit})", None
    side, few, many = ("b", vb, va) if vb < va else ("a", va, vb)
    return (f"{name_b if side == 'b' else name_a} needed fewer {what} ({format(few, fmt)}{unit} against "
            f"{format(many, fmt)}{unit})", side)


def expectation(ma: dict, mb: dict, name_a: str, name_b: str) -> str:
    """Markdown, in sentences: which side needed fewer forwards, token-forwards and seconds, which of the first two
    the seconds went with here, and what that means on the device the runs' wall-clock was measured on. Names
    are escaped by the caller (comparison_summary)."""
    parts = [_fewer(what, ma[key], mb[key], name_a, name_b, fmt) for what, key, fmt in
             (("forwards", "forwards", "d"), ("token-forwards", "token_forwards", "d"), ("seconds", "latency_s", ".2f"))]
    (forwards, by_forwards), (compute, by_compute), (seconds, by_seconds) = parts
    said = f"{forwards[0].upper()}{forwards[1:]}, {compute}, and {seconds}."
    if by_seconds is None or (by_forwards == by_compute):
        went = ""
    elif by_seconds == by_forwards:
        went = " Here the seconds went with the forwards, not the token-forwards."
    else:
        went = " Here the seconds went with the token-forwards, not the forwards."
    device = next((m["device"] for m in (mb, ma) if m["device"]), "")
    kind = device.split(":")[0].split(" ")[0].lower()
    if kind in ("cuda", "mps", "xpu"):
        means = (f" On {esc(device)}, a GPU, a batched verify of k + 1 branches at batch 1 costs little more than one "
                 "forward: fewer forwards should mean fewer seconds, until the branches fill the device.")
    elif kind == "cpu":
        means = (" On a CPU (these runs' device) every token-forward is paid for: the side with fewer token-forwards "
                 "is usually the faster one, whatever the forward count. On a GPU at batch 1 the branches cost little "
                 "more than one forward, so there the side with fewer forwards would usually win.")
    else:
        means = " Neither trace says which device it ran on, so the seconds cannot be read against one."
    return said + went + means


def _device(ma: dict, mb: dict) -> str:
    """Where the two runs' wall-clock was measured, in words ("" when neither trace says)."""
    devices = [m["device"] for m in (ma, mb) if m["device"]]
    if not devices:
        return ""
    return f", on {esc(devices[0])}" if len(set(devices)) == 1 else f", on {esc(ma['device'] or '?')} and {esc(mb['device'] or '?')}"


def _diff_cell(p: int, fill_round, token, other_round, differs: bool, top: int, names, mask_id) -> str:
    fill = viridis((fill_round - 1) / max(top - 1, 1)) if fill_round is not None else "#f7f7f7"
    border = f"3px solid {DIFF_COLOUR}" if differs else "1px solid #bbbbbb"
    label = "·" if fill_round is None else str(fill_round)
    tip = (f"position {p}: filled in round {fill_round if fill_round is not None else '—'}"
           f" (other run: {other_round if other_round is not None else '—'})"
           + (f", token {token_label(token, names, mask_id)}" if token is not None else ""))
    return (f'<div class="lopa-diff-cell" data-position="{p}" data-differs="{int(differs)}" title="{esc(tip)}" '
            f'style="box-sizing:border-box;width:19px;height:18px;margin:1px;border:{border};border-radius:2px;'
            f'background:{fill};color:{text_on(fill) if fill_round is not None else SUBDUED_TEXT};font:9px/14px monospace;'
            f'text-align:center">{esc(label)}</div>')


def tfo_diff_html(a, b, name_a: str = "A", name_b: str = "B", names: dict | None = None) -> str:
    """Both TFO maps aligned position by position: per block, a row for each run, each cell the round
    that run filled the position; positions filled in a different round (or token) are outlined."""
    if not a.records or not b.records:
        return '<div class="lopa-diff lopa-empty">Pick two runs and press Compare runs.</div>'
    d = run_diff(a, b)
    N = int(a.settings.get("block_size") or b.settings.get("block_size"))
    mask_id = a.spec.get("mask_token_id")
    differs = set(d["differs"])
    top = max([r for pair in d["rounds"].values() for r in pair if r is not None], default=1)
    n = max(len(a.tokens), len(b.tokens))
    blocks = []
    for b0 in range(0, n, N):
        rows = []
        for title, run_index in ((name_a, 0), (name_b, 1)):
            cells = "".join(_diff_cell(p, d["rounds"][p][run_index], d["tokens"][p][run_index],
                                       d["rounds"][p][1 - run_index], p in differs, top, names, mask_id)
                            for p in range(b0, min(b0 + N, n)))
            rows.append(f'<div style="display:flex;align-items:center"><div style="width:130px;font-size:11px;'
                        f'overflow:hidden;white-space:nowrap;flex:none">{esc(title)}</div>'
                        f'<div style="display:flex;flex-wrap:wrap">{cells}</div></div>')
        blocks.append(f'<div class="lopa-diff-block" style="margin:3px 0;border-left:3px solid #333;padding-left:4px">'
                      f'<div style="font-size:11px">block {b0 // N}</div>{"".join(rows)}</div>')
    split = d["first_divergence"]
    head = (f'<div style="font-size:12px;margin-bottom:4px">Cell = round the position was filled (colour: early '
            f'dark, late bright). <span style="border:3px solid {DIFF_COLOUR};padding:0 3px">outlined</span>: filled in '
            f'a different round or with a different token ({len(differs)} positions). First divergent round: '
            f'<b data-first-divergence="{"" if split is None else split}">{"none" if split is None else split}</b>.</div>')
    return (f'<div class="lopa-diff" data-differs="{len(differs)}" data-first-divergence="{"" if split is None else split}">'
            f'{head}{"".join(blocks)}</div>')
