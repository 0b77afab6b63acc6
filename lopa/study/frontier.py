"""Study 6: every decoder on one frontier: accuracy against TPF, token-forwards and tokens/s.

    python -m lopa.study frontier [--n 30] [--rules threshold,eb,...] [--values 3] [--ks 0,4,14]
                                  [--editing off|on|off,on] [--out DIR]

Every commit rule (D2F's threshold and each peer's of lopa/peers.py: eb, factor, frechet, joint,
stable, learned, dawn) at --values values of its own knob (SWEEPS: the first is the settings' own value, then the
grid's others), each with and without lookahead (--ks: k = 0 is the rule alone, k > 0 LoPA's branches
over that rule's anchor), on the same problems, greedy, every other setting the paper's. Each problem
runs every cell back to back in a Williams order (lopa.tasks.turns), so a shared machine's load falls
on all of them alike. Per cell: accuracy, TPF (all tokens over all forwards), token-forwards per answer
(the tokens every forward processed, summed: a verify of k + 1 branches over W positions counts
(k + 1) W) and tokens/s (all tokens over all seconds, on the device it ran on), and whether it is on
the Pareto front of accuracy against each of the three (fronts). Against two references: D2F (the
threshold rule at the settings' tau_conf, k = 0) and LoPA (the same at the largest k of --ks), the
issue's goal for each cell: accuracy within 1 point of D2F's, TPF at least LoPA's, tokens/s at least
twice D2F's (goal), and how far each cell is from it. Writes frontier.csv / .parquet (one row per
decode), frontier.html, frontier.png and frontier.json.

--editing takes token editing as one more knob (lopa/editing.py): off (edit_threshold 1), on (the run's own
edit_threshold: the model's, or --edit-threshold), or both, every cell twice; an editing cell's name ends in
"+edit", and the references are the cells without editing.

commit=eb reads each position's entropy from Conf, so its cells run with confidence=neg_entropy (the
paper's Conf) whatever --confidence says.
"""

from __future__ import annotations

from collections.abc import Iterator

from lopa.settings import MAX_LOOKAHEAD, DecodeSettings
from lopa.study.common import decode_one, start, write_results
from lopa.study.declaration import Knob, Study
from lopa.study.stats import pareto_front
from lopa.tasks.turns import in_turns
from lopa.trace import pooled

# Each rule's own knob and the values it sweeps: the settings' own value first (the paper's or the
# model's), then these, from the most to the least parallel side of it, the first ones taken first.
SWEEPS = {"threshold": ("tau_conf", (0.7, 0.5)),
          "eb": ("eb_gamma", (1.0, 0.01)),
          "factor": ("factor_f", (2.0, 0.5)),
          "frechet": ("frechet_margin", (-0.5, 0.5)),
          "joint": ("tau_conf", (0.7, 0.5)),
          "stable": ("stable_js", (0.1, 0.001)),
          "learned": ("learned_threshold", (0.9, 0.99)),
          "dawn": ("dawn_low", (0.5, 0.9))}
RULES = tuple(SWEEPS)
STUDY_RULES_DEFAULT = ",".join(RULES)
LOPA_KS = (0, 4, 14)
LIVE_K = 4                   # a live run's lookahead where the app's k is 0
GOAL_ACCURACY_POINTS = 1.0   # the goal: accuracy within this many points of D2F's,
GOAL_TPS_RATIO = 2.0         # tokens/s at least this many times D2F's, and TPF at least LoPA's
MEASURES = (("tpf", 1), ("token_forwards", -1), ("tps", 1))   # (measure, +1: more is better, -1: less)
STUDY = Study(
    "frontier", "Every decoder on one frontier", rank=6, n=30,
    per_row=("k", "commit", "tau_conf", "eb_gamma", "factor_f", "frechet_margin", "stable_js", "learned_threshold",
             "dawn_low"),                                                                      # each cell sets them
    knobs=(Knob("rules", str, STUDY_RULES_DEFAULT, f"commit rules, comma-separated (default all: {','.join(RULES)})"),
           Knob("values", int, 3, "values of each rule's own knob (the settings' own first; default 3)", low=1,
                high=3, live=(1, 3, 1), label="knob values per rule"),
           Knob("ks", str, ",".join(map(str, LOPA_KS)), "lookahead k per cell, comma-separated (0: the rule alone; "
                "the largest is the LoPA reference)"),
           Knob("editing", str, "off", "token editing per cell: off, on (at the run's edit_threshold: the model's "
                "own or --edit-threshold) or off,on (every cell both ways)")),
    figure=True, app=True)


