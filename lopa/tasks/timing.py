"""What a verify forward costs: the median seconds of one batched forward over B two-block windows, the
measurement the round benchmark (lopa.bench.round), the GPU benchmark (lopa.bench.gpu) and the adaptive
study's cost curve (lopa.study.adaptive_fit) all take.

Shapes (notation in lopa/__init__.py): N block size, B branches (windows) in one forward.
"""

from __future__ import annotations

import statistics
import time

import torch

from lopa.blocks import Branch
from lopa.forward import BatchedExecutor
from lopa.settings import DecodeSettings

BRANCH_COUNTS = (1, 2, 4, 8, 15)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def round_branches(B: int, settings: DecodeSettings, mask: int, vocab: int, where: str = "first") -> list[Branch]:
    """An all-mask two-block anchor window and B - 1 lookahead branches, each the anchor plus one token
    in its first block (`where="first"`: every branch feeds its whole window) or its last block
    (`"last"`: under block_causal attention a branch then feeds only that block, lopa.kv.Packing)."""
    N = settings.block_size
    anchor = Branch(torch.full((2 * N,), mask), 0, N, mask)                  # [2N] all masked
    at = 0 if where == "first" else N
    tokens = [t for t in range(min(vocab, B + 1)) if t != mask]                  # any B - 1 real tokens
    return [anchor] + [anchor.with_tokens(torch.tensor([at + j % N]), torch.tensor([tokens[j]])) for j in range(B - 1)]


def forward_times(loaded, prompt_ids: torch.Tensor, settings: DecodeSettings, repeats: int,
                  counts=BRANCH_COUNTS, where: str = "first") -> dict[int, float]:
    """Median seconds of one verify forward over B two-block windows (round_branches), for each B in counts."""
    ex = BatchedExecutor(loaded.model, loaded.spec, settings)
    ex.start(prompt_ids)
    first = Branch.start(settings, loaded.spec)
    ex.verify([first])
    ex.commit(0, 0)                                          # the prompt is now the cached prefix
    times = {}
    for B in counts:
        branches = round_branches(B, settings, loaded.spec.mask_token_id, loaded.model.config.vocab_size, where)
        ex.verify(branches)                                  # warm-up
        samples = []
        for _ in range(repeats):
            _sync(ex.device)
            t0 = time.perf_counter()
            ex.verify(branches)
            _sync(ex.device)
            samples.append(time.perf_counter() - t0)
        ex.kv.pending.clear()
        times[B] = statistics.median(samples)
    return times
