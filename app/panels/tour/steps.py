"""The guided tour's six steps, for any vanilla D2F run and LoPA run of the same prompt, and a seventh on token
editing when the LoPA run edits (a model that revises its own tokens: edit_threshold < 1).

Each step's round is picked by a rule applied to the trace (`pick_*`), and every number in its words
is read from the records it shows, so each claim is true of the state the step puts the page in
(tests/test_tour.py recomputes them from the records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lopa.trace import metrics

from ..viz import COMMIT_RULE_NAMES, PEER_RULES, esc, fills, predictions, rule_name, token_label


# -- the steps: rounds picked by rules, words read from the trace -----------------------------------
@dataclass(frozen=True)
class Step:
    key: str
    title: str
    run: str | None            # "d2f" or "lopa": shown in the round view at `round`; None: the comparison
    round: int | None
    target: str                # CSS selector of the panel the step points at
    text: str                  # HTML, every trace-derived value escaped
    facts: dict                # the claims the text makes, for tests


def ready(record, j: int, tau: float) -> int:
    """Positions of branch j whose max prob clears τ_conf after its forward: the next anchor's commits."""
    return sum(p > tau for p in record.branch_max_prob[j])


def pick_fill_round(run) -> int:
    """Step 1's round: the round that commits the most tokens at once (earliest on a tie)."""
    rounds = [r for r in run.records if r.kind == "round"]
    return max(rounds, key=lambda r: (len(r.anchor_positions), -r.round)).round if rounds else 0


def pick_branch_round(run) -> int:
    """Steps 2, 3 and 6's round: the first round that built lookahead branches (else the first round)."""
    rounds = [r for r in run.records if r.kind == "round"]
    with_branches = [r for r in rounds if r.lookahead_positions]
    return (with_branches or rounds or run.records)[0].round


def pick_winner_round(run) -> int | None:
    """Step 4's round: the round where a lookahead branch won and made the most positions confident
    beyond what the anchor alone would have (earliest on a tie); None when the anchor always won."""
    tau = float(run.settings["tau_conf"])
    won = [r for r in run.records if r.kind == "round" and r.winner > 0]
    if not won:
        return None
    return max(won, key=lambda r: (ready(r, r.winner, tau) - ready(r, 0, tau), -r.round)).round


def _score(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.3f}"


def _tok(token: int, names, mask_id) -> str:
    return f"<code>{esc(token_label(token, names, mask_id))}</code>"


def _list(items, limit: int = 8) -> str:
    items = list(items)
    return esc(", ".join(map(str, items[:limit])) + (f", … ({len(items)} in all)" if len(items) > limit else ""))


def step_fill(d2f, names) -> Step:
    r = pick_fill_round(d2f)
    rec, tau = d2f.records[r], float(d2f.settings["tau_conf"])
    masked = len(rec.branch_positions[rec.winner]) if rec.kind != "final" else 0
    forwards = metrics(d2f)["forwards"]
    facts = {"round": r, "committed": sorted(rec.anchor_positions), "masked_after": masked, "forwards": forwards}
    text = (f"A masked diffusion LM writes by unmasking: one forward predicts every masked position at once, and "
            f"every position it is sure of (max prob &gt; τ_conf = {tau}) is committed in parallel. Round {r} of "
            f"vanilla D2F commits <b>{len(rec.anchor_positions)} tokens at once</b> (positions "
            f"{_list(sorted(rec.anchor_positions))}: outlined in blue, tagged A); the {masked} pale cells are still "
            f"masked and show the model's current guess. D2F needed {forwards} forwards for this answer.")
    return Step("fill", "a masked diffusion LM fills a block", "d2f", r, "#canvas", text, facts)


def step_anchor(lopa, names) -> Step:
    r = pick_branch_round(lopa)
    rec, tau, mask_id = lopa.records[r], float(lopa.settings["tau_conf"]), lopa.spec.get("mask_token_id")
    before = predictions(lopa.records[r - 1]) if r > 0 else {}
    over = [p for p in rec.anchor_positions if p in before and before[p].max_prob > tau]
    facts = {"round": r, "anchor": list(rec.anchor_positions), "over_tau": over}
    n = len(rec.anchor_positions)
    tokens = f"{n} token{'s' * (n != 1)}: " + ", ".join(
        f"{p} ← {_tok(t, names, mask_id)}" for p, t in list(zip(rec.anchor_positions, rec.anchor_tokens))[:8]) \
        + (f" and {n - 8} more" if n > 8 else "")
    if not rec.anchor_positions:
        why = "it commits nothing: no position cleared τ_conf and no block was fully activated"
    elif len(over) == len(rec.anchor_positions):
        why = f"it commits {tokens}; each had max prob above τ_conf = {tau} in round {r - 1}'s forward"
    else:
        why = (f"it commits {tokens}; {len(over)} of them cleared τ_conf = {tau} in round {r - 1}'s forward, the "
               "rest is the single most confident position of a fully activated block where none did")
    text = (f"Every LoPA round starts with the <b>anchor</b>: D2F's own commit rule applied to the last round's "
            f"predictions. In round {r} {why}. These are the cells tagged A; the anchor alone is what vanilla D2F "
            f"would do.{peer_lines()}")
    return Step("anchor", "the anchor", "lopa", r, "#canvas", text, facts)


