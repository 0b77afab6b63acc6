"""Study 3: an adaptive branch budget (k = adaptive) against fixed k.

    python -m lopa.study adaptive [--n 40] [--ks 0,1,2,4,8,14] [--k-max 14] [--out DIR]

At start-up the study measures the cost curve of the running device: the verify forward's seconds
for B = 1 .. K + 1 branches (lopa.tasks.timing.forward_times), and prints it. lopa.order.AdaptiveOrder
(order = adaptive) then chooses k each round from the anchor's confidence profile, that curve and the
model's own gain model, aiming at seconds saved, not forwards (lopa.rules.choose_k).
The gain model (adaptive_win, adaptive_release, adaptive_lift) is fitted at start-up too, from --calibration-problems
problems beyond the n measured ones decoded at k = 0 and k = 1 (calibrate, lopa.rules.fit_gain), and
printed; the adaptive runs' settings and the JSON's summary.gain record it. On a GPU, where B
branches cost about one, it verifies many; on a CPU, where they cost nearly B times one, as many as
a win is worth on that model: none where wins add little, one where they unlock more. Every problem runs every
configuration back to back, so a shared machine's load falls on all of them alike. Writes
adaptive.csv / .parquet (one row per run), adaptive_cost.*, .html, .png and .json: accuracy, TPF,
tokens/s and mean k per configuration, and which sit on the Pareto front of TPF against tokens/s.
With k = 1 among the fixed k it also measures how much room any budget has over k = 1: the budget's
tokens/s over k = 1's with a bootstrap interval; an oracle that skips exactly the branches that lose
(skip_bound: a bound, same tokens); an oracle that adds a second branch exactly where one pays
(add_estimate, from decodes with two branches at one round); and the flags that replay the budget.
"""

from __future__ import annotations

from collections.abc import Iterator

from lopa.order import SecondBranchAt, make_order
from lopa.settings import DecodeSettings
from lopa.study.adaptive_fit import (
    CALIBRATION_PROBLEMS,
    GAIN,
    budget_flags,
    calibrate,
    calibration_steps,
    cost_steps,
    describe_cost,
    measure_cost,
)
from lopa.study.common import (
    decode_one,
    load_problems,
    question_ids,
    start,
    write_results,
)
from lopa.study.declaration import Knob, Study
from lopa.study.stats import bootstrap_ci, pareto_front
from lopa.tasks.turns import in_turns
from lopa.trace import pooled

FIXED_KS = (0, 1, 2, 4, 8, 14)
STUDY = Study(
    "adaptive", "An adaptive branch budget", rank=3, n=40, per_row=("k", "order", "branch_cost"),  # --ks, --k-max; cost measured
    knobs=(Knob("ks", str, ",".join(map(str, FIXED_KS)), "fixed k to compare, comma-separated"),
           Knob("k_max", int, 14, "most branches the adaptive budget may verify (default 14)", low=1),
           Knob("repeats", int, 5, "timed forwards per B for the cost curve (default 5)", low=1),
           Knob("timing_repeats", int, 2, "decodes per problem and configuration; the fastest counts (default 2)", low=1),
           Knob("calibration_problems", int, CALIBRATION_PROBLEMS,
                "problems after the n measured ones (same data and seed) decoded at k = 0 and 1 to fit the gain model, "
                f"adaptive_win, adaptive_release and adaptive_lift (default {CALIBRATION_PROBLEMS}; 0: take "
                "--adaptive-win and --adaptive-lift as given)", low=0)),
    tables=("", "cost"), figure=True, app=True)


