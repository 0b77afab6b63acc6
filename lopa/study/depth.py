"""Study 7: how far deeper lookahead gets, and where its chains are cut.

    python -m lopa.study depth [--n 100] [--ks 4,8,14] [--depths 1,2,3,4] [--search 1,2] [--search-n 30]

Every LoPA branch count of --ks at every lookahead depth of --depths (lookahead_depth: a branch commits a
chain of up to d tokens, each prefix a row of the same verify forward, cut where the row before a token no
longer predicts it; lopa/chains.py, docs/method.md "Deeper lookahead"), beside D2F (k = 0), on the same
problems, greedy, every other setting the paper's. Each problem runs its cells back to back in a Williams
order (lopa.tasks.turns), so a shared machine's load falls on all of them alike. Per cell: accuracy, pooled
TPF, tokens/s (on the device it ran on), token-forwards per answer, and the chains: how many the rounds
proposed, how many were cut, before which of their tokens (its place in the chain, 2..d) and why: the row
holding the chain's tokens before it predicts another token there ("token"), or the same one under the
lookahead floor ("floor"); where the cut token sits (its distance from the chain's token before it, whether
in a later block) and how sure the proposal and the row before it were.

On the first --search-n problems, the headroom search (lopa.study.headroom) from the LoPA run with the fewest
forwards over --ks, at each depth of --search: at depth 1 the best order of one extra token per round, at
depth 2 of up to two (two-step departures), LoPA below at that depth; its rows are cells "best-d1",
"best-d2" (their tokens/s is left out: a search's time is not a decode's). Against the goal each cell is judged: K <= 14, pooled TPF >= 1.2x LoPA k = 14's (depth 1),
accuracy within 1 point of D2F's, and a higher pooled TPF than best-d1 on the searched problems.

Writes depth.csv / .parquet (one row per decode), depth_cuts.* (one row per cut chain) and depth.json.
"""

from __future__ import annotations

import time
from collections import Counter

from lopa.chains import chain_cut
from lopa.settings import MAX_LOOKAHEAD, MAX_LOOKAHEAD_DEPTH, DecodeSettings
from lopa.study.common import decode_one, run_row, start, write_results
from lopa.study.declaration import Knob, Study
from lopa.study.headroom import PAIR_POOL, iter_search
from lopa.tasks import task_for
from lopa.tasks.turns import in_turns
from lopa.trace import pooled, predictions

KS, DEPTHS, SEARCH = (4, 8, 14), (1, 2, 3, 4), (1, 2)
GOAL_TPF_RATIO = 1.2         # the goal: pooled TPF at least this many times LoPA k = 14's,
GOAL_ACCURACY_POINTS = 1.0   # accuracy within this many points of D2F's, and above best-d1's TPF
GOAL_MAX_K, GOAL_REFERENCE_K = 14, 14
STUDY = Study(
    "depth", "Deeper lookahead: chains of tokens per branch", rank=7, n=100, per_row=("k", "lookahead_depth"),
    knobs=(Knob("ks", str, ",".join(map(str, KS)), "LoPA branch counts, comma-separated (default 4,8,14)"),
           Knob("depths", str, ",".join(map(str, DEPTHS)), "lookahead depths, comma-separated (default 1,2,3,4)"),
           Knob("search", str, ",".join(map(str, SEARCH)), "depths to run the headroom search at (1, 2 or both; "
                "empty: none)"),
           Knob("search_n", int, 30, "problems the search runs on: the first N (default 30)", low=0),
           Knob("max_candidates", int, 0, "the search's single-token rollouts per round: the M most confident free "
                "positions (0 = every one; default)", low=0),
           Knob("pair_pool", int, PAIR_POOL, f"the depth-2 search's pairs: among the P most confident free positions "
                f"(default {PAIR_POOL}), besides every adjacent chain", low=0)),
    tables=("", "cuts"), figure=True, app=True)
LIVE_DEPTHS = (1, 2, 3)      # the app's live run: D2F and the app's k at these depths, no search (a shared CPU)


def cell_name(k: int, depth: int) -> str:
    """The bench's decoder names (lopa.bench.decoders): d2f, lopa-k14, lopa-k14-d2."""
    return "d2f" if k == 0 else f"lopa-k{k}" + (f"-d{depth}" if depth > 1 else "")


def cells(base: DecodeSettings, ks, depths) -> list[tuple[str, DecodeSettings]]:
    """(name, settings) of D2F and every (k, depth), paper order."""
    paper = base.replace(order="confidence")
    return [("d2f", paper.replace(k=0, lookahead_depth=1))] + [
        (cell_name(k, d), paper.replace(k=k, lookahead_depth=d)) for k in ks for d in depths]


