"""Study 4: how far is LoPA from the best token filling order a search can find?

    python -m lopa.study headroom [--n 60] [--ks 1,2,4,8,14] [--random 10] [--k 4] [--max-candidates 0]

LoPA (Sec. 3 of the paper) keeps D2F's commit rule for the anchor and adds at most one extra token per
round, at the position whose branch has the best score C(B). The search keeps that round and chooses the
extra position by the true outcome instead: the forwards the decode then needs to finish. It is a rollout
search (Bertsekas' rollout algorithm, with LoPA as the base policy). It starts from the LoPA run of the
problem that needed the fewest forwards over --ks (LoPA at every k keeps this round too); at every round,
every candidate (the anchor alone, or the anchor plus the model's top token at one free position) is run
to the end as a fork (lopa.engine.fork: the forked round verifies that one branch, the rounds after it are
LoPA at the starting run's k), and the round keeps the candidate that finishes in the fewest forwards; on
a tie, LoPA's own round stays. LoPA's own round is among the candidates, so the order found never needs
more forwards than LoPA at any k of --ks. It never reads the reference answer.

Budget, per round of the order found: one rollout per candidate, every free position of the window
(`--max-candidates M`: only the M most confident) plus the anchor alone, each stopped as soon as it
reaches the best count so far; one round deep, searched again at every round; LoPA at the starting
run's k below.

At lookahead depth 2 or more (--lookahead-depth: LoPA's branches commit chains, lopa/chains.py) a round may
also take two extra tokens: the candidates add every pair among the --pair-pool most confident free positions
and every chain the engine proposes (a position and the next free one after it), LoPA's round at that depth
below; LoPA's own round there is the winner's kept chain, whichever row of the batch it was.

What it cannot see: orders that pay only after two or more departures from LoPA in a row (each departure
must pay on its own, under LoPA below it); another token than the model's top one at an extra position;
more than one extra token per round at depth 1, more than two at any depth. So the best order may reach a
TPF higher still.

For each problem: vanilla D2F (k = 0), LoPA at each k of --ks (the paper's order), R random orders at k
(seeds 0..R-1) and the order found. Writes headroom.csv / .parquet (one row per decode),
headroom_choices.* (one row per round where the order found left LoPA's choice), headroom.html, .png and
.json. Headline: the share of the gap in pooled TPF from vanilla to the order found that LoPA closes,
with a bootstrap 95% interval over problems, beside the accuracy of every order.
"""

from __future__ import annotations

import statistics
import time
from contextlib import closing

from lopa.engine import fork_decoder
from lopa.settings import DecodeSettings
from lopa.study.common import run_row, start, write_results
from lopa.study.declaration import Knob, Study
from lopa.study.stats import bootstrap_ci
from lopa.tasks import task_for
from lopa.trace import RunResult, pooled, predictions

DEFAULT_KS = (1, 2, 4, 8, 14)
PAIR_POOL = 8        # at depth >= 2: every pair among the 8 best ranked free positions (and every adjacent chain)
STUDY = Study(
    "headroom", "How far LoPA is from the best order found", rank=5, n=60, per_row=("order", "order_seed"),  # each run sets its order
    knobs=(Knob("ks", str, ",".join(map(str, DEFAULT_KS)),
                "LoPA's branch counts to report (the search's k, --k, is always among them)"),
           Knob("random", int, 10, "random orders per problem at k (seeds 0..R-1; default 10)", low=0, live=(1, 10, 5),
                label="random orders"),
           Knob("max_candidates", int, 0, "rollouts per round: the M most confident free positions (0 = every one; default)",
                low=0),
           Knob("pair_pool", int, PAIR_POOL, f"at --lookahead-depth 2 or more: pairs among the P most confident free "
                f"positions per round (default {PAIR_POOL}), besides every adjacent chain", low=0),
           Knob("bootstrap", int, 1000, "bootstrap resamples (default 1000)", low=1)),
    tables=("", "choices"), figure=True, app=True)