def peer_lines() -> str:
    """The commit rules other decoders use in place of D2F's, one line each (the settings' commit rule; Compare
    decodes each alone): LoPA's lookahead runs over any of them."""
    # Spaces between the items: the card's words read the same as its text with the tags taken out.
    lines = " ".join(f'<li><a href="#term-rule-{rule}">{esc(rule_name(rule))}</a> (commit = {esc(rule)}) '
                    f"{esc(COMMIT_RULE_NAMES[rule][1])}</li>" for rule in PEER_RULES)
    return (" Other decoders commit by other rules; LoPA's lookahead runs over any of them (the settings' commit "
            f'rule), and Compare decodes each alone: <ul class="lopa-tour-peers">{lines}</ul>')


def _chosen(settings: dict, k: int) -> str:
    """Which positions the order policy gave the k branches (lopa/order.py), in words."""
    order = str(settings.get("order", "confidence"))
    which = {"confidence": f"the {k} most confident positions still masked",
             "random": f"{k} still-masked positions drawn at random (order = random)",
             "left_to_right": f"the {k} leftmost positions still masked (order = left_to_right)"}
    floor = float(settings.get("lookahead_min_prob") or 0)
    return (which.get(order, f"{k} still-masked positions chosen by the {esc(order)} order")
            + (f" among those with max prob ≥ {floor:g}" if floor else ""))


def step_branches(lopa, names) -> Step:
    r = pick_branch_round(lopa)
    rec, mask_id = lopa.records[r], lopa.spec.get("mask_token_id")
    k = len(rec.lookahead_positions)
    facts = {"round": r, "lookahead": list(rec.lookahead_positions), "branches": len(rec.branch_scores)}
    if not k:
        text = (f"With k = {lopa.settings.get('k')} this run built no lookahead branch in round {r}: only the "
                "anchor was verified. The table below lists the branches of a round.")
    else:
        adds = ", ".join(f"{p} ← {_tok(t, names, mask_id)}" for p, t in zip(rec.lookahead_positions, rec.lookahead_tokens))
        text = (f"Then LoPA <b>looks ahead</b>: it takes {_chosen(lopa.settings, k)} and builds "
                f"one branch per position, the anchor plus that single extra token ({adds}). All "
                f"{len(rec.branch_scores)} branches, the anchor's included, are verified in <b>one batched "
                f"forward</b>. The table lists what each branch adds and what it scored.")
    return Step("branches", "the lookahead branches", "lopa", r, "#branches", text, facts)


def step_winner(lopa, names) -> Step:
    r = pick_winner_round(lopa)
    tau, mask_id = float(lopa.settings["tau_conf"]), lopa.spec.get("mask_token_id")
    if r is None:
        r = pick_branch_round(lopa)
        rec = lopa.records[r]
        facts = {"round": r, "winner": 0, "score_anchor": rec.branch_scores[0]}
        text = ("Each branch is scored by C(B), the mean confidence of the positions it leaves masked, and the "
                f"highest wins. In this run the anchor won every round (round {r}: C = "
                f"{_score(rec.branch_scores[0])}): no extra token made the rest surer, so LoPA filled like D2F.")
        return Step("winner", "branch confidence and the winner", "lopa", r, "#heatmap", text, facts)
    rec = lopa.records[r]
    w = rec.winner
    p, t = rec.lookahead_positions[w - 1], rec.lookahead_tokens[w - 1]
    after = lopa.records[r + 1] if r + 1 < len(lopa.records) else None
    facts = {"round": r, "winner": w, "position": p, "token": t, "score": rec.branch_scores[w],
             "score_anchor": rec.branch_scores[0], "ready": ready(rec, w, tau), "ready_anchor": ready(rec, 0, tau),
             "next_anchor": len(after.anchor_positions) if after is not None else None}
    nxt = (f" Round {r + 1}'s anchor then committed {facts['next_anchor']} tokens." if after is not None else "")
    text = (f"Which branch wins? Each is scored by <b>C(B)</b>, the mean confidence of the positions it leaves masked. "
            f"In round {r}, branch <b>B{w}</b> (position {p} ← {_tok(t, names, mask_id)}) scored C = "
            f"{_score(rec.branch_scores[w])} against the anchor's {_score(rec.branch_scores[0])} (higher is surer), the "
            f"highest of {len(rec.branch_scores)}. With that one token fixed, <b>{facts['ready']} positions</b> clear τ_conf = "
            f"{tau}, against {facts['ready_anchor']} without it (blue cells: confidence raised).{nxt}")
    return Step("winner", "branch confidence and the winner", "lopa", r, "#heatmap", text, facts)


