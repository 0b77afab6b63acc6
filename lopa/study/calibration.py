"""Study 2: does the branch score C(B) predict the next round, and which score should pick the winner?

    python -m lopa.study calibration [--n 30] [--k 4] [--metrics max_prob,neg_entropy,margin] [--out DIR]

Every branch is verified every round, so for each branch, winners and losers alike, we know what the
anchor would commit next round if that branch won: its positions with max_prob > tau_conf in its own
verify output (the target). For winners the next round's anchor commits are recorded too.

Part 1 (calibration): on LoPA runs with the paper's rule, for every (round, branch), the candidate
scores of lopa.rules.branch_scores (mean = the paper's, loo, min, window, segment, count) against the
target: Spearman and Kendall per problem and pooled (bootstrap 95% intervals over problems), how often
each score's best branch is the round's best by target, and a binned plot.
Part 2 (selection): each candidate as the selection rule (setting branch_score=), under each Conf
metric: TPF, accuracy and AUP on the same problems.

Each Conf metric runs its own decodes (settings.confidence): the trace records one Conf per branch
position, and a run under another metric also ranks lookahead candidates by it, so recomputing the
others from one run would score branches a real run under that metric never builds. The default
path's trace and speed are unchanged. Writes calibration_rounds.* (one row per round and branch),
calibration_runs.* (one row per decode), calibration_problems.* (correlations per problem), .html,
.png, .json.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator

import torch

from lopa.rules import branch_scores, score_split
from lopa.settings import BRANCH_SCORE_RULES, CONFIDENCE_METRICS, DecodeSettings
from lopa.study.common import decode_one, start, write_results
from lopa.study.declaration import Knob, Study
from lopa.study.stats import aup, bootstrap_ci, kendall_tau, spearman
from lopa.trace import pooled

CORRELATION_BOOTSTRAP = 200          # resamples of problems for the pooled correlations
STUDY = Study(
    "calibration", "What the branch score measures", rank=2, n=30, per_row=("branch_score",),   # --rules
    knobs=(Knob("metrics", str, None, "Conf metrics, comma-separated (default: --confidence if given, else all: "
                f"{','.join(CONFIDENCE_METRICS)})"),
           Knob("rules", str, ",".join(BRANCH_SCORE_RULES), "selection rules, comma-separated"),
           Knob("bootstrap", int, CORRELATION_BOOTSTRAP, "bootstrap resamples", low=1)),
    tables=("runs", "rounds", "problems"), figure=True, app=True)


def round_rows(run, problem: int, metric: str) -> list[dict]:
    """One row per (round, branch) of a run: every candidate score, the target (positions over tau),
    and for the winner what the next round's anchor did commit."""
    tau = float(run.settings["tau_conf"])
    rows = []
    for i, rec in enumerate(run.records):
        if rec.kind != "round":
            continue
        masked = [(torch.tensor(p, dtype=torch.long), torch.tensor(m), torch.tensor(c))
                  for p, m, c in zip(rec.branch_positions, rec.branch_max_prob, rec.branch_conf)]
        scores = {rule: branch_scores(masked, rule, tau).tolist() for rule in BRANCH_SCORE_RULES}
        nxt = run.records[i + 1] if i + 1 < len(run.records) else None
        anchor_conf = dict(zip(rec.branch_positions[0], rec.branch_conf[0]))
        filled_conf = [anchor_conf.get(p, float("nan")) for p in rec.lookahead_positions]
        for j in range(len(masked)):
            parts = (score_split(rec.branch_positions[0], rec.branch_conf[0], rec.branch_positions[j], rec.branch_conf[j],
                                 rec.lookahead_positions[j - 1]) if j else None) or {}
            rows.append({"problem": problem, "metric": metric, "round": rec.round, "branch": j,
                         "branches": len(masked), "winner": int(j == rec.winner),
                         "masked": len(rec.branch_positions[j]), "target": sum(m > tau for m in rec.branch_max_prob[j]),
                         "next_committed": len(nxt.anchor_positions) if (nxt is not None and j == rec.winner) else None,
                         "removal": parts.get("removal"), "change": parts.get("change"),
                         "filled_least_confident": int(j > 0 and filled_conf[j - 1] == min(filled_conf)),
                         **{f"score_{rule}": scores[rule][j] for rule in BRANCH_SCORE_RULES}})
    return rows


