"""What `python -m lopa.bench.gpu` measures, and on what: the model shapes (the published sizes of the
families the engine loads, and their toys), the plans (device and toy sizes), the environment the
numbers come from, and the models it runs (the bundled ones, random ones of a shape, created on the
device). lopa.bench.gpu runs the sections and writes the report.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import torch

from lopa.bench.decoders import PEER_RULES
from lopa.bench.roofline import EXPERT_COUNTS
from lopa.bench.round import BRANCH_COUNTS
from lopa.models import ASSETS
from lopa.models.loading import LoadedModel
from lopa.settings import ModelSpec
from lopa.tasks import hardware

BLOCK = 32                        # the paper's block size: windows of two 32-token blocks
# Dream-7B (Qwen2.5-7B's architecture); weights random, created on the device.
DREAM_7B = dict(num_hidden_layers=28, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                num_key_value_heads=4, vocab_size=152064, max_position_embeddings=4096, tie_word_embeddings=False)
# The other families the engine loads, at their published sizes (random weights, same stock classes the
# loaders map them onto): SDAR-1.7B-Chat's config.json (Qwen3); LLaDA-MoE-7B-A1B as OLMoE-1B-7B's
# geometry (16 layers, hidden 2048, 16 heads, 64 experts, 8 active, expert width 1024) with its
# 157,184-token vocabulary, on Qwen3-MoE (lopa.models.sdar_llada_moe).
SDAR_1_7B = dict(num_hidden_layers=28, hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=32768,
                 rope_theta=1000000.0, tie_word_embeddings=False)
LLADA_MOE_7B = dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=1024, num_attention_heads=16,
                    num_key_value_heads=16, head_dim=128, num_experts=64, num_experts_per_tok=8,
                    moe_intermediate_size=1024, norm_topk_prob=False, vocab_size=157184, max_position_embeddings=8192,
                    tie_word_embeddings=False)
# name -> (stock architecture, shape, how it decodes: logit shift, attention) for the premise's extra rows.
MORE_SHAPES = {"SDAR-1.7B shape (random weights)": ("qwen3", SDAR_1_7B, False, "block_causal"),
               "LLaDA-MoE-7B-A1B shape (random weights)": ("qwen3_moe", LLADA_MOE_7B, False, "full")}


def toy_shape(shape: dict) -> dict:
    """`shape` (a transformers config's keyword arguments) at a size a CPU runs in seconds: the same
    architecture and GQA ratio (heads per K/V head) with one K/V head of width 32, 2 layers, a 4096-token
    vocabulary; a mixture of experts keeps at most 4 experts and 2 per token. Any shape the plan measures
    gets its toy this way, so the toy run covers every architecture the device run does."""
    ratio = shape["num_attention_heads"] // shape.get("num_key_value_heads", shape["num_attention_heads"])
    hidden = 32 * ratio
    toy = {**shape, "num_hidden_layers": 2, "hidden_size": hidden, "num_attention_heads": ratio,
           "num_key_value_heads": 1, "intermediate_size": -(-hidden * 8 // 3 // 32) * 32, "vocab_size": 4096,
           "max_position_embeddings": 4096}
    toy.update({key: 32 for key in ("head_dim",) if key in shape})
    toy.update({key: 64 for key in ("moe_intermediate_size", "shared_expert_intermediate_size") if key in shape})
    toy.update({key: min(shape[key], 4) for key in EXPERT_COUNTS if key in shape})
    toy.update({key: min(shape[key], 2) for key in ("num_experts_per_tok",) if key in shape})
    toy.update({key: shape[key][:2] for key in ("layer_types",) if key in shape})
    return toy


# Dream-7B's family and GQA ratio (7 query heads per K/V head): 2 layers, hidden 224.
TOY_SHAPE = toy_shape(DREAM_7B)


REPLAY_KS = (0, 1, 2, 4, 8, 14)     # the k the replay measures unless a plan says otherwise (lopa.bench.replay)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run measures, and at what size."""
    toy: bool
    shape_name: str
    shape: dict
    repeats: int
    bench_n: int
    bench_rows: tuple[str, ...]
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    ks: tuple[int, ...] = (0, 4, 8)
    equality_tokens: int = 128
    prefixes: tuple[int, ...] = (100, 500)
    counts: tuple[int, ...] = BRANCH_COUNTS
    more_shapes: tuple[str, ...] = tuple(MORE_SHAPES)      # measured in the premise beside shape (toy-sized when toy)
    # The peers' commit rules (lopa/peers.py), alone and under lookahead, on the first peer_n problems.
    peer_rows: tuple[str, ...] = ()
    peer_n: int = 0
    # The replay (lopa.bench.replay): the bundled default model's decodes of replay_n problems at these k
    # (0 = D2F) and the adaptive order, replayed on the plan's shape.
    curve_repeats: int = 5        # timings per B of the cost curve (lopa.bench.curve): 15 B x prefixes x 3 shapes
    replay_ks: tuple[int, ...] = REPLAY_KS
    replay_n: int = 8


BENCH_ROWS = tuple(["d2f"] + [f"lopa-k{B - 1}" for B in BRANCH_COUNTS[1:]])    # k + 1 = the premise's B
# Each peer alone and under LoPA k = 7 (B = 8, the premise's headline count), D2F beside them: the rows
# the projection turns into tokens/s at the 7B shape.
# `learned` is not among them: it needs a filter trained on the model's own problems, and random weights have none.
PLANNED_PEER_RULES = tuple(rule for rule in PEER_RULES if rule != "learned")
PEER_BENCH_ROWS = ("d2f",) + tuple(f"d2f-{rule}" for rule in PLANNED_PEER_RULES) + \
    tuple(f"lopa-k7-{rule}" for rule in PLANNED_PEER_RULES)
PLANS = {
    "device": Plan(False, "Dream-7B shape (random weights)", DREAM_7B, repeats=20, bench_n=100, bench_rows=BENCH_ROWS,
                   peer_rows=PEER_BENCH_ROWS, peer_n=30, replay_ks=tuple(range(15)), replay_n=20),
    "toy": Plan(True, "toy Qwen2 (2 layers, hidden 224, GQA 7/1; random weights)", TOY_SHAPE, repeats=1, bench_n=2,
                bench_rows=("d2f", "lopa-k14"), equality_tokens=64, peer_rows=PEER_BENCH_ROWS, peer_n=1,
                curve_repeats=1, replay_ks=(0, 1, 14), replay_n=2),
}


def environment(device: torch.device) -> dict:
    """The hardware and software the numbers come from (lopa.tasks.hardware), and which optional kernels exist."""
    flash = importlib.util.find_spec("flash_attn") is not None
    env = {**hardware.environment(device), "flash_attn": flash,
           "flash_attn_note": "flash_attn imports: full-attention rounds after the prefill run FlashAttention-2"
           if flash else "flash_attn is not installed: the FlashAttention path was not exercised"}
    if device.type == "cuda":
        env["sdpa_backends_enabled"] = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")()
                                        for name in ("flash", "mem_efficient", "math", "cudnn")
                                        if hasattr(torch.backends.cuda, f"{name}_sdp_enabled")}
    return env


