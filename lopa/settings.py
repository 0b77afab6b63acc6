"""Frozen settings: what the user chooses (DecodeSettings) and what the model is (ModelSpec).

Every decode setting is declared once, as a DecodeSettings field whose metadata holds its range or
choices, help, its name and its choices' names in plain words, the paper's value and whether the app shows it
(`setting(...)` below, lopa/setting.py). SETTINGS, the
registry read from those fields, is what every surface is generated from: the command-line flags
(lopa.resolution.add_settings_arguments), the trace schema (lopa.schema), transformers' generation
config (lopa.hf), the paper presets, the app's inputs, its share links and its /decode endpoint.
`Setting.check` and `Setting.parse` (and `check_settings` over a dict) are the one range check all of them apply;
tests/test_settings_registry.py fails when a surface disagrees with the registry. Turning a request
into the settings that run (what the user set over a preset over the model's own values) is
lopa.resolution's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .setting import Setting, registry, setting  # noqa: F401 (Setting: read from here too; declared in lopa/setting.py)

CONFIDENCE_METRICS = ("max_prob", "neg_entropy", "margin")
# Attention inside the window (docs/method.md, "Attention"): block_causal as D2F trains; full as the
# authors' LoPA code runs it (every input row sees every other, the prompt's rows included, in the
# forward that caches the prompt); full_prompt_blind, full except that the prompt sees only itself
# (what the bundled models are trained with; lopa.schema reads the name lopa-trace/1 traces use, "full").
ATTENTION_MODES = ("block_causal", "full", "full_prompt_blind")
# When a block a lookahead token completed enters the prefix cache (docs/method.md, departure 2):
# "eager" from the forward that verified it; "authors" one forward later, as the authors' loop does.
CACHE_SCHEDULES = ("eager", "authors")
# What a position whose argmax is the mask token predicts (departure 1): "next_best" the best other
# token; "authors" the mask token itself, whose commit leaves the position masked; "excluded" the mask
# token's logit set to -inf before the softmax, so probabilities and Conf are over the other tokens
# (what the departures study compares the raw logits with).
MASK_ARGMAX = ("next_best", "authors", "excluded")
# Commit rules (lopa.rules.COMMIT_RULES): D2F's threshold, one token per round, and the peers' (lopa.peers).
COMMIT_RULES = ("threshold", "top1", "eb", "factor", "frechet", "joint", "stable", "learned", "dawn")
# Token filling orders (lopa/order.py): which positions the anchor's fallback and the lookahead take.
ORDERS = ("confidence", "random", "left_to_right", "adaptive", "least_confident", "highest_entropy", "mixed")
# The orders in words, for the app's menus and the help.
ORDER_WORDS = {"confidence": "most confident first (the paper's)", "random": "drawn at random", "left_to_right": "left to right",
    "adaptive": "adaptive: only the branches that pay", "least_confident": "least confident first",
    "highest_entropy": "least sure first (highest entropy)", "mixed": "half most, half least sure"}
# The rankings the adaptive budget can verify a prefix of: every order but itself.
ADAPTIVE_RANKS = tuple(o for o in ORDERS if o != "adaptive")
# Branch score rules (lopa.rules.BRANCH_SCORES): "mean" is the paper's C(B); the others are the
# alternatives `python -m lopa.study calibration` compares (docs/studies.md).
BRANCH_SCORE_RULES = ("mean", "loo", "min", "window", "segment", "count")
# k verifies k + 1 windows in one batch; past 32 the batch stops being "small" even on a GPU,
# and the paper never uses more than 14 (Table 5).
MAX_LOOKAHEAD = 32
# A lookahead branch commits a chain of at most this many tokens (lopa/chains.py); each adds a row per branch
# to the round's batch, so a round verifies at most 1 + MAX_LOOKAHEAD * MAX_LOOKAHEAD_DEPTH rows.
MAX_LOOKAHEAD_DEPTH = 8
MAX_ROWS = 1 + MAX_LOOKAHEAD * MAX_LOOKAHEAD_DEPTH
MAX_TEMPERATURE = 10.0
# Bounds a run (and so a trace, lopa.schema) may declare: far above the paper's 512 new tokens in
# blocks of 32, small enough that a trace's figures stay within memory.
MAX_BLOCK_SIZE = 1024
MAX_NEW_TOKENS = 8192
# Seeds are 32-bit: the random order derives one generator seed per round from order_seed, and
# every derived seed must stay inside torch's 64-bit seed range.
MAX_SEED = 2**32 - 1
# The cost model of the adaptive order: a round with R rows in its verify batch costs
# 1 + branch_cost * (R - 1) rounds of the anchor alone (lopa.order.linear_cost).
MAX_BRANCH_COST = 100.0
# How the adaptive order prices branches (lopa.cost.cost_curve): timed on the running device, or the linear model.
COST_CURVES = ("measured", "linear")
# The adaptive gain model (forwards a won round saves later: release + lift per position near tau_conf):
# a fit is clipped here. A win cannot save more forwards than a decode has; these are far above any fit.
MAX_ADAPTIVE_LIFT = 20.0
MAX_ADAPTIVE_RELEASE = 64.0
# The peers' knobs: an entropy budget past every block's total (32 positions of a 150k vocabulary hold
# under 400 nats), and a factor far past any published one (Fast-dLLM uses f <= 2).
MAX_EB_GAMMA = 1000.0
MAX_FACTOR = 100.0
# Token editing (lopa/editing.py): a block's post-edit rounds at most; LLaDA2.1's generate() defaults to 16.
MAX_EDIT_POST_STEPS = 256


@dataclass(frozen=True)
class DecodeSettings:
    """One run's decoding settings. The defaults are the paper's D2F-Dream GSM8K row (Table 5), k and
    the mechanics aside (the `paper` of each field is the paper's value). Each field's help says what
    it does; `SETTINGS[name]` holds its range, choices, paper value and whether the app shows it."""

    k: int = setting(0, "lookahead branches per round (0 = D2F vanilla)", low=0, high=MAX_LOOKAHEAD, paper=14,
                     label="k (lookahead branches)", words="lookahead branches per round")
    tau_conf: float = setting(0.9, "commit threshold on max prob (strict: commit when max_prob > tau_conf); "
                              "commit=joint and commit=stable read it too",
                              low=0.0, high=1.0, open_low=True, paper=0.9, words="commit threshold")
    tau_add: float = setting(0.1, "add a block once the last block's decoded fraction reaches this",
                             low=0.0, high=1.0, open_low=True, paper=0.1, words="add the next block at")
    tau_act: float = setting(0.95, "fully activate block i+1 once block i's decoded fraction reaches this",
                             low=0.0, high=1.0, open_low=True, paper=0.95, words="fully activate the next block at")
    block_size: int = setting(32, "block size N", low=1, high=MAX_BLOCK_SIZE, paper=32, words="block size, in tokens")
    max_new_tokens: int = setting(256, "new tokens at most, a multiple of the block size", low=1,
                                  high=MAX_NEW_TOKENS, paper=512, words="new tokens at most")
    commit: str = setting("threshold", "commit rule: threshold (D2F / Fast-dLLM: every max prob > tau_conf, "
                          "else the best), top1 (one token per round), or a peer's (lopa/peers.py): eb "
                          "(entropy-bounded, eb_gamma), factor (Fast-dLLM, factor_f), frechet (Fast-dLLM++, "
                          "frechet_margin), joint (SGLang JointThreshold's mask-to-token step, at "
                          "tau_conf; its token edits are edit_threshold's, off unless set), stable (after LESS, tau_conf and stable_js), "
                          "learned (after Learn2PD: a filter trained on the model's own decodes, learned_threshold; python -m "
                          "lopa.train filter --model DIR), dawn (DAWN's dependency-aware rule: the sure positions, those a "
                          "sure decoded one induces, and a conflict-free set of the forward's attention graph; dawn_low, "
                          "dawn_edge, dawn_induce, dawn_sink)", choices=COMMIT_RULES, paper="threshold", words="commit rule", choice_words={"threshold": "every position over the threshold (D2F)", "top1": "one token a round",
    "eb": "entropy-bounded (EB sampler)", "factor": "Fast-dLLM's factor rule", "frechet": "Fréchet bound (Fast-dLLM++)",
    "joint": "joint threshold (SGLang)", "stable": "stable across rounds (after LESS)",
    "learned": "learned filter (after Learn2PD)", "dawn": "dependency-aware (DAWN)"})
    confidence: str = setting("neg_entropy", "Conf, used by the fallback commit, the lookahead ranking and the "
                              "branch score", choices=CONFIDENCE_METRICS, paper="neg_entropy", words="confidence measure", choice_words={"max_prob": "highest probability", "neg_entropy": "negative entropy (how peaked)",
    "margin": "gap between the two best"})
    attention: str = setting("block_causal", "attention inside the window: block_causal (how D2F models are "
                             "trained), full (the authors': the prompt's rows see the first window too), "
                             "full_prompt_blind (full, the prompt seeing only itself)", choices=ATTENTION_MODES,
                             paper="full", words="attention inside the window", choice_words={"block_causal": "block-causal (as D2F trains)", "full": "full (the authors')",
    "full_prompt_blind": "full, the prompt seeing only itself"})
    temperature: float = setting(0.0, "sampling temperature (0 = greedy)", low=0.0, high=MAX_TEMPERATURE, paper=0.0, words="sampling temperature")
    seed: int = setting(0, "sampling seed", low=0, high=MAX_SEED, words="sampling seed")
    order: str = setting("confidence", "token filling order (lopa/order.py): confidence (the paper's), random "
                         "(lookahead drawn uniformly, seeded by order_seed), left_to_right (lowest first), "
                         "adaptive (the adaptive_rank order verifying only the branches that pay, branch_cost), or "
                         "another lookahead proposal with the paper's anchor: least_confident (lowest max prob), "
                         "highest_entropy (lowest Conf) or mixed (half highest, half lowest Conf)",
                         choices=ORDERS, paper="confidence", words="token filling order", choice_words=ORDER_WORDS)
    order_seed: int = setting(0, "seed of the random order", low=0, high=MAX_SEED, words="seed of the random order")
    branch_score: str = setting("mean", "how a branch is scored to pick the winner: mean (the paper's mean Conf "
                                "of its masked positions), loo, min, window, segment or count (docs/studies.md)",
                                choices=BRANCH_SCORE_RULES, paper="mean", words="how a branch is scored", choice_words={"mean": "mean confidence of the masked (the paper's C(B))", "loo": "mean over positions all leave masked",
    "min": "least confident masked position", "window": "mean of the first positions",
    "segment": "least confident stretch", "count": "positions over the threshold"})
    cache_schedule: str = setting("eager", "when a block a lookahead token completed enters the prefix cache: "
                                  "eager, from the forward that verified it; authors, one forward later, as in their "
                                  "loop (docs/method.md, departure 2)", choices=CACHE_SCHEDULES, paper="authors", words="when a finished block is cached", choice_words={"eager": "at once", "authors": "one forward later (the authors')"})
    mask_argmax: str = setting("next_best", "what a position predicts when its best guess is the mask token: next_best, "
                               "the best other token; authors, the mask token, whose commit leaves the position "
                               "masked; excluded, its logit is -inf before the softmax, so probabilities and Conf "
                               "leave it out (departure 1)", choices=MASK_ARGMAX,
                               paper="authors", words="when the mask token is the best guess", choice_words={"next_best": "take the best other token", "authors": "commit it, the position stays masked (the authors')",
    "excluded": "leave it out of the probabilities"})
    lookahead_min_prob: float = setting(
        0.0, "a position is a lookahead candidate only if its max prob is at least this; 0 = the paper's (every "
        "masked position). Ours: the branch score never checks the lookahead token itself (departure 8)",
        low=0.0, high=1.0, open_high=True, paper=0.0, words="least sureness of a lookahead position")
    branch_cost: float = setting(
        1.0, "order=adaptive only: what one more row of the verify batch (a branch; each token of its chain at "
        "lookahead_depth > 1) adds to a round's seconds, in rounds of the anchor alone (1 = a compute-bound CPU; "
        "a GPU at batch 1 is near 0); read when cost_curve is linear", low=0.0, high=MAX_BRANCH_COST,
        words="cost of one more branch (adaptive order)")
    cost_curve: str = setting(
        "measured", "order=adaptive only: what the budget prices a round with b branches by: measured, a few verify "
        "forwards timed on the running device at the run's shape when the decode starts, once per process "
        "(lopa/cost.py; the linear model stands in where nothing can be timed: a reference or remote executor); "
        "linear, 1 + branch_cost * b. Setting branch_cost (a flag, the API, a preset or the model's config) without "
        "cost_curve chooses linear", choices=COST_CURVES, words="how branches are priced (adaptive order)",
        choice_words={"measured": "timed on this device", "linear": "linear in branch_cost"})
    adaptive_rank: str = setting(
        "confidence", "order=adaptive only: the order whose lookahead ranking the budget verifies a prefix of: "
        "confidence (the paper's top-Conf) or another proposal rule (least_confident pays best on the regime "
        "model, docs/studies.md)", choices=ADAPTIVE_RANKS, words="ranking the adaptive order checks", choice_words={o: w for o, w in ORDER_WORDS.items() if o in ADAPTIVE_RANKS})
    # The adaptive order's gain model (lopa.rules.choose_k): a won round saves release + lift * n_near
    # forwards later. A model's own values come from a short calibration decode
    # (lopa.study.adaptive_fit.calibrate); the defaults, as measured on sure-gsm-dllm. Not app inputs: a
    # study fits them, nobody picks them by hand.
    adaptive_win: float = setting(
        0.35, "order=adaptive only: the chance one lookahead branch wins a round (k branches: 1 - (1 - win)^k)",
        low=0.0, high=1.0, app=False, words="chance a branch wins (adaptive order)")
    adaptive_release: float = setting(
        0.2, "order=adaptive only: forwards a won round saves later in the decode, whatever lies near tau_conf",
        low=0.0, high=MAX_ADAPTIVE_RELEASE, app=False, words="forwards a win saves (adaptive order)")
    adaptive_lift: float = setting(
        0.0, "order=adaptive only: forwards a won round saves beyond release, per free position within 0.2 "
        "under tau_conf", low=0.0, high=MAX_ADAPTIVE_LIFT, app=False, words="forwards a win saves per near position (adaptive order)")
    # The peers' own knobs (lopa/peers.py, docs/method.md "Peers"): app inputs like the rest (Run, Compare and
    # forks all take them); each is read only under its commit rule, as its help says.
    eb_gamma: float = setting(
        0.1, "commit=eb only: the entropy bound gamma (nats): commit the lowest-entropy positions while their "
        "summed entropy less the largest stays within it (0 = one token per round)", low=0.0, high=MAX_EB_GAMMA, words="entropy budget (entropy-bounded rule)")
    factor_f: float = setting(
        1.0, "commit=factor only: Fast-dLLM's f: commit the n most probable while (n + 1)(1 - c_(n)) <= f",
        low=0.0, high=MAX_FACTOR, open_low=True, words="factor f (Fast-dLLM's factor rule)")
    frechet_margin: float = setting(
        0.0, "commit=frechet only: commit the n most probable while the Fréchet bound c_(1) + ... + c_(n) - (n - 1) "
        "less 1 - c_(n) exceeds this margin. 0 is the published function's default, where the rule on an even "
        "profile is factor at f = 1; the Fast-dLLM++ README's tables use 0.25 (factor at f = 0.75)",
        low=-1.0, high=1.0, words="margin (Fréchet rule)")
    stable_js: float = setting(
        0.01, "commit=stable only: the largest Jensen-Shannon divergence (nats) between two rounds' (predicted "
        "token, the rest) splits at a position it commits", low=0.0, high=0.6931471805599453, words="largest change between rounds (stable rule)")
    learned_threshold: float = setting(
        0.96, "commit=learned only: commit a position when the model's commit filter gives its prediction a chance "
        "above this of being final (Learn2PD's evaluation scripts use 0.96)", low=0.0, high=1.0, open_high=True,
        words="least chance a guess is final (learned filter)")
    # DAWN's four thresholds (lopa.peers.dawn_sets); the defaults are its LLaDA GSM8K run's (lizhuo-luo/DAWN,
    # llada/eval_instruct.sh line 44: tau_sink 0.01, tau_edge 0.07, tau_induce 0.7, tau_low 0.75)
    dawn_low: float = setting(
        0.75, "commit=dawn only: the least max prob of a position the conflict-free set may commit (DAWN's tau_low)",
        low=0.0, high=1.0, words="least sureness of a conflict-free commit (DAWN)")
    dawn_edge: float = setting(
        0.07, "commit=dawn only: a position depends on another when its mean attention to it is at least this "
        "(DAWN's tau_edge)", low=0.0, high=1.0, open_low=True, app=False, words="attention that makes a dependency (DAWN)")
    dawn_induce: float = setting(
        0.7, "commit=dawn only: the least max prob of a position committed because it depends on a sure decoded "
        "one (DAWN's tau_induce)", low=0.0, high=1.0, app=False, words="least sureness of an induced commit (DAWN)")
    dawn_sink: float = setting(
        0.01, "commit=dawn only: a key whose mean attention over the window's rows exceeds this is an attention "
        "sink and makes no dependency (DAWN's tau_sink)", low=0.0, high=1.0, app=False,
        words="attention that marks a sink (DAWN)")
    lookahead_depth: int = setting(
        1, "tokens a lookahead branch may commit beyond the anchor: 1 = LoPA's one; d > 1 a chain of up to d, each "
        "prefix verified in the same forward and the chain cut where the row before a token no longer predicts it "
        "(lopa/chains.py, docs/method.md)", low=1, high=MAX_LOOKAHEAD_DEPTH, paper=1,
        label="lookahead depth", words="lookahead depth: tokens a chain may add")
    # Token editing (lopa/editing.py, docs/method.md "Token editing"): LLaDA2.1's token-to-token edits. Off by
    # default: no probability is above 1, and at 1 the engine skips the phase altogether.
    edit_threshold: float = setting(
        1.0, "token editing: a committed token of the window (not yet cached) is replaced by the model's prediction "
        "there when that differs and its probability is above this (strict); 1 = off. LLaDA2.1 publishes 0.5 to 0.9, "
        "SGLang's JointThreshold 0", low=0.0, high=1.0, words="editing threshold")
    edit_post_steps: int = setting(
        16, "edit_threshold < 1 only: rounds a full block may stay in the window to be edited again (its post-edit "
        "rounds); it is cached once its latest forward proposes no edit or these are spent. 0 = edits only while "
        "blocks still hold masks", low=0, high=MAX_EDIT_POST_STEPS, words="post-edit rounds per block")

    def __post_init__(self) -> None:
        for name, spec in SETTINGS.items():
            object.__setattr__(self, name, spec.check(getattr(self, name)))
        if self.max_new_tokens < self.block_size:
            raise ValueError(
                f"max_new_tokens must be at least block_size ({self.block_size}), got {self.max_new_tokens!r}")
        if self.max_new_tokens % self.block_size:
            raise ValueError(
                f"max_new_tokens ({self.max_new_tokens}) must be a multiple of block_size ({self.block_size}); "
                f"try {self.max_new_tokens - self.max_new_tokens % self.block_size}")
        if self.commit == "eb" and self.confidence != "neg_entropy":
            raise ValueError(f"commit=eb reads each position's entropy from Conf: set confidence=neg_entropy "
                             f"(got {self.confidence})")

    @property
    def max_blocks(self) -> int:
        return self.max_new_tokens // self.block_size

    def replace(self, **changes) -> DecodeSettings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DecodeSettings:
        return cls(**{k: v for k, v in data.items() if k in SETTINGS})


# The registry: every decode setting, in declaration order.
SETTINGS: dict[str, Setting] = registry(DecodeSettings)


@dataclass(frozen=True)
class CanvasSettings:
    """DiffusionGemma's own sampler (lopa.models.diffusion_gemma), as the app's DiffusionGemma panel sets it:
    not LoPA settings, so no surface of DecodeSettings carries them. None is unset: the checkpoint's own
    generation config (the seed is always set). The ranges bound one decode of a served page."""

    max_new_tokens: int = setting(None, "new tokens at most", low=1, high=2048, label="max new tokens")
    max_denoising_steps: int = setting(None, "denoising steps at most", low=1, high=256, label="max denoising steps")
    entropy_bound: float = setting(None, "the sampler's entropy bound, in nats", low=0.0, high=1000.0, open_low=True,
                                   label="entropy bound")
    seed: int = setting(0, "sampling seed", low=0, high=2**31 - 1)


# The DiffusionGemma panel's settings, declared and read (Setting.parse) like the decode settings.
CANVAS_SETTINGS: dict[str, Setting] = registry(CanvasSettings)


def check_settings(values: dict, parse: bool = True) -> dict:
    """{name: value} read through the registry (Setting.parse, or .check when parse=False): typed
    values, or ValueError naming the first bad one, its range and what was given. Unknown names too."""
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r}: the settings are {', '.join(SETTINGS)}")
    return {name: (SETTINGS[name].parse if parse else SETTINGS[name].check)(value) for name, value in values.items()}


# The four decoders the comparison offers (design note, "Other baselines"). Each is a set of
# overrides on the user's settings, not a separate loop: single-block decoding is D2F whose
# next block is only added once the last one is complete (tau_add = 1), and one-token-per-round
# is that plus the top-1 commit rule.
DECODERS = {
    "lopa": {},
    "d2f": {"k": 0},
    "single_block": {"k": 0, "tau_add": 1.0},
    "one_token": {"k": 0, "tau_add": 1.0, "commit": "top1"},
}


def decoder_settings(decoder: str, base: DecodeSettings | None = None, **overrides) -> DecodeSettings:
    """`base` (the engine's defaults when None) with `overrides`, as `decoder` (one of DECODERS) runs it:
    the decoder's overrides last, since choosing it is part of the request. The one place they are
    applied: lopa.resolution.resolution() ends here too."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {tuple(DECODERS)}, got {str(decoder)[:40]!r}")
    base = base or DecodeSettings()
    return base.replace(**{**overrides, **DECODERS[decoder]})


# Paper Table 5 (D2F-Dream unless noted); greedy. The GSM8K row is every setting's paper value in the
# registry; the other rows change what Table 5 changes. Two paper values are not a preset's: the
# generation length (512) is the task's, so a preset keeps the caller's, and attention is left to the
# model: the paper's checkpoints decode with the authors' `full` by default (lopa.models.families),
# while the bundled model was trained block-causal with a prompt blind to the answer and, under
# `full`, answers almost nothing right (4 of 80 held-out problems, 0 of 23 one-step, D2F vanilla,
# seed 48213; block_causal: 50 of 80), so a Table 5 row on it keeps its own attention. Every row
# takes the authors' mechanics (cache schedule, mask-token argmax: docs/method.md, departures).
NOT_IN_PRESETS = ("max_new_tokens", "attention")
_GSM8K = {name: s.paper for name, s in SETTINGS.items() if s.paper is not None and name not in NOT_IN_PRESETS}
PAPER_PRESETS = {
    "gsm8k": _GSM8K,
    "math": {**_GSM8K, "block_size": 16, "k": 7},
    "humaneval": {**_GSM8K, "tau_add": 0.3, "tau_conf": 0.95, "k": 7},
    "mbpp": {**_GSM8K, "tau_add": 0.3, "tau_conf": 0.95, "k": 7},
    "diffucoder-humaneval+": {**_GSM8K, "tau_add": 0.3, "tau_conf": 0.95, "k": 6, "confidence": "max_prob"},
    "diffucoder-mbpp+": {**_GSM8K, "tau_add": 0.3, "tau_conf": 0.90, "k": 14, "confidence": "max_prob"},
}


@dataclass(frozen=True)
class ModelSpec:
    """What a model is, as far as decoding cares. Read from the checkpoint, never a user setting.

    logit_shift: the output at position i - 1 predicts token i (Dream, D2F-Dream, DiffuCoder:
    models initialised from autoregressive LMs). LLaDA has no shift.
    """

    mask_token_id: int
    eos_token_ids: tuple[int, ...]
    logit_shift: bool
    pad_token_id: int | None = None
    block_size: int | None = None        # the block size the model was trained with, if known
    prompt_template: str = "{prompt}"
    max_context: int = 2048
    attention: str = "block_causal"      # the attention decoded with unless asked otherwise (see its loader)
    name: str = "model"
    # Other decode settings the checkpoint asks for ({name: value}, config.json "lopa": {"decode": ...}
    # or a family's published settings): a family's threshold, a fitted adaptive budget. Attention
    # and block size have their own fields above. lopa.resolution.resolve() puts them under what the
    # user sets.
    decode: dict = field(default_factory=dict, compare=False)
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decode", check_settings(dict(self.decode or {}), parse=False))
        if self.mask_token_id is None or int(self.mask_token_id) < 0:
            raise ValueError("the model has no mask token: a masked diffusion LM needs one (mask_token_id)")
        if not self.eos_token_ids:
            raise ValueError("the model spec names no EOS token id (eos_token_ids)")
        object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))
        if "{prompt}" not in self.prompt_template:
            raise ValueError("prompt_template must contain '{prompt}'")

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["eos_token_ids"] = list(self.eos_token_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