def iter_calibration(loaded, problems: list[dict], base: DecodeSettings, metrics, rules,
                     data: str = "", shots: int = 0) -> Iterator[tuple[dict, list[dict]]]:
    """(run row, round rows) per decode: problem by problem, every (metric, rule). Round rows come
    from the runs under the paper's rule only (the calibration question is about its trajectory)."""
    for problem in problems:
        for metric in metrics:
            for rule in rules:
                settings = base.replace(confidence=metric, branch_score=rule)
                run, row = decode_one(loaded, settings, problem, data=data, shots=shots)
                rounds = round_rows(run, problem["id"], metric) if rule == "mean" else []
                yield {"problem": row.pop("problem"), "metric": metric, "rule": rule, "k": settings.k, **row}, rounds


def _finite(df, column):
    return df[[not math.isinf(v) for v in df[column]]] if len(df) else df


def correlations(rounds, n_boot: int = CORRELATION_BOOTSTRAP, seed: int = 0) -> list[dict]:
    """Per metric and rule: pooled Spearman / Kendall (+inf scores dropped) with bootstrap intervals
    over problems, the median per-problem Spearman, and the share of rounds where the rule's best
    branch has the round's highest target."""
    out = []
    for metric in rounds.metric.unique():
        m = rounds[rounds.metric == metric]
        for rule in BRANCH_SCORE_RULES:
            col = f"score_{rule}"
            d = _finite(m, col)
            groups = [g for _, g in d.groupby("problem")]
            pooled = lambda gs, f, col=col: f([v for g in gs for v in g[col]], [v for g in gs for v in g.target])
            per_problem = [v for v in (spearman(g[col], g.target) for g in groups) if not math.isnan(v)]
            per_problem_tau = [v for v in (kendall_tau(g[col], g.target) for g in groups) if not math.isnan(v)]
            best, within = [], []
            for _, r in m[m.branches > 1].groupby(["problem", "round"]):
                top = r[col].max()
                best.append(float(r[r[col] == top].target.max() == r.target.max()))
                within.append(kendall_tau(r[col].clip(-1e9, 1e9), r.target))
            within = [v for v in within if not math.isnan(v)]
            out.append({"metric": metric, "rule": rule, "pairs": len(d),
                        "spearman": pooled(groups, spearman),
                        "spearman_ci95": bootstrap_ci(groups, lambda gs, pooled=pooled: pooled(gs, spearman), n_boot, seed),
                        "kendall": pooled(groups, kendall_tau),
                        "kendall_ci95": bootstrap_ci(groups, lambda gs, pooled=pooled: pooled(gs, kendall_tau), n_boot, seed),
                        "spearman_per_problem_median": statistics.median(per_problem) if per_problem else float("nan"),
                        "kendall_per_problem_median": statistics.median(per_problem_tau) if per_problem_tau else float("nan"),
                        "best_branch_agreement": sum(best) / len(best) if best else float("nan"),
                        "kendall_within_round_mean": statistics.mean(within) if within else float("nan"),
                        "rounds_ranked": len(within)})
    return out


def _tpf_ratio(pairs) -> float:
    """TPF of a rule over TPF of the paper's rule, from per-problem (tokens, forwards, tokens, forwards)."""
    a = sum(p[0] for p in pairs) / sum(p[1] for p in pairs)
    b = sum(p[2] for p in pairs) / sum(p[3] for p in pairs)
    return a / b


def per_problem_correlations(rounds):
    """One row per (metric, rule, problem): Spearman and Kendall of the score against the target over
    that problem's (round, branch) pairs (nan where either side is constant)."""
    import pandas as pd
    rows = []
    for (metric, problem), g in rounds.groupby(["metric", "problem"]):
        for rule in BRANCH_SCORE_RULES:
            d = _finite(g, f"score_{rule}")
            rows.append({"metric": metric, "rule": rule, "problem": problem, "pairs": len(d),
                         "spearman": spearman(d[f"score_{rule}"], d.target),
                         "kendall": kendall_tau(d[f"score_{rule}"], d.target)})
    return pd.DataFrame(rows)