# -- the search ---------------------------------------------------------------------------------------
def _forwards(records) -> int:
    return sum(r.kind != "final" for r in records)


def rollout(parent: RunResult, at_round: int, positions: tuple[int, ...], bound: int) -> tuple[RunResult | None, int]:
    """`parent` forked after `at_round`: its round at_round + 1 is the anchor's commits plus the model's top
    tokens at `positions` (none: the anchor alone), verified as one branch, then the parent's policy to the
    end. -> (the fork, or None once it reaches `bound` forwards in all; forwards it ran)."""
    decoder = fork_decoder(parent)
    total, ran = _forwards(parent.records[:at_round + 1]), 0
    stream = decoder.stream_fork(parent, at_round, dict.fromkeys(positions), lookahead=())
    with closing(stream):
        for record in stream:
            ran += record.kind != "final"
            if total + ran >= bound:
                return None, ran
    return decoder.result(), ran


def lopa_extra(step) -> tuple[int, ...]:
    """The positions a round's winner filled beyond the anchor: its lookahead token, or the kept part of its
    chain (lookahead_depth > 1, where the winner is a row of the chain plan, not a lookahead index); ()
    where the anchor won."""
    return tuple(p for p, _, ahead in step.filled() if ahead)


def two_step_candidates(ranked: list[int], free: list[int], pair_pool: int) -> list[tuple[int, int]]:
    """The two-token departures a round tries at depth >= 2: every pair among the `pair_pool` first positions of
    `ranked` (LoPA's ranking, best first), and every chain the engine's proposal makes (lopa.chains.adjacent_chains:
    a position of `ranked` and the next free position after it), each pair once, best ranked first."""
    rank = {p: i for i, p in enumerate(free)}
    pool = ranked[:pair_pool]
    pairs = [(p, q) for i, p in enumerate(pool) for q in pool[i + 1:]]
    after = sorted(free)
    for p in ranked:
        later = [q for q in after if q > p]
        if later:
            pairs.append((p, later[0]))
    seen, out = set(), []
    for pair in pairs:
        pair = tuple(sorted(pair, key=rank.__getitem__))
        if frozenset(pair) not in seen:
            seen.add(frozenset(pair))
            out.append(pair)
    return out


def search(lopa_run: RunResult, max_candidates: int = 0, pair_pool: int = PAIR_POOL) -> tuple[RunResult, list[dict], int]:
    """The best order found from `lopa_run`, a LoPA run decoded in this process with keep_states.
    -> (its run, one dict per round where it left LoPA's choice, forwards the rollouts ran)."""
    best, choices, spent = lopa_run, [], 0
    for step in iter_search(lopa_run, max_candidates, pair_pool=pair_pool):
        best, choices, spent = step["best"], step["choices"], step["spent"]
    return best, choices, spent