def bundled_models() -> list[Path]:
    return sorted(p for p in (ASSETS / "models").iterdir() if (p / "config.json").is_file())


def random_model(shape: dict, name: str, device: torch.device, dtype: torch.dtype, architecture: str = "qwen2",
                 logit_shift: bool = True, attention: str = "full") -> LoadedModel:
    """A Qwen2 (or Qwen3 / Qwen3-MoE: `architecture`) with random weights, created on the device in
    `dtype` (no full-precision copy)."""
    import transformers
    stock = {"qwen2": "Qwen2", "qwen3": "Qwen3", "qwen3_moe": "Qwen3Moe"}[architecture]
    config_class, model_class = (getattr(transformers, f"{stock}{part}") for part in ("Config", "ForCausalLM"))
    config = config_class(**shape, attn_implementation="sdpa")
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = model_class(config).eval()
    finally:
        torch.set_default_dtype(default)
    V = shape["vocab_size"]
    spec = ModelSpec(mask_token_id=V - 1, eos_token_ids=(V - 2,), logit_shift=logit_shift,
                     max_context=shape["max_position_embeddings"], block_size=BLOCK, attention=attention, name=name)
    return LoadedModel(model, None, spec, Path("random"))


def shaped_models(plan: Plan, device: torch.device):
    """The plan's random models, one at a time (each freed before the next is made): its main shape, then
    more_shapes; toy-sized when the plan is; bf16 on a GPU, fp32 on a CPU. -> LoadedModel, ..."""
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    yield random_model(plan.shape, plan.shape_name, device, dtype)
    for name in plan.more_shapes:
        architecture, shape, shift, attention = MORE_SHAPES[name]
        yield random_model(toy_shape(shape) if plan.toy else shape, name, device, dtype, architecture, shift, attention)


def kv_bytes_per_token(model) -> int:
    """K and V of one position over every layer: 2 x layers x Hkv x D x bytes per element."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * next(model.parameters()).element_size()