def selection(runs, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """Per metric and rule: TPF (total tokens / total forwards), accuracy, AUP (weights against the best
    accuracy of any rule and metric in the table), and against the paper's mean rule under the same
    metric, on the same problems: the TPF ratio and the accuracy difference, with bootstrap 95% intervals."""
    out = []
    graded = runs.dropna(subset=["correct"])
    top = float(graded.groupby(["metric", "rule"]).correct.mean().max()) if len(graded) else 0.0
    for (metric, rule), g in runs.groupby(["metric", "rule"], sort=False):
        total = pooled(g.to_dict("records"), tokens="tokens")
        tpf = total["tpf_useful"]
        gg = graded[(graded.metric == metric) & (graded.rule == rule)]
        acc = float(gg.correct.mean()) if len(gg) else None
        row = {"metric": metric, "rule": rule, "problems": len(g), "tpf": float(tpf), "accuracy": acc,
               "aup": aup([(tpf, acc)], y_max=top) if acc is not None else None,
               "tps": total["tps"]}
        paper = runs[(runs.metric == metric) & (runs.rule == "mean")].set_index("problem")
        mine = g.set_index("problem")
        shared = sorted(set(mine.index) & set(paper.index))
        if rule != "mean" and shared:
            pairs = [(mine.tokens[p], mine.forwards[p], paper.tokens[p], paper.forwards[p]) for p in shared]
            row["tpf_vs_mean"] = _tpf_ratio(pairs)
            row["tpf_vs_mean_ci95"] = bootstrap_ci(pairs, _tpf_ratio, n_boot, seed)
            both = [(mine.correct[p], paper.correct[p]) for p in shared
                    if mine.correct[p] == mine.correct[p] and paper.correct[p] == paper.correct[p]]   # graded only
            if both:
                diff = lambda ps: sum(a - b for a, b in ps) / len(ps)
                row["accuracy_vs_mean"] = diff(both)
                row["accuracy_vs_mean_ci95"] = bootstrap_ci(both, diff, n_boot, seed)
        out.append(row)
    return out


def winner_split(rounds) -> dict:
    """Over the rounds a lookahead branch won under the mean rule (per metric): the median share of its
    gain that came from removal (its own position leaving the mean), and how often it was the branch
    that filled the least confident candidate."""
    out = {}
    if not len(rounds):
        return out
    for metric, m in rounds.groupby("metric"):
        won = m[(m.winner == 1) & (m.branch > 0) & m.removal.notna()]
        won = won[(won.removal + won.change) > 0]
        shares = (won.removal / (won.removal + won.change)).tolist()
        out[metric] = {"rounds": len(won), "median_removal_share": statistics.median(shares) if shares else None,
                       "share_filled_least_confident": float(won.filled_least_confident.mean()) if len(won) else None}
    return out


def summarize_calibration(runs, rounds, n_boot: int = CORRELATION_BOOTSTRAP) -> dict:
    winners = rounds[(rounds.winner == 1) & rounds.next_committed.notna()] if len(rounds) else rounds
    return {"winner_split": winner_split(rounds),"problems": int(runs.problem.nunique()) if len(runs) else 0,
            "correlations": correlations(rounds, n_boot) if len(rounds) else [],
            "selection": selection(runs) if len(runs) else [],
            "winner_target_vs_committed": {
                "rounds": len(winners),
                "mean_target": float(winners.target.mean()) if len(winners) else None,
                "mean_next_committed": float(winners.next_committed.mean()) if len(winners) else None}}


# -- the app's view of this study (lopa.study.STUDIES) ------------------------------------------------
def live(loaded, problems: list[dict], base: DecodeSettings):
    """The study's decodes for a live run (the app's Conf, every rule): {"done", "total", "row", "rounds"} per
    decode, and "complete": the problem id on the decode that completes a problem."""
    per_problem = len(BRANCH_SCORE_RULES)
    total = len(problems) * per_problem
    for done, (row, rounds) in enumerate(iter_calibration(loaded, problems, base, ("neg_entropy",), BRANCH_SCORE_RULES), 1):
        yield {"done": done, "total": total, "row": row, "rounds": rounds,
               **({"complete": row["problem"]} if done % per_problem == 0 else {})}


def live_summary(rows: list[dict], rounds: list[dict]) -> tuple[dict, dict]:
    import pandas as pd
    runs, rounds = pd.DataFrame(rows), pd.DataFrame(rounds)
    return summarize_calibration(runs, rounds, n_boot=50), {"runs": runs, "rounds": rounds}


def figure(tables: dict, summary: dict, title: str):
    from lopa.study.figures import calibration_figure
    return calibration_figure(tables["runs"], tables["rounds"], summary, title)


def png(tables: dict, summary: dict, title: str, path) -> None:
    from lopa.study.figures import calibration_png
    calibration_png(tables["runs"], tables["rounds"], summary, title, path)


def report(summary: dict) -> str:
    lines = [f"{summary['problems']} problems",
             f"{'metric':>12} {'rule':>8} {'pairs':>6} {'Spearman (95% CI)':>24} {'Kendall (95% CI)':>24} "
             f"{'per-problem rho, tau':>21} {'best-branch':>11} {'tau in round':>12}"]
    for c in summary["correlations"]:
        s, k = c["spearman_ci95"], c["kendall_ci95"]
        lines.append(f"{c['metric']:>12} {c['rule']:>8} {c['pairs']:>6} {c['spearman']:>7.3f} ({s[0]:.3f}..{s[1]:.3f}) "
                     f"{c['kendall']:>7.3f} ({k[0]:.3f}..{k[1]:.3f}) {c['spearman_per_problem_median']:>14.3f} "
                     f"{c.get('kendall_per_problem_median', float('nan')):>6.3f} "
                     f"{c['best_branch_agreement'] * 100:>10.0f}% {c['kendall_within_round_mean']:>12.3f}")
    lines.append(f"\n{'metric':>12} {'rule':>8} {'TPF':>6} {'accuracy':>9} {'AUP':>6} {'TPF vs mean (95% CI)':>22} "
                 f"{'accuracy vs mean (95% CI)':>27}")
    for s in summary["selection"]:
        acc = "n/a" if s["accuracy"] is None else f"{s['accuracy'] * 100:.1f}%"
        aup_text = "n/a" if s["aup"] is None else f"{s['aup']:.2f}"
        ratio = (f"x{s['tpf_vs_mean']:.3f} ({s['tpf_vs_mean_ci95'][0]:.3f}..{s['tpf_vs_mean_ci95'][1]:.3f})"
                 if "tpf_vs_mean" in s else "")
        delta = (f"{s['accuracy_vs_mean'] * 100:+.1f} ({s['accuracy_vs_mean_ci95'][0] * 100:+.1f}.."
                 f"{s['accuracy_vs_mean_ci95'][1] * 100:+.1f})" if "accuracy_vs_mean" in s else "")
        lines.append(f"{s['metric']:>12} {s['rule']:>8} {s['tpf']:>6.2f} {acc:>9} {aup_text:>6} {ratio:>22} {delta:>27}")
    for metric, w in summary.get("winner_split", {}).items():
        if w["rounds"]:
            lines.append(f"\n{metric}: in the {w['rounds']} rounds a lookahead branch won, a median "
                         f"{w['median_removal_share'] * 100:.0f}% of its score gain was removal (its own filled "
                         f"position leaving the mean); it had filled the least confident candidate in "
                         f"{w['share_filled_least_confident'] * 100:.0f}% of them")
    w = summary["winner_target_vs_committed"]
    if w["rounds"]:
        lines.append(f"\nwinners ({w['rounds']} rounds): predicted next-round commits {w['mean_target']:.2f}, "
                     f"committed {w['mean_next_committed']:.2f} on average")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = STUDY.parser()
    args = STUDY.parse(argv, parser)
    import pandas as pd
    from tqdm import tqdm

    from lopa.study.figures import calibration_figure, calibration_png
    metrics, rules = (args.metrics or args.confidence or ",".join(CONFIDENCE_METRICS)).split(","), args.rules.split(",")
    if args.confidence and args.confidence not in metrics:
        parser.error(f"--confidence {args.confidence} is not among --metrics {args.metrics}: each metric runs its own decodes")
    if "mean" not in rules:
        rules = ["mean", *rules]                  # the calibration part needs the paper's trajectory
    started = start(args)
    loaded, hw, problems, base = started.loaded, started.hw, started.problems, started.base
    run_rows, rounds = [], []
    for row, more in tqdm(iter_calibration(loaded, problems, base, metrics, rules, args.data, args.shots),
                          total=len(problems) * len(metrics) * len(rules), leave=False):
        run_rows.append(row)
        rounds += more
    runs, rounds = pd.DataFrame(run_rows), pd.DataFrame(rounds)
    summary = summarize_calibration(runs, rounds, args.bootstrap)
    print(report(summary))
    title = f"{loaded.spec.name}, {len(problems)} problems, k={base.k}, {hw}"
    meta = started.meta(argv, args, summary)
    tables = {"runs": runs, "rounds": rounds, "problems": per_problem_correlations(rounds)}
    files = write_results(args.out, STUDY.name, tables, meta,
                          calibration_figure(runs, rounds, summary, title),
                          lambda path: calibration_png(runs, rounds, summary, title, path))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