def configurations(base: DecodeSettings, ks, k_max: int, cost, gain: dict | None = None
                   ) -> list[tuple[str, DecodeSettings, object]]:
    """(name, settings, order policy or None): fixed k under the ranking the budget verifies (the order
    adaptive_rank names, so every k and the budget propose the same positions), then order = adaptive
    with at most k_max branches under the cost curve measured here and the gain model `gain`
    ({"adaptive_win", "adaptive_release", "adaptive_lift"}, from
    calibrate; None: the settings' own). Its trace records order "adaptive", the gain model and the
    measured curve (RunResult.order), so it replays from the trace alone (lopa.order.trace_order)."""
    fitted = {name: (gain or {}).get(name, getattr(base, name)) for name in GAIN}
    adaptive = base.replace(k=k_max, order="adaptive", **fitted)
    return ([(f"k={k}", base.replace(k=k, order=base.adaptive_rank), None) for k in ks]
            + [("adaptive", adaptive, make_order(adaptive, cost, "measured by the adaptive study at start-up "
                                                        "(lopa.study.adaptive_fit.measure_cost)"))])


def iter_adaptive(loaded, problems: list[dict], configs, data: str = "", repeats: int = 1,
                  shots: int = 0, each_decode: bool = False) -> Iterator[dict]:
    """One row per (problem, configuration), a problem's rows once all its decodes ran; with `each_decode`,
    also {"decoded": configuration} after every decode (a live run counts them and reads Stop between
    them). With repeats > 1 each decode runs that many times (same
    tokens: decoding is deterministic) and the fastest counts, which filters a shared machine's noise.
    Each pass over the configurations takes them in a Williams order (lopa.tasks.turns), so every
    configuration follows every other equally often: on this machine a decode's time depends on the
    decode before it by up to 7%, more than what is measured."""
    for i, problem in enumerate(problems):
        timed, lost = {name: [] for name, *_ in configs}, {}
        for r in range(repeats):
            for name, settings, order in in_turns(configs, i * repeats + r):
                run, row = decode_one(loaded, settings, problem, order, data, shots)
                if name not in lost:                                  # the same in every repeat: count once
                    lost[name] = lost_rounds(run.records)
                timed[name].append(row)
                if each_decode:
                    yield {"decoded": name, "problem": problem["id"]}
        for name, settings, order in configs:
            ordered = sorted(timed[name], key=lambda r: r["latency_s"])
            fastest, slowest = ordered[0], ordered[-1]
            row = dict(fastest, lost_rounds=lost[name], timing_spread=slowest["latency_s"] / fastest["latency_s"] - 1)
            yield {"problem": row.pop("problem"), "config": name, "k": -1 if order is not None else settings.k, **row}


def lost_rounds(records) -> int:
    """Rounds that verified at least one branch and were won by the anchor: their branches bought nothing,
    and a round without them would have committed the same tokens (the anchor's) at a B = 1 forward's cost."""
    return sum(r.kind == "round" and bool(r.lookahead_positions) and r.winner == 0 for r in records)


def skip_bound(g, cost) -> dict:
    """The most any branch budget could gain over fixed k = 1 by skipping branches: an oracle that knew
    which k = 1 branches the anchor would beat and verified only the others decodes the same tokens
    (a lost round keeps the anchor's commits either way) and saves cost[1] - cost[0] per lost round.
    g: the k = 1 rows; cost: [>= 2] seconds of a round with B = 1, 2, ...
    -> {"lost_rounds", "tps": the oracle's tokens/s, "tps_ratio": that over k = 1's}."""
    lost, seconds = int(g.lost_rounds.sum()), float(g.latency_s.sum())
    oracle = max(seconds - lost * (cost[1] - cost[0]), 1e-12)                     # the oracle's seconds
    return {"lost_rounds": lost, "tps": float(g.tokens.sum()) / oracle, "tps_ratio": seconds / oracle}


def second_branch_saves(loaded, base: DecodeSettings, problem: dict, data: str = "", shots: int = 0) -> list[int]:
    """Forwards a second branch saves, one entry per round of the k = 1 decode of `problem` under the
    ranking adaptive_rank names: that decode's forwards minus those of the same decode with two branches
    at that round alone (negative: the second branch cost forwards later)."""
    settings = base.replace(k=2, order=base.adaptive_rank)

    def forwards(round: int):
        return decode_one(loaded, settings, problem, SecondBranchAt(make_order(settings), round), data, shots)[0]
    k1 = forwards(-1)
    rounds = [r.round for r in k1.records if r.kind == "round"]
    return [k1.metrics()["forwards"] - forwards(r).metrics()["forwards"] for r in rounds]


