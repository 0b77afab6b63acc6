"""The roofline in the GPU report: every timed verify forward beside its floor on the device it ran on
(lopa.bench.roofline), and the cost curve, ms against positions per forward for B = 1..15 windows of two
32-token blocks, with its ridge point, at the model shapes the plan measures.

Shapes (notation in lopa/__init__.py): B windows of W = 2N positions behind a prefix of P.
"""

from __future__ import annotations

import torch

from lopa.bench.gpu_plan import BLOCK, Plan
from lopa.bench.roofline import Peaks, Shape, device_peaks, judged, ridge_positions
from lopa.bench.tables import table
from lopa.models.loading import LoadedModel
from lopa.resolution import resolve
from lopa.tasks.timing import forward_times

CURVE_COUNTS = tuple(range(1, 16))     # B = 1..15: D2F and LoPA k = 1..14
WINDOW = 2 * BLOCK


def model_peaks(loaded: LoadedModel) -> tuple[Shape, int, Peaks]:
    """The model's shape, bytes per weight, and the peaks of the device and dtype it runs in."""
    weight = next(loaded.model.parameters())
    return Shape.from_config(loaded.model.config.to_dict()), weight.element_size(), device_peaks(weight.device, weight.dtype)


def forward_floor(loaded: LoadedModel, B: int, prefix: int, seconds: float) -> dict:
    """A verify forward over B windows of W behind `prefix`, timed at `seconds`, beside its floor."""
    shape, element_bytes, peaks = model_peaks(loaded)
    return judged(shape, peaks, B * WINDOW, prefix, WINDOW, element_bytes, seconds)


def random_prompt(loaded: LoadedModel, wanted: int, generator: torch.Generator) -> torch.Tensor:
    """A prompt of `wanted` random tokens, or as many as fit before a window. -> [P]"""
    prefix = min(wanted, loaded.spec.max_context - WINDOW)
    return torch.randint(3, loaded.model.config.vocab_size - 2, (prefix,), generator=generator)    # [P]


def cost_curve(loaded: LoadedModel, plan: Plan) -> list[dict]:
    """ms per verify forward for B = 1..15 windows at each of the plan's prefixes, with the floor, the
    ratio to it and the ridge point (positions per forward where the floor turns from bytes to FLOPs)."""
    settings = resolve({"block_size": BLOCK, "max_new_tokens": WINDOW}, loaded.spec)
    shape, element_bytes, peaks = model_peaks(loaded)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for wanted in plan.prefixes:
        prompt_ids = random_prompt(loaded, wanted, generator)                                      # [P]
        prefix = prompt_ids.numel()
        times = forward_times(loaded, prompt_ids, settings, plan.curve_repeats, counts=CURVE_COUNTS)
        ridge = ridge_positions(shape, peaks, prefix, WINDOW, element_bytes)
        rows += [{"model": loaded.spec.name, "dtype": str(next(loaded.model.parameters()).dtype).removeprefix("torch."),
                  "prefix": prefix, "B": B, "positions": B * WINDOW, "ms_per_forward": times[B] * 1e3,
                  **judged(shape, peaks, B * WINDOW, prefix, WINDOW, element_bytes, times[B]),
                  "ridge_positions": ridge, "peak_tflops": peaks.flops / 1e12, "bandwidth_tbs": peaks.bandwidth / 1e12,
                  "peaks_source": peaks.source} for B in CURVE_COUNTS]
    return rows


def markdown(rows: list[dict]) -> list[str]:
    """Per model: the device's peaks, the ridge at each prefix, and one row per B: positions, then ms,
    floor and measured / floor at each prefix."""
    out = ["## 2b. The roofline: cost curve against the floor", "",
           "floor = max(weight + K/V bytes / bandwidth, FLOPs / peak) (lopa.bench.roofline: weights read once, "
           "the experts a forward touches, the prefix K/V read once; FLOPs of the matmuls and of attention over the "
           "prefix and the window). Ridge: the positions per forward from which FLOPs, not bytes, bind.", ""]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        ridges = {r["prefix"]: r["ridge_positions"] for r in mine}          # one per prefix
        first = mine[0]
        out += [f"### {model}, {first['dtype']}", "",
                f"Peaks: {first['peak_tflops']:.4g} TFLOPS, {first['bandwidth_tbs']:.4g} TB/s ({first['peaks_source']}). "
                + "; ".join(f"prefix {p}: ridge at {ridge} positions ({ridge / WINDOW:.1f} windows)" if ridge
                            else f"prefix {p}: no ridge" for p, ridge in ridges.items()) + ".", ""]
        wide = [{"B": B, "positions": B * WINDOW,
                 **{f"{key}_{p}": r[key] for r in mine if r["B"] == B for p in [r["prefix"]]
                    for key in ("ms_per_forward", "floor_ms", "floor_bound", "over_floor")}} for B in CURVE_COUNTS]
        columns = {"B": "B", "positions": "positions"}
        for p in ridges:
            columns.update({f"ms_per_forward_{p}": f"ms (P={p})", f"floor_ms_{p}": f"floor ms (P={p})",
                            f"floor_bound_{p}": "bound", f"over_floor_{p}": "x floor"})
        out += [table(wide, columns), ""]
    return out