def iter_search(lopa_run: RunResult, max_candidates: int = 0, deadline: float | None = None,
                each_rollout: bool = False, pair_pool: int = PAIR_POOL):
    """search() a round at a time: after each searched round, {"best": the order found so far (a whole run:
    the rounds not searched yet as the rollout below left them), "choices", "spent", "round": the round just
    searched, "rounds": the best run's rounds with a forward, "out_of_time"}. With `deadline` (a
    time.perf_counter() value) no rollout starts after it: the round in hand keeps the best of the rollouts
    it ran, and the search ends there. With `each_rollout`, also {"rollout": j, "of": the round's rollouts,
    "round": the round being searched, "rounds": forwards of the best run so far} after each rollout (a
    rollout is a decode: a live run counts them and reads Stop between them). A run at lookahead_depth >= 2
    is searched over two-step departures too (two_step_candidates, `pair_pool`), LoPA below at its depth."""
    depth = int(lopa_run.settings.get("lookahead_depth", 1))
    best, choices, spent, r = lopa_run, [], 0, 0
    while r + 1 < len(best.records) and best.records[r + 1].kind != "final":
        seen, step = predictions(best.records[r]), best.records[r + 1]      # round r + 1 decides from round r
        anchor = set(step.anchor_positions)
        free = sorted((p for p in seen if p not in anchor), key=lambda p: -seen[p].conf)   # LoPA's ranking
        ranked = free[:max_candidates] if max_candidates else free
        lopa_choice = lopa_extra(step)
        bound, found, late = _forwards(best.records), None, False
        tried = [(p,) for p in ranked] + (two_step_candidates(ranked, free, pair_pool) if depth >= 2 else [])
        candidates = [c for c in tried if set(c) != set(lopa_choice)] + ([()] if lopa_choice else [])
        for j, positions in enumerate(candidates, 1):
            if deadline is not None and time.perf_counter() >= deadline:
                late = True
                break
            child, ran = rollout(best, r, positions, bound)
            spent += ran
            if child is not None:                      # strictly fewer forwards (ties keep the earlier)
                best_child, bound, found = child, _forwards(child.records), positions
            if each_rollout:
                yield {"rollout": j, "of": len(candidates), "round": r + 1, "rounds": _forwards(best.records)}
        if bound < _forwards(best.records):
            choices.append(choice_row(r + 1, found, lopa_choice, free, seen, step, _forwards(best.records) - bound))
            best = best_child
        r += 1
        yield {"best": best, "choices": choices, "spent": spent, "round": r, "rounds": _forwards(best.records),
               "out_of_time": late}
        if late:
            return


def choice_row(round_: int, found: tuple[int, ...], lopa_choice: tuple[int, ...], free: list[int], seen: dict,
               step, saved: int) -> dict:
    """A round where the order found left LoPA's choice: "position" (and "conf_rank", "max_prob", "offset") its
    first extra position, the best ranked (None: the anchor alone), "positions" all of them; LoPA's as
    "lopa_position" (its first) and "lopa_positions"."""
    first = found[0] if found else None
    front = min(free) if free else 0
    return {"round": round_, "position": first, "lopa_position": lopa_choice[0] if lopa_choice else None,
            "conf_rank": None if first is None else free.index(first) + 1, "free": len(free),
            "max_prob": None if first is None else seen[first].max_prob,
            "offset": None if first is None else first - front,
            "in_lopa_top_k": first is not None and first in step.lookahead_positions,
            "saved": saved, "positions": list(found), "lopa_positions": list(lopa_choice)}


# -- the runs of one problem ---------------------------------------------------------------------------
def configurations(base: DecodeSettings, ks, random_orders: int) -> list[tuple[str, int, int, DecodeSettings]]:
    """(config, k, seed, settings) of every plain decode of one problem; seed -1 where none applies."""
    paper = base.replace(order="confidence")
    runs = [("vanilla", 0, -1, paper.replace(k=0))] + [("lopa", k, -1, paper.replace(k=k)) for k in ks]
    return runs + [("random", base.k, s, base.replace(order="random", order_seed=s)) for s in range(random_orders)]