def add_estimate(saves: list[int], k1_seconds: float, cost) -> dict:
    """What an oracle that adds a second branch exactly in the rounds where it pays would gain over k = 1:
    each such round saves saves_r * cost[0] seconds later for cost[2] - cost[1] now. Rounds are taken one at
    a time (a second branch changes the rounds after it), so this estimates, not bounds.
    -> {"rounds", "paying_rounds", "mean_saved", "tps_ratio"}."""
    extra = cost[2] - cost[1]
    gained = sum(max(0.0, s * cost[0] - extra) for s in saves)
    return {"rounds": len(saves), "paying_rounds": sum(s * cost[0] > extra for s in saves),
            "mean_saved": sum(saves) / len(saves) if saves else float("nan"),
            "tps_ratio": k1_seconds / max(k1_seconds - gained, 1e-12)}


def tps_ratio_ci(df, a: str, b: str) -> tuple[float, float]:
    """Bootstrap interval (over problems) of configuration a's pooled tokens/s over b's."""
    pairs = df.pivot_table(index="problem", columns="config", values=["tokens", "latency_s"], aggfunc="sum")
    groups = [(r[("tokens", a)], r[("latency_s", a)], r[("tokens", b)], r[("latency_s", b)]) for _, r in pairs.iterrows()]
    return bootstrap_ci(groups, lambda g: (sum(x[0] for x in g) / sum(x[1] for x in g))
                        / (sum(x[2] for x in g) / sum(x[3] for x in g)))


def summarize_adaptive(df, cost=None) -> dict:
    rows = []
    for name, g in df.groupby("config", sort=False):
        graded, total = g.dropna(subset=["correct"]), pooled(g.to_dict("records"), tokens="tokens")
        rows.append({"config": name, "problems": len(g),
                     "accuracy": float(graded.correct.mean()) if len(graded) else None,
                     "tpf": total["tpf_useful"], "tps": total["tps"],
                     "mean_k": float(g.mean_k.mean()), "latency_ms": float(g.latency_s.mean() * 1e3)})
    front = pareto_front([(r["tpf"], r["tps"]) for r in rows])
    for i, r in enumerate(rows):
        r["pareto"] = i in front
    by = {r["config"]: r for r in rows}
    out = {"problems": int(df.problem.nunique()), "configs": rows,
           "timing_spread_median": float(df.timing_spread.median()) if "timing_spread" in df else None}
    if "adaptive" in by and "k=0" in by:
        a, v = by["adaptive"], by["k=0"]
        out["adaptive_vs_vanilla"] = {"tps_ratio": a["tps"] / v["tps"], "tpf_ratio": a["tpf"] / v["tpf"],
                                      "accuracy_delta": (a["accuracy"] - v["accuracy"]) if a["accuracy"] is not None
                                      and v["accuracy"] is not None else None, "adaptive_on_pareto_front": a["pareto"]}
    if "adaptive" in by and "k=1" in by:
        out["adaptive_vs_k1"] = {"tps_ratio": by["adaptive"]["tps"] / by["k=1"]["tps"],
                                 "tps_ratio_ci": tps_ratio_ci(df, "adaptive", "k=1")}
        if cost is not None and len(cost) > 1 and "lost_rounds" in df:
            out["skip_bound"] = skip_bound(df[df.config == "k=1"], cost)
    return out


# -- the app's view of this study (lopa.study.STUDIES) ------------------------------------------------
# A live run compares k up to 8 (the command line: up to 14): k = 14 rounds cost 6x a vanilla one on a
# CPU, and the app's default run stays within a minute on a shared 2-core CPU (docs/studies.md).
LIVE_KS = (0, 1, 2, 4, 8)
LIVE_K_MAX = 8
LIVE_COST_REPEATS = 3       # timing sweeps (and vanilla decodes) of a live run's cost curve


