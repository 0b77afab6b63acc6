"""Token filling order (TFO) policies: who decides which positions a round fills.

Two decisions of a round define the TFO (design note, "One LoPA round", steps 1 and 2): which
masked positions the anchor commits, and which positions the k lookahead branches fill. The
engine asks an order policy for both; everything else in the round (verify, score, select,
commit) is the same whatever the order. A policy is any object with two methods:

    anchor(view) -> Commits            window positions the anchor commits, with their tokens
    lookahead(view, free) -> [<=k]     window positions of the lookahead branches, rank order

Built-in policies (ORDERS, chosen by DecodeSettings.order):
- confidence     the paper's: D2F's commit rule (threshold, fallback = highest Conf), lookahead =
                 the k highest Conf. The default; identical to the engine before policies existed.
- random         anchor as confidence; lookahead = k positions drawn uniformly (without
                 replacement) from the free masked positions, seeded by (order_seed, round). The
                 control group the paper never ran.
- left_to_right  the autoregressive order: the commit rule's fallback takes the lowest masked
                 position of a block, lookahead the k lowest free positions.
- least_confident, highest_entropy, mixed: other proposal rules for the branches (anchor as
                 confidence): the k lowest max prob, the k lowest Conf (the highest entropy under
                 Conf = neg_entropy), or half the highest Conf and half the lowest.
- adaptive       the ranking of the order adaptive_rank names (default confidence), verifying only
                 as many of its k branches as save more seconds than they cost, under a cost model
                 and the model's gain model (AdaptiveOrder, lopa.rules.choose_k).
FlooredOrder wraps a policy with the lookahead floor (lookahead_min_prob).
ScriptedOrder (lopa.script) wraps any of them with forced decisions per round (commit p now, hold p
back, pin the lookahead), which is how forks and replays of recorded traces work.

Policies are stateless between rounds (random draws from a generator seeded per round), so a run
resumed from a saved state or replayed from scratch takes the same decisions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from lopa.rules import COMMIT_RULES, WINDOW_RULES, BlockPredictions, choose_k, lookahead_positions
from lopa.settings import DecodeSettings


@dataclass(frozen=True)
class RoundView:
    """What a policy sees when it decides round `round`: the last winner's predictions over the
    window (all uncached blocks) and which window positions are still masked."""
    round: int
    window_start: int          # generated index of window position 0
    n_tokens: int              # generated positions appended so far (cached + window)
    token: torch.Tensor        # [W] predicted token (sampled when temperature > 0)
    max_prob: torch.Tensor     # [W]
    conf: torch.Tensor         # [W]
    masked: torch.Tensor       # bool [W] still masked (candidates for the anchor)
    fully_activated: list[bool]  # per window block
    settings: DecodeSettings
    mask_id: int
    vocab_size: int | None = None
    # What the round before predicted at the same generated positions (the commit rule "stable" reads
    # them): [W] token, -1 where it predicted none, and its max prob. None: no round before.
    prev_token: torch.Tensor | None = None
    prev_max_prob: torch.Tensor | None = None
    # The model's commit filter (lopa.filter.CommitFilter), which commit=learned reads; None under the other rules.
    commit_filter: object = None
    # commit=dawn: the last winner's attention rows over the window, [W, C] (lopa.dependency); None otherwise.
    attention: torch.Tensor | None = None
    # The positions that still hold the mask token, bool [W], whatever a script holds back from `masked`: what a
    # dependency-aware rule reads as undecided. None: `masked`.
    unfilled: torch.Tensor | None = None

    @property
    def block_size(self) -> int:
        return self.settings.block_size


@dataclass(frozen=True)
class Commits:
    """The anchor's decision: window positions [A] (ascending) and the tokens written there [A];
    `forced` lists what a script imposed this round, for the trace; `reasons` ({reason: window positions}), why a
    rule that says so committed each position or held it back (commit=dawn), for the trace too."""
    positions: torch.Tensor
    tokens: torch.Tensor
    forced: list = field(default_factory=list)
    reasons: dict = field(default_factory=dict)


def block_predictions(view: RoundView, rank: torch.Tensor) -> Iterator[tuple[torch.Tensor, BlockPredictions, bool]]:
    """Each window block with a masked position: (its masked window positions [M], what they predict as a
    block-wise commit rule reads it, whether the block is fully activated). rank [W]: the fallback ranking."""
    N, W = view.block_size, view.token.numel()
    prev_token = view.prev_token if view.prev_token is not None else torch.full((W,), -1, dtype=torch.long)
    prev_max_prob = view.prev_max_prob if view.prev_max_prob is not None else torch.full((W,), float("nan"))
    for b, full in enumerate(view.fully_activated):
        idx = view.masked[b * N:(b + 1) * N].nonzero().flatten() + b * N         # [M] masked positions of block b
        if idx.numel():
            yield idx, BlockPredictions(view.token[idx], view.max_prob[idx], view.conf[idx], rank[idx], prev_token[idx],
                                        prev_max_prob[idx], idx - b * N, b, view.commit_filter), full


class OrderPolicy(Protocol):
    def anchor(self, view: RoundView) -> Commits: ...
    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor: ...


# -- built-in policies ----------------------------------------------------------------------------
class ConfidenceOrder:
    """The paper's order. Subclasses change only the two rankings: `fallback_rank` picks the
    commit rule's single position when nothing passes tau_conf, `lookahead_rank` the k branches."""
    name = "confidence"
    stationary = True       # decides from the view alone (lopa.order.stationary)

    def fallback_rank(self, view: RoundView) -> torch.Tensor:      # [W], higher = first
        return view.conf

    def lookahead_rank(self, view: RoundView) -> torch.Tensor:     # [W], higher = first
        return view.conf

    def anchor(self, view: RoundView) -> Commits:
        """D2F step 4 block by block under the settings' commit rule (the paper's: commit every
        max_prob > tau_conf; else the best by rank)."""
        rank = self.fallback_rank(view)
        if view.settings.commit in WINDOW_RULES:                 # one decision over the whole window (dawn)
            chosen, reasons = WINDOW_RULES[view.settings.commit](view, rank)
            positions = chosen.nonzero().flatten()
            return Commits(positions, view.token[positions], reasons=reasons)
        rule = COMMIT_RULES[view.settings.commit]
        chosen = [idx[rule(block, view.settings, full)] for idx, block, full in block_predictions(view, rank)]
        positions = torch.cat(chosen) if chosen else torch.zeros(0, dtype=torch.long)
        return Commits(positions, view.token[positions])

    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor:
        return lookahead_positions(self.lookahead_rank(view), free, view.settings.k)

    def describe(self) -> dict:
        return {"name": self.name}


