"""The floor under a verify forward: what the hardware must do for it at the least, and how long that takes.

A forward over T positions (B windows of W, padded: T = B x W; in the prefill the prompt's P0 positions
too) behind a cached prefix of P positions must at least
- read every weight it multiplies by once (bytes), and
- do the multiply-adds of its matmuls and its attention (FLOPs),
so it takes at least floor = max(bytes / bandwidth, FLOPs / peak). Below the ridge point (positions per
forward where the two meet) a forward is bound by reading weights and more positions are nearly free,
LoPA's premise; past it every branch costs compute.

What is counted, exactly (work()):
- weight bytes: every layer's q, k, v, o projections; its MLP (dense: gate, up, down) or, in a mixture of
  experts, the router and the experts the forward touches, at most min(experts, T x active) per layer; the
  LM head; of the embedding only the T rows gathered. Norms and biases (under 0.01% of a 7B model) are
  left out.
- KV bytes: per layer the prefix's K and V read once (the prefix is stored once, batch 1: lopa.kv.PrefixKV)
  and the window's K and V written once (T positions).
- FLOPs: 2 per multiply-add: 2 x (matmul weights a position multiplies by: projections, MLP or router +
  `active` experts, LM head) x T, plus attention's QK^T and AV, 2 x 2 x heads x head_dim x (P + W) per
  position per layer (every query against the prefix and its own window; a block-causal mask lets a kernel
  skip part of that, so there the attention term is counted high: under 2% of a Dream-7B forward's FLOPs
  at a 500-token prefix).
- Not counted: activations and logits, which a fused kernel can keep on chip. The floor is a bound, not a
  prediction.

Peaks come from NVIDIA's datasheets for the devices named in DATASHEET, else (a CPU, an unknown GPU) they
are measured once per device and dtype by measure_peaks, and the report says which.

Shapes (notation in lopa/__init__.py): B windows of W behind a prefix of P; `positions` (T above) is what a
forward feeds, B x L (L = W, plus the prompt in the prefill).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from lopa.cost import sync

EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")   # what configs call the expert count


@dataclasses.dataclass(frozen=True)
class Shape:
    """The sizes of a decoder-only transformer that the floor depends on."""
    layers: int
    hidden: int
    intermediate: int              # dense MLP width
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    experts: int = 0               # 0: dense
    active: int = 0                # experts per position
    expert_intermediate: int = 0
    moe_layers: int = 0            # layers whose MLP is the mixture of experts

    @classmethod
    def from_config(cls, config: dict) -> Shape:
        """From a transformers config's keyword arguments (gpu_plan's DREAM_7B, ...) or its to_dict()."""
        heads = config["num_attention_heads"]
        experts = next((config[key] for key in EXPERT_COUNTS if config.get(key)), 0)
        layers = config["num_hidden_layers"]
        # Qwen3-MoE's rule: layer i is sparse unless listed in mlp_only_layers, every decoder_sparse_step-th layer
        step, dense = config.get("decoder_sparse_step", 1) or 1, set(config.get("mlp_only_layers") or ())
        moe_layers = sum(i not in dense and (i + 1) % step == 0 for i in range(layers)) if experts else 0
        return cls(layers=layers, hidden=config["hidden_size"], intermediate=config["intermediate_size"], heads=heads,
                   kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or config["hidden_size"] // heads, vocab=config["vocab_size"],
                   experts=experts, active=config.get("num_experts_per_tok", 0) if experts else 0,
                   expert_intermediate=config.get("moe_intermediate_size") or config["intermediate_size"],
                   moe_layers=moe_layers)

    @property
    def attention_weights(self) -> int:
        """q and o (heads x head_dim), k and v (kv_heads x head_dim), per layer."""
        return 2 * self.hidden * self.head_dim * (self.heads + self.kv_heads)

    @property
    def expert_weights(self) -> int:
        return 3 * self.hidden * self.expert_intermediate          # gate, up, down of one expert

    def parameters(self) -> int:
        """Every counted weight: layers, embedding and LM head (untied)."""
        mlp = (self.layers - self.moe_layers) * 3 * self.hidden * self.intermediate
        moe = self.moe_layers * (self.experts * self.expert_weights + self.hidden * self.experts)
        return self.layers * self.attention_weights + mlp + moe + 2 * self.vocab * self.hidden


@dataclasses.dataclass(frozen=True)
class Peaks:
    flops: float                   # FLOP/s of dense matmuls in the dtype
    bandwidth: float               # bytes/s of device memory
    source: str                    # "datasheet: ..." or "measured: ..."


# NVIDIA datasheets, dense (no sparsity) tensor-core BF16 and plain FP32 (torch's default fp32 matmul does not
# use TF32), and memory bandwidth: H100 and H200 from the H100 / H200 Tensor Core GPU datasheets
# (nvidia.com/en-us/data-center/h100/, /h200/: "BF16 Tensor Core 1,979 TFLOPS" with sparsity, so 989.4 dense;
# FP32 67 TFLOPS; 3.35 TB/s HBM3 (H100 SXM), 2 TB/s (H100 PCIe: 756 BF16 dense, FP32 51), 4.8 TB/s HBM3e (H200
# SXM; H200 NVL 835 BF16 dense, FP32 60)); A100 from the A100 datasheet (312 BF16, FP32 19.5; 2,039 GB/s for
# the 80 GB SXM, 1,555 GB/s for 40 GB). Matched against torch.cuda.get_device_name(), first match wins.
TFLOPS, TBS = 1e12, 1e12
DATASHEET = [  # (name contains, {dtype: FLOP/s}, bytes/s)
    ("H200 NVL", {"bfloat16": 835 * TFLOPS, "float16": 835 * TFLOPS, "float32": 60 * TFLOPS}, 4.8 * TBS),
    ("H200", {"bfloat16": 989.4 * TFLOPS, "float16": 989.4 * TFLOPS, "float32": 67 * TFLOPS}, 4.8 * TBS),
    ("H100 PCIe", {"bfloat16": 756 * TFLOPS, "float16": 756 * TFLOPS, "float32": 51 * TFLOPS}, 2.0 * TBS),
    ("H100", {"bfloat16": 989.4 * TFLOPS, "float16": 989.4 * TFLOPS, "float32": 67 * TFLOPS}, 3.35 * TBS),
    ("A100-SXM4-80GB", {"bfloat16": 312 * TFLOPS, "float16": 312 * TFLOPS, "float32": 19.5 * TFLOPS}, 2.039 * TBS),
    ("A100", {"bfloat16": 312 * TFLOPS, "float16": 312 * TFLOPS, "float32": 19.5 * TFLOPS}, 1.555 * TBS),
]


def datasheet_peaks(name: str, dtype: str) -> Peaks | None:
    """The datasheet's peaks for a device named `name` in `dtype` ("bfloat16", ...), or None if unlisted."""
    for part, flops, bandwidth in DATASHEET:
        if part.lower() in name.lower() and dtype in flops:
            return Peaks(flops[dtype], bandwidth, f"datasheet: NVIDIA {part}")
    return None