def earlier_fills(d2f, lopa) -> dict:
    """Positions of the answer (both runs filled them) that LoPA filled in an earlier round than D2F."""
    fd, fl = fills(d2f.records), fills(lopa.records)
    n = min(len(d2f.useful_tokens), len(lopa.useful_tokens))
    both = [p for p in range(n) if p in fd and p in fl]
    gains = {p: fd[p].round - fl[p].round for p in both if fl[p].round < fd[p].round}
    return {"positions": len(both), "earlier": gains, "later": sum(fl[p].round > fd[p].round for p in both),
            "fills": (fd, fl)}


def step_order(d2f, lopa, names) -> Step:
    e = earlier_fills(d2f, lopa)
    fd, fl = e["fills"]
    nd, nl = (metrics(run)["forwards"] for run in (d2f, lopa))
    facts = {"earlier": len(e["earlier"]), "positions": e["positions"], "d2f_forwards": nd, "lopa_forwards": nl}
    if e["earlier"]:
        p = max(e["earlier"], key=lambda q: (e["earlier"][q], -q))
        facts.update(example=p, d2f_round=fd[p].round, lopa_round=fl[p].round)
        detail = (f"LoPA filled <b>{len(e['earlier'])} of the answer's {e['positions']} positions earlier</b> than D2F "
                  f"(most: position {p}, {_tok(fl[p].token, names, lopa.spec.get('mask_token_id'))}, round "
                  f"{fd[p].round} → {fl[p].round})")
    else:
        detail = f"LoPA filled none of the answer's {e['positions']} positions earlier than D2F"
    text = (f"The <b>token filling order</b> is which position is committed in which round. D2F waits until each "
            f"position is sure on its own; LoPA commits one token early when that makes others sure. {detail}, so it "
            f"needed {nl} forwards where D2F needed {nd}. Each map colours a position by the round that filled it; "
            "outlined positions were filled in a different round.")
    return Step("order", "the filling order and why it changes the speed", None, None, "#base-tfo, #lopa-tfo", text,
                facts)


def step_try(lopa, names) -> Step:
    r = pick_branch_round(lopa)
    rec = lopa.records[r]
    guesses = predictions(rec)
    facts = {"round": r}
    if guesses:
        p = min(guesses, key=lambda q: (guesses[q].max_prob, q))        # the model's least sure guess
        g = guesses[p]
        facts.update(position=p, token=g.token, max_prob=g.max_prob)
        example = (f", e.g. position {p}, where round {r}'s forward guesses "
                   f"{_tok(g.token, names, lopa.spec.get('mask_token_id'))} with max prob {g.max_prob:.2f}, its least "
                   "sure guess")
    else:
        example = ""
    text = (f"Your turn: what if another position were filled first? Click a pale (still masked) cell of round "
            f"{r}{example}, choose a token and press <b>Fill first</b> (or <b>Hold back</b>): a fork decodes live "
            f"from round {r + 1} and joins the run list. <b>Compare runs</b> then sets it beside this run, position "
            "by position. The full controls are all on this page; close the tour to use them.")
    # The what-if panel (Fill first, Hold back) opens under the canvas on a click: outlined already then.
    return Step("try", "try it yourself: fill first, fork, compare", "lopa", r, "#canvas, #whatif-panel, #compare-runs",
                text, facts)


def step_edit(lopa, names) -> Step | None:
    """Token editing, on the first round of the LoPA run that edited; None when it never did."""
    rec = next((r for r in lopa.records if r.edit_positions), None)
    if rec is None:
        return None
    mask_id, threshold = lopa.spec.get("mask_token_id"), float(lopa.settings.get("edit_threshold", 1.0))
    p, old, new, q = rec.edit_positions[0], rec.edit_old[0], rec.edit_tokens[0], rec.edit_prob[0]
    m = metrics(lopa)
    n, post = m["edits"], m["post_rounds"]
    facts = {"round": rec.round, "position": p, "old": old, "new": new, "max_prob": q, "edits": n, "post_rounds": post}
    after = (f"; once every position was committed, {post} post-edit round(s) only edited and checked" if post else "")
    text = (f"This model revises its own tokens (<b>token editing</b>): a committed token is not final. In round "
            f"{rec.round} the model read position {p}, committed as {_tok(old, names, mask_id)}, as "
            f"{_tok(new, names, mask_id)} with max prob {q:.2f}, above the editing threshold {threshold:g}, so the "
            f"token was replaced: the cell tagged E, whose hover names both tokens, and the round's explanation names "
            f"each edit. A block stays out of the cache while its tokens still change{after}. This decode made "
            f"<b>{n} edit(s)</b>; Compare sets it beside the same decode without editing.")
    return Step("edit", "the model revises its own tokens", "lopa", rec.round, "#canvas", text, facts)


def tour_steps(d2f, lopa, names: dict | None = None) -> list[Step]:
    """The six steps for a vanilla D2F run and a LoPA run of the same prompt (any two traces), with the token
    editing step before the last when the LoPA run edits."""
    names = names or {}
    edit = step_edit(lopa, names)
    return [step_fill(d2f, names), step_anchor(lopa, names), step_branches(lopa, names), step_winner(lopa, names),
            step_order(d2f, lopa, names), *([edit] if edit else []), step_try(lopa, names)]