class RandomOrder(ConfidenceOrder):
    name = "random"
    stationary = False      # a draw per round

    def __init__(self, seed: int = 0):
        self.seed = seed

    def describe(self) -> dict:
        return {"name": self.name, "seed": self.seed}

    def lookahead_rank(self, view: RoundView) -> torch.Tensor:
        # One generator per (seed, round): the draw never depends on earlier rounds, so resuming,
        # replaying and forking all see the same keys. Top-k of iid uniform keys = uniform sample.
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + view.round)
        return torch.rand(view.token.numel(), generator=generator)


class LeftToRightOrder(ConfidenceOrder):
    name = "left_to_right"

    def fallback_rank(self, view: RoundView) -> torch.Tensor:
        return -torch.arange(view.token.numel(), dtype=torch.float)

    lookahead_rank = fallback_rank


# Proposal rules: which k positions the branches try (the paper's answer, Sec. 3: the k most confident).
# The anchor stays the paper's, so each differs from `confidence` in the lookahead only. The paper's rule
# proposes positions that are nearly committable already; these ask whether the extra token pays more
# where the model is unsure (docs/studies.md, section 1, compares them).
class LeastConfidentOrder(ConfidenceOrder):
    """Lookahead = the k free positions whose predicted token is least sure (lowest max prob)."""
    name = "least_confident"

    def lookahead_rank(self, view: RoundView) -> torch.Tensor:
        return -view.max_prob


