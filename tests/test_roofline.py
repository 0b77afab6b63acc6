"""lopa.bench.roofline on hand-made shapes: the bytes, FLOPs, floor and ridge it claims to count."""

import pytest
import torch

from lopa.bench import gpu_plan
from lopa.bench.roofline import Peaks, Shape, datasheet_peaks, floor_seconds, measure_peaks, ridge_positions, work

# 2 layers, hidden 8, MLP 16, 2 query heads and 1 K/V head of 4, vocabulary 10
DENSE = Shape(layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4, vocab=10)
# 1 layer of 8 experts (2 active, width 3), hidden 4, one head of 4, vocabulary 2
MOE = Shape(layers=1, hidden=4, intermediate=99, heads=1, kv_heads=1, head_dim=4, vocab=2, experts=8, active=2,
            expert_intermediate=3, moe_layers=1)


def test_dense_bytes_and_flops_by_hand():
    # per layer: q, o 8 x 8 and k, v 8 x 4 = 192; MLP 3 x 8 x 16 = 384; embedding and LM head 10 x 8 each
    assert DENSE.attention_weights == 192 and DENSE.parameters() == 2 * (192 + 384) + 2 * 80
    w = work(DENSE, positions=3, prefix=5, window=2, element_bytes=2)
    assert w.weight_bytes == 2 * (2 * 192 + 2 * 384 + 80 + 3 * 8)            # LM head whole, 3 embedding rows
    assert w.kv_bytes == 2 * (2 * 2 * 1 * 4 * (5 + 3))                       # prefix read, window written, per layer
    # per position: 2 x (projections + MLP + LM head) + attention 2 x 2 x heads x head_dim x (P + W) per layer
    assert w.flops == 3 * (2 * (2 * 192 + 2 * 384 + 80) + 2 * 4 * 2 * 4 * (5 + 2))
    assert w.bytes == w.weight_bytes + w.kv_bytes


def test_a_mixture_reads_the_experts_it_touches_and_computes_the_active_ones():
    one, many = (work(MOE, positions=T, prefix=0, window=T, element_bytes=1) for T in (1, 10))
    expert, router, attention = 3 * 4 * 3, 4 * 8, 2 * 4 * 4 * 2
    assert one.weight_bytes == attention + 2 * expert + router + 2 * 4 + 4           # 1 position: its 2 experts
    assert many.weight_bytes == attention + 8 * expert + router + 2 * 4 + 10 * 4     # 10 x 2 > 8: every expert once
    assert many.flops == 10 * (2 * (attention + 2 * expert + router + 2 * 4) + 4 * 4 * 10)


def test_shapes_from_the_plan_s_configs():
    dream = Shape.from_config(gpu_plan.DREAM_7B)
    assert (dream.head_dim, dream.kv_heads, dream.experts) == (128, 4, 0)
    assert dream.parameters() == pytest.approx(7.615e9, rel=1e-3)                  # Qwen2.5-7B's 7.6 B
    moe = Shape.from_config(gpu_plan.LLADA_MOE_7B)
    assert (moe.experts, moe.active, moe.expert_intermediate, moe.moe_layers) == (64, 8, 1024, 16)
    assert Shape.from_config(dict(gpu_plan.LLADA_MOE_7B, mlp_only_layers=[0])).moe_layers == 15
    assert Shape.from_config(gpu_plan.SDAR_1_7B).head_dim == 128


def test_the_floor_is_the_larger_of_bytes_and_flops():
    w = work(DENSE, positions=3, prefix=5, window=2, element_bytes=2)
    assert floor_seconds(w, Peaks(flops=w.flops, bandwidth=w.bytes / 2, source="")) == (2.0, "bytes")
    assert floor_seconds(w, Peaks(flops=w.flops / 3, bandwidth=w.bytes, source="")) == (3.0, "flops")


def test_the_ridge_is_where_flops_overtake_bytes():
    peaks = Peaks(flops=1e4, bandwidth=1e3, source="")
    ridge = ridge_positions(DENSE, peaks, prefix=5, window=2, element_bytes=2)
    binds = lambda T: floor_seconds(work(DENSE, T, 5, 2, 2), peaks)[1] == "flops"     # noqa: E731
    assert binds(ridge) and not binds(ridge - 1)
    # Dream-7B in bf16 on an H200: about 14.1 GB of weights at 4.8 TB/s against 14.2 GFLOP a position at
    # 989 TFLOPS: about 205 positions, three windows of 64 (issue #55: "roughly 200")
    h200 = datasheet_peaks("NVIDIA H200", "bfloat16")
    dream = Shape.from_config(gpu_plan.DREAM_7B)
    assert 200 <= ridge_positions(dream, h200, prefix=100, window=64, element_bytes=2) <= 210
    assert ridge_positions(DENSE, Peaks(flops=1e30, bandwidth=1.0, source=""), 5, 2, 2, limit=1024) is None


def test_datasheet_peaks_by_device_name():
    assert datasheet_peaks("NVIDIA H200", "bfloat16").flops == pytest.approx(989.4e12)
    assert datasheet_peaks("NVIDIA H200 NVL", "bfloat16").flops == pytest.approx(835e12)
    assert datasheet_peaks("NVIDIA H100 80GB HBM3", "bfloat16").bandwidth == pytest.approx(3.35e12)
    assert datasheet_peaks("NVIDIA H100 PCIe", "float32").flops == pytest.approx(51e12)
    assert datasheet_peaks("NVIDIA GeForce RTX 4090", "bfloat16") is None


def test_peaks_are_measured_where_no_datasheet_is_known():
    peaks = measure_peaks(torch.device("cpu"), torch.float32, size=128, copy_mib=4)
    assert peaks.flops > 1e6 and peaks.bandwidth > 1e6 and peaks.source.startswith("measured")
