"""One round's branches (anchor + k lookahead) as an HTML table, and the round in plain words.

The table answers "why did the winner win": each branch's extra token, its score C(B) (mean Conf
over its still-masked positions, paper Sec. 3 / LoPA step 5), the change against the anchor, and
how many positions now clear tau_conf (what the next anchor would commit). Under the paper's mean
rule a lookahead branch's gain splits into *removal* (its own filled position left the mean) and
*change* (the extra token moved the other positions' Conf), lopa.rules.score_split.
"""

from __future__ import annotations

import math

from lopa.chains import chain_cut
from lopa.rules import score_split

from .edits import edit_line, post_round_text
from .glossary import COMMIT_RULE_NAMES, rule_name, term_link
from .labels import token_label, token_repr
from .markup import esc
from .palette import ANCHOR_COLOUR, LOOKAHEAD_COLOUR, WINNER_COLOUR, swatch
from .timeline import detail_round, predictions


def _score(x: float) -> str:
    return "∞ (nothing left masked)" if math.isinf(x) else f"{x:.3f}"


def _ready(record, j: int, tau: float) -> int:
    return sum(p > tau for p in record.branch_max_prob[j])


def _proposed(run, r: int, pos: int):
    """What round r - 1's winner predicted at `pos`: what round r's lookahead ranked it by (None if unknown)."""
    return predictions(run.records[r - 1]).get(pos) if r > 0 else None


def _lookahead_conf(run, r: int, pos: int) -> float:
    before = _proposed(run, r, pos)
    return before.conf if before else float("nan")


def split(record, j: int, settings: dict) -> dict | None:
    """The removal / change split of lookahead branch j's ΔC (mean rule only; None otherwise)."""
    if j == 0 or settings.get("branch_score", "mean") != "mean" or record.kind != "round" or len(record.row_fills(j)) != 1:
        return None                                      # a chain of several tokens has no one-position split
    return score_split(record.branch_positions[0], record.branch_conf[0], record.branch_positions[j],
                       record.branch_conf[j], record.row_fills(j)[0][0])


def _split_text(parts: dict | None) -> str:
    if parts is None:
        return ""
    return f"{parts['removal']:+.3f} removal, {parts['change']:+.3f} change"


def _positions_text(positions, tokens, names, mask_id, limit=6) -> str:
    parts = [f"{p}←{token_label(t, names, mask_id)}" for p, t in zip(positions, tokens)]
    more = f" … +{len(parts) - limit}" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


def chain_of(record, j: int) -> int | None:
    """The chain (index into record.chain_*, rank order) verified row j belongs to: one whose kept prefix it is
    (the branch score chose among those), else the first that holds it; None for the anchor or without chains."""
    holding = [c for c, rows in enumerate(record.chain_rows) if j in rows]
    kept = [c for c in holding if record.chain_rows[c][record.chain_kept[c] - 1] == j]
    return (kept or holding or [None])[0]


def cut_sentence(record, c: int, names, mask_id: int, floor: float) -> str:
    """One line (plain text, not yet escaped) on why chain c was cut, or that it was kept whole."""
    cut, first = chain_cut(record, c, floor), record.chain_rows[c][0]
    if cut is None:
        n = len(record.chain_positions[c])
        return (f"B{first}'s chain was kept whole ({n} tokens)." if n > 1 else
                f"B{first}'s chain proposed one token (no later position free for it) and kept it.")
    proposed = repr(token_label(cut["token"], names, mask_id))
    predicted = "nothing" if cut["predicted"] is None else repr(token_label(cut["predicted"], names, mask_id))
    holds = "its first token" if cut["kept"] == 1 else f"its first {cut['kept']} tokens"
    said = (f"predicts {predicted} there (max prob {cut['max_prob']:.3f}), not the chain's {proposed}"
            if cut["failed"] == "token" else
            f"predicts the chain's {proposed} there at max prob {cut['max_prob']:.3f}, under the lookahead floor "
            f"{cut['floor']:g}" if cut["failed"] == "floor" else
            f"predicts the chain's {proposed} there at max prob {cut['max_prob']:.3f}, which passes both "
            "tests: the recorded numbers do not show why it was cut" if cut["predicted"] is not None else
            "records no prediction there: the trace does not show why it was cut")
    return (f"B{first}'s chain was cut after {cut['kept']} of its {cut['proposed']} tokens: at position "
            f"{cut['position']}, row B{cut['row']} (the anchor plus {holds}) {said}.")