class HighestEntropyOrder(ConfidenceOrder):
    """Lookahead = the k free positions with the lowest Conf: under Conf = neg_entropy (the default and the
    paper's for D2F-Dream) the highest entropy; under another Conf, the least certain by it."""
    name = "highest_entropy"

    def lookahead_rank(self, view: RoundView) -> torch.Tensor:
        return -view.conf


class MixedOrder(ConfidenceOrder):
    """Lookahead = the ceil(k / 2) highest-Conf free positions (the paper's), then the floor(k / 2) lowest:
    half the branches fill what is nearly sure, half what is least sure. k = 1 is the paper's order."""
    name = "mixed"

    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor:
        k = view.settings.k
        top = lookahead_positions(view.conf, free, (k + 1) // 2)             # [<= ceil(k/2)] best first
        rest = free.clone()                                                  # free stays the caller's
        rest[top] = False
        bottom = lookahead_positions(-view.conf, rest, k - top.numel())      # [<= floor(k/2)] least sure first
        return torch.cat([top, bottom])


# "Just under tau_conf" for the adaptive gain model: within this of it (AdaptiveOrder's n_near; the
# calibration that fits the model counts the same, lopa.study.adaptive_fit.branch_rounds).
ADAPTIVE_NEAR = 0.2


class AdaptiveOrder:
    """order = adaptive: the base policy's anchor and ranking, but each round verifies only as many of its
    top settings.k candidates as pay for themselves in seconds saved (lopa.rules.choose_k),
    given `cost`, the seconds of a round with B = 1 .. K + 1 branches: the curve the engine measured on the
    running device (lopa.cost.cost_curve, settings.cost_curve = "measured", the default) or the linear model
    of the settings (branch_cost, linear_cost); `source` says which, in words, for the trace and the app.
    Returns fewer than k positions, often none, which the engine verifies as a smaller batch; with zero
    branches a round is exactly a vanilla D2F round.
    near: a free position with max_prob > tau_conf - near counts as "just under" the threshold;
    win, release, lift: the gain model of lopa.rules.choose_k (make_order passes the settings'
    adaptive_win, adaptive_release and adaptive_lift, the running model's when a calibration fitted them)."""
    name = "adaptive"
    stationary = True

    def __init__(self, cost, base: OrderPolicy | None = None, near: float = ADAPTIVE_NEAR, win: float = 0.35,
                 release: float = 0.2, lift: float = 0.0, source: str = ""):
        self.cost = torch.as_tensor(cost, dtype=torch.float64)          # [K + 1] seconds for B = 1 .. K + 1
        self.source = source[:256]                                      # a trace keeps names short (lopa.schema)
        self.base, self.near, self.gain = base or ConfidenceOrder(), near, dict(win=win, release=release, lift=lift)
        # For a quick "no branch can pay" check: the cheapest round with branches against one without.
        self.single, self.cheapest = float(self.cost[0]), float(self.cost[1:].min()) if self.cost.numel() > 1 else 0.0
        # choose_k depends only on (candidates, n_near) once cost and gain are fixed: each pair is
        # solved once per run, so the budget costs a round a dict lookup, not a dozen small tensor ops.
        self.budget: dict[tuple[int, int], int] = {}

    def anchor(self, view: RoundView) -> Commits:
        return self.base.anchor(view)

    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor:
        n_near = int((free & (view.max_prob > view.settings.tau_conf - self.near)).sum())
        most_saved = (self.gain["release"] + self.gain["lift"] * n_near) * self.single    # a sure win's seconds
        if self.cheapest <= 0 or most_saved < self.cheapest - self.single:
            return torch.zeros(0, dtype=torch.long)                      # no k >= 1 can pay: skip the ranking
        ranked = self.base.lookahead(view, free)                         # [<= k] best first
        key = (ranked.numel(), n_near)
        if key not in self.budget:
            self.budget[key] = int(choose_k(*key, self.cost, **self.gain))
        return ranked[:self.budget[key]]

    def describe(self) -> dict:
        return {"name": self.name, "cost": self.cost.tolist(), "near": self.near, **self.gain,
                **({"source": self.source} if self.source else {}), "base": self.base.describe()}


class FlooredOrder:
    """A lookahead floor around any policy (DecodeSettings.lookahead_min_prob; docs/method.md,
    departure 8): a position is a lookahead candidate only if its max_prob is at least `floor`, so a
    round may verify fewer than k branches. The anchor is the base policy's, untouched."""

    stationary = True

    def __init__(self, base: OrderPolicy, floor: float):
        self.base, self.floor = base, floor

    def anchor(self, view: RoundView) -> Commits:
        return self.base.anchor(view)

    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor:
        return self.base.lookahead(view, free & (view.max_prob >= self.floor))

    def describe(self) -> dict:
        return {"name": "floor", "floor": self.floor, "base": self.base.describe()}


class SecondBranchAt:
    """k = 1 under `base` (a policy run with settings.k >= 2) in every round but `round`, which verifies
    its first two candidates: what one second branch at that round is worth, the rest of the decode
    following k = 1 (lopa.study.adaptive.second_branch_saves). round = -1: exactly the k = 1 decode."""
    name = "second_branch_at"

    def __init__(self, base: OrderPolicy, round: int):
        self.base, self.round = base, round

    def anchor(self, view: RoundView) -> Commits:
        return self.base.anchor(view)

    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor:
        return self.base.lookahead(view, free)[:2 if view.round == self.round else 1]

    def describe(self) -> dict:
        return {"name": self.name, "round": self.round, "base": self.base.describe()}


ORDERS = {"confidence": ConfidenceOrder, "random": RandomOrder, "left_to_right": LeftToRightOrder,
          "adaptive": AdaptiveOrder, "least_confident": LeastConfidentOrder,
          "highest_entropy": HighestEntropyOrder, "mixed": MixedOrder}


def stationary(policy: OrderPolicy) -> bool:
    """Whether `policy` decides from the round's view alone, never from the round's number (a draw seeded
    per round, a study's chosen round): then a round whose view repeats makes the same decisions (the
    engine's stall check, lopa.engine). A policy says so with `stationary = True`; a wrapper (`base`) is
    as stationary as what it wraps; one that does not say is not."""
    while policy is not None:
        if not getattr(policy, "stationary", False):
            return False
        policy = getattr(policy, "base", None)
    return True


def linear_cost(settings: DecodeSettings) -> list[float]:
    """The adaptive order's cost model: a round with b lookahead branches costs 1 + branch_cost * b * d rounds of
    the anchor alone, d = lookahead_depth: each branch verifies up to d rows, one per token of its chain
    (lopa/chains.py), and a row is what branch_cost prices. The gain model is fitted at depth 1, so at d > 1 the
    budget is cautious: a kept chain may save more than one token's worth."""
    return [1.0 + settings.branch_cost * b * settings.lookahead_depth for b in range(settings.k + 1)]


def linear_source(settings: DecodeSettings) -> str:
    """How a trace and the app name the linear cost model of these settings."""
    return f"linear, branch_cost {settings.branch_cost:g}"


def budget_warning(settings: DecodeSettings, cost=None, source: str = "") -> str | None:
    """Why order = adaptive under these settings verifies no branch in any round, or None when some
    round can (or the order is not adaptive). A budget never branches when even the most favourable
    round (all k candidates, every window position just under tau_conf) saves less than a branch
    costs (lopa.rules.choose_k, whose saving grows with both): the run is then vanilla D2F, which the
    CLI, the app and the API say instead of letting "adaptive" stand for it. cost: as make_order's (the
    run's curve, e.g. run_curve of its trace), source: where it came from (default: the linear model)."""
    if settings.order != "adaptive" or settings.k == 0:
        return None
    cost = torch.as_tensor(linear_cost(settings) if cost is None else cost, dtype=torch.float64)
    best = choose_k(settings.k, settings.max_new_tokens, cost, settings.adaptive_win, settings.adaptive_release,
                    settings.adaptive_lift)
    if int(best) > 0:
        return None
    extra = float(cost[1] / cost[0] - 1) if cost.numel() > 1 else 0.0
    return (f"order=adaptive verifies no branch in any round here, so this run decodes as vanilla D2F (k = 0): "
            f"a branch wins with chance {settings.adaptive_win:.2f} and a won round saves "
            f"{settings.adaptive_release:.2f} forwards (+ {settings.adaptive_lift:.2f} per position just under "
            f"tau_conf), less than the {extra:.2f} of a round a branch costs (cost curve: "
            f"{source or linear_source(settings)}). Branches pay sooner where they cost less (a GPU's branch_cost "
            "is near 0)")


def make_order(settings: DecodeSettings, cost=None, source: str = "") -> OrderPolicy:
    """The policy a run's settings name, with its lookahead floor. `cost`: a measured cost curve for
    order = adaptive (default: linear_cost(settings)), `source` where it came from in words."""
    name = settings.adaptive_rank if settings.order == "adaptive" else settings.order
    ranking = RandomOrder(settings.order_seed) if name == "random" else ORDERS[name]()
    if settings.lookahead_min_prob:     # ours (0 = the paper's): no speculation on a position the model barely guesses
        ranking = FlooredOrder(ranking, settings.lookahead_min_prob)
    if settings.order == "adaptive":
        return AdaptiveOrder(linear_cost(settings) if cost is None else cost, base=ranking,
                             win=settings.adaptive_win, release=settings.adaptive_release, lift=settings.adaptive_lift,
                             source=linear_source(settings) if cost is None else source)
    return ranking


# -- policies as data: what a trace records of the policy that ran ---------------------------------
# Every policy here describes itself (describe() -> {"name", its parameters, "base": the one it wraps});
# the trace schema validates the result (lopa.schema.Policy, POLICY_NAMES).
def describe_order(policy: OrderPolicy) -> dict:
    """policy.describe(), or {"name": "unknown", "type": ...} for a policy that cannot describe itself."""
    describe = getattr(policy, "describe", None)
    return describe() if describe is not None else {"name": "unknown", "type": type(policy).__name__[:64]}


def recorded_order(settings: DecodeSettings, policy: OrderPolicy) -> dict | None:
    """What a trace records of the policy that ran: None when it is the one the settings name
    (make_order(settings)), else its description, so a study's own policy (a measured cost curve,
    SecondBranchAt) replays from the trace alone (order_from_description). An adaptive policy is always
    recorded: its cost curve and where it came from (measured here, or linear) are the run's, not the
    settings'."""
    described = describe_order(policy)
    same = described == make_order(settings).describe() and described.get("name") != "adaptive"
    return None if same else described


def order_from_description(description: dict) -> OrderPolicy:
    """The policy a description (describe_order, a trace's `order`) names, with its parameters;
    ValueError naming what cannot be rebuilt."""
    name = description.get("name")
    base = (lambda: order_from_description(description["base"])) if "base" in description else ConfidenceOrder
    if name == "random":
        return RandomOrder(int(description.get("seed", 0)))
    if name == "adaptive":
        return AdaptiveOrder(description["cost"], base=base(), near=description.get("near", ADAPTIVE_NEAR),
                             **{g: description[g] for g in ("win", "release", "lift", "source") if g in description})
    if name == "floor":
        return FlooredOrder(base(), description["floor"])
    if name == "second_branch_at":
        return SecondBranchAt(base(), int(description["round"]))
    if name in ORDERS:
        return ORDERS[name]()
    if name == "unknown":
        raise ValueError(f"the run's order policy ({description.get('type', 'a custom object')}) did not record its "
                         "parameters, so its trace replays only as a script of its decisions (--script)")
    raise ValueError(f"unknown order policy {str(name)[:40]!r}: one of {tuple(ORDERS)}, floor, second_branch_at")


def trace_order(run) -> OrderPolicy:
    """The policy a recorded run (RunResult) decoded with: its recorded order, else its settings'."""
    return order_from_description(run.order) if run.order else make_order(DecodeSettings.from_dict(run.settings))