def runnable(loaded, rules, base: DecodeSettings) -> tuple[str, ...]:
    """`rules` less `learned` where the model has no commit filter for the run's Conf (lopa.filter.filter_for: none
    trained for it, or one trained with another Conf)."""
    from lopa.filter import filter_for
    try:
        filter_for(loaded.spec, base.confidence)
    except ValueError:
        return tuple(r for r in rules if r != "learned")
    return tuple(rules)


def sweep_values(base: DecodeSettings, rule: str, values: int) -> list[float]:
    """The first `values` values rule `rule` sweeps of its own knob: the settings' own value, then SWEEPS'."""
    knob, others = SWEEPS[rule]
    own = getattr(base, knob)
    return [own, *[v for v in others if v != own]][:values]


EDITING = ("off", "on")


def editing_thresholds(base: DecodeSettings, editing: str) -> list[float]:
    """The edit_threshold of each --editing value (off: 1, no editing; on: the run's own), in EDITING order;
    ValueError where `on` has no threshold below 1 to run at or a value is not off/on."""
    asked = [e.strip() for e in editing.split(",") if e.strip()]
    unknown = sorted(set(asked) - set(EDITING))
    if unknown or not asked:
        raise ValueError(f"--editing: off, on or off,on; got {editing!r}")
    if "on" in asked and base.edit_threshold >= 1:
        raise ValueError("--editing on: this run does not edit (edit_threshold 1); pick a model that edits "
                         "(assets/models/edit-gsm-dllm) or give --edit-threshold below 1")
    return [1.0 if e == "off" else base.edit_threshold for e in EDITING if e in asked]


def cells(base: DecodeSettings, rules, values: int, ks, edits=(1.0,)) -> list[tuple[str, DecodeSettings, bool]]:
    """(name, settings, whether its knob has the settings' own value) of every cell: rule, knob value, k and
    edit_threshold (1: no editing)."""
    out = []
    for rule in rules:
        knob = SWEEPS[rule][0]
        for i, value in enumerate(sweep_values(base, rule, values)):
            for k in ks:
                for edit in edits:
                    settings = base.replace(commit=rule, k=k, edit_threshold=edit, **{knob: value},
                                            **({"confidence": "neg_entropy"} if rule == "eb" else {}))
                    out.append((cell_name(rule, knob, value, k, edit < 1), settings, i == 0))
    return out


def cell_name(rule: str, knob: str, value: float, k: int, editing: bool = False) -> str:
    return f"{rule} {knob}={value:g} k={k}" + (" +edit" if editing else "")


def references(df) -> dict | None:
    """{"d2f": its cell, "lopa": its cell} of a table: the threshold rule at the settings' own tau_conf, k = 0
    and the largest k there; None where the table has neither (no threshold rule, or no k = 0 or k > 0)."""
    own = df[(df.rule == "threshold") & df.own_value]
    if "editing" in df and (~df.editing).any():
        own = own[~own.editing]                        # the references decode without editing
    if not len(own) or own.k.min() != 0 or own.k.max() == 0:
        return None
    return {"d2f": own[own.k == 0].cell.iloc[0], "lopa": own[own.k == own.k.max()].cell.iloc[0]}


