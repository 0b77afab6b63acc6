"""Frozen settings: what the user chooses (DecodeSettings) and what the model is (ModelSpec)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

CONFIDENCE_METRICS = ("max_prob", "neg_entropy", "margin")
# Attention inside the window (docs/method.md, "Attention"): block_causal as D2F trains; full as the
# authors' LoPA code runs it (every input row sees every other, the prompt's rows included, in the
# forward that caches the prompt); full_prompt_blind, full except that the prompt sees only itself
# (what the bundled model was trained with; traces of format lopa-trace/1 called it "full").
ATTENTION_MODES = ("block_causal", "full", "full_prompt_blind")
# When a block a lookahead token completed enters the prefix cache (docs/method.md, departure 2):
# "eager" from the forward that verified it; "authors" one forward later, as the authors' loop does.
CACHE_SCHEDULES = ("eager", "authors")
# What a position whose argmax is the mask token predicts (departure 1): "next_best" the best other
# token; "authors" the mask token itself, whose commit leaves the position masked.
MASK_ARGMAX = ("next_best", "authors")
COMMIT_RULES = ("threshold", "top1")
# Token filling orders (lopa/order.py): which positions the anchor's fallback and the lookahead take.
ORDERS = ("confidence", "random", "left_to_right")
# Branch score rules (lopa.rules.branch_scores): "mean" is the paper's C(B); the others are the
# alternatives `python -m lopa.study calibration` compares (docs/studies.md).
BRANCH_SCORE_RULES = ("mean", "loo", "min", "window", "segment", "count")
# k verifies k + 1 windows in one batch; past 32 the batch stops being "small" even on a GPU,
# and the paper never uses more than 14 (Table 5).
MAX_LOOKAHEAD = 32
MAX_TEMPERATURE = 10.0


def _check_unit_interval(name: str, value: float) -> None:
    if not (0.0 < value <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


@dataclass(frozen=True)
class DecodeSettings:
    """One run's decoding settings. The defaults are the paper's D2F-Dream GSM8K row (Table 5).

    k: lookahead branches per round (0 = D2F vanilla), 0..MAX_LOOKAHEAD.
    tau_conf: commit threshold on max_prob (strict: commit when max_prob > tau_conf).
    tau_add: add a block once the last block's decoded fraction reaches this.
    tau_act: fully activate block i+1 once block i's decoded fraction reaches this.
    commit: "threshold" (D2F/Fast-dLLM rule) or "top1" (one token per round).
    confidence: Conf used for the fallback commit, lookahead ranking and branch score.
    attention: "block_causal" (how D2F models are trained), "full" (the authors' LoPA default: the
        prompt's rows see the first window too) or "full_prompt_blind" (full, the prompt seeing only itself).
    cache_schedule: "eager" (a block is cached from the forward that verified its completion) or
        "authors" (a block a lookahead token completed is cached one forward later, as in their loop).
    mask_argmax: "next_best" (the mask token is never predicted) or "authors" (it is, and committing
        it leaves the position masked). Probabilities and Conf never change: both use the raw logits.
    order: token filling order policy (lopa/order.py): "confidence" (the paper's), "random" (the
        lookahead drawn uniformly, seeded by order_seed) or "left_to_right".
    branch_score: how a branch is scored to pick the winner (LoPA step 5): "mean" (the paper's mean
        Conf over its masked positions), "loo", "min", "window", "segment" or "count"
        (lopa.rules.branch_scores; docs/studies.md says what each does on the bundled model).
    lookahead_min_prob: a position is a lookahead candidate only if its max_prob is at least this;
        0 (the paper's) makes every free masked position one. Ours, not the paper's: the branch score
        checks what a lookahead token does to the other positions, never the token itself, so on the
        bundled model the winning branch often speculates a name at max_prob ~0.15 (docs/method.md,
        departure 8).
    """

    k: int = 0
    tau_conf: float = 0.9
    tau_add: float = 0.1
    tau_act: float = 0.95
    block_size: int = 32
    max_new_tokens: int = 256
    commit: str = "threshold"
    confidence: str = "neg_entropy"
    attention: str = "block_causal"
    temperature: float = 0.0
    seed: int = 0
    order: str = "confidence"
    order_seed: int = 0
    branch_score: str = "mean"
    cache_schedule: str = "eager"
    mask_argmax: str = "next_best"
    lookahead_min_prob: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or not (0 <= self.k <= MAX_LOOKAHEAD):
            raise ValueError(f"k (lookahead branches) must be an integer in 0..{MAX_LOOKAHEAD}, got {self.k!r}")
        _check_unit_interval("tau_conf", self.tau_conf)
        _check_unit_interval("tau_add", self.tau_add)
        _check_unit_interval("tau_act", self.tau_act)
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be a positive integer, got {self.block_size!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < self.block_size:
            raise ValueError(
                f"max_new_tokens must be at least block_size ({self.block_size}), got {self.max_new_tokens!r}")
        if self.max_new_tokens % self.block_size:
            raise ValueError(
                f"max_new_tokens ({self.max_new_tokens}) must be a multiple of block_size ({self.block_size}); "
                f"try {self.max_new_tokens - self.max_new_tokens % self.block_size}")
        if self.commit not in COMMIT_RULES:
            raise ValueError(f"commit must be one of {COMMIT_RULES}, got {self.commit!r}")
        if self.confidence not in CONFIDENCE_METRICS:
            raise ValueError(f"confidence must be one of {CONFIDENCE_METRICS}, got {self.confidence!r}")
        if self.attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {self.attention!r}")
        if not (0.0 <= self.temperature <= MAX_TEMPERATURE):
            raise ValueError(f"temperature must be in [0, {MAX_TEMPERATURE}], got {self.temperature!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if not isinstance(self.order_seed, int) or self.order_seed < 0:
            raise ValueError(f"order_seed must be a non-negative integer, got {self.order_seed!r}")
        if self.branch_score not in BRANCH_SCORE_RULES:
            raise ValueError(f"branch_score must be one of {BRANCH_SCORE_RULES}, got {self.branch_score!r}")
        if self.cache_schedule not in CACHE_SCHEDULES:
            raise ValueError(f"cache_schedule must be one of {CACHE_SCHEDULES}, got {self.cache_schedule!r}")
        if self.mask_argmax not in MASK_ARGMAX:
            raise ValueError(f"mask_argmax must be one of {MASK_ARGMAX}, got {self.mask_argmax!r}")
        if not (0.0 <= self.lookahead_min_prob < 1.0):
            raise ValueError(f"lookahead_min_prob must be in [0, 1) (0 = the paper's: no floor), "
                             f"got {self.lookahead_min_prob!r}")

    @property
    def max_blocks(self) -> int:
        return self.max_new_tokens // self.block_size

    def replace(self, **changes) -> DecodeSettings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DecodeSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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
    """Settings for one of DECODERS, starting from `base` (defaults) plus `overrides`."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {tuple(DECODERS)}, got {decoder!r}")
    base = base or DecodeSettings()
    return base.replace(**{**overrides, **DECODERS[decoder]})


# Paper Table 5 (D2F-Dream unless noted); generation length 512, greedy. Every row also takes the
# authors' mechanics: blocks cached on their schedule, a mask-token argmax handled as they do
# (docs/method.md, departures). Attention is left to the model: the paper's checkpoints decode
# with the authors' `full` by default (lopa.models.families), while the bundled model was trained
# block-causal with a prompt blind to the answer and, under `full`, answers almost nothing right
# (4 of 80 held-out problems, 0 of 23 one-step, D2F vanilla, seed 48213; block_causal: 50 of 80),
# so a Table 5 row on it keeps its own attention.
_AUTHORS = dict(cache_schedule="authors", mask_argmax="authors")
PAPER_PRESETS = {
    "gsm8k": dict(block_size=32, tau_add=0.1, tau_conf=0.90, tau_act=0.95, k=14, confidence="neg_entropy", **_AUTHORS),
    "math": dict(block_size=16, tau_add=0.1, tau_conf=0.90, tau_act=0.95, k=7, confidence="neg_entropy", **_AUTHORS),
    "humaneval": dict(block_size=32, tau_add=0.3, tau_conf=0.95, tau_act=0.95, k=7, confidence="neg_entropy", **_AUTHORS),
    "mbpp": dict(block_size=32, tau_add=0.3, tau_conf=0.95, tau_act=0.95, k=7, confidence="neg_entropy", **_AUTHORS),
    "diffucoder-humaneval+": dict(block_size=32, tau_add=0.3, tau_conf=0.95, tau_act=0.95, k=6, confidence="max_prob", **_AUTHORS),
    "diffucoder-mbpp+": dict(block_size=32, tau_add=0.3, tau_conf=0.90, tau_act=0.95, k=14, confidence="max_prob", **_AUTHORS),
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
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
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


# -- the command-line flags of these settings (lopa generate, the benchmarks) -------------------
_DEFAULTS = DecodeSettings()


def add_settings_arguments(parser, choose_decoder: bool = True) -> None:
    """Decoding settings as flags; shared by `generate` and the benchmarks (which choose the
    decoder, k and commit rule per row themselves: choose_decoder=False)."""
    g = parser.add_argument_group("decoding settings (defaults: the paper's GSM8K row, Table 5)")
    if choose_decoder:
        g.add_argument("--decoder", choices=tuple(DECODERS), default="lopa",
                       help="lopa (k lookahead branches), d2f (k=0), single_block (Fast-dLLM style), one_token")
        g.add_argument("--preset", choices=tuple(PAPER_PRESETS), help="start from a paper preset (Table 5)")
        g.add_argument("--k", type=int, help="lookahead branches per round (default 4 for lopa; gsm8k preset 14)")
        g.add_argument("--commit", choices=COMMIT_RULES, help="commit rule (default threshold)")
    g.add_argument("--tau-conf", type=float, help=f"commit threshold on max prob (default {_DEFAULTS.tau_conf})")
    g.add_argument("--tau-add", type=float, help=f"block add threshold (default {_DEFAULTS.tau_add})")
    g.add_argument("--tau-act", type=float, help=f"block activation threshold (default {_DEFAULTS.tau_act})")
    g.add_argument("--block-size", type=int, help=f"block size N (default {_DEFAULTS.block_size})")
    g.add_argument("--max-new-tokens", type=int, help=f"multiple of the block size (default {_DEFAULTS.max_new_tokens})")
    g.add_argument("--confidence", choices=CONFIDENCE_METRICS, help=f"Conf metric (default {_DEFAULTS.confidence})")
    g.add_argument("--attention", choices=ATTENTION_MODES,
                   help="attention inside the window (default: the model's); full = the authors' (prompt rows see "
                        "the first window), full_prompt_blind = full with a prompt that sees only itself")
    g.add_argument("--cache-schedule", choices=CACHE_SCHEDULES,
                   help="eager (default): a block a lookahead token completed is cached at once; authors: one forward later")
    g.add_argument("--mask-argmax", choices=MASK_ARGMAX,
                   help="next_best (default): never predict the mask token; authors: predict it (its commit is a no-op)")
    g.add_argument("--temperature", type=float, help="0 = greedy (default)")
    g.add_argument("--seed", type=int, help="sampling seed (default 0)")
    g.add_argument("--order", choices=ORDERS,
                   help="token filling order: confidence (the paper's, default), random (lookahead positions drawn "
                        "uniformly from the masked window, seeded by --order-seed) or left_to_right (lowest first)")
    g.add_argument("--order-seed", type=int, help="seed of the random order (default 0)")
    g.add_argument("--branch-score", choices=BRANCH_SCORE_RULES,
                   help="how a branch is scored to pick the winner: mean (the paper's mean Conf of its masked "
                        "positions, default), loo, min, window, segment, count (docs/studies.md)")
    g.add_argument("--lookahead-min-prob", type=float,
                   help="only positions whose max prob is at least this are lookahead candidates (default 0: the "
                        "paper's, every masked position; ours, docs/method.md departure 8)")


# The lookahead a run gets when it names none (`lopa generate`, transformers' generate()).
DEFAULT_K = 4


def settings_for_model(spec: ModelSpec | None, **fields) -> DecodeSettings:
    """`fields` over the model's own attention and trained block size, k = DEFAULT_K unless given:
    the one place where `lopa generate` and transformers' generate() (lopa.hf) fill what the user
    left unset, so the same choices decode the same tokens."""
    if spec is not None:
        fields.setdefault("attention", spec.attention)
        if spec.block_size:
            fields.setdefault("block_size", spec.block_size)
    fields.setdefault("k", DEFAULT_K)
    return DecodeSettings(**fields)


def flag_settings(args) -> dict:
    """The DecodeSettings fields given as flags (add_settings_arguments), those left unset omitted."""
    names = [f.name for f in dataclasses.fields(DecodeSettings)]
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def settings_from_args(args, spec=None) -> DecodeSettings:
    """Preset (or the settings of a trace given as --script), then explicit flags, over the model's
    own attention and block size; the decoder's overrides (e.g. k = 0 for d2f) come last."""
    fields = dict(PAPER_PRESETS[args.preset]) if args.preset else {}
    fields.update(getattr(args, "script_settings", None) or {})
    fields.update(flag_settings(args))
    return decoder_settings(args.decoder, settings_for_model(spec, **fields))