_MEASURED: dict[tuple, Peaks] = {}


def measure_peaks(device: torch.device, dtype: torch.dtype, size: int = 1024, copy_mib: int = 256) -> Peaks:
    """The best of a few timings of a size x size matmul (2 size^3 FLOPs) and of copying copy_mib MiB
    (read + write: twice the bytes), about a second on a CPU; cached per device and dtype."""
    key = (str(device), str(dtype), size, copy_mib)
    if key not in _MEASURED:
        def best(fn, repeats: int) -> float:
            fn()                                                   # warm-up
            times = []
            for _ in range(repeats):
                sync(device)
                t0 = time.perf_counter()
                fn()
                sync(device)
                times.append(time.perf_counter() - t0)
            return min(times)
        a = torch.randn(size, size, device=device).to(dtype)      # [size, size]
        b = torch.randn(size, size, device=device).to(dtype)
        matmul = best(lambda: a @ b, 5)
        src = torch.empty(copy_mib * 2**20 // 4, dtype=torch.float32, device=device).fill_(1.0)
        dst = torch.empty_like(src)
        copy = best(lambda: dst.copy_(src), 3)
        _MEASURED[key] = Peaks(2 * size**3 / matmul, 2 * src.nbytes / copy,
                               f"measured: {size}x{size} matmul, {copy_mib} MiB copy")
    return _MEASURED[key]


def device_peaks(device: torch.device, dtype: torch.dtype) -> Peaks:
    """The datasheet's peaks for a known CUDA device, else measured ones (on a GPU at sizes that keep it
    busy for more than a kernel launch: an 8192 x 8192 matmul, a 1 GiB copy)."""
    name = str(dtype).removeprefix("torch.")
    if device.type != "cuda":
        return measure_peaks(device, dtype)
    return datasheet_peaks(torch.cuda.get_device_name(device), name) or measure_peaks(device, dtype, 8192, 1024)


@dataclasses.dataclass(frozen=True)
class Work:
    weight_bytes: float
    kv_bytes: float
    flops: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes


def work(shape: Shape, positions: int, prefix: int, window: int, element_bytes: int) -> Work:
    """What one forward over `positions` (T) inputs behind a cached prefix of `prefix` (P) must at least
    move and compute, each position attending to the prefix and `window` (W) positions (its own window;
    in the prefill, the prompt and the window). Counted as the module docstring says."""
    T, s = positions, shape
    touched = min(s.experts, T * s.active)                    # experts a layer reads at most
    mlp_read = (s.layers - s.moe_layers) * 3 * s.hidden * s.intermediate \
        + s.moe_layers * (touched * s.expert_weights + s.hidden * s.experts)
    weights = s.layers * s.attention_weights + mlp_read + s.vocab * s.hidden + T * s.hidden
    kv = s.layers * 2 * s.kv_heads * s.head_dim * (prefix + T)
    per_position = s.layers * s.attention_weights + s.vocab * s.hidden \
        + (s.layers - s.moe_layers) * 3 * s.hidden * s.intermediate \
        + s.moe_layers * (s.active * s.expert_weights + s.hidden * s.experts)
    attention = s.layers * 4 * s.heads * s.head_dim * (prefix + window)
    return Work(weights * element_bytes, kv * element_bytes, T * (2 * per_position + attention))


def floor_seconds(w: Work, peaks: Peaks) -> tuple[float, str]:
    """The floor of one forward and what binds it: "bytes" (memory) or "flops" (compute)."""
    memory, compute = w.bytes / peaks.bandwidth, w.flops / peaks.flops
    return (memory, "bytes") if memory >= compute else (compute, "flops")


def ridge_positions(shape: Shape, peaks: Peaks, prefix: int, window: int, element_bytes: int,
                    limit: int = 1 << 24) -> int | None:
    """The fewest positions per forward (windows of `window` behind `prefix`) at which the FLOPs floor
    reaches the bytes floor, or None below `limit`. Past the few positions that touch every expert, FLOPs
    grow faster with T than bytes (a position's FLOPs over peak exceed its K/V bytes over bandwidth), so
    the crossing is single: doubling finds a bracket, bisection the point."""
    binds = lambda T: floor_seconds(work(shape, T, prefix, window, element_bytes), peaks)[1] == "flops"  # noqa: E731
    hi = 1
    while not binds(hi):
        hi *= 2
        if hi > limit:
            return None
    lo = hi // 2                                             # binds(hi); not binds(lo) (lo = 0: nothing)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if binds(mid) else (mid, hi)
    return hi


def judged(shape: Shape, peaks: Peaks, positions: int, prefix: int, window: int, element_bytes: int,
           seconds: float) -> dict:
    """A timed forward beside its floor: the floor in ms, what binds it, and measured / floor."""
    floor, bound = floor_seconds(work(shape, positions, prefix, window, element_bytes), peaks)
    return {"floor_ms": floor * 1e3, "floor_bound": bound, "over_floor": seconds / floor}