def iter_frontier(loaded, problems: list[dict], configs, data: str = "", shots: int = 0) -> Iterator[dict]:
    """One row per decode, problem by problem (a stopped study has whole problems); each problem takes
    the cells in its Williams order."""
    for i, problem in enumerate(problems):
        for name, settings, own in in_turns(configs, i):
            run, row = decode_one(loaded, settings, problem, data=data, shots=shots)
            knob = SWEEPS[settings.commit][0]
            yield {"problem": row.pop("problem"), "cell": name, "rule": settings.commit, "knob": knob,
                   "value": float(getattr(settings, knob)), "own_value": own, "k": settings.k,
                   "editing": settings.edit_threshold < 1, **row}


def fronts(rows: list[dict]) -> list[dict]:
    """`rows` (one per cell: accuracy, tpf, token_forwards, tps) with front_<measure> set for each measure:
    no other cell has accuracy and that measure at least as good, one of them better (more TPF and
    tokens/s, fewer token-forwards). An ungraded cell's accuracy counts as 0 (all alike: the measure decides)."""
    for measure, sign in MEASURES:
        on = pareto_front([(r["accuracy"] if r["accuracy"] is not None else 0.0, sign * r[measure]) for r in rows])
        for i, r in enumerate(rows):
            r[f"front_{measure}"] = i in on
    for r in rows:
        r["front_all"] = all(r[f"front_{m}"] for m, _ in MEASURES)
    return rows


def goal(rows: list[dict], refs: dict) -> dict | None:
    """Each cell's distance from the goal (None without both references): accuracy points over D2F's,
    TPF over LoPA's, tokens/s over D2F's, and whether all three hold (accuracy within GOAL_ACCURACY_POINTS,
    TPF ratio >= 1, tokens/s ratio >= GOAL_TPS_RATIO), set on each row; -> the references' numbers."""
    by = {r["cell"]: r for r in rows}
    d2f, lopa = by.get(refs["d2f"]), by.get(refs["lopa"])
    if d2f is None or lopa is None:
        return None
    for r in rows:
        delta = (None if r["accuracy"] is None or d2f["accuracy"] is None
                 else 100 * (r["accuracy"] - d2f["accuracy"]))
        r["accuracy_points_vs_d2f"] = delta
        r["tpf_over_lopa"] = r["tpf"] / lopa["tpf"] if lopa["tpf"] else float("nan")
        r["tps_over_d2f"] = r["tps"] / d2f["tps"] if d2f["tps"] else float("nan")
        r["goal"] = bool((delta is None or delta >= -GOAL_ACCURACY_POINTS) and r["tpf_over_lopa"] >= 1
                         and r["tps_over_d2f"] >= GOAL_TPS_RATIO)
    return {"d2f": refs["d2f"], "lopa": refs["lopa"], "accuracy_points": GOAL_ACCURACY_POINTS,
            "tps_ratio": GOAL_TPS_RATIO, "reached_by": [r["cell"] for r in rows if r["goal"]]}


def summarize_frontier(df) -> dict:
    """Per cell (by rule, knob value, k): problems, accuracy, TPF, token-forwards per answer, tokens/s, ms per
    answer, its fronts, and against the table's references (references()) its distance from the goal."""
    if not len(df):
        return {"problems": 0, "cells": []}
    rows = []
    for name, g in df.groupby("cell", sort=False):
        graded, total = g.dropna(subset=["correct"]), pooled(g.to_dict("records"), tokens="tokens")
        first = g.iloc[0]
        editing = bool(first.get("editing", False))
        rows.append({"cell": name, "rule": first.rule, "knob": first.knob, "value": float(first.value),
                     "k": int(first.k), "editing": editing, "problems": len(g),
                     "edits": float(g.edits.mean()) if "edits" in g else 0.0,
                     "accuracy": float(graded.correct.mean()) if len(graded) else None,
                     "tpf": total["tpf_useful"], "token_forwards": total["token_forwards_mean"], "tps": total["tps"],
                     "latency_ms": float(g.latency_s.mean() * 1e3)})
    rows.sort(key=lambda r: (RULES.index(r["rule"]) if r["rule"] in RULES else len(RULES), r["value"], r["k"],
                             r["editing"]))
    edit_effects(df, rows)
    fronts(rows)
    refs = references(df)
    out = {"problems": int(df.problem.nunique()), "cells": rows}
    reached = goal(rows, refs) if refs else None
    if reached:
        out["goal"] = reached
        for role in ("d2f", "lopa"):
            out[role] = placement(rows, refs[role])
        out["standings"] = standings(rows, refs)
    return out


