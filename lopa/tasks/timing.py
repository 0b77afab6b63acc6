"""What a verify forward costs: the median seconds of one batched forward over B two-block windows, the
measurement the round benchmark (lopa.bench.round), the GPU benchmark (lopa.bench.gpu) and the adaptive
study's cost curve (lopa.study.adaptive_fit) all take. The timing itself is the engine's
(lopa.cost.verify_samples, which prices the adaptive order's branches at the start of a decode).

Shapes (notation in lopa/__init__.py): N block size, B branches (windows) in one forward.
"""

from __future__ import annotations

import statistics

import torch

from lopa.cost import verify_samples
from lopa.forward import BatchedExecutor
from lopa.settings import DecodeSettings

BRANCH_COUNTS = (1, 2, 4, 8, 15)


def forward_times(loaded, prompt_ids: torch.Tensor, settings: DecodeSettings, repeats: int,
                  counts=BRANCH_COUNTS, where: str = "first", executor=BatchedExecutor) -> dict[int, float]:
    """Median seconds of one verify forward over B two-block windows (round_branches), for each B in counts.
    executor: the executor class, or any factory (model, spec, settings) -> Executor, whose forwards are timed."""
    samples = verify_samples(executor(loaded.model, loaded.spec, settings), loaded.spec,
                             loaded.model.config.vocab_size, prompt_ids, settings, tuple(counts), repeats, where)
    return {B: statistics.median(times) for B, times in samples.items()}
