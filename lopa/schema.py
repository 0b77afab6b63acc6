"""The trace format (`lopa-trace/2`), checked at the door.

A trace file may come from anyone (a Space visitor's upload, a shared link), so `RunResult.load`
and `RunResult.from_json` pass every field through these pydantic models before anything else
touches it: types are strict (no "4" for 4), ranges hold (positions inside the sequence, token
ids inside the vocabulary, probabilities in [0, 1]), the run agrees with its own settings (block
counts, window starts, one entry per branch) and sizes are bounded, so a small file cannot make
a replay allocate gigabytes. A failure is one ValueError that names the field, e.g.
`invalid trace: records.3.anchor_positions.0: must be < 64 (the sequence length)`. What a read
may cost in memory, checked before the file is parsed, is lopa.read_budget's; the canvas sampler's
trace format is lopa.canvas_schema's.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from lopa.editing import EDIT_STOPS, derive_edits, recorded_edits
from lopa.settings import (
    ATTENTION_MODES,
    MAX_ADAPTIVE_LIFT,
    MAX_ADAPTIVE_RELEASE,
    MAX_BLOCK_SIZE,
    MAX_LOOKAHEAD,
    MAX_LOOKAHEAD_DEPTH,
    MAX_NEW_TOKENS,
    MAX_ROWS,
    MAX_SEED,
    ORDERS,
    SETTINGS,
    DecodeSettings,
    ModelSpec,
)

TRACE_FORMAT = "lopa-trace/2"
# Version 1 called prompt-blind full attention "full"; version 2 calls it "full_prompt_blind" and
# gives "full" the authors' meaning. A version-1 trace is read as version 2 with that name changed.
OLD_FORMATS = {"lopa-trace/1": {"full": "full_prompt_blind"}}
MAX_POSITIONS = MAX_NEW_TOKENS         # generated positions (the registry's bound on max_new_tokens)
MAX_ROUNDS = MAX_POSITIONS + 2         # every round commits at least one token
MAX_PROMPT_TOKENS = 32768
MAX_TOKEN_ID = 1 << 24                 # token ids travel as float32 between ranks (lopa.distributed)
MAX_TEXT = 1 << 20                     # prompt and answer characters
MAX_NAME = 256

BLOCK_STATES = ("cached", "complete", "active_full", "active_semi")
# Order policies a trace may record (lopa.order.describe_order): the settings' orders, the wrappers
# (lookahead floor, the adaptive study's SecondBranchAt) and "unknown" (a policy that cannot describe
# itself; its trace replays only as a script). Wrappers nest a base policy, at most MAX_POLICY_DEPTH deep.
POLICY_NAMES = (*ORDERS, "floor", "second_branch_at", "unknown")
POLICY_PARAMETERS = {"adaptive": ("cost",), "floor": ("floor",), "second_branch_at": ("round",)}
MAX_POLICY_DEPTH = 4

Strict = ConfigDict(strict=True, extra="forbid")
Id = Annotated[int, Field(ge=0, lt=MAX_TOKEN_ID)]
Pos = Annotated[int, Field(ge=0, lt=MAX_POSITIONS)]
Prob = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Name = Annotated[str, Field(max_length=MAX_NAME)]


def _positions(n: int):
    return Field(max_length=n, fail_fast=True)


# Every list stops at its first bad item (fail_fast), and a strict model at its first unknown key
# (StrictModel): pydantic would otherwise make an error object of about 1 KB for each, far more than
# the item or key costs to read (lopa.read_budget.read_cost), so a hostile file of bad items could
# outgrow its read.
def _branches(item):
    """One entry per branch (a verified row: k + 1, or more with lookahead chains), each a list of `item`
    that stops at its first bad entry too."""
    return Annotated[list[Annotated[list[item], Field(fail_fast=True)]],
                     Field(min_length=1, max_length=MAX_ROWS, fail_fast=True)]


def _edits():
    """A list of token editing's fields (lopa.editing): one entry per position, empty in traces without editing."""
    return Field(default=[], max_length=MAX_POSITIONS, fail_fast=True)


def _chains(item):
    """One entry per lookahead branch, each a list of `item`, one per token of its chain."""
    return Annotated[list[Annotated[list[item], Field(max_length=MAX_LOOKAHEAD_DEPTH, fail_fast=True)]],
                     Field(max_length=MAX_LOOKAHEAD, fail_fast=True)]


def _stored(spec) -> tuple:
    """A registry setting as a strict pydantic field: its type, choices and default (ranges are
    checked by DecodeSettings itself, which names the setting, its range and the value)."""
    if spec.choices is not None:
        return Literal[spec.choices], spec.default
    if spec.type is float:
        return Finite, spec.default
    return Annotated[int, Field(ge=spec.low, le=spec.high)], spec.default