def iter_headroom(loaded, problems: list[dict], base: DecodeSettings, ks, random_orders: int,
                  max_candidates: int = 0, data: str = "", shots: int = 0, search_rounds: bool = False,
                  pair_pool: int = PAIR_POOL):
    """(row, choices) per decode, problem by problem, the search last (a stopped study has whole problems).
    The search starts from the LoPA run with the fewest forwards (the smallest k on a tie). With
    `search_rounds`, also (None, {"problem", "rollout", "of", "round", "rounds"}) after each rollout of the
    search (iter_search's each_rollout): the search is the long step of a problem, and a live run counts
    its rollouts and reads Stop between yields."""
    ks = sorted(set(ks) | {base.k})
    for problem in problems:
        ids = task_for(data).prompt(loaded, problem, data, shots)
        lopa_runs = {}
        for config, k, seed, settings in configurations(base, ks, random_orders):
            decoder = loaded.decoder(settings)
            decoder.keep_states = config == "lopa"          # a possible starting point: forks resume from it
            run = decoder.run(ids)
            yield {"problem": problem["id"], "config": config, "k": k, "seed": seed, **run_row(run, problem, loaded, data),
                   "start_k": -1, "search_forwards": 0, "search_s": 0.0}, []
            if config == "lopa":
                lopa_runs[k] = run
        start_k = min(lopa_runs, key=lambda k: (lopa_runs[k].metrics()["forwards"], k))
        t0 = time.perf_counter()
        best, choices, spent = lopa_runs[start_k], [], 0
        for step in iter_search(lopa_runs[start_k], max_candidates, each_rollout=search_rounds, pair_pool=pair_pool):
            if "rollout" in step:
                yield None, {"problem": problem["id"], **step}
                continue
            best, choices, spent = step["best"], step["choices"], step["spent"]
        row = {"problem": problem["id"], "config": "best", "k": base.k, "seed": -1, **run_row(best, problem, loaded, data),
               "start_k": start_k, "search_forwards": spent, "search_s": time.perf_counter() - t0}
        yield row, [{"problem": problem["id"], **c} for c in choices]


# -- the numbers -----------------------------------------------------------------------------------------
def _tpf(rows: list[dict]) -> float:
    return pooled(rows, tokens="tokens")["tpf_useful"]


def _gap_share(groups) -> float:
    """Share of the pooled-TPF gap from vanilla to the order found that LoPA closes; groups: (vanilla, lopa,
    best) rows per problem."""
    van, lopa, best = (_tpf([g[i] for g in groups]) for i in range(3))
    return (lopa - van) / (best - van) if best > van else float("nan")