def _chain_cell(record, c: int, names, mask_id: int, floor: float) -> str:
    """Chain c (lookahead_depth > 1) in one cell: its proposed tokens in order, kept ✓ or cut ✗, and in words why it
    was cut (shown, not only on hover: a touch screen has none), and which verified rows it took."""
    n, rows = record.chain_kept[c], record.chain_rows[c]
    why = esc(cut_sentence(record, c, names, mask_id, floor))
    tokens = [f'<b class="lopa-chain-kept">{p}←{esc(token_label(t, names, mask_id))} ✓</b>' if i < n else
              f'<s class="lopa-chain-cut">{p}←{esc(token_label(t, names, mask_id))}</s> ✗'
              for i, (p, t) in enumerate(zip(record.chain_positions[c], record.chain_tokens[c]))]
    verified = ", ".join(f"B{j}" for j in rows)
    past = ("" if n == len(rows) else
            f"; {', '.join(f'B{j}' for j in rows[n:])} past the cut: verified, not candidates")
    return (f'<span data-chain="{c}" data-kept="{n}">B{rows[0]}: {" ".join(tokens)}<br>'
            f'<small class="lopa-chain-why">{why} Kept {n} of {len(rows)}; scored as row B{rows[n - 1]} (its rows: '
            f'{verified}{past}).</small></span>')