def edit_effects(df, rows: list[dict]) -> None:
    """On each editing cell's row: the answers editing fixed and broke against the same decoder without editing
    (its twin: the same rule, knob value and k), problem by problem, graded problems only. Cells without a twin
    are left as they are."""
    if "editing" not in df or not df.editing.any() or df.editing.all():
        return
    graded = df.dropna(subset=["correct"])
    key = ["rule", "value", "k", "problem"]
    pairs = graded[graded.editing][key + ["correct"]].merge(graded[~graded.editing][key + ["correct"]], on=key,
                                                            suffixes=("_on", "_off"))
    on, off = pairs.correct_on.astype(bool), pairs.correct_off.astype(bool)
    pairs = pairs.assign(fixed=on & ~off, broken=~on & off)
    counts = {cell: (int(g.fixed.sum()), int(g.broken.sum())) for cell, g in pairs.groupby(["rule", "value", "k"])}
    for r in rows:
        if r["editing"] and (r["rule"], r["value"], r["k"]) in counts:
            r["fixed_by_editing"], r["broken_by_editing"] = counts[(r["rule"], r["value"], r["k"])]


def standings(rows: list[dict], refs: dict) -> list[dict]:
    """Where each rule stands, at the accuracy the goal asks (within GOAL_ACCURACY_POINTS of D2F's): its cell with
    the most tokens/s there (lookahead or not, any knob value), against the LoPA reference and against the best
    cell of every other rule there, by tokens/s and by TPF. A rule with no cell that accurate stands nowhere
    (cell None). Editing and non-editing cells of a rule count alike."""
    by = {r["cell"]: r for r in rows}
    d2f, lopa = by[refs["d2f"]], by[refs["lopa"]]
    floor = (d2f["accuracy"] or 0.0) - GOAL_ACCURACY_POINTS / 100 - 1e-9
    accurate = [r for r in rows if (r["accuracy"] or 0.0) >= floor]
    out = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        mine = [r for r in accurate if r["rule"] == rule]
        others = [r for r in accurate if r["rule"] != rule]
        best = max(mine, key=lambda r: r["tps"]) if mine else None
        rival = max(others, key=lambda r: r["tps"]) if others else None
        rival_tpf = max(others, key=lambda r: r["tpf"]) if others else None
        out.append({"rule": rule, "cell": best and best["cell"], "accuracy": best and best["accuracy"],
                    "tps": best and best["tps"], "tpf": best and best["tpf"],
                    "tps_over_lopa": best and (best["tps"] / lopa["tps"] if lopa["tps"] else float("nan")),
                    "tpf_over_lopa": best and (best["tpf"] / lopa["tpf"] if lopa["tpf"] else float("nan")),
                    "best_other_tps": rival and rival["cell"], "tps_over_best_other": best and rival and best["tps"] / rival["tps"],
                    "best_other_tpf": rival_tpf and rival_tpf["cell"],
                    "tpf_over_best_other": best and rival_tpf and max(r["tpf"] for r in mine) / rival_tpf["tpf"]})
    return out


