"""The verify step at static shapes, captured once per shape bucket as a CUDA graph.

A verify forward of a 7B model at batch 1..15 is bound by reading the weights (about 3 ms on an H200),
but launched op by op from Python it takes 40-60 ms (assets/bench/gpu/h200.md): hundreds of kernels,
each waiting for the host. A CUDA graph replays the whole forward, and the per-round decisions'
inputs (token, max prob, Conf of every window position), with one launch. Graphs need static shapes and
addresses, so:

- the windows are padded to a bucket of B (1, 2, 4, 8, 16, ...) and of W (whole blocks): padding rows
  attend to themselves only, padding columns are masked (lopa.forward.attention_mask);
- the prefix K/V is a buffer of fixed capacity (StaticPrefixKV); attention reads all of it and masks the
  positions past the cached length (`valid`), which costs a few MB of reads against the weights' GBs;
- the summaries (lopa.rules.summarize, greedy) are computed in the graph and come back in one copy:
  one host synchronisation per round. The decisions that follow (anchor, scores, the winner) run on the
  host over those [3, B, W] numbers: each is a handful of ops on at most 16 x 64 elements, cheaper on
  the host than as launches, and they need the host anyway to build the next round's windows.

Why CUDA graphs and not torch.compile: compile's graph breaks on the engine's Python-side cache and its
recompiles per prefix length would cost minutes per model, where capture costs one forward per bucket;
the graphs replay the very kernels the eager lean forward runs, so the bf16 tolerance of the GPU report
holds unchanged. Sampling (temperature > 0) draws from a generator the graph cannot own: those decodes
run the lean forward uncaptured.

On a CPU the same static path runs without capture (`capture=False`): the suite holds its tokens to the
eager executor's there (tests/test_fast.py); only the capture itself needs a GPU.
"""

from __future__ import annotations

import os
import weakref

import torch

from lopa.kv import PrefixKV
from lopa.rules import pack_rows, summarize, unpack_rows

MAX_EXACT_TOKEN = 2 ** 24            # token ids travel as float32 (here and between ranks), exact below this