# -- the chains of one decode, from its trace --------------------------------------------------------------
def chain_cuts(records, block_size: int, depth: int) -> tuple[dict, list[dict]]:
    """What a decode's chains did, re-read from its trace (RoundRecord.chain_*): counts ({"chains": chains
    proposed with two tokens or more, "short": of those, shorter than `depth` (too few free positions after
    the branch's own), "cut", "chain_tokens" past
    the first, "chain_kept", "rounds", "won_chain": rounds whose winner committed two chain tokens or more}) and
    one dict per cut chain: the round, the branch, its place (cut_at: the 1-based place of the first token
    that did not stand), why ("token": the row before predicts another token; "floor": the same token under
    the lookahead floor), the proposal's and the row's max prob there, the gap from the token before it, and
    whether it lies in a later block."""
    counts, cuts = Counter(), []
    for i, r in enumerate(records):
        if r.kind != "round" or not r.chain_rows:
            continue
        counts["rounds"] += 1
        counts["won_chain"] += sum(ahead for _, _, ahead in r.filled()) >= 2
        proposed = predictions(records[i - 1])
        for j, (positions, kept) in enumerate(zip(r.chain_positions, r.chain_kept)):
            if len(positions) < 2:
                continue
            counts["chains"] += 1
            counts["short"] += len(positions) < depth
            counts["chain_tokens"] += len(positions) - 1
            counts["chain_kept"] += kept - 1
            if kept == len(positions):
                continue
            counts["cut"] += 1
            cut = chain_cut(r, j, 0.0)          # at no floor, a cut the token test did not make is the floor's
            p = cut["position"]
            cuts.append({"round": r.round, "branch": j + 1, "chain": len(positions), "cut_at": kept + 1,
                         "reason": "token" if cut["failed"] == "token" else "floor", "position": p,
                         "gap": p - positions[kept - 1], "later_block": p // block_size > positions[kept - 1] // block_size,
                         "proposed_max_prob": proposed[p].max_prob if p in proposed else float("nan"),
                         "row_max_prob": cut["max_prob"]})
    return dict(counts), cuts


CHAIN_COUNTS = ("rounds", "chains", "short", "cut", "chain_tokens", "chain_kept", "won_chain")


def iter_depth(loaded, problems: list[dict], configs, data: str = "", shots: int = 0, search=(), search_n: int = 0,
               max_candidates: int = 0, pair_pool: int = PAIR_POOL):
    """(row, cuts) per decode, problem by problem (a stopped study has whole problems): every cell in the
    problem's Williams order, then on the first `search_n` problems the headroom search at each depth of
    `search`, from the LoPA run at that depth with the fewest forwards (the smallest k on a tie; decoded again
    with saved states, so the timed decodes never pay for them)."""
    task = task_for(data)
    for i, problem in enumerate(problems):
        runs = {}
        for name, settings in in_turns(configs, i):
            run, row = decode_one(loaded, settings, problem, data=data, shots=shots)
            counts, cuts = chain_cuts(run.records, settings.block_size, settings.lookahead_depth)
            runs[name] = (settings, row)
            yield ({"problem": row.pop("problem"), "cell": name, "k": settings.k, "depth": settings.lookahead_depth,
                    **row, **{c: counts.get(c, 0) for c in CHAIN_COUNTS}},
                   [{"problem": problem["id"], "cell": name, "k": settings.k, "depth": settings.lookahead_depth, **c}
                    for c in cuts])
        if i >= search_n:
            continue
        for depth in search:
            at = [(row["forwards"], s.k, s) for s, row in runs.values() if s.k and s.lookahead_depth == depth]
            if not at:
                continue
            settings = min(at, key=lambda x: x[:2])[2]
            decoder = loaded.decoder(settings)
            decoder.keep_states = True                          # the rollouts fork from its saved states
            start_run = decoder.run(task.prompt(loaded, problem, data, shots))
            t0, best, spent = time.perf_counter(), start_run, 0
            for step in iter_search(start_run, max_candidates, pair_pool=pair_pool):
                best, spent = step["best"], step["spent"]
            row = run_row(best, problem, loaded, data)
            yield ({"problem": row.pop("problem"), "cell": f"best-d{depth}", "k": settings.k, "depth": depth, **row,
                    **dict.fromkeys(CHAIN_COUNTS, 0), "search_forwards": spent,
                    "search_s": time.perf_counter() - t0}, [])