def placement(rows: list[dict], name: str) -> dict:
    """Where cell `name` sits on each front: {"front": {measure: on it}, "dominated_by": {measure: how many
    cells beat it (accuracy and that measure at least as good, one better)}, "best": {measure: the best
    value of any cell at least as accurate}}."""
    acc = lambda r: r["accuracy"] if r["accuracy"] is not None else 0.0   # noqa: E731
    me = next(r for r in rows if r["cell"] == name)
    out = {"front": {}, "dominated_by": {}, "best": {}}
    for measure, sign in MEASURES:
        as_good = [r for r in rows if acc(r) >= acc(me)]
        out["front"][measure] = me[f"front_{measure}"]
        out["dominated_by"][measure] = sum(sign * r[measure] >= sign * me[measure]
                                           and (acc(r) > acc(me) or sign * r[measure] > sign * me[measure])
                                           for r in as_good)
        out["best"][measure] = (max if sign > 0 else min)(r[measure] for r in as_good)
    return out


# -- the app's view of this study (lopa.study.STUDIES) ------------------------------------------------
def live_ks(base: DecodeSettings) -> tuple[int, int]:
    """A live run's lookahead: none, and the app's k (LIVE_K where that is 0)."""
    return (0, base.k or LIVE_K)


def live(loaded, problems: list[dict], base: DecodeSettings, values: int):
    """The study's decodes for a live run (every rule, `values` values of its knob, k = 0 and the app's k):
    {"done", "total", "row", "rounds"} per decode, and "complete": the problem id on the decode that
    completes a problem."""
    configs = cells(base, runnable(loaded, RULES, base), values, live_ks(base))
    total = len(problems) * len(configs)
    for done, row in enumerate(iter_frontier(loaded, problems, configs), 1):
        yield {"done": done, "total": total, "row": row, "rounds": [],
               **({"complete": row["problem"]} if done % len(configs) == 0 else {})}


def live_summary(rows: list[dict], rounds: list[dict]) -> tuple[dict, dict]:
    import pandas as pd
    df = pd.DataFrame(rows)
    return summarize_frontier(df), {"": df}


def figure(tables: dict, summary: dict, title: str):
    from lopa.study.figures import frontier_figure
    return frontier_figure(summary, title)


def png(tables: dict, summary: dict, title: str, path) -> None:
    from lopa.study.figures import frontier_png
    frontier_png(summary, title, path)


def _fmt(value, spec: str, none: str = "n/a") -> str:
    return none if value is None else format(value, spec)


def report(summary: dict) -> str:
    if not summary.get("problems"):
        return "no complete problem yet"
    g = summary.get("goal")
    lines = [f"{summary['problems']} problem{'s' * (summary['problems'] != 1)}, {len(summary['cells'])} decoders"
             + (f"; D2F = {g['d2f']}, LoPA = {g['lopa']}" if g else ""),
             f"{'decoder':>30} {'accuracy':>9} {'TPF':>6} {'tok-fwd/answer':>15} {'tokens/s':>9} {'fronts (TPF, tok-fwd, tok/s)':>29}"
             + (f" {'acc vs D2F':>10} {'TPF/LoPA':>9} {'tok/s / D2F':>11} {'goal':>5}" if g else "")]
    for r in summary["cells"]:
        marks = " ".join("*" if r[f"front_{m}"] else "." for m, _ in MEASURES)
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy'] * 100:.1f}%"
        line = (f"{r['cell']:>30} {acc:>9} {r['tpf']:>6.2f} "
                f"{r['token_forwards']:>15.0f} {r['tps']:>9.0f} {marks:>29}")
        if g:
            line += (f" {_fmt(r['accuracy_points_vs_d2f'], '>+10.1f'):>10} {r['tpf_over_lopa']:>9.2f} "
                     f"{r['tps_over_d2f']:>11.2f} {'yes' if r['goal'] else '':>5}")
        if "fixed_by_editing" in r:
            line += f"  editing: {r['edits']:.2f} edits/answer, fixed {r['fixed_by_editing']}, broke {r['broken_by_editing']}"
        lines.append(line)
    if g:
        for role in ("d2f", "lopa"):
            where = summary[role]
            parts = [f"{WORDS[m]}: on the front" if where["front"][m] else
                     f"{WORDS[m]}: {where['dominated_by'][m]} decoders beat it (best at its accuracy {format(where['best'][m], FORMATS[m])})"
                     for m, _ in MEASURES]
            lines.append(f"{'D2F' if role == 'd2f' else 'LoPA'} ({g[role]}): " + "; ".join(parts))
        lines.append(f"goal (accuracy within {g['accuracy_points']:g} point of D2F, TPF >= LoPA's, tokens/s >= "
                     f"{g['tps_ratio']:g}x D2F's): " + (", ".join(g["reached_by"]) if g["reached_by"] else "reached by none"))
        lines.append(f"each rule at accuracy within {g['accuracy_points']:g} point of D2F's: its fastest cell; tokens/s and "
                     "TPF over LoPA's, and over the best other rule's there")
        for st in summary.get("standings", []):
            if st["cell"] is None:
                lines.append(f"{st['rule']:>10}: no cell that accurate")
                continue
            lines.append(f"{st['rule']:>10}: {st['cell']} ({st['accuracy'] * 100:.1f}%, {st['tps']:.0f} tokens/s, TPF "
                         f"{st['tpf']:.2f}): tokens/s x{st['tps_over_lopa']:.2f} LoPA's, "
                         f"x{_fmt(st['tps_over_best_other'], '.2f')} {st['best_other_tps']}'s; best TPF "
                         f"x{_fmt(st['tpf_over_best_other'], '.2f')} {st['best_other_tpf']}'s")
    return "\n".join(lines)


