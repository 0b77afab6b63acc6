"""Study 1: is parallelism sensitive to the token filling order, and does LoPA pick good orders?

    python -m lopa.study orders [--n 40] [--random 20] [--k 4] [--seed 15] [--out DIR]

For each problem: vanilla D2F (k = 0), LoPA (k branches at the highest-Conf positions, the paper's
order), LoPA under the left-to-right order, and R runs with the lookahead drawn at random (same k,
order seeds 0..R-1), and LoPA with each other proposal rule of --proposals (least_confident,
highest_entropy, mixed: lopa/order.py), same k. Writes orders.csv / .parquet (one row per run), orders.html (interactive),
orders.png and orders.json (command, hardware, date, summary): per problem the spread of TPF over
random orders with LoPA and vanilla marked and LoPA's percentile; accuracy per order; mean TPF of LoPA
over random with a bootstrap 95% interval; the share of problems where LoPA beats the median random
order; AFP and Kendall's tau of the fill order against left-to-right; per order the pooled TPF and
tokens/s (lopa.trace.pooled) and, for each proposal rule, its pooled TPF over LoPA's with a bootstrap
95% interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from lopa.settings import DecodeSettings
from lopa.study.common import decode_one, start, write_results
from lopa.study.declaration import Knob, Study
from lopa.study.stats import bootstrap_ci, percentile_among, ratio_of_means
from lopa.trace import pooled

# The proposal rules beside the paper's top-Conf (lopa/order.py): which k positions the branches try.
PROPOSALS = ("least_confident", "highest_entropy", "mixed")
ORDER_NAMES = ("vanilla", "lopa", "left_to_right", "random", *PROPOSALS)
STUDY = Study(
    "orders", "LoPA's orders against random orders", rank=1, n=40, per_row=("order", "order_seed"),  # each run sets its order
    knobs=(Knob("random", int, 20, "random orders per problem (seeds 0..R-1; default 20)", low=0, live=(1, 10, 5),
                label="random orders"),
           Knob("bootstrap", int, 1000, "bootstrap resamples (default 1000)", low=1),
           Knob("proposals", str, ",".join(PROPOSALS), "other proposal rules to run beside the paper's, comma-separated "
                f"('' for none; default {','.join(PROPOSALS)})")),
    figure=True, app=True)


def order_runs(base: DecodeSettings, random_orders: int, proposals=()) -> list[tuple[str, int, DecodeSettings]]:
    """(order, seed, settings) of every run on one problem; seed -1 where no seed applies."""
    runs = [("vanilla", -1, base.replace(k=0, order="confidence")),
            ("lopa", -1, base.replace(order="confidence")),
            ("left_to_right", -1, base.replace(order="left_to_right"))]
    runs += [(name, -1, base.replace(order=name)) for name in proposals]
    return runs + [("random", s, base.replace(order="random", order_seed=s)) for s in range(random_orders)]


def iter_orders(loaded, problems: list[dict], base: DecodeSettings, random_orders: int, data: str = "",
                shots: int = 0, proposals=()) -> Iterator[dict]:
    """One row per run, problem by problem (so a stopped study has whole problems)."""
    for problem in problems:
        for order, seed, settings in order_runs(base, random_orders, proposals):
            _, row = decode_one(loaded, settings, problem, data=data, shots=shots)
            yield {"problem": row.pop("problem"), "order": order, "seed": seed, "k": settings.k, **row}


def summarize_orders(df, n_boot: int = 1000, seed: int = 0) -> dict:
    """The study's numbers from its table (problems with a LoPA and at least one random run)."""
    rand = df[df.order == "random"]
    problems = sorted(set(df[df.order == "lopa"].problem) & set(rand.problem))
    if not problems:
        return {"problems": 0}
    lopa = df[df.order == "lopa"].set_index("problem").tpf
    vanilla = df[df.order == "vanilla"].set_index("problem").tpf
    by_problem = {p: rand[rand.problem == p].tpf.tolist() for p in problems}
    pairs = [(lopa[p], statistics.mean(by_problem[p])) for p in problems]
    lo, hi = bootstrap_ci(pairs, ratio_of_means, n_boot, seed)
    per_problem = [{"problem": int(p), "lopa_tpf": float(lopa[p]), "vanilla_tpf": float(vanilla.get(p, float("nan"))),
                    "random_min": min(by_problem[p]), "random_median": statistics.median(by_problem[p]),
                    "random_max": max(by_problem[p]), "lopa_percentile": percentile_among(lopa[p], by_problem[p])}
                   for p in problems]
    graded = df.dropna(subset=["correct"])
    per_order = {}
    for order in ORDER_NAMES:
        rows = df[(df.order == order) & df.problem.isin(problems)]
        if len(rows):
            g = graded[(graded.order == order) & graded.problem.isin(problems)]
            together = pooled(rows.to_dict("records"), tokens="tokens")
            per_order[order] = {"runs": len(rows), "tpf_mean": float(rows.tpf.mean()),
                                "tpf_pooled": together["tpf_useful"], "tps": together["tps"],
                                "accuracy": float(g.correct.mean()) if len(g) else None,
                                "afp_mean": float(rows.afp.mean()), "order_tau_mean": float(rows.order_tau.mean())}
    lopa_rows = df[df.order == "lopa"].set_index("problem")
    proposals = {}
    for order in PROPOSALS:
        rule = df[(df.order == order) & df.problem.isin(problems)].set_index("problem")
        if len(rule):       # pooled TPF over LoPA's, paired by problem (tokens / forwards summed before dividing)
            pairs_r = [({"tokens": rule.tokens[p], "forwards": rule.forwards[p]},
                        {"tokens": lopa_rows.tokens[p], "forwards": lopa_rows.forwards[p]}) for p in rule.index]
            proposals[order] = {"tpf_over_lopa": _pooled_ratio(pairs_r),
                                "tpf_over_lopa_ci95": list(bootstrap_ci(pairs_r, _pooled_ratio, n_boot, seed))}
    return {
        "problems": len(problems), "random_orders": int(rand.seed.nunique()),
        "tpf_ratio_lopa_over_random": ratio_of_means(pairs), "tpf_ratio_ci95": [lo, hi], "bootstrap": n_boot,
        "share_lopa_beats_median_random": sum(r["lopa_tpf"] > r["random_median"] for r in per_problem) / len(problems),
        "share_lopa_ties_median_random": sum(r["lopa_tpf"] == r["random_median"] for r in per_problem) / len(problems),
        "lopa_percentile_median": statistics.median(r["lopa_percentile"] for r in per_problem),
        "per_order": per_order, "per_problem": per_problem, "proposals": proposals,
    }