def live(loaded, problems: list[dict], base: DecodeSettings):
    """A live run: {"status"} after each unit of measuring this machine's cost curve (cost_steps) and fitting
    the model's gain model (on the first problem: a live run has few), {"summary": {"cost_s", "gain",
    "adaptive_rank"}} once they are, then {"row", "rounds"} per decode; every step but the summary carries
    "done" and "total", the units of work (timing sweeps and decodes) done so far and in all."""
    configs = len(LIVE_KS) + 1
    total = 2 * LIVE_COST_REPEATS + 2 + len(problems) * configs
    verify, bookkeeping = yield from _in_units(
        cost_steps(loaded, base, LIVE_K_MAX, question_ids(loaded, problems[0]["question"]), LIVE_COST_REPEATS),
        f"Measuring this machine's cost curve (verify time for 1 .. {LIVE_K_MAX + 1} branches)…", 0, total)
    cost = [t + bookkeeping for t in verify]
    done = 2 * LIVE_COST_REPEATS
    gain = yield from _in_units(calibration_steps(loaded, base, problems[:1]),
                                "Fitting this model's gain model (the first problem decoded at k = 0 and k = 1)…",
                                done, total)
    done += 2
    yield {"summary": {"cost_s": cost, "gain": gain, "adaptive_rank": base.adaptive_rank}}
    number = {p["id"]: i for i, p in enumerate(problems, 1)}
    rows = 0
    for step in iter_adaptive(loaded, problems, configurations(base, LIVE_KS, LIVE_K_MAX, cost, gain), each_decode=True):
        if "decoded" in step:
            done += 1
            yield {"status": f"Problem {number[step['problem']]} of {len(problems)}: decoded {step['decoded']}…",
                   "done": done, "total": total}
            continue
        rows += 1
        yield {"row": step, "rounds": [], "done": done, "total": total,
               **({"complete": step["problem"]} if rows % configs == 0 else {})}


