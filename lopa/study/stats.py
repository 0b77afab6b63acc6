"""Statistics of the studies, pure and small: rank correlations, the bootstrap, the order metrics
(AFP, Kendall's tau of the fill order) and AUP. numpy only; each is checked on hand-made data
with known answers in tests/test_study.py."""

from __future__ import annotations

import math

import numpy as np

# Accuracy-under-parallelism weight (d3LLM, Qian et al. 2026): W(y) = min(exp(-alpha (1 - y / y_max)), 1).
AUP_ALPHA = 3.0


def rankdata(x) -> np.ndarray:
    """Ranks 1..n, ties get the average of the ranks they span."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def spearman(x, y) -> float:
    """Spearman's rho (Pearson's r of the average ranks); nan when either side is constant or n < 2."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    rx, ry = rankdata(x) - (len(x) + 1) / 2, rankdata(y) - (len(y) + 1) / 2
    return float((rx * ry).sum() / math.sqrt((rx * rx).sum() * (ry * ry).sum()))


def kendall_tau(x, y) -> float:
    """Kendall's tau-b (ties in either variable corrected); nan when either side is constant or n < 2."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    sx = np.sign(x[:, None] - x[None, :])                  # [n, n]
    sy = np.sign(y[:, None] - y[None, :])
    s = (sx * sy).sum() / 2                                # concordant - discordant pairs
    n0 = n * (n - 1) / 2
    tx = ((sx == 0).sum() - n) / 2                         # pairs tied in x
    ty = ((sy == 0).sum() - n) / 2
    return float(s / math.sqrt((n0 - tx) * (n0 - ty)))


def bootstrap_ci(groups: list, statistic, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of statistic(resampled groups): the groups (one per problem) are drawn
    with replacement, so rounds of one problem stay together. nan results are dropped."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(groups), len(groups))
        v = statistic([groups[i] for i in pick])
        if not math.isnan(v):
            values.append(v)
    if not values:
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def ratio_of_means(pairs: list[tuple[float, float]]) -> float:
    """mean(a) / mean(b) over (a, b) pairs (one pair per problem)."""
    a = sum(p[0] for p in pairs)
    b = sum(p[1] for p in pairs)
    return a / b if b else float("nan")


def percentile_among(value: float, others) -> float:
    """Where `value` sits among `others`, in percent: the share below it plus half the ties."""
    others = list(others)
    if not others:
        return float("nan")
    below = sum(o < value for o in others)
    ties = sum(o == value for o in others)
    return 100.0 * (below + ties / 2) / len(others)


# -- order metrics ----------------------------------------------------------------------------------
def afp(steps) -> float:
    """Average finalization parallelism (Zhong et al. 2026): tokens / distinct steps that finalized
    any; 1 for one token per step, n when all n are finalized together."""
    steps = list(steps)
    return len(steps) / len(set(steps)) if steps else 0.0


def order_tau(rounds: dict[int, int]) -> float:
    """Kendall's tau-b between position and fill round: 1 = strictly left to right, -1 = right to
    left, nan when every position was filled in one round."""
    positions = sorted(rounds)
    return kendall_tau(positions, [rounds[p] for p in positions])


# -- accuracy under parallelism ---------------------------------------------------------------------
def aup_weight(y: float, y_max: float, alpha: float = AUP_ALPHA) -> float:
    return min(math.exp(-alpha * (1 - y / y_max)), 1.0) if y_max > 0 else 0.0


def aup(points, y_max: float | None = None, alpha: float = AUP_ALPHA) -> float:
    """Accuracy under parallelism (d3LLM, Qian et al. 2026, as we read it): the area under the
    weighted accuracy-vs-TPF curve, f(y) = y * W(y), from TPF 0 (at the first point's height) through
    the (TPF, accuracy) points sorted by TPF, trapezoids between them. Accuracy as a fraction; y_max
    (default: the best accuracy among the points) sets the weight, so accuracy lost against the best
    counts exponentially. For one operating point: TPF * y * W(y)."""
    pts = sorted((float(r), float(y)) for r, y in points)
    if not pts:
        return 0.0
    top = max(y for _, y in pts) if y_max is None else y_max
    f = [y * aup_weight(y, top, alpha) for _, y in pts]
    area = pts[0][0] * f[0]
    for i in range(1, len(pts)):
        area += (pts[i][0] - pts[i - 1][0]) * (f[i] + f[i - 1]) / 2
    return area


def pareto_front(points) -> list[int]:
    """Indices of the points (x, y) that no other point dominates (>= on both, > on one), both maximised."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any(a >= x and b >= y and (a > x or b > y) for j, (a, b) in enumerate(points) if j != i):
            front.append(i)
    return front