def bucket(n: int, step: int | None = None) -> int:
    """The static size n is padded to: a power of two (B), or a whole number of `step` (W)."""
    if step:
        return -(-n // step) * step
    return 1 << max(n - 1, 0).bit_length()


class StaticPrefixKV(PrefixKV):
    """PrefixKV at a fixed address: every layer's buffer is allocated up front at `capacity`, and `prefix`
    hands out the whole buffer with `valid` [capacity] marking the cached positions (True below `length`),
    which the shared-prefix attention masks by. `length_t` mirrors `length` on the device for the graphs."""

    def __init__(self, capacity: int, layers: int, kv_heads: int, head_dim: int, dtype, device):
        super().__init__(capacity)
        for layer in range(layers):
            self.keys[layer] = torch.zeros(1, kv_heads, capacity, head_dim, dtype=dtype, device=device)
            self.values[layer] = torch.zeros(1, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.length_t = torch.zeros((), dtype=torch.long, device=device)
        self.slots = torch.arange(capacity, device=device)                           # [capacity]
        self.valid = self.slots < self.length_t                                      # [capacity]

    def prefix(self, layer, like):
        return self.keys[layer], self.values[layer]

    def reset(self) -> None:
        self.length = 0
        self._sync()

    def append(self, kv):
        super().append(kv)
        self._sync()

    def _sync(self) -> None:
        self.length_t.fill_(self.length)
        torch.lt(self.slots, self.length_t, out=self.valid)


class GraphVerify:
    """Verify forwards at static shapes for one model and one set of decision settings: the lean forward
    plus the greedy summaries, captured per (B, W) bucket when `capture` (CUDA), run directly otherwise.
    One per model and key (runner_for); an executor holds it from start() until another one takes it."""

    def __init__(self, lean, settings, spec, capacity: int, capture: bool):
        config = lean.model.config
        param = next(lean.model.parameters())
        self.lean, self.settings, self.spec, self.capture = lean, settings, spec, capture
        self.kv = StaticPrefixKV(capacity, len(lean.layers), config.num_key_value_heads, lean.head_dim,
                                 param.dtype, param.device)
        self.device = param.device
        self.buckets: dict[tuple[int, int], dict] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.owner = None                                  # weakref to the executor using the buffers

    def take(self, executor) -> bool:
        """Hand the static buffers to `executor` (a new decode) unless another live decode holds them
        (the executor releases them when its decode ends: BatchedExecutor.release)."""
        current = self.owner() if self.owner is not None else None
        if current is not None and current is not executor:
            return False
        self.owner = weakref.ref(executor)
        self.kv.reset()
        return True

    def run(self, inputs: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """inputs, positions [B, L]; mask [B, 1, L, L] bool (the window's) -> (token, max_prob, conf) [B, L] each,
        on the host after one copy. The pending K/V of the forward are in self.kv.pending."""
        B, L = inputs.shape
        key = (bucket(B), bucket(L, self.settings.block_size))
        slot = self.buckets.get(key) or self._build(*key)
        Bb, Lb = key
        ids = torch.full((Bb, Lb), self.spec.mask_token_id, dtype=torch.long)              # [Bb, Lb]
        ids[:B, :L] = inputs
        full = torch.eye(Lb, dtype=torch.bool).repeat(Bb, 1, 1, 1)                            # [Bb, 1, Lb, Lb]: padding sees itself
        full[:B, :, :L, :L] = mask
        slot["ids"].copy_(ids)
        slot["positions"].copy_((positions[0, 0] + torch.arange(Lb)).expand(Bb, Lb))
        slot["mask"].copy_(full)
        if slot["graph"] is not None:
            slot["graph"].replay()
        else:
            slot["out"] = self._step(slot)
        self.kv.pending = dict(slot["pending"])
        token, max_prob, conf = unpack_rows(slot["out"].cpu())     # [Bb, Lb] each: the round's one synchronisation
        return token[:B, :L], max_prob[:B, :L], conf[:B, :L]

    def _step(self, slot) -> torch.Tensor:
        """The captured work: lean forward over the static buffers, then the greedy summaries, packed (pack_rows)."""
        s = self.settings
        logits = self.lean(slot["ids"], slot["mask"], slot["positions"], self.kv)          # [Bb, Lb, V]
        token, max_prob, conf = summarize(logits, s.confidence, 0.0, None, self.spec.mask_token_id, s.mask_argmax)
        slot["pending"] = dict(self.kv.pending)
        return pack_rows(token, max_prob, conf, torch.float32)      # token ids exact: runner_for bounds the vocabulary

    def _build(self, B: int, L: int) -> dict:
        """Static buffers for one bucket, and its graph when capturing (two warm-up runs on a side stream first,
        as CUDA graph capture asks)."""
        dev = self.device
        slot = {"ids": torch.zeros(B, L, dtype=torch.long, device=dev),
                "positions": torch.zeros(B, L, dtype=torch.long, device=dev),
                "mask": torch.zeros(B, 1, L, L, dtype=torch.bool, device=dev), "graph": None}
        if self.capture:
            length = self.kv.length
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._step(slot)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                slot["out"] = self._step(slot)
            slot["graph"] = graph
            assert self.kv.length == length          # capture computes, never caches
        self.buckets[(B, L)] = slot
        return slot


GRAPHS_ENV = "LOPA_CUDA_GRAPHS"     # "0": on CUDA the batched executor runs the lean forward uncaptured


def graphs_enabled() -> bool:
    """Whether a CUDA batched executor captures its verify step (default yes). A process that decodes once and
    ends (a ZeroGPU call's forked worker: app/serving/gpu.py sets it off there) would pay a capture per bucket
    and replay it a few times, so it runs the lean forward uncaptured."""
    return os.environ.get(GRAPHS_ENV, "1").strip() != "0"


def capacity_for(n: int) -> int:
    """The static prefix capacity a decode of n positions (prompt + new tokens) gets: whole 512s, so
    decodes of similar lengths share one runner and its graphs."""
    return bucket(n, 512)


def runner_for(executor, prompt_len: int) -> GraphVerify | None:
    """The model's runner for this executor's decode, built on first use and kept on the model (graphs are
    worth keeping: a capture costs a forward per bucket), or None where the static path does not apply:
    no lean forward, sampling, a vocabulary past float32's exact integers, a forward hook on the model (a graph
    would replay without it), or buffers another decode holds."""
    s, lean = executor.settings, executor.lean
    if lean is None or s.temperature > 0 or lean.model.config.vocab_size > MAX_EXACT_TOKEN or lean.hooked():
        return None
    capture = executor.device.type == "cuda"
    # The weights' address and dtype: a graph reads the weights where they were at capture, so a model moved
    # or cast since (model.to(...), as the GPU report does between dtypes) gets new runners, the old dropped.
    param = next(lean.model.parameters())
    weights = (param.dtype, str(param.device), param.data_ptr())
    key = (capacity_for(prompt_len + s.max_new_tokens), s.block_size, s.attention, s.confidence, s.mask_argmax,
           executor.spec.mask_token_id, capture, weights)
    runners = lean.model.__dict__.setdefault("_lopa_graph_runners", {})
    for stale in [k for k in runners if k[-1] != weights]:
        del runners[stale]
    if key not in runners:
        runners[key] = GraphVerify(lean, s, executor.spec, key[0], capture)
    runner = runners[key]
    return runner if runner.take(executor) else None