def _in_units(steps, status: str, done: int, total: int):
    """Run `steps` (cost_steps, calibration_steps), yielding {"status", "done", "total"} after each unit;
    returns their result."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value
        done += 1
        yield {"status": status, "done": done, "total": total}


def live_summary(rows: list[dict], rounds: list[dict]) -> tuple[dict, dict]:
    import pandas as pd
    df = pd.DataFrame(rows)
    return summarize_adaptive(df), {"": df}


def figure(tables: dict, summary: dict, title: str):
    from lopa.study.figures import adaptive_figure
    return adaptive_figure(tables[""], summary, title)


def png(tables: dict, summary: dict, title: str, path) -> None:
    from lopa.study.figures import adaptive_png
    adaptive_png(summary, title, path)


def report(summary: dict) -> str:
    lines = [f"{summary['problems']} problems" + (f", ranking: {summary['adaptive_rank']}" if summary.get("adaptive_rank") else ""),
             f"{'config':>9} {'accuracy':>9} {'TPF':>6} {'tokens/s':>9} {'mean k':>7} {'ms/problem':>11} {'Pareto':>7}"]
    for r in summary["configs"]:
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy'] * 100:.1f}%"
        lines.append(f"{r['config']:>9} {acc:>9} {r['tpf']:>6.2f} {r['tps']:>9.0f} {r['mean_k']:>7.2f} "
                     f"{r['latency_ms']:>11.1f} {'yes' if r['pareto'] else '':>7}")
    if summary.get("timing_spread_median"):
        lines.append(f"timing noise: a decode's slowest timing is a median {summary['timing_spread_median'] * 100:.0f}% above "
                     "its fastest (the fastest counts)")
    c = summary.get("adaptive_vs_vanilla")
    if c:
        delta = "n/a" if c["accuracy_delta"] is None else f"{c['accuracy_delta'] * 100:+.1f} points"
        lines.append(f"adaptive / vanilla: tokens/s x{c['tps_ratio']:.2f}, TPF x{c['tpf_ratio']:.2f}, accuracy {delta}; "
                     f"on the Pareto front: {'yes' if c['adaptive_on_pareto_front'] else 'no'}")
    b = summary.get("skip_bound")
    if b:
        lo, hi = summary["adaptive_vs_k1"]["tps_ratio_ci"]
        lines.append(f"adaptive / k = 1: tokens/s x{summary['adaptive_vs_k1']['tps_ratio']:.3f} ({lo:.3f}..{hi:.3f}); the most any budget gains "
                     f"over k = 1 by skipping branches (an oracle skipping the {b['lost_rounds']} rounds k = 1's branch lost): "
                     f"x{b['tps_ratio']:.3f}")
    e = summary.get("add_estimate")
    if e:
        lines.append(f"a second branch in one round of k = 1's decodes saves {e['mean_saved']:.2f} forwards on average "
                     f"({e['rounds']} rounds); it pays in {e['paying_rounds']}; an oracle adding it exactly there: "
                     f"x{e['tps_ratio']:.3f} k = 1's tokens/s (rounds taken one at a time: an estimate)")
    g = summary.get("gain")
    if g:
        lines.append(f"gain model: win {g['adaptive_win']:.3f}, release {g.get('adaptive_release', 1.0):.3f}, "
                     f"lift {g['adaptive_lift']:.3f}"
                     + (f" (fitted on {g['problems']} calibration problems)" if "problems" in g else " (as given)"))
    if summary.get("flags"):
        lines.append(f"this budget elsewhere (lopa generate, lopa.bench, the API; its cost curve as a line): {summary['flags']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = STUDY.parse(argv)
    import pandas as pd
    from tqdm import tqdm

    from lopa.study.figures import adaptive_figure, adaptive_png
    started = start(args)
    loaded, hw, problems, base = started.loaded, started.hw, started.problems, started.base
    decode_one(loaded, base, problems[0], data=args.data, shots=args.shots)   # warm-up, not timed
    verify, bookkeeping = measure_cost(loaded, base, args.k_max,
                                       question_ids(loaded, problems[0]["question"], args.data, args.shots), args.repeats)
    cost = [t + bookkeeping for t in verify]
    print("cost curve measured at start-up (verify forward over B windows of two blocks, fastest of the repeats, made non-decreasing):\n"
          + describe_cost(verify, bookkeeping))
    extra = load_problems(args.data, args.n + args.calibration_problems, args.problem_seed)[0][len(problems):]
    gain = calibrate(loaded, base, extra, args.data, args.shots) if extra else None
    print(f"gain model fitted on {len(extra)} calibration problems (k = 0 and 1): {gain}" if gain else
          "gain model as given: " + ", ".join(f"{name} {getattr(base, name)}" for name in GAIN))
    configs = configurations(base, [int(k) for k in args.ks.split(",")], args.k_max, cost, gain)
    df = pd.DataFrame(list(tqdm(iter_adaptive(loaded, problems, configs, args.data, args.timing_repeats, args.shots),
                                total=len(problems) * len(configs), leave=False)))
    summary = summarize_adaptive(df, cost)
    summary["cost_s"], summary["verify_s"], summary["bookkeeping_s"] = cost, verify, bookkeeping
    summary["gain"] = gain or {name: getattr(base, name) for name in GAIN}
    summary["adaptive_rank"] = base.adaptive_rank
    summary["flags"] = budget_flags(cost, summary["gain"], base.adaptive_rank, args.k_max)
    if "skip_bound" in summary and len(cost) > 2:
        saves = [s for p in problems for s in second_branch_saves(loaded, base, p, args.data, args.shots)]
        summary["add_estimate"] = add_estimate(saves, float(df[df.config == "k=1"].latency_s.sum()), cost)
    print(report(summary))
    cost_df = pd.DataFrame({"branches": list(range(1, len(cost) + 1)), "verify_s": verify, "round_s": cost})
    title = f"{loaded.spec.name}, {len(problems)} problems, {hw}"
    meta = started.meta(argv, args, summary)
    files = write_results(args.out, STUDY.name, {"": df, "cost": cost_df}, meta, adaptive_figure(df, summary, title),
                          lambda path: adaptive_png(summary, title, path))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