def branches_table(run, r: int, names: dict[int, str] | None = None) -> str:
    """HTML table of round r's branches; the winner's row is outlined and starred."""
    if not run.records:
        return '<div class="lopa-branches lopa-empty">No rounds yet.</div>'
    r = max(0, min(r, len(run.records) - 1))
    record = run.records[r]
    tau, mask_id = float(run.settings["tau_conf"]), int(run.spec["mask_token_id"])
    if record.kind == "final":
        return ('<div class="lopa-branches">Final round: the anchor\'s commits completed every block, so there '
                'was nothing left to verify and no forward ran.</div>')
    if int(run.settings.get("k") or 0) == 0:
        return no_branches(run, record)
    finite = [s for s in record.branch_scores if not math.isinf(s)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    anchor_score = record.branch_scores[0]
    floor, chained = float(run.settings.get("lookahead_min_prob") or 0), bool(record.chain_rows)
    rows = []
    # One row per chain where chains ran (lookahead_depth > 1): its kept prefix, the row the branch score weighed;
    # every other prefix was verified in the same forward, and the chain's cell names them.
    chain_at = {rows_[kept - 1]: c for c, (rows_, kept) in enumerate(zip(record.chain_rows, record.chain_kept))}
    shown = [0, *chain_at] if chained else range(len(record.branch_scores))      # chains in rank order
    for j in shown:
        score = record.branch_scores[j]
        win = j == record.winner
        if j == 0:
            name = "B0 anchor" if record.kind == "round" else "prompt forward"
            adds = (f"anchor commits {len(record.anchor_positions)}: "
                    f"{_positions_text(record.anchor_positions, record.anchor_tokens, names, mask_id)}"
                    if record.anchor_positions else "anchor commits nothing")
            colour = ANCHOR_COLOUR
        elif len(record.row_fills(j)) > 1:               # a chain's kept prefix (lookahead_depth > 1)
            positions, tokens = zip(*record.row_fills(j))
            name, colour = f"B{j} chain", LOOKAHEAD_COLOUR
            adds = f"anchor + {len(positions)} tokens: {esc(_positions_text(positions, tokens, names, mask_id))}"
        elif chained:                                    # a chain kept to its first token
            pos, tok = record.row_fills(j)[0]
            name, colour = f"B{j} chain", LOOKAHEAD_COLOUR
            adds = f"anchor + position {pos} ← <b>{esc(token_label(tok, names, mask_id))}</b>"
        else:
            pos, tok = record.row_fills(j)[0]
            name, colour = f"B{j} lookahead", LOOKAHEAD_COLOUR
            adds = (f"anchor + position {pos} ← <b title=\"{esc(token_repr(tok, names))}\">"
                    f"{esc(token_label(tok, names, mask_id))}</b> (its Conf was {_lookahead_conf(run, r, pos):.3f})")
        width = 100 if math.isinf(score) else (8 + 92 * (score - lo) / (hi - lo) if hi > lo else 100)
        delta = "" if j == 0 or math.isinf(score) or math.isinf(anchor_score) else f"{score - anchor_score:+.3f}"
        bar = (f'<div style="background:{WINNER_COLOUR if win else colour};height:10px;width:{width:.0f}%;'
               f'border-radius:2px"></div>')
        style = f"outline:3px solid {WINNER_COLOUR};font-weight:600" if win else ""
        rows.append(
            f'<tr class="lopa-branch{" lopa-winner" if win else ""}" data-branch="{j}" style="{style}">'
            f'<td>{"★ " if win else ""}{name}</td><td>{adds if j else esc(adds)}</td>'
            + (f'<td style="font-size:12px">{_chain_cell(record, chain_at[j], names, mask_id, floor) if j else ""}</td>'
               if chained else "") +
            f'<td style="text-align:right">{len(record.branch_positions[j])}</td>'
            f'<td style="text-align:right">{_ready(record, j, tau)}</td>'
            f'<td style="min-width:150px">{_score(score)}{bar}</td><td style="text-align:right">{delta}</td>'
            f'<td style="text-align:right;font-size:12px">{_split_text(split(record, j, run.settings))}</td></tr>')
    head = ("<tr><th>branch</th><th>what it fills</th>" + ("<th>chain: kept ✓ / cut ✗, and why</th>" if chained else "")
            + "<th>masked left</th>"
            f"<th>max prob &gt; τ_conf={tau}</th><th>score C(B) = mean Conf of masked</th><th>Δ vs anchor</th>"
            '<th title="removal: the gain from its own filled position leaving the mean; change: what the extra '
            'token did to the other positions">Δ = removal + change</th></tr>')
    legend = (f'<div style="font-size:12px;margin-top:4px">Bars: {swatch(ANCHOR_COLOUR)} anchor, '
              f'{swatch(LOOKAHEAD_COLOUR)} lookahead branch, '
              f'{swatch(WINNER_COLOUR)} ★ winner (highest C; ties go to lookahead branches in '
              f'rank order). {term_link("Conf")} = {esc(str(run.settings["confidence"]))} (a masked position\'s '
              f'confidence score); {term_link("τ_conf")} = the threshold a commit needs. '
              'Δ = removal + change: filling a low-confidence position lifts a mean over the remaining positions by '
              'itself (removal); only the change is the extra token raising the confidence of the others.'
              + (f' {term_link("chain", "Chains")}: one row per chain, scored at its kept prefix; every prefix of '
                 'every chain was verified in the same forward, and a row past a cut does not compete.'
                 if chained else '') + '</div>')
    return (f'<div class="lopa-branches" data-round="{r}"><table style="border-collapse:collapse;width:100%;'
            f'font-size:13px">{head}{"".join(rows)}</table>{legend}</div>')


def no_branches(run, record) -> str:
    """The one line shown in place of the table where a run has no lookahead (k = 0): there is only the
    anchor, so nothing to rank."""
    rule = str(run.settings.get("commit", "threshold"))
    what = ("the prompt forward verifies the first window" if record.kind == "prefill" else
            f"the {esc(rule_name(rule))} rule committed {len(record.anchor_positions)} token(s) and one forward "
            "verified the window")
    return (f'<div class="lopa-branches lopa-no-branches" data-round="{record.round}" data-branches="0">No branches '
            f'to compare: k = 0, so each round has only the {term_link("commit rule", "commit rule")}\'s own commit '
            f'(round {record.round}: {what}). Set k to 1 or more to see LoPA\'s lookahead branches over it.</div>')


def _last_branches(run, r: int) -> str:
    """Where a finished run's branches are to be seen: the final round has none, so its branches table,
    heatmap and rank lanes show the last round before `r` that had lookahead branches (detail_round)."""
    last = detail_round(run.records, r)
    if last == r:
        return ""
    won = " (a lookahead branch won it)" if run.records[last].winner > 0 else " (the anchor won it)"
    return (f" This round has no branches of its own: the branches, heatmap and rank lanes below are round "
            f"{last}'s, the last round with lookahead branches{won}; move the slider there to see its canvas.")


def detail_note(run, r: int) -> str:
    """The line above the branches table when it shows another round than the slider's (detail_round)."""
    last = detail_round(run.records, r) if run.records else r
    return "" if last == r else (f'<div class="lopa-detail-note" data-detail-round="{last}">Round {r} is the finish, '
                                 f'with no branches: shown below is round {last}, the last round with lookahead '
                                 'branches.</div>')


def explain_round(run, r: int, names: dict[int, str] | None = None) -> str:
    """A few plain sentences (Markdown) on round r: anchor, lookahead branches, winner, commits."""
    if not run.records:
        return "Press **Run** to stream a decode round by round, or **Step** to advance one round."
    r = max(0, min(r, len(run.records) - 1))
    rec, s = run.records[r], run.settings
    tau, mask_id, N = float(s["tau_conf"]), int(run.spec["mask_token_id"]), int(s["block_size"])
    if rec.kind == "prefill":
        ready = _ready(rec, 0, tau)
        return (f"**Round 0 — prompt forward.** The model reads the prompt and one all-mask block of {N} positions "
                f"and predicts every position; nothing is committed yet. {ready} positions already have max prob "
                f"> τ_conf = {tau}; the next round's anchor commits them (or, if none, the single most confident).")
    edit_threshold = float(s.get("edit_threshold", 1.0))
    edited = edit_line(rec, names, mask_id, edit_threshold)          # token editing's line ("" without edits)
    if rec.kind == "post":
        return post_round_text(rec, names, mask_id, edit_threshold)
    if rec.kind == "final":
        done = (f"The anchor committed the last {len(rec.anchor_positions)} token(s)" if rec.anchor_positions
                else f"Round {r - 1} already completed the last masked positions")
        return (f"**Round {r} — finish.** {done}: every appended block is complete and no block will be added, "
                f"so no forward was needed. Decoding is done.{' ' + edited if edited else ''}{_last_branches(run, r)}")
    n_anchor = len(rec.anchor_positions)
    rule = str(s.get("commit", "threshold"))
    how = (f"max prob > τ_conf = {tau}, or the single most confident position of a fully activated block"
           if rule == "threshold" else f"{rule_name(rule)}: {COMMIT_RULE_NAMES[rule][2]}" if rule in COMMIT_RULE_NAMES
           else f"commit = {rule}")
    anchor = (f"the commit rule on round {r - 1}'s winner predictions committed **{n_anchor}** token(s) ({esc(how)})"
              if n_anchor else "no position qualified and no block was fully activated, so it commits nothing")
    anchor += esc(dependency_sentence(rec.extra.get("commit_reasons"), s))
    k = len(rec.lookahead_positions)
    if k == 0:
        floor = float(s.get("lookahead_min_prob") or 0)
        alone = "vanilla D2F" if rule == "threshold" else f"{esc(rule_name(rule))} alone"
        look = (f"k = 0 ({alone}): no lookahead branches, only the anchor was verified."
                if int(s["k"]) == 0 else "no lookahead branch this round (no masked position was left"
                + (f", none had max prob ≥ the lookahead floor {floor:g}" if floor else "")
                + ", or the adaptive branch budget chose none).")
    else:
        made = (f"each started a chain of up to {s.get('lookahead_depth', 1)} tokens, every prefix of every chain a row."
                f" All {len(rec.branch_scores)} rows" if rec.chain_rows else
                f"each made one branch: the anchor plus that single extra token. All {k + 1} branches")
        look = (f"the {k} most confident remaining positions ({', '.join(map(str, rec.lookahead_positions[:8]))}"
                f"{'…' if k > 8 else ''}) {made} were verified in one batched forward ({rec.forward_seconds * 1e3:.0f} ms).")
    score0, w = rec.branch_scores[0], rec.winner
    if w == 0:
        win = (f"**Winner: the anchor** (C = {_score(score0)}). No extra token raised the mean confidence of the "
               "remaining positions, so only the anchor's tokens are kept.")
    elif len(rec.row_fills(w)) > 1:                       # a chain (lookahead_depth > 1): which of it was kept
        fills, sw = rec.row_fills(w), rec.branch_scores[w]
        win = (f"**Winner: B{w}**, a chain of {len(fills)} tokens "
               f"({esc(_positions_text(*zip(*fills), names, mask_id))}): mean Conf of its "
               f"{len(rec.branch_positions[w])} still-masked positions is {_score(sw)}, the highest among the anchor "
               "and each branch's kept chain.")
    else:
        pos, tok = rec.row_fills(w)[0]
        sw = rec.branch_scores[w]
        gain = "" if math.isinf(sw) or math.isinf(score0) else f" ({sw - score0:+.3f} over the anchor's {score0:.3f})"
        win = (f"**Winner: B{w}**, which adds <code>{esc(token_label(tok, names, mask_id))}</code> at position {pos}: mean Conf of its "
               f"{len(rec.branch_positions[w])} still-masked positions is {_score(sw)}{gain}, the highest of "
               f"{k + 1}. With that one token fixed, {_ready(rec, w, tau)} position(s) clear τ_conf "
               f"(anchor: {_ready(rec, 0, tau)}) and become the next round's anchor.{_why(split(rec, w, s))}"
               f"{_own(_proposed(run, r, pos), tau)}")
    if w > 0 and rec.chain_rows:                          # lookahead_depth > 1: why the winning chain ends where it does
        floor = float(s.get("lookahead_min_prob") or 0)
        win += f" *Chain:* {esc(cut_sentence(rec, chain_of(rec, w), names, mask_id, floor))}"
    cached = f" {rec.n_cached_blocks} block(s) now sit in the prefix cache." if rec.n_cached_blocks else ""
    return (f"**Round {r}.** {edited + ' ' if edited else ''}*Anchor:* {anchor}. *Lookahead:* {look} {win} "
            f"This round kept **{rec.committed}** token(s).{cached}")


def _list(positions: list[int]) -> str:
    return ", ".join(map(str, positions[:8])) + ("…" if len(positions) > 8 else "")


def dependency_sentence(reasons: dict | None, s: dict) -> str:
    """commit=dawn: why each position was committed or held back, from the sets the rule recorded (the round's
    extra["commit_reasons"], lopa.rules.dawn_anchor); "" for rules that record none."""
    if not reasons:
        return ""
    said = [f"{len(reasons[key])} {words} ({_list(reasons[key])})" for key, words in (
        ("sure", f"sure (max prob ≥ τ_conf = {s.get('tau_conf')})"),
        ("induced", f"leaning by the round's attention on a sure decoded token (max prob ≥ {s.get('dawn_induce')})"),
        ("free", f"a set of which no two lean on each other (max prob ≥ {s.get('dawn_low')})"),
        ("fallback", "the block's fallback")) if reasons.get(key)]
    held = [f"{len(reasons[key])} {words} ({_list(reasons[key])})" for key, words in (
        ("conflict", "because each leans on, or is leaned on by, a more probable one that was committed"),
        ("leans", "because each leans on a token committed now as sure and induced")) if reasons.get(key)]
    text = f". Of them: {'; '.join(said)}" if said else ""
    if held:
        text += f". Held back though over {s.get('dawn_low')}: " + "; ".join(held)
    return text


def _own(proposed, tau: float) -> str:
    """The winning lookahead token's own max prob when proposed, which the score never checks."""
    if proposed is None or proposed.max_prob > tau:
        return ""
    return (f" The token itself had max prob {proposed.max_prob:.2f} when it was proposed, below the τ_conf = {tau} a commit "
            "needs: C(B) scores what it does to the other positions, never whether it is right (a lookahead "
            "floor, in the settings, keeps such positions out).")


def _why(parts: dict | None) -> str:
    """The winner's gain in plain words: how much came from dropping its own position from the mean."""
    if parts is None or parts["delta"] == 0:
        return ""
    removal, change = parts["removal"], parts["change"]
    share = 100 * removal / parts["delta"] if parts["delta"] > 0 else float("nan")
    who = ("mostly because the position it filled was less confident than the rest, so leaving the mean raised "
           "the mean by itself" if removal > change else
           "mostly because the extra token raised the confidence of the other positions")
    return (f" **Why it won:** of its {parts['delta']:+.3f}, {removal:+.3f}"
            f"{f' ({share:.0f}%)' if not math.isnan(share) else ''} is *removal* (its filled position no longer "
            f"counts in the mean) and {change:+.3f} is *change* (the other positions' confidence with the token "
            f"fixed): it won {who}.")
