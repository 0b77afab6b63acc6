"""Executors: how one round's branches go through the model. The engine speaks three verbs, the
`Executor` protocol:

    start(prompt_ids)          a new sequence; the prompt is not cached yet
    verify(branches) -> Verified   one forward over every branch's window (LoPA step 4)
    commit(winner, n)          the winner's first n window positions join the prefix cache

Four local executors implement them (`LocalExecutor`); the branch-parallel ones in lopa.distributed
implement the same protocol and reuse the public helpers here (`forward_windows`, `summarize`)
and lopa.kv's `PrefixKV`, never private methods:
- BatchedExecutor (fast path): all k + 1 windows in one batch; attention reads the shared
  prefix K/V, stored once with batch 1, through a custom attention function (no per-branch copy);
  the forward is lopa.fast's lean one where the model's layout allows, and on CUDA a captured graph
  per shape bucket (lopa.graphs). EagerBatchedExecutor ("batched_eager") is the same over the
  model's own forward: the reference the fast path is held to.
- PerBranchExecutor (reference): one forward per branch, each on its own copy of a transformers
  DynamicCache, as the authors' code does.
- UncachedExecutor (reference): recomputes prompt + every generated token each forward. Works
  with any model that takes a 4-D mask, e.g. the scripted fake model of the tests.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from lopa.blocks import Branch
from lopa.kv import Packing, PrefixKV
from lopa.rules import pack_rows, summarize, unpack_rows
from lopa.settings import DecodeSettings, ModelSpec


@dataclass
class Verified:
    """Predictions for every window position of every branch, from one forward.
    Window position i of branch j is predicted by token[j, i], max_prob[j, i], conf[j, i]."""
    token: torch.Tensor      # [B, W] (padded to the longest window)
    max_prob: torch.Tensor   # [B, W]
    conf: torch.Tensor       # [B, W]
    lengths: list[int]
    seconds: float
    ranks: list[int] | None = None   # process rank that computed each branch (branch-parallel backends)
    extra: dict = field(default_factory=dict)   # backend timings and traffic, copied into the trace
    # commit=dawn only (lopa.dependency): each branch's window rows of the forward's attention, [n_j, C_j]
    attention: list[torch.Tensor] | None = None

    def branch(self, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = self.lengths[j]
        return self.token[j, :n], self.max_prob[j, :n], self.conf[j, :n]


def attention_mask(segments: torch.Tensor, mode: str, prompt_segment: bool, prefix_len: int = 0) -> torch.Tensor:
    """Boolean attention mask for a batch of windows. segments: [B, L] -> [B, 1, L, prefix_len + L].

    segments holds a segment id per input position (-1 = padding); segment 0 is the prompt when
    `prompt_segment`, blocks follow in order. A block sees the prompt, earlier blocks and itself
    (block_causal) or every block (full, full_prompt_blind). The prompt sees only itself, except in
    `full`: the authors' full attention is an all-zero mask, so in the forward that caches the prompt
    its rows see the first window too. Everyone sees the cached prefix.
    """
    B, L = segments.shape
    valid = segments >= 0                                     # [B, L]
    q, k = segments[:, :, None], segments[:, None, :]         # [B, L, 1], [B, 1, L]
    allowed = (k <= q) if mode == "block_causal" else torch.ones(B, L, L, dtype=torch.bool)
    if prompt_segment and mode != "full":
        allowed = torch.where(q == 0, k == 0, allowed)
    allowed = allowed & valid[:, None, :]
    allowed = allowed | (torch.eye(L, dtype=torch.bool) & ~valid[:, :, None])  # padding rows: self only
    prefix = torch.ones(B, L, prefix_len, dtype=torch.bool)
    return torch.cat([prefix, allowed], dim=-1)[:, None]     # [B, 1, L, P + L]


@runtime_checkable
class Executor(Protocol):
    """What the engine calls, once per run (start) and once per round (verify, then commit)."""

    def start(self, prompt_ids: torch.Tensor) -> None: ...

    def verify(self, branches: list[Branch]) -> Verified: ...

    def commit(self, winner: int, n_positions: int) -> None: ...

    def snapshot(self) -> Executor | None:
        """A private copy of this executor's state (prefix cache, boundary row, sampling generator) that
        a fork can resume from, or None where state cannot be copied (it lives in other processes)."""

def window_predictions(rows: torch.Tensor, q0: int, width: int, shift: bool, boundary) -> torch.Tensor:
    """Rows over input positions -> predictions for window positions. [B, L] -> [B, W].
    q0: input index of window position 0. With the logit shift, position i is predicted by the
    output at i - 1; the first window position then uses `boundary`, the row kept from the round
    that cached its predecessor (a scalar, broadcast over the branches)."""
    first = q0 - int(shift)
    if first >= 0:
        return rows[:, first:first + width]
    head = boundary.expand(rows.shape[0], 1).to(rows.dtype)
    return torch.cat([head, rows[:, :width - 1]], dim=1)


def release_executor(executor) -> None:
    """Tell an executor its decode (or its timing) is over, where it holds something another decode may need
    (the batched executor's graph runner, lopa.graphs); executors without `release` hold nothing."""
    release = getattr(executor, "release", None)
    if release is not None:
        release()


def host_rows(rows: tuple) -> tuple:
    """(token, max_prob, conf) [B, L] each, on the host: from a device in one copy."""
    if rows[0].device.type == "cpu":
        return rows
    return unpack_rows(pack_rows(*rows).cpu())


def boundary_rows(rows: tuple, q0: int, winner: int, n_positions: int, current):
    """The winner's (token, max_prob, conf) at the last position that `commit` caches, or `current`
    when nothing new is cached. rows: 3 x [B, L] over input positions."""
    last = q0 + n_positions - 1           # input index of the last newly cached position
    return tuple(r[winner, last] for r in rows) if last >= 0 else current


class LocalExecutor:
    """Shared logic of the in-process executors: building inputs, summarising logits, the logit
    shift and the boundary row."""

    def __init__(self, model, spec: ModelSpec, settings: DecodeSettings):
        self.model, self.spec, self.settings = model, spec, settings
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(settings.seed)

    # -- the three verbs -------------------------------------------------------------------
    def start(self, prompt_ids: torch.Tensor) -> None:
        self.prompt = prompt_ids.cpu()        # [P0]
        self.prompt_cached = False
        self.boundary = None                  # (token, max_prob, conf) at the last cached position
        self._last = None
        self.rows_from = 0                    # the input position the last forward's rows start at

    @torch.no_grad()
    def verify(self, branches: list[Branch]) -> Verified:
        t0 = time.perf_counter()
        self.rows_from = 0                                         # unless _forward skips the prompt's rows
        logits, q0 = self._forward(branches)                       # [B, L, V]
        return self._verified(host_rows(self.summarize(logits)), q0, [b.window().numel() for b in branches], t0)

    def _verified(self, rows: tuple, q0: int, lengths: list[int], t0: float) -> Verified:
        """Rows over input positions (3 x [B, L] on the host) -> the window predictions of every branch."""
        self._last = (rows, q0)
        token, max_prob, conf = (window_predictions(r, q0, max(lengths), self.spec.logit_shift,
                                                    self.boundary[i] if self.boundary else None) for i, r in enumerate(rows))
        return Verified(token, max_prob, conf, lengths, time.perf_counter() - t0)

    def commit(self, winner: int, n_positions: int) -> None:
        """The winner's first n window positions (and the prompt, after the first round) are cached."""
        rows, q0 = self._last
        self.boundary = boundary_rows(rows, q0, winner, n_positions, self.boundary)
        self._cache(winner, self.rows_from + q0 + n_positions)
        self.prompt_cached = True

    def snapshot(self) -> LocalExecutor:
        """A deep copy that shares the model (weights are never copied)."""
        return copy.deepcopy(self, memo={id(self.model): self.model})

    def summarize(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, L, V] logits -> (token, max_prob, conf), 3 x [B, L]: what the decisions need, from the
        unmodified logits. Unless settings.mask_argmax is "authors", a prediction is never the mask
        token: committing it would leave the position masked, and a random or undertrained model
        that keeps ranking it first would never finish (docs/method.md, departure 1)."""
        s = self.settings
        return summarize(logits, s.confidence, s.temperature, self.generator, self.spec.mask_token_id, s.mask_argmax)

    # -- shared helpers --------------------------------------------------------------------
    def _window_inputs(self, windows: list[torch.Tensor], with_prompt: bool, block_offset: int):
        """Pad windows (optionally behind the prompt) into a batch. -> inputs [B, L], segments [B, L]."""
        N = self.settings.block_size
        head = self.prompt if with_prompt else self.prompt[:0]
        L = head.numel() + max(w.numel() for w in windows)
        inputs = torch.full((len(windows), L), self.spec.mask_token_id, dtype=torch.long)
        segments = torch.full((len(windows), L), -1, dtype=torch.long)
        for j, w in enumerate(windows):
            seq = torch.cat([head, w])
            inputs[j, :seq.numel()] = seq
            segments[j, :head.numel()] = 0
            segments[j, head.numel():seq.numel()] = 1 + block_offset + torch.arange(w.numel()) // N
        return inputs, segments

    def _position_ids(self, inputs: torch.Tensor, start: int) -> torch.Tensor:
        return (start + torch.arange(inputs.shape[1])).expand_as(inputs)   # [B, L]

    # -- what differs between executors ----------------------------------------------------
    def _forward(self, branches):  # -> logits [B, L, V], q0 (input index of window position 0)
        raise NotImplementedError

    def _logits(self, inputs, segments, start):
        raise NotImplementedError

    def _cache(self, winner, n_input_positions):
        raise NotImplementedError

    def cache_nbytes(self) -> int:
        return 0


class UncachedExecutor(LocalExecutor):
    """Recompute everything every round, reusing no K/V: the reference for the cache.

    Under block_causal a cached position's K/V depends only on what precedes it, so one forward over
    prompt + every generated token gives the cached engine's K/V. Under the full modes it depends on
    the window it was cached from (in `full` the prompt's on the first, all-mask window; a block's on
    its neighbours then), so every caching forward is kept as a frozen group: the winner's input of
    that forward, its cached positions ("real") followed by the rest of its window ("ghosts", at their
    own position ids). A frozen row sees the real positions of earlier groups and its own group under
    the window's rule; the live window sees every real position and itself; no one else sees a ghost.
    So each row computes exactly what it computed in the cached engine. A model that ignores masks
    (spec.extra["ignores_attention_mask"]) gets the plain recompute whatever the mode.
    """

    def start(self, prompt_ids):
        super().start(prompt_ids)
        plain = self.settings.attention == "block_causal" or self.spec.extra.get("ignores_attention_mask")
        self.frozen = None if plain else {"tokens": torch.zeros(0, dtype=torch.long), "positions": torch.zeros(0, dtype=torch.long),
                                          "real": torch.zeros(0, dtype=torch.bool), "mask": torch.zeros(0, 0, dtype=torch.bool)}

    def _forward(self, branches):
        if self.frozen is None:
            inputs, segments = self._window_inputs([b.tokens for b in branches], True, 0)
            mask = attention_mask(segments, self.settings.attention, True)
            return self._logits(inputs, mask, self._position_ids(inputs, 0)), self.prompt.numel() + branches[0].window_start
        with_prompt, f = not self.prompt_cached, self.frozen
        inputs, segments = self._window_inputs([b.window() for b in branches], with_prompt, 0)    # live: [B, Lw]
        positions = self._position_ids(inputs, 0 if with_prompt else self.prompt.numel() + branches[0].window_start)
        self._live = (inputs, segments, positions)
        (B, Lw), F = inputs.shape, f["tokens"].numel()
        mask = torch.zeros(B, 1, F + Lw, F + Lw, dtype=torch.bool)
        mask[:, 0, :F, :F] = f["mask"]                                                     # frozen rows: as when cached
        mask[:, 0, F:, :F] = f["real"]                                                     # live rows: real positions only
        mask[:, :, F:, F:] = attention_mask(segments, self.settings.attention, with_prompt)
        logits = self._logits(torch.cat([f["tokens"].expand(B, F), inputs], 1), mask,
                              torch.cat([f["positions"].expand(B, F), positions], 1))     # [B, F + Lw, V]
        return logits[:, F:], (self.prompt.numel() if with_prompt else 0)

    def _logits(self, inputs, mask, position_ids):
        out = self.model(input_ids=inputs.to(self.device), attention_mask=mask.to(self.device),
                         position_ids=position_ids.to(self.device), use_cache=False)
        return out.logits

    def _cache(self, winner, n_input_positions):
        """Freeze the winner's input of the last forward: n_input_positions real, the rest ghosts."""
        if self.frozen is None or n_input_positions == 0:
            return
        inputs, segments, positions = (x[winner] for x in self._live)
        n, f = int((segments >= 0).sum()), self.frozen
        group = attention_mask(segments[None, :n], self.settings.attention, True)[0, 0]    # [T, T]
        F = f["tokens"].numel()
        mask = torch.zeros(F + n, F + n, dtype=torch.bool)
        mask[:F, :F], mask[F:, :F], mask[F:, F:] = f["mask"], f["real"], group
        real = torch.cat([f["real"], torch.arange(n) < n_input_positions])
        self.frozen = {"tokens": torch.cat([f["tokens"], inputs[:n]]), "positions": torch.cat([f["positions"], positions[:n]]),
                       "real": real, "mask": mask}


class _CachedExecutor(LocalExecutor):
    """Inputs for executors with a prefix cache: the window, behind the prompt in the first round."""

    def _forward(self, branches):
        self.rows_from = self.first_read_row()
        return self.forward_windows([b.window() for b in branches], branches[0].window_start, keep_from=self.rows_from)

    def first_read_row(self) -> int:
        """The first input row of the next forward whose logits a decision reads: the prompt's rows are read
        by none but the last one's (the logit shift's boundary). Sampling draws one token per row, so there
        every row stays: the same seed keeps drawing the same tokens. Branch-parallel ranks ask the same,
        so their forwards have the rows, and the float sums, of the single process's."""
        greedy = self.settings.temperature == 0
        return max(self.prompt.numel() - 1, 0) if not self.prompt_cached and greedy else 0

    def forward_windows(self, windows: list[torch.Tensor], window_start: int, rows: list[int] | None = None,
                        keep_from: int = 0):
        """One forward over `windows` [W_j] each, padded into a batch (behind the prompt until it is
        cached), or over the batch rows `rows` of that same padded batch (a branch-parallel rank's
        share, padded exactly as one process pads the whole round). -> logits [b, L - keep_from, V] (the
        rows from input position keep_from on), q0 (the input index of window position 0 in those rows)."""
        with_prompt = not self.prompt_cached
        inputs, segments = self._window_inputs(windows, with_prompt, 0)       # [B, L] each
        if rows is not None:
            inputs, segments = inputs[rows], segments[rows]
        start = 0 if with_prompt else self.prompt.numel() + window_start
        return self._logits(inputs, segments, start, keep_from), (self.prompt.numel() if with_prompt else 0) - keep_from


class BatchedExecutor(_CachedExecutor):
    """All branches in one forward that reads the shared prefix without copying it per branch.
    Under block_causal attention, once the prompt is cached, the branches go packed into one row
    where that feeds fewer tokens (Packing): the equality tests hold it to the reference executors.

    The forward itself is lopa.fast's lean forward where the model's layout allows (lean_support),
    else the model's own; `lean=False` (executor "batched_eager") always runs the model's own, the
    reference the fast path is held to bit for bit (tests/test_fast.py)."""

    def __init__(self, model, spec, settings, lean: bool = True, static: bool | None = None):
        super().__init__(model, spec, settings)
        from lopa.attention import install_shared_prefix_attention
        from lopa.fast import LeanForward, lean_support
        install_shared_prefix_attention(model)
        self.lean_reason = lean_support(model) if lean else "the eager reference (executor batched_eager)"
        self.lean = LeanForward(model) if self.lean_reason is None else None
        # static shapes and captured graphs (lopa.graphs): by default on CUDA; static=True runs the same
        # static path uncaptured on any device (the suite's check of it on a CPU)
        if static is None:
            from lopa.graphs import graphs_enabled
            static = self.device.type == "cuda" and graphs_enabled()
        # commit=dawn reads each forward's attention (lopa.dependency): the probe rides on the prefix cache, so
        # those forwards run uncaptured and unpacked; under every other rule there is no probe and no extra work
        from lopa.dependency import AttentionProbe, wants_attention
        self.probe = None
        if wants_attention(settings):
            self.probe = AttentionProbe(getattr(model.config, "num_hidden_layers", None) or model.config.n_layers)
        self.static = static and self.probe is None
        self.graph = None

    def start(self, prompt_ids):
        super().start(prompt_ids)
        self.release()
        self.kv = PrefixKV(prompt_ids.numel() + self.settings.max_new_tokens)
        self.kv.probe = self.probe
        self.packing = None
        if self.static:
            from lopa.graphs import runner_for
            self.graph = runner_for(self, prompt_ids.numel())
            if self.graph is not None:
                self.kv = self.graph.kv          # the runner's fixed-address prefix, emptied for this decode

    def release(self) -> None:
        """The decode is over (the engine says so): the graph runner's buffers may serve another decode."""
        if self.graph is not None:
            self.graph.owner = None
            self.graph = None

    @torch.no_grad()
    def verify(self, branches):
        if self.probe is not None:
            return self._verify_with_attention(branches)
        if self.graph is None or not self.prompt_cached:       # the prefill runs uncaptured (any prompt length)
            return super().verify(branches)
        t0 = time.perf_counter()
        inputs, segments = self._window_inputs([b.window() for b in branches], False, 0)     # [B, L] each
        positions = self._position_ids(inputs, self.prompt.numel() + branches[0].window_start)
        rows = self.graph.run(inputs, attention_mask(segments, self.settings.attention, False), positions)
        self.packing, self.rows_from = None, 0           # static shapes: padded, never packed
        return self._verified(rows, 0, [b.window().numel() for b in branches], t0)

    def _verify_with_attention(self, branches) -> Verified:
        """The eager verify, with each branch's window rows of its attention (commit=dawn)."""
        q0 = 0 if self.prompt_cached else self.prompt.numel()      # input index of window position 0
        self.probe.reset()
        verified = super().verify(branches)
        verified.attention = self.probe.rows(q0, verified.lengths)
        return verified

    def snapshot(self):
        """None under the graph runner (its buffers serve the next decode): a fork then replays."""
        return None if self.graph is not None else super().snapshot()

    def _run(self, inputs, mask, positions, window_lengths=None, keep_from: int = 0) -> torch.Tensor:
        """One forward -> logits [B, L - keep_from, V]: the lean forward, or the model's own."""
        inputs, mask, positions = inputs.to(self.device), mask.to(self.device), positions.to(self.device)
        if self.lean is not None and not self.lean.hooked():
            return self.lean(inputs, mask, positions, self.kv, window_lengths, keep_from)
        out = self.model(input_ids=inputs, attention_mask=mask, position_ids=positions, use_cache=False,
                         lopa_prefix=self.kv, lopa_window_lengths=window_lengths)
        return out.logits[:, keep_from:]

    def _forward(self, branches):
        windows = [b.window() for b in branches]
        self.packing = None
        if self.probe is None and self.prompt_cached and self.settings.attention == "block_causal" and len(windows) > 1:
            plan = Packing.plan(windows, self.settings.block_size)
            if plan.pays(windows):
                self.packing = plan
                return self._packed_logits(windows, plan, branches[0].window_start), 0
        return super()._forward(branches)

    def _packed_logits(self, windows, plan: Packing, window_start: int) -> torch.Tensor:
        """One row of every branch's fed positions -> logits [B, Lmax, V] as the padded batch gives them."""
        inputs = torch.cat([w[s:] for w, s in zip(windows, plan.skip)])[None]                 # [1, T]
        positions = (self.prompt.numel() + window_start + plan.local)[None]                  # [1, T]
        logits = self._run(inputs, plan.mask(self.settings.block_size), positions)           # [1, T, V]
        return logits[0][plan.index.to(self.device)]                                         # [B, Lmax, V]

    def _logits(self, inputs, segments, start, keep_from: int = 0):
        mode = self.settings.attention
        mask = attention_mask(segments, mode, not self.prompt_cached)  # window part only
        # Full attention needs no window mask (the authors' none at all; prompt-blind none once the
        # prompt is cached): FlashAttention may serve those forwards.
        unmasked = mode == "full" or (mode == "full_prompt_blind" and self.prompt_cached)
        return self._run(inputs, mask, self._position_ids(inputs, start),
                         (segments >= 0).sum(1).tolist() if unmasked else None, keep_from)

    def pending_kv(self, branch: int, n: int) -> torch.Tensor:
        """Branch `branch`'s K/V of the last forward, first n input positions, packed or not. -> [layers, 2, Hkv, n, D]"""
        if self.packing is None:
            return self.kv.pending_slice(branch, n)
        return self.kv.gathered_slice(self.packing.index[branch, :n])     # wherever the packed row holds them

    def _cache(self, winner, n_input_positions):
        self.kv.append(self.pending_kv(winner, n_input_positions))

    def cache_nbytes(self):
        return self.kv.nbytes()


class PerBranchExecutor(_CachedExecutor):
    """The reference: one branch at a time, each with its own copy of the cache (transformers
    DynamicCache + the model's stock attention)."""

    def start(self, prompt_ids):
        super().start(prompt_ids)
        from transformers import DynamicCache
        self.cache = DynamicCache(config=self.model.config)
        self.copies = []

    def _logits(self, inputs, segments, start, keep_from: int = 0):
        prefix_len = self.cache.get_seq_length()
        mask = attention_mask(segments, self.settings.attention, not self.prompt_cached, prefix_len)
        position_ids = self._position_ids(inputs, start)
        self.copies, logits = [], []
        for j in range(inputs.shape[0]):
            n = int((segments[j] >= 0).sum())          # this branch's own length, no padding
            cache = copy.deepcopy(self.cache)
            out = self.model(input_ids=inputs[j:j + 1, :n].to(self.device),
                             attention_mask=mask[j:j + 1, :, :n, :prefix_len + n].to(self.device),
                             position_ids=position_ids[j:j + 1, :n].to(self.device), past_key_values=cache, use_cache=True)
            self.copies.append(cache)
            logits.append(torch.nn.functional.pad(out.logits, (0, 0, 0, inputs.shape[1] - n)))
        return torch.cat(logits)[:, keep_from:]        # [B, L - keep_from, V]

    def _cache(self, winner, n_input_positions):
        cache = self.copies[winner]
        extra = cache.get_seq_length() - self.cache.get_seq_length() - n_input_positions
        if extra:
            cache.crop(-extra)
        self.cache, self.copies = cache, []

    def cache_nbytes(self):
        return sum(t.numel() * t.element_size() for layer in self.cache.layers
                   for t in (layer.keys, layer.values) if t is not None)


class EagerBatchedExecutor(BatchedExecutor):
    """The batched executor over the model's own forward: the reference for the fast path (lopa.fast)."""

    def __init__(self, model, spec, settings):
        super().__init__(model, spec, settings, lean=False)


EXECUTORS = {"batched": BatchedExecutor, "batched_eager": EagerBatchedExecutor, "per_branch": PerBranchExecutor,
             "uncached": UncachedExecutor}


def make_executor(name: str, model, spec: ModelSpec, settings: DecodeSettings) -> LocalExecutor:
    if name not in EXECUTORS:
        raise ValueError(f"executor must be one of {tuple(EXECUTORS)}, got {name!r}")
    return EXECUTORS[name](model, spec, settings)


# -- what if: the model's top tokens at one position of a recorded round (app forks) -----------------
@torch.no_grad()
def top_tokens(model, spec, run, r: int, position: int, n: int = 5) -> list[tuple[int, float]]:
    """[(token, probability)] x n: the model's best tokens at generated `position` in round r's
    forward of the winning branch, recomputed with one uncached forward over prompt + that window.
    Exact for block_causal attention (a cached block's K/V depends only on what precedes it); with
    full attention cached blocks are recomputed seeing their final neighbours, so probabilities can
    differ slightly from the round's own (and in `full`, where the cached prompt saw the first window,
    more). Temperature applies as in the engine; probabilities come from the unmodified logits and
    the mask token is never listed."""
    record = run.records[r]
    N, settings = int(run.settings["block_size"]), DecodeSettings.from_dict(run.settings)
    generated = run.tokens[:record.window_start] + record.branch_tokens[record.winner]     # [G]
    prompt = torch.tensor(run.prompt_ids, dtype=torch.long)
    inputs = torch.cat([prompt, torch.tensor(generated, dtype=torch.long)])[None]          # [1, L]
    segments = torch.cat([torch.zeros(prompt.numel(), dtype=torch.long),
                          1 + torch.arange(len(generated)) // N])[None]                    # [1, L]
    mask = attention_mask(segments, settings.attention, True)                             # [1, 1, L, L]
    device = next(model.parameters()).device
    logits = model(input_ids=inputs.to(device), attention_mask=mask.to(device),
                   position_ids=torch.arange(inputs.shape[1])[None].to(device), use_cache=False).logits
    row = logits[0, prompt.numel() + position - int(spec["logit_shift"])].float().cpu()   # [V]
    probs = torch.softmax(row / settings.temperature if settings.temperature > 0 else row, dim=-1)
    listed = probs.clone()                 # probabilities as the engine's (the mask's mass included) ...
    listed[spec["mask_token_id"]] = -1.0   # ... but the mask token is not listed as a candidate
    top = listed.topk(min(n, probs.numel() - 1))
    return list(zip(top.indices.tolist(), top.values.tolist()))