def summarize_headroom(df, choices=None, k: int | None = None, n_boot: int = 1000, seed: int = 0) -> dict:
    """The study's numbers from its table (problems with a vanilla, a LoPA at k and a best row)."""
    rows = df.to_dict("records")
    best = {r["problem"]: r for r in rows if r["config"] == "best"}
    k = k if k is not None else (next(iter(best.values()))["k"] if best else 4)
    lopa = {r["problem"]: r for r in rows if r["config"] == "lopa" and r["k"] == k}
    van = {r["problem"]: r for r in rows if r["config"] == "vanilla"}
    problems = sorted(set(best) & set(lopa) & set(van))
    if not problems:
        return {"problems": 0}
    pick = [r for r in rows if r["problem"] in problems]

    def describe(group: list[dict]) -> dict:
        graded = [r["correct"] for r in group if r["correct"] is not None and r["correct"] == r["correct"]]
        pool = pooled(group, tokens="tokens")
        return {"runs": len(group), "tpf": pool["tpf_useful"], "forwards_mean": pool["forwards_mean"],
                "accuracy": statistics.mean(graded) if graded else None}

    per_config = {"vanilla": describe([van[p] for p in problems])}
    for kk in sorted({r["k"] for r in pick if r["config"] == "lopa"}):
        per_config[f"lopa k={kk}"] = describe([r for r in pick if r["config"] == "lopa" and r["k"] == kk])
    randoms = [r for r in pick if r["config"] == "random"]
    if randoms:
        per_config[f"random k={k}"] = describe(randoms)
    per_config["best found"] = describe([best[p] for p in problems])
    # An answer-keeping variant: where the order found wrote another answer than LoPA's, LoPA's run counts.
    kept = {p: best[p] if best[p]["answer"] == lopa[p]["answer"] else lopa[p] for p in problems}
    per_config["best found, LoPA's answer kept"] = describe(list(kept.values()))
    groups = [(van[p], lopa[p], best[p]) for p in problems]
    lo, hi = bootstrap_ci(groups, _gap_share, n_boot, seed)
    kept_groups = [(van[p], lopa[p], kept[p]) for p in problems]
    seeds = sorted({r["seed"] for r in randoms})
    by_seed = [_tpf([r for r in randoms if r["seed"] == s]) for s in seeds]
    changed = [p for p in problems if best[p]["answer"] != lopa[p]["answer"]]
    graded = lambda r: r["correct"] is not None and r["correct"] == r["correct"]      # noqa: E731
    per_problem = []
    for p in problems:
        rand = [r["tpf"] for r in randoms if r["problem"] == p]
        per_problem.append({"problem": int(p), "vanilla_tpf": van[p]["tpf"], "lopa_tpf": lopa[p]["tpf"],
                            "best_tpf": best[p]["tpf"], "vanilla_forwards": van[p]["forwards"],
                            "lopa_forwards": lopa[p]["forwards"], "best_forwards": best[p]["forwards"],
                            "random_min": min(rand, default=float("nan")),
                            "random_median": statistics.median(rand) if rand else float("nan"),
                            "random_max": max(rand, default=float("nan")),
                            "lopa_correct": lopa[p]["correct"], "best_correct": best[p]["correct"],
                            "search_forwards": best[p]["search_forwards"], "search_s": best[p]["search_s"]})
    out = {
        "problems": len(problems), "k": k, "random_orders": len(seeds), "bootstrap": n_boot,
        "gap_share": _gap_share(groups), "gap_share_ci95": [lo, hi],
        "gap_share_answer_kept": _gap_share(kept_groups),
        "best_over_lopa_tpf": per_config["best found"]["tpf"] / per_config[f"lopa k={k}"]["tpf"],
        "problems_best_saves": sum(best[p]["forwards"] < lopa[p]["forwards"] for p in problems),
        "answers_changed": len(changed),
        "right_to_wrong": sum(graded(best[p]) and lopa[p]["correct"] == 1 and best[p]["correct"] == 0 for p in changed),
        "wrong_to_right": sum(graded(best[p]) and lopa[p]["correct"] == 0 and best[p]["correct"] == 1 for p in changed),
        "random_pooled_tpf": {"min": min(by_seed), "median": statistics.median(by_seed), "max": max(by_seed)} if by_seed else None,
        "search_forwards_total": int(sum(best[p]["search_forwards"] for p in problems)),
        "search_s_total": float(sum(best[p]["search_s"] for p in problems)),
        "per_config": per_config, "per_problem": per_problem,
    }
    out["choices"] = summarize_choices(choices, problems)
    return out


def summarize_choices(choices, problems) -> dict:
    """What the order found filled where it left LoPA: how LoPA ranked that position, and where it sat."""
    rows = [] if choices is None or not len(choices) else [c for c in choices.to_dict("records") if c["problem"] in problems]
    extra = [c for c in rows if c["position"] is not None and c["position"] == c["position"]]
    if not rows:
        return {"departures": 0}
    return {"departures": len(rows), "anchor_alone": len(rows) - len(extra),
            "in_lopa_top_k": sum(bool(c["in_lopa_top_k"]) for c in extra),
            "conf_rank_median": statistics.median(c["conf_rank"] for c in extra) if extra else None,
            "at_front": sum(c["offset"] == 0 for c in extra),
            "max_prob_median": statistics.median(c["max_prob"] for c in extra) if extra else None,
            "free_median": statistics.median(c["free"] for c in rows)}


