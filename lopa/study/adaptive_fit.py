"""The adaptive branch budget's two models, measured and fitted on the device and the model that run
(lopa.study.adaptive's first steps): the cost curve, a verify forward's seconds for B = 1 .. K + 1
branches plus the bookkeeping around it (measure_cost), and the gain model, what a branch wins on this
model (calibrate, lopa.rules.fit_gain); budget_flags writes both as the flags that run the budget anywhere.
"""

from __future__ import annotations

from lopa.cost import monotone
from lopa.order import ADAPTIVE_NEAR
from lopa.rules import fit_gain
from lopa.settings import DecodeSettings
from lopa.study.common import decode_one
from lopa.trace import pooled

GAIN = ("adaptive_win", "adaptive_release", "adaptive_lift")      # the gain model's settings (lopa.rules.choose_k)
CALIBRATION_PROBLEMS = 16     # ~60 branch rounds: win and lift settle within a few percent on the regime model


def measure_cost(loaded, settings: DecodeSettings, k_max: int, prompt, repeats: int = 5) -> tuple[list[float], float]:
    """(verify seconds for B = 1 .. k_max + 1 windows of two blocks, bookkeeping seconds per round) on
    this device. The B are timed in turn, `repeats` times over; the fastest of each B counts (other
    work on the machine only ever adds time) and the curve is made non-decreasing (monotone): on a
    shared machine single timings jump by 2x. Bookkeeping (anchor, lookahead, scoring, records) is the
    median time outside the forward of a vanilla decode's rounds, the least of `repeats` decodes; a
    round with B branches costs verify(B) + bookkeeping."""
    return drain(cost_steps(loaded, settings, k_max, prompt, repeats))


def cost_steps(loaded, settings: DecodeSettings, k_max: int, prompt, repeats: int = 5):
    """measure_cost a unit at a time: yields after each of its 2 * repeats units (a timing sweep over every
    B, a vanilla decode), so a live run counts them and can stop between them; returns what
    measure_cost returns (`yield from` gives it)."""
    from lopa.tasks.timing import forward_times
    counts = range(1, k_max + 2)
    samples = {B: [] for B in counts}
    for _ in range(repeats):
        for B, t in forward_times(loaded, prompt, settings, 1, counts=counts).items():
            samples[B].append(t)
        yield
    fastest = [min(samples[B]) for B in counts]
    bookkeeping = []
    for _ in range(repeats):
        run = loaded.decoder(settings.replace(k=0)).run(prompt)
        outside = sorted(r.round_seconds - r.forward_seconds for r in run.records if r.kind == "round")
        bookkeeping.append(outside[len(outside) // 2] if outside else 0.0)
        yield
    return monotone(fastest), min(bookkeeping)


def drain(steps):
    """Run a generator of units to its end and give its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


def describe_cost(verify: list[float], bookkeeping: float) -> str:
    """The cost model as the study prints it: what a round with B branches costs against one, which is
    what a k-branch round must commit, against a vanilla round, to win in tokens per second."""
    lines = [f"bookkeeping per round: {bookkeeping * 1e3:.2f} ms (median outside the forward, vanilla decode)",
             f"{'B = k+1':>8} {'verify ms':>10} {'round ms':>9} {'x single':>9}   a k-branch round pays when it commits"]
    single = verify[0] + bookkeeping
    for B, t in enumerate(verify, start=1):
        ratio = (t + bookkeeping) / single
        lines.append(f"{B:>8} {t * 1e3:>10.2f} {(t + bookkeeping) * 1e3:>9.2f} {ratio:>9.2f}   "
                     f">= {ratio:.2f}x the tokens of a vanilla round")
    return "\n".join(lines)


def branch_rounds(records, tau_conf: float, near: float = ADAPTIVE_NEAR) -> dict:
    """What a decode's rounds say about its branches: {"rounds": rounds that verified a branch, "wins": of
    those, won by one, "near": n_near summed over them, "near_won": summed over the won ones}. n_near is
    what AdaptiveOrder counts when it decides a round: free positions (masked, not committed by the
    round's anchor) whose max prob, from the previous round's winner, is above tau_conf - near."""
    counts = {"rounds": 0, "wins": 0, "near": 0, "near_won": 0}
    for prev, rec in zip(records, records[1:]):
        if rec.kind != "round" or not rec.lookahead_positions:
            continue
        anchored = set(rec.anchor_positions)
        seen = zip(prev.branch_positions[prev.winner], prev.branch_max_prob[prev.winner])
        n_near = sum(p not in anchored and m > tau_conf - near for p, m in seen)
        counts["rounds"] += 1
        counts["wins"] += rec.winner > 0
        counts["near"] += n_near
        counts["near_won"] += n_near if rec.winner > 0 else 0
    return counts


def calibrate(loaded, base: DecodeSettings, problems: list[dict], data: str = "", shots: int = 0) -> dict:
    """The gain model of the model that runs (lopa.rules.fit_gain): `problems` decoded at k = 0 and at
    k = 1 under the ranking the budget verifies (adaptive_rank), untimed.
    -> {"adaptive_win", "adaptive_release", "adaptive_lift", and what they came from}."""
    return drain(calibration_steps(loaded, base, problems, data, shots))


def calibration_steps(loaded, base: DecodeSettings, problems: list[dict], data: str = "", shots: int = 0):
    """calibrate a decode at a time: yields after each of its 2 * len(problems) decodes; returns what
    calibrate returns (`yield from` gives it)."""
    runs = {0: [], 1: []}
    for k in (0, 1):
        for p in problems:
            runs[k].append(decode_one(loaded, base.replace(k=k, order=base.adaptive_rank), p, data=data, shots=shots)[0])
            yield
    metrics = {k: [r.metrics() for r in rs] for k, rs in runs.items()}
    tpf = {k: pooled(ms, tokens="tokens_useful")["tpf_useful"] for k, ms in metrics.items()}
    rows = [{"saved": m0["forwards"] - m1["forwards"], **branch_rounds(r1.records, base.tau_conf)}
            for m0, m1, r1 in zip(metrics[0], metrics[1], runs[1])]
    win, release, lift = fit_gain(rows)
    totals = {name: sum(r[name] for r in rows) for name in ("rounds", "wins", "near", "near_won")}
    return {"adaptive_win": win, "adaptive_release": release, "adaptive_lift": lift, "problems": len(problems),
            "tpf_k0": tpf[0], "tpf_k1": tpf[1], "forwards_k1": sum(m["forwards"] for m in metrics[1]),
            **{f"k1_{name}": v for name, v in totals.items()}}


def budget_flags(cost: list[float], gain: dict, rank: str, k_max: int) -> str:
    """The flags that run this study's budget anywhere (lopa generate, lopa.bench -adaptive rows, the
    API): the fitted gain model, and the measured cost curve as the settings' linear model
    1 + branch_cost * (B - 1), branch_cost the least-squares slope through the origin of
    cost(B) / cost(1) - 1 over B - 1."""
    x = range(1, len(cost))
    slope = sum(b * (cost[b] / cost[0] - 1) for b in x) / max(sum(b * b for b in x), 1)
    return (f"--order adaptive --adaptive-rank {rank} --k {k_max} --branch-cost {slope:.3f} "
            f"--adaptive-win {gain['adaptive_win']:.3f} --adaptive-release {gain['adaptive_release']:.3f} "
            f"--adaptive-lift {gain['adaptive_lift']:.3f}")