# -- the numbers -------------------------------------------------------------------------------------------
def summarize_depth(df, cuts=None) -> dict:
    """Per cell: problems, accuracy, pooled TPF, tokens/s, token-forwards per answer, its chains (cut share,
    cuts by place and by reason, share of chain tokens kept, rounds a chain won) and, against the references,
    TPF over LoPA k = 14's and over best-d1's on the searched problems, accuracy points over D2F's, and the goal."""
    if not len(df):
        return {"problems": 0, "cells": []}
    cut_rows = [] if cuts is None or not len(cuts) else cuts.to_dict("records")
    searched = set(df[df.cell.str.startswith("best-")].problem)
    rows = []
    for name, g in df.groupby("cell", sort=False):
        graded, total = g.dropna(subset=["correct"]), pooled(g.to_dict("records"), tokens="tokens")
        mine = [c for c in cut_rows if c["cell"] == name]
        chains = int(g.chains.sum())
        on = g[g.problem.isin(searched)]
        rows.append({
            "cell": name, "k": int(g.k.iloc[0]), "depth": int(g.depth.iloc[0]), "problems": len(g),
            "accuracy": float(graded.correct.mean()) if len(graded) else None, "tpf": total["tpf_useful"],
            "tps": None if name.startswith("best-") else total["tps"], "token_forwards": total["token_forwards_mean"], "forwards_mean": total["forwards_mean"],
            "tpf_searched": pooled(on.to_dict("records"), tokens="tokens")["tpf_useful"] if len(on) else None,
            "chains": chains, "chains_cut": int(g.cut.sum()), "cut_share": g.cut.sum() / chains if chains else None,
            "short_chains": int(g.short.sum()),
            "kept_share": g.chain_kept.sum() / g.chain_tokens.sum() if g.chain_tokens.sum() else None,
            "rounds": int(g.rounds.sum()), "rounds_won_by_chain": int(g.won_chain.sum()),
            "cut_at": {str(a): n for a, n in sorted(Counter(c["cut_at"] for c in mine).items())},
            "cut_reason": dict(sorted(Counter(c["reason"] for c in mine).items())),
            "cut_later_block": sum(bool(c["later_block"]) for c in mine),
            "cut_gap_1": sum(c["gap"] == 1 for c in mine),
            "cut_proposed_max_prob_median": _median([c["proposed_max_prob"] for c in mine]),
            "cut_row_max_prob_median": _median([c["row_max_prob"] for c in mine])})
    rows.sort(key=lambda r: (r["cell"].startswith("best-"), r["k"], r["depth"]))
    out = {"problems": int(df.problem.nunique()), "searched": len(searched), "cells": rows}
    by = {r["cell"]: r for r in rows}
    d2f, ref, best1 = by.get("d2f"), by.get(cell_name(GOAL_REFERENCE_K, 1)), by.get("best-d1")
    for r in rows:
        r["tpf_over_lopa_k14"] = r["tpf"] / ref["tpf"] if ref and ref["tpf"] else None
        r["accuracy_points_vs_d2f"] = (None if d2f is None or r["accuracy"] is None or d2f["accuracy"] is None
                                       else 100 * (r["accuracy"] - d2f["accuracy"]))
        r["tpf_over_best_d1"] = (r["tpf_searched"] / best1["tpf_searched"]
                                 if best1 and r["tpf_searched"] and best1["tpf_searched"] else None)
        r["goal"] = bool(not r["cell"].startswith("best-") and r["k"] <= GOAL_MAX_K
                         and r["tpf_over_lopa_k14"] is not None and r["tpf_over_lopa_k14"] >= GOAL_TPF_RATIO
                         and (r["accuracy_points_vs_d2f"] is None or r["accuracy_points_vs_d2f"] >= -GOAL_ACCURACY_POINTS)
                         and (r["tpf_over_best_d1"] is None or r["tpf_over_best_d1"] > 1))
    lopa_rows = [r for r in rows if r["k"] and not r["cell"].startswith("best-")]
    out["goal"] = {"tpf_ratio": GOAL_TPF_RATIO, "accuracy_points": GOAL_ACCURACY_POINTS, "max_k": GOAL_MAX_K,
                   "reached_by": [r["cell"] for r in rows if r["goal"]],
                   "best_tpf_cell": max(lopa_rows, key=lambda r: r["tpf"])["cell"] if lopa_rows else None}
    return out


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v == v)
    return values[len(values) // 2] if values else None


def _fmt(value, spec: str, none: str = "–") -> str:
    return none if value is None else format(value, spec)


def report(summary: dict) -> str:
    if not summary.get("problems"):
        return "no complete problem yet"
    lines = [f"{summary['problems']} problems ({summary['searched']} searched); TPF pooled; cuts by place in the chain",
             f"{'cell':>13} {'acc':>6} {'TPF':>6} {'/k14':>6} {'/best-d1':>8} {'tok/s':>6} {'tok-fwd':>8} "
             f"{'chains':>7} {'cut':>6} {'kept':>6} {'cut at':>18} {'why':>16} {'goal':>4}"]
    for r in summary["cells"]:
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy'] * 100:.1f}%"
        at = " ".join(f"{a}:{n}" for a, n in r["cut_at"].items())
        why = " ".join(f"{a}:{n}" for a, n in r["cut_reason"].items())
        lines.append(f"{r['cell']:>13} {acc:>6} {r['tpf']:>6.2f} {_fmt(r['tpf_over_lopa_k14'], '.3f'):>6} "
                     f"{_fmt(r['tpf_over_best_d1'], '.3f'):>8} {_fmt(r['tps'], '.0f'):>6} {r['token_forwards']:>8.0f} "
                     f"{r['chains']:>7} {_fmt(r['cut_share'], '.1%'):>6} {_fmt(r['kept_share'], '.1%'):>6} "
                     f"{at:>18} {why:>16} {'yes' if r['goal'] else '':>4}")
    g = summary["goal"]
    lines.append(f"goal (K <= {g['max_k']}, TPF >= {g['tpf_ratio']:g}x LoPA k = 14's, accuracy within "
                 f"{g['accuracy_points']:g} point of D2F's, above best-d1 on the searched problems): "
                 + (", ".join(g["reached_by"]) if g["reached_by"] else f"reached by none (highest TPF: {g['best_tpf_cell']})"))
    return "\n".join(lines)


# -- the app's view of this study (lopa.study.STUDIES) ------------------------------------------------
def live(loaded, problems: list[dict], base: DecodeSettings):
    """The study's decodes for a live run (D2F, and the app's k at each depth of LIVE_DEPTHS; no search):
    {"done", "total", "row", "rounds" (its cut chains), "complete" on a problem's last decode}."""
    configs = cells(base, (base.k or 4,), LIVE_DEPTHS)
    total = len(problems) * len(configs)
    for done, (row, cut) in enumerate(iter_depth(loaded, problems, configs), 1):
        yield {"done": done, "total": total, "row": {**row, "config": row["cell"]}, "rounds": cut,
               **({"complete": row["problem"]} if done % len(configs) == 0 else {})}


def live_summary(rows: list[dict], rounds: list[dict]) -> tuple[dict, dict]:
    import pandas as pd
    df, cuts = pd.DataFrame(rows), pd.DataFrame(rounds, columns=CUT_COLUMNS)
    return summarize_depth(df, cuts), {"": df, "cuts": cuts}


def figure(tables: dict, summary: dict, title: str):
    from lopa.study.depth_figures import depth_figure
    return depth_figure(summary, title)


def png(tables: dict, summary: dict, title: str, path) -> None:
    from lopa.study.depth_figures import depth_png
    depth_png(summary, title, path)


def _ints(parser, flag: str, text: str, low: int, high: int) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        parser.error(f"{flag}: whole numbers, comma-separated; got {text!r}")
    if values and not low <= values[0] <= values[-1] <= high:
        parser.error(f"{flag}: give values from {low} to {high}, comma-separated; got {text!r}")
    return values


def main(argv=None) -> int:
    parser = STUDY.parser()
    args = STUDY.parse(argv, parser)
    ks = _ints(parser, "--ks", args.ks, 1, MAX_LOOKAHEAD)
    depths = _ints(parser, "--depths", args.depths, 1, MAX_LOOKAHEAD_DEPTH)
    search = _ints(parser, "--search", args.search, 1, 2)
    if not ks or not depths:
        parser.error("--ks and --depths: give at least one value each")
    import pandas as pd
    from tqdm import tqdm
    started = start(args)
    loaded, problems, base = started.loaded, started.problems, started.base
    configs = cells(base, ks, depths)
    decode_one(loaded, base, problems[0], data=args.data, shots=args.shots)   # warm-up, not timed
    t0, rows, cuts = time.perf_counter(), [], []
    total = len(problems) * len(configs) + min(args.search_n, len(problems)) * len(search)
    for row, cut in tqdm(iter_depth(loaded, problems, configs, args.data, args.shots, search, args.search_n,
                                    args.max_candidates, args.pair_pool), total=total, leave=False):
        rows.append(row)
        cuts += cut
    df = pd.DataFrame(rows)
    cuts_df = pd.DataFrame(cuts, columns=CUT_COLUMNS)
    summary = summarize_depth(df, cuts_df)
    summary["wall_s"] = time.perf_counter() - t0
    print(report(summary))
    meta = started.meta(argv, args, summary)
    from lopa.study.depth_figures import depth_figure, depth_png
    from lopa.study.figures import shipped_title
    title = shipped_title(STUDY.name, meta)
    files = write_results(args.out, STUDY.name, {"": df, "cuts": cuts_df}, meta, depth_figure(summary, title),
                          lambda path: depth_png(summary, title, path))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


CUT_COLUMNS = ["problem", "cell", "k", "depth", "round", "branch", "chain", "cut_at", "reason", "position", "gap",
               "later_block", "proposed_max_prob", "row_max_prob"]