class _SettingsChecks(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    @model_validator(mode="after")
    def _ranges(self):
        DecodeSettings(**self.model_dump())            # its own checks: thresholds, multiples, ...
        return self


# DecodeSettings as stored, generated from the registry (a trace of an older version lacks the
# settings added since: they read as their defaults).
Settings = create_model("Settings", __base__=_SettingsChecks, **{name: _stored(s) for name, s in SETTINGS.items()})


class Spec(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    mask_token_id: Id
    eos_token_ids: list[Id] = Field(min_length=1, max_length=64, fail_fast=True)
    logit_shift: bool
    pad_token_id: Id | None = None
    block_size: Annotated[int, Field(ge=1, le=MAX_BLOCK_SIZE)] | None = None
    prompt_template: Annotated[str, Field(max_length=MAX_TEXT)] = "{prompt}"
    max_context: Annotated[int, Field(ge=1)] = 2048
    attention: Literal[ATTENTION_MODES] = "block_causal"
    name: Name = "model"
    extra: dict[str, Any] = {}
    vocab_size: Annotated[int, Field(ge=1, le=MAX_TOKEN_ID)] | None = None

    @model_validator(mode="after")
    def _spec(self):
        ModelSpec.from_dict(self.model_dump())
        return self


class Extra(BaseModel):
    """Executor timings and traffic (lopa.distributed); the known keys are typed, others pass as plain JSON."""
    model_config = ConfigDict(strict=True, extra="allow")
    world: Annotated[int, Field(ge=1, le=4096)] | None = None
    forward_s: Seconds | None = None
    rank_forward_s: list[Seconds] = Field(default=[], max_length=4096, fail_fast=True)
    control_s: Seconds | None = None
    gather_s: Seconds | None = None
    commit_s: Seconds | None = None
    ipc_s: Finite | None = None
    control_bytes: Annotated[int, Field(ge=0)] | None = None
    summary_bytes: Annotated[int, Field(ge=0)] | None = None
    commit_bytes: Annotated[int, Field(ge=0)] | None = None
    bytes: Annotated[int, Field(ge=0)] | None = None
    full_logits_bytes: Annotated[int, Field(ge=0)] | None = None
    commit_broadcast: bool | None = None


class StrictModel(BaseModel):
    """Strict types and no unknown keys: the first unknown key is the one error (see _branches)."""
    model_config = Strict

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        if isinstance(data, dict):
            unknown = next((key for key in data if key not in cls.model_fields), None)
            if unknown is not None:
                raise ValueError(f"unknown field {str(unknown)[:MAX_NAME]!r}")
        return data


class Forced(StrictModel):
    action: Literal["commit", "hold", "lookahead"]
    position: Pos
    token: Id | None = None


class Policy(StrictModel):
    """A trace's `order`: the policy that ran where its settings do not name it, with its parameters."""
    name: Literal[POLICY_NAMES]
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    floor: Prob | None = None
    cost: list[Seconds] | None = Field(default=None, min_length=1, max_length=MAX_LOOKAHEAD + 1)
    near: Prob | None = None
    win: Prob | None = None
    release: Annotated[float, Field(ge=0.0, le=MAX_ADAPTIVE_RELEASE, allow_inf_nan=False)] | None = None
    lift: Annotated[float, Field(ge=0.0, le=MAX_ADAPTIVE_LIFT, allow_inf_nan=False)] | None = None
    round: Annotated[int, Field(ge=-1, le=MAX_NEW_TOKENS + 2)] | None = None
    type: Name | None = None
    base: Policy | None = None

    @model_validator(mode="after")
    def _complete(self):
        missing = [p for p in POLICY_PARAMETERS.get(self.name, ()) if getattr(self, p) is None]
        if missing:
            raise ValueError(f"order policy {self.name!r} needs {missing[0]!r}")
        depth, inner = 1, self.base
        while inner is not None:
            depth, inner = depth + 1, inner.base
        if depth > MAX_POLICY_DEPTH:
            raise ValueError(f"order policies nest at most {MAX_POLICY_DEPTH} deep")
        return self


class ForkedFrom(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    run_id: Name
    round: Annotated[int, Field(ge=0, le=MAX_ROUNDS)]


class Record(StrictModel):
    round: Annotated[int, Field(ge=0, le=MAX_ROUNDS)]
    kind: Literal["prefill", "round", "post", "final"]
    window_start: Pos
    anchor_positions: list[Pos] = _positions(MAX_POSITIONS)
    anchor_tokens: list[Id] = _positions(MAX_POSITIONS)
    lookahead_positions: list[Pos] = _positions(MAX_LOOKAHEAD)
    lookahead_tokens: list[Id] = _positions(MAX_LOOKAHEAD)
    branch_tokens: _branches(Id)
    branch_positions: _branches(Pos)
    branch_max_prob: _branches(Prob)
    branch_conf: _branches(Finite)
    branch_argmax: _branches(Id)
    branch_scores: list[float] = Field(min_length=1, max_length=MAX_ROWS, fail_fast=True)
    branch_rank: list[Annotated[int, Field(ge=0, le=4096)]] = Field(min_length=1, max_length=MAX_ROWS,
                                                                      fail_fast=True)
    winner: Annotated[int, Field(ge=0, lt=MAX_ROWS)]
    block_states: list[Literal[BLOCK_STATES]] = Field(min_length=1, max_length=MAX_POSITIONS, fail_fast=True)
    committed: Annotated[int, Field(ge=0, le=MAX_POSITIONS)]
    n_cached_blocks: Annotated[int, Field(ge=0, le=MAX_POSITIONS)]
    forward_seconds: Seconds
    round_seconds: Seconds
    extra: Extra = Extra()
    forced: list[Forced] = Field(default=[], max_length=MAX_POSITIONS, fail_fast=True)
    chain_positions: _chains(Pos) = []
    chain_tokens: _chains(Id) = []
    chain_rows: _chains(Annotated[int, Field(ge=0, lt=MAX_ROWS)]) = []
    chain_kept: list[Annotated[int, Field(ge=0, le=MAX_LOOKAHEAD_DEPTH)]] = Field(default=[], max_length=MAX_LOOKAHEAD,
                                                                                  fail_fast=True)
    edit_positions: list[Pos] = _edits()
    edit_old: list[Id] = _edits()
    edit_tokens: list[Id] = _edits()
    edit_prob: list[Prob] = _edits()
    edit_seen_positions: list[Pos] = _edits()
    edit_seen_argmax: list[Id] = _edits()
    edit_seen_max_prob: list[Prob] = _edits()
    edit_stop: Literal[("", *EDIT_STOPS)] = ""

    @field_validator("branch_scores")
    @classmethod
    def _scores(cls, scores):
        if any(math.isnan(s) or s == -math.inf for s in scores):
            raise ValueError("a branch score is NaN or -inf (only +inf, 'nothing left masked', is allowed)")
        return scores

    @model_validator(mode="after")
    def _one_entry_per_branch(self):
        n = len(self.branch_scores)
        for name in ("branch_tokens", "branch_positions", "branch_max_prob", "branch_conf", "branch_argmax",
                     "branch_rank"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} branches but branch_scores has {n}")
        for j in range(n):
            sizes = {len(self.branch_positions[j]), len(self.branch_max_prob[j]), len(self.branch_conf[j]),
                     len(self.branch_argmax[j])}
            if len(sizes) > 1:
                raise ValueError(f"branch {j}: positions, max_prob, conf and argmax differ in length")
        if self.winner >= n:
            raise ValueError(f"winner {self.winner} is not one of the {n} branches")
        if len(self.anchor_positions) != len(self.anchor_tokens):
            raise ValueError("anchor_positions and anchor_tokens differ in length")
        if len(self.lookahead_positions) != len(self.lookahead_tokens):
            raise ValueError("lookahead_positions and lookahead_tokens differ in length")
        if not len(self.edit_positions) == len(self.edit_old) == len(self.edit_tokens) == len(self.edit_prob):
            raise ValueError("edit_positions, edit_old, edit_tokens and edit_prob differ in length")
        if not len(self.edit_seen_positions) == len(self.edit_seen_argmax) == len(self.edit_seen_max_prob):
            raise ValueError("edit_seen_positions, edit_seen_argmax and edit_seen_max_prob differ in length")
        chains = (self.chain_positions, self.chain_tokens, self.chain_rows)
        if self.chain_kept or any(chains):
            if {len(c) for c in (*chains, self.chain_kept)} != {len(self.lookahead_positions)}:
                raise ValueError("chain_positions, chain_tokens, chain_rows and chain_kept need one entry per lookahead branch")
            for j, (positions, tokens, rows, kept) in enumerate(zip(*chains, self.chain_kept)):
                if not len(positions) == len(tokens) == len(rows) or not 1 <= kept <= len(positions):
                    raise ValueError(f"chain {j}: positions, tokens and rows differ in length, or it keeps "
                                     f"{kept} of its {len(positions)} tokens")
                if any(row >= n for row in rows):
                    raise ValueError(f"chain {j}: a row is not one of the {n} branches")
            if self.winner and self.winner not in {rows[kept - 1] for rows, kept in zip(self.chain_rows, self.chain_kept)}:
                raise ValueError(f"winner {self.winner} is neither the anchor nor a chain's kept row")
        return self


class Trace(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    format: Literal[TRACE_FORMAT]
    prompt: Annotated[str, Field(max_length=MAX_TEXT)]
    prompt_ids: list[Id] = Field(max_length=MAX_PROMPT_TOKENS, fail_fast=True)
    settings: Settings
    spec: Spec
    tokens: list[Id] = Field(max_length=MAX_POSITIONS, fail_fast=True)
    text: Annotated[str, Field(max_length=MAX_TEXT)] = ""
    stopped: bool = False
    run_id: Name = ""
    forked_from: ForkedFrom | None = None
    order: Policy | None = None
    records: list[Record] = Field(max_length=MAX_ROUNDS, fail_fast=True)

    @model_validator(mode="after")
    def _consistent(self):
        """The run agrees with its own settings: sizes, positions and ids."""
        N, limit, n = self.settings.block_size, self.settings.max_new_tokens, len(self.tokens)
        if n % N or n > limit:
            raise ValueError(f"tokens: {n} positions is not a whole number of blocks of {N} within max_new_tokens "
                             f"{limit}")
        vocab = self.spec.vocab_size or MAX_TOKEN_ID
        for i, record in enumerate(self.records):
            where = f"records.{i}"
            if len(record.block_states) * N > limit:
                raise ValueError(f"{where}.block_states: {len(record.block_states)} blocks of {N} exceed max_new_tokens "
                                 f"{limit}")
            if record.window_start > limit:
                raise ValueError(f"{where}.window_start: {record.window_start} is past max_new_tokens {limit}")
            positions = {"anchor_positions": record.anchor_positions, "lookahead_positions": record.lookahead_positions,
                         **{f"branch_positions.{j}": p for j, p in enumerate(record.branch_positions)},
                         **{f"chain_positions.{j}": p for j, p in enumerate(record.chain_positions)},
                         "edit_positions": record.edit_positions, "edit_seen_positions": record.edit_seen_positions,
                         "forced": [f.position for f in record.forced]}
            for name, values in positions.items():
                bad = next((p for p in values if p >= limit), None)
                if bad is not None:
                    raise ValueError(f"{where}.{name}: position {bad} is outside the sequence (max_new_tokens {limit})")
            ids = [*record.anchor_tokens, *record.lookahead_tokens, *(t for row in record.branch_tokens for t in row),
                   *(t for row in record.branch_argmax for t in row), *(t for row in record.chain_tokens for t in row),
                   *record.edit_old, *record.edit_tokens, *record.edit_seen_argmax]
            if any(t >= vocab for t in ids):
                raise ValueError(f"{where}: a token id is outside the vocabulary ({vocab} ids)")
        if any(t >= vocab for t in [*self.tokens, *self.prompt_ids]):
            raise ValueError(f"tokens: a token id is outside the vocabulary ({vocab} ids)")
        self._edits_rederived()
        return self

    def _edits_rederived(self) -> None:
        """Every round's edits are those its predecessor's recorded predictions give (lopa.editing.derive_edits)."""
        s = self.settings
        derived = derive_edits(self.records, s.edit_threshold, s.edit_post_steps, s.block_size, self.spec.mask_token_id)
        for i, (record, edits) in enumerate(zip(self.records, derived)):
            if recorded_edits(record) != edits:
                raise ValueError(f"records.{i}: its edits ({record.edit_positions[:8]}) are not those the recorded "
                                 f"predictions give under edit_threshold {s.edit_threshold} "
                                 f"({[e[0] for e in edits][:8]})")


def upgrade_trace(data: Any) -> Any:
    """A trace of an older format as the current one (a new dict; `data` is not changed), renaming
    the attention modes that changed meaning. Anything else is returned as it is."""
    if not isinstance(data, dict) or data.get("format") not in OLD_FORMATS:
        return data
    renamed = OLD_FORMATS[data["format"]]
    new = {**data, "format": TRACE_FORMAT}
    for part in ("settings", "spec"):
        if isinstance(data.get(part), dict) and data[part].get("attention") in renamed:
            new[part] = {**data[part], "attention": renamed[data[part]["attention"]]}
    return new


def validate_trace(data: Any) -> dict:
    """Check a parsed trace (header fields + "records") and return it as plain data, in the current
    format (upgrade_trace); ValueError naming the first bad field otherwise."""
    if not isinstance(data, dict):
        raise ValueError("not a LoPA trace: the file holds no JSON object")
    data = upgrade_trace(data)
    if data.get("format") != TRACE_FORMAT:
        raise ValueError(f"not a LoPA trace (expected format {TRACE_FORMAT!r})")
    check_model(Trace, data, "trace")
    return data


def check_model(model: type[BaseModel], data: dict, what: str) -> None:
    """Validate `data` against `model`; one ValueError naming the first bad field (and how many others
    there are) otherwise: the message every trace format gives."""
    try:
        model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "trace"
        more = f" (and {err.error_count() - 1} more problems)" if err.error_count() > 1 else ""
        raise ValueError(f"invalid {what}: {where}: {first['msg']}{more}") from None