def report(summary: dict) -> str:
    if not summary.get("problems"):
        return "no complete problem yet"
    lo, hi = summary["gap_share_ci95"]
    k = summary["k"]
    lines = [f"{summary['problems']} problems; LoPA at k = {k}; the order found: anchor + at most one extra token per "
             "round, chosen by the forwards to finish (rollouts under LoPA from its best run over k)",
             f"{'order':>32} {'runs':>5} {'TPF':>6} {'forwards':>9} {'accuracy':>9}"]
    for name, s in summary["per_config"].items():
        acc = "n/a" if s["accuracy"] is None else f"{s['accuracy'] * 100:.1f}%"
        lines.append(f"{name:>32} {s['runs']:>5} {s['tpf']:>6.2f} {s['forwards_mean']:>9.2f} {acc:>9}")
    spread = summary.get("random_pooled_tpf")
    if spread:
        lines.append(f"random orders ({summary['random_orders']} seeds), pooled TPF per seed: min {spread['min']:.2f}, "
                     f"median {spread['median']:.2f}, max {spread['max']:.2f}")
    lines += [f"share of the vanilla -> best-found TPF gap that LoPA closes: {summary['gap_share']:.3f} "
              f"(bootstrap 95% CI {lo:.3f}..{hi:.3f}); keeping LoPA's answer where the search changed it: "
              f"{summary['gap_share_answer_kept']:.3f}",
              f"best found / LoPA TPF: {summary['best_over_lopa_tpf']:.3f}; fewer forwards than LoPA on "
              f"{summary['problems_best_saves']} of {summary['problems']} problems; answers changed on "
              f"{summary['answers_changed']} (right -> wrong {summary['right_to_wrong']}, wrong -> right "
              f"{summary['wrong_to_right']})",
              f"search: {summary['search_forwards_total']} rollout forwards, {summary['search_s_total']:.1f} s"]
    c = summary.get("choices", {})
    if c.get("departures"):
        lines.append(f"where the order found left LoPA ({c['departures']} rounds): the anchor alone {c['anchor_alone']}; "
                     f"an extra token in LoPA's top k {c['in_lopa_top_k']}, at the front (lowest free position) "
                     f"{c['at_front']}; median Conf rank {c['conf_rank_median']} of {c['free_median']} free, "
                     f"median max prob {c['max_prob_median']:.2f}")
    return "\n".join(lines)


# -- the app's view of this study (lopa.study.STUDIES) ------------------------------------------------
LIVE_KS = (1, 4)
# A live search tries the anchor alone and the 4 most confident free positions per round (every free
# position: --max-candidates 0 on the command line), so the app's default run stays within a minute on
# a shared 2-core CPU (docs/benchmarks.md).
LIVE_MAX_CANDIDATES = 4


def live(loaded, problems: list[dict], base: DecodeSettings, random: int):
    """A live run with `random` random orders: {"total", "row", "rounds"} per plain decode ("rounds": where the order found left LoPA, with
    the search's row), a {"status"} after each rollout of the search, and on every step "done" and "total":
    the decodes run so far and expected in all, the search's rollouts included (search_progress); the
    search's row carries "complete": its problem id, and "estimate" says whether a search has yet to end."""
    ks = sorted(set(LIVE_KS) | {base.k})
    plain = len(configurations(base, ks, random))
    number = {p["id"]: i for i, p in enumerate(problems, 1)}
    done, searches, current = 0, [], 0          # rollouts of the finished searches, and of the one running
    for row, step in iter_headroom(loaded, problems, base, ks, random, LIVE_MAX_CANDIDATES, search_rounds=True):
        if row is None:
            done, current = done + 1, current + 1
            total = search_progress(len(problems), plain, searches, current, step)
            yield {"status": f"Searching problem {number[step['problem']]} of {len(problems)}: round {step['round']}, "
                             f"rollout {step['rollout']} of {step['of']}; the order found so far needs "
                             f"{step['rounds']} forwards…", "done": done, "total": total, "estimate": True}
        elif row["config"] == "best":           # the search's result: its rollouts are counted already
            searches, current = searches + [current], 0
            yield {"row": row, "rounds": step, "done": done, "complete": row["problem"],
                   "total": search_progress(len(problems), plain, searches, 0, None),
                   "estimate": len(searches) < len(problems)}
        else:
            done += 1
            yield {"row": row, "rounds": step, "done": done, "estimate": True,
                   "total": search_progress(len(problems), plain, searches, current, None)}