WORDS = {"tpf": "TPF", "token_forwards": "token-forwards", "tps": "tokens/s"}
FORMATS = {"tpf": ".2f", "token_forwards": ".0f", "tps": ".0f"}


def main(argv=None) -> int:
    parser = STUDY.parser()
    args = STUDY.parse(argv, parser)
    rules = tuple(r for r in args.rules.split(",") if r)
    unknown = sorted(set(rules) - set(RULES))
    if unknown or not rules:
        parser.error(f"--rules: unknown rule {unknown[0]!r}; the rules are {', '.join(RULES)}" if unknown
                     else f"--rules: name at least one of {', '.join(RULES)}")
    try:
        ks = sorted({int(k) for k in args.ks.split(",") if k.strip()})
    except ValueError:
        parser.error(f"--ks: whole numbers, comma-separated (e.g. 0,4,14); got {args.ks!r}")
    if not ks or not 0 <= ks[0] <= ks[-1] <= MAX_LOOKAHEAD:
        parser.error(f"--ks: give k from 0 to {MAX_LOOKAHEAD}, comma-separated, e.g. 0,4,14; got {args.ks!r}")
    import pandas as pd
    from tqdm import tqdm

    from lopa.study.figures import frontier_figure, frontier_png
    started = start(args)
    loaded, hw, problems, base = started.loaded, started.hw, started.problems, started.base
    try:
        edits = editing_thresholds(base, args.editing)
    except ValueError as e:
        parser.error(str(e))
    if args.rules == STUDY_RULES_DEFAULT and (ok := runnable(loaded, rules, base)) != rules:
        print(f"{loaded.spec.name} has no commit filter for confidence={base.confidence}, so the learned rule sits out "
              "(train one: python -m lopa.train filter --model DIR)")
        rules = ok
    configs = cells(base, rules, args.values, ks, edits)
    decode_one(loaded, base, problems[0], data=args.data, shots=args.shots)   # warm-up, not timed
    df = pd.DataFrame(list(tqdm(iter_frontier(loaded, problems, configs, args.data, args.shots),
                                total=len(problems) * len(configs), leave=False)))
    summary = summarize_frontier(df)
    print(report(summary))
    title = f"{loaded.spec.name}, {len(problems)} problems, {hw}"
    meta = started.meta(argv, args, summary)
    files = write_results(args.out, STUDY.name, {"": df}, meta, frontier_figure(summary, title),
                          lambda path: frontier_png(summary, title, path))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