def _pooled_ratio(pairs) -> float:
    """Pooled TPF (lopa.trace.pooled) of the first over the second, from ({"tokens", "forwards"}, same) per problem."""
    a, b = (pooled([pair[i] for pair in pairs], tokens="tokens")["tpf_useful"] for i in (0, 1))
    return a / b if b else float("nan")


# -- the app's view of this study (lopa.study.STUDIES) ------------------------------------------------
def live(loaded, problems: list[dict], base: DecodeSettings, random: int):
    """The study's decodes for a live run with `random` random orders: {"done", "total", "row", "rounds"} per
    decode, and "complete": the problem id on the decode that completes a problem."""
    per_problem = len(order_runs(base, random))
    total = len(problems) * per_problem
    for done, row in enumerate(iter_orders(loaded, problems, base, random), 1):
        yield {"done": done, "total": total, "row": row, "rounds": [],
               **({"complete": row["problem"]} if done % per_problem == 0 else {})}


def live_summary(rows: list[dict], rounds: list[dict]) -> tuple[dict, dict]:
    import pandas as pd
    df = pd.DataFrame(rows)
    return summarize_orders(df, n_boot=200), {"": df}


def figure(tables: dict, summary: dict, title: str):
    from lopa.study.figures import orders_figure
    return orders_figure(tables[""], summary, title)


def png(tables: dict, summary: dict, title: str, path) -> None:
    from lopa.study.figures import orders_png
    orders_png(tables[""], summary, title, path)


def report(summary: dict) -> str:
    if not summary.get("problems"):
        return "no complete problem yet"
    lo, hi = summary["tpf_ratio_ci95"]
    lines = [f"{summary['problems']} problem{'s' * (summary['problems'] != 1)} x {summary['random_orders']} random orders",
             f"mean TPF, LoPA / random: {summary['tpf_ratio_lopa_over_random']:.3f} (bootstrap 95% CI {lo:.3f}..{hi:.3f})",
             f"LoPA beats the median random order on {summary['share_lopa_beats_median_random'] * 100:.0f}% of problems "
             f"(ties {summary['share_lopa_ties_median_random'] * 100:.0f}%); median percentile of LoPA among random "
             f"orders {summary['lopa_percentile_median']:.0f}",
             f"{'order':>15} {'runs':>5} {'TPF':>6} {'pooled':>7} {'tokens/s':>9} {'accuracy':>9} {'AFP':>6} {'tau(LTR)':>9}"]
    for order, s in summary["per_order"].items():
        acc = "n/a" if s["accuracy"] is None else f"{s['accuracy'] * 100:.1f}%"
        lines.append(f"{order:>15} {s['runs']:>5} {s['tpf_mean']:>6.2f} {s.get('tpf_pooled', float('nan')):>7.2f} "
                     f"{s.get('tps', float('nan')):>9.0f} {acc:>9} {s['afp_mean']:>6.2f} {s['order_tau_mean']:>9.3f}")
    for order, s in summary.get("proposals", {}).items():
        lo, hi = s["tpf_over_lopa_ci95"]
        lines.append(f"pooled TPF, {order} / LoPA's top-Conf: {s['tpf_over_lopa']:.3f} (bootstrap 95% CI {lo:.3f}..{hi:.3f})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = STUDY.parser()
    args = STUDY.parse(argv, parser)
    proposals = tuple(p for p in args.proposals.split(",") if p)
    unknown = sorted(set(proposals) - set(PROPOSALS))
    if unknown:
        parser.error(f"--proposals: unknown rule {unknown[0]!r}; the rules are {', '.join(PROPOSALS)}")
    import pandas as pd
    from tqdm import tqdm

    from lopa.study.figures import orders_figure, orders_png
    started = start(args)
    loaded, hw, problems, base = started.loaded, started.hw, started.problems, started.base
    total = len(problems) * len(order_runs(base, args.random, proposals))
    rows = list(tqdm(iter_orders(loaded, problems, base, args.random, args.data, args.shots, proposals), total=total,
                     leave=False))
    df = pd.DataFrame(rows)
    summary = summarize_orders(df, args.bootstrap)
    print(report(summary))
    title = f"{loaded.spec.name}, {len(problems)} problems, k={base.k}, {hw}"
    meta = started.meta(argv, args, summary)
    files = write_results(args.out, STUDY.name, {"": df}, meta, orders_figure(df, summary, title),
                          lambda path: orders_png(df, summary, title, path))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