def search_progress(n: int, plain: int, searches: list[int], current: int, step: dict | None) -> int:
    """Decodes a live headroom run of `n` problems takes in all, as far as they are known: `plain` decodes per
    problem, the rollouts of the finished `searches`, the running search's `current` ones so far and, from
    its latest rollout `step` ({"rollout", "of", "round", "rounds"}), the rest of its round and as many per
    round for the rounds left (its best run's forwards). A search not started yet is expected to take the
    mean of the finished ones (before any: the running one's estimate, or `plain`). Exact once every search
    has ended; never below the decodes done."""
    running = 0
    if step is not None:
        running = current + step["of"] - step["rollout"] + max(step["rounds"] - 1 - step["round"], 0) * step["of"]
    guess = sum(searches) / len(searches) if searches else (running or plain)
    unstarted = n - len(searches) - (1 if step is not None or current else 0)
    return n * plain + sum(searches) + max(running, current) + round(guess * max(unstarted, 0))


def live_summary(rows: list[dict], rounds: list[dict]) -> tuple[dict, dict]:
    import pandas as pd
    df, choices = pd.DataFrame(rows), pd.DataFrame(rounds, columns=CHOICE_COLUMNS)
    return summarize_headroom(df, choices, n_boot=200), {"": df, "choices": choices}


def figure(tables: dict, summary: dict, title: str):
    from lopa.study.figures import headroom_figure
    return headroom_figure(tables[""], summary, title)


def png(tables: dict, summary: dict, title: str, path) -> None:
    from lopa.study.figures import headroom_png
    headroom_png(tables[""], summary, title, path)


CHOICE_COLUMNS = ["problem", "round", "position", "lopa_position", "conf_rank", "free", "max_prob", "offset",
                  "in_lopa_top_k", "saved", "positions", "lopa_positions"]


def main(argv=None) -> int:
    parser = STUDY.parser()
    args = STUDY.parse(argv, parser)
    import pandas as pd
    from tqdm import tqdm

    from lopa.study.figures import headroom_figure, headroom_png
    started = start(args)
    loaded, hw, problems, base = started.loaded, started.hw, started.problems, started.base
    ks = sorted({int(x) for x in args.ks.split(",")} | {base.k})
    if base.k < 1:
        parser.error("the search needs LoPA with at least one branch below it: --k 1 or more")
    t0 = time.perf_counter()
    rows, choices = [], []
    total = len(problems) * (len(configurations(base, ks, args.random)) + 1)
    for row, chosen in tqdm(iter_headroom(loaded, problems, base, ks, args.random, args.max_candidates, args.data,
                                          args.shots, pair_pool=args.pair_pool), total=total, leave=False):
        rows.append(row)
        choices += chosen
    df, choices_df = pd.DataFrame(rows), pd.DataFrame(choices, columns=CHOICE_COLUMNS)
    summary = summarize_headroom(df, choices_df, base.k, args.bootstrap)
    summary["budget"] = {"depth": base.lookahead_depth, "candidates": args.max_candidates or "every free position",
                         **({"pair_pool": args.pair_pool} if base.lookahead_depth > 1 else {}),
                         "k_below": "the k of the LoPA run with the fewest forwards, over --ks", "ks": ks,
                         "wall_s": time.perf_counter() - t0}
    print(report(summary))
    print(f"wall time {summary['budget']['wall_s']:.0f} s")
    title = f"{loaded.spec.name}, {len(problems)} problems, k={base.k}, {hw}"
    meta = started.meta(argv, args, summary)
    files = write_results(args.out, STUDY.name, {"": df, "choices": choices_df}, meta,
                          headroom_figure(df, summary, title), lambda path: headroom_png(df, summary, title, path))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
