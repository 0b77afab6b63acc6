"""Every GPU-dependent check and measurement in one command, written as one JSON and one Markdown report.

    python -m lopa.bench.gpu [--out DIR] [--device cuda|cpu] [--toy] [--threads N]

1. Equality on the device: the batched executor against the per-branch and the uncached references,
   fp32 and bf16, every attention mode, k in {0, 4, 8}, on the bundled model(s); the attention
   kernels each executor ran (FlashAttention where `flash_attn` imports, SDPA's backend op).
2. The premise: one verify forward over B = 1, 2, 4, 8, 15 windows of two 32-token blocks at
   prefixes of about 100 and 500 tokens (lopa.tasks.timing.forward_times), on the bundled model(s) and
   on a randomly initialised Qwen2 of Dream-7B's shape (28 layers, hidden 3584, GQA 28/4, bf16;
   nothing downloaded), a Qwen3 of SDAR-1.7B's and a Qwen3-MoE of LLaDA-MoE-7B-A1B's: ms/forward, ratio to
   B = 1, KV memory, and each forward's floor on this device (lopa.bench.roofline) and measured / floor.
2b. The roofline (lopa.bench.curve): at those three shapes, ms against positions per forward for
   B = 1..15 windows, each beside its floor, and the ridge point (positions where FLOPs start to bind).
3. The bundled model's bench (lopa.bench.decoders) on this device, rows k = 0, 1, 3, 7, 14, whose
   B = k + 1 are the premise's.
4. A projection of tokens/s for vanilla and LoPA rounds at the 7B shape: TPF / (verify forward at
   B = k + 1 + the bookkeeping the bench measured per round), with the paper's GSM8K TPF and with ours.
3b/4b. The peers' commit rules (lopa/peers.py), each alone (`d2f-<rule>`) and under LoPA k = 7
   (`lopa-k7-<rule>`, B = 8), on the bundled model(s) with forwards, token-forwards and wall-clock, and
   projected to the 7B shape as in 4.
5. Tokens/s measured at the 7B shape by replay (lopa.bench.replay): the bundled default model's decodes at
   D2F, LoPA k = 1..14 and the adaptive order, every round replayed on the random Dream-7B-shaped model.

On a CPU (or with --toy) the same runs at toy sizes: each model shape shrunk to 2 layers (toy_shape), a
few problems, one repeat; the report says so. The toy run checks that the command works, not the premise. Runs on an image with torch, transformers, safetensors, peft, pandas and
pyarrow, plus pydantic for the engine core (scripts/gpu_wheels.sh carries it to an offline machine). The report
is rewritten after each section, so a run cut short still leaves what it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from lopa.bench import replay
from lopa.bench.curve import cost_curve, forward_floor, random_prompt
from lopa.bench.curve import markdown as roofline_markdown
from lopa.bench.decoders import DEFAULTS, row_settings, run_decoder, summarize_rows
from lopa.bench.gpu_plan import (
    BLOCK,
    PLANS,
    Plan,
    bundled_models,
    environment,
    kv_bytes_per_token,
    shaped_models,
)
from lopa.bench.tables import table
from lopa.cost import sync
from lopa.models import load
from lopa.models.loading import DEFAULT_MODEL, LoadedModel
from lopa.resolution import resolve
from lopa.settings import ATTENTION_MODES, DecodeSettings
from lopa.tasks.sources import HELDOUT, heldout_questions, read_rows
from lopa.tasks.timing import forward_times
from lopa.trace import pooled

REPORT_FORMAT = "lopa-gpu-report/1"
PREMISE_LIMIT = 1.3               # the premise holds when a B = 8 forward costs at most 1.3x B = 1
# D2F-Dream on GSM8K (the paper's Table 1): vanilla and LoPA TPF, LoPA with 14 branches (Table 5).
PAPER_TPF = {"vanilla": (0, 3.1), "LoPA": (14, 10.1)}


def attention_ops(fn, *args) -> list[str]:
    """The attention ops (SDPA's backend, FlashAttention) that fn(*args) dispatched, from the profiler's
    CPU-side record of aten ops (the dispatch is recorded there on every device)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args)
    return sorted({e.key for e in prof.key_averages()
                   if e.key.startswith("aten::_scaled_dot_product") or "flash" in e.key.lower()})


# -- 1. equality -------------------------------------------------------------------------------
def decisions(run) -> list[tuple]:
    return [(r.anchor_positions, r.anchor_tokens, r.lookahead_positions, r.lookahead_tokens, r.winner,
             r.block_states, r.branch_positions) for r in run.records]


def compare(fast, ref) -> dict:
    """Tokens and round-by-round decisions equal? Where they first differ, and the largest max-prob
    difference over the rounds before that."""
    a, b = decisions(fast), decisions(ref)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
    agree = len(a) if first is None else first
    diff = max((abs(p - q) for ra, rb in zip(fast.records[:agree], ref.records[:agree])
                for pa, pb in zip(ra.branch_max_prob, rb.branch_max_prob) for p, q in zip(pa, pb)), default=0.0)
    return {"tokens_equal": fast.tokens == ref.tokens, "decisions_equal": first is None,
            "first_divergent_round": first, "max_prob_diff": diff}


# The batched executor's references: its own eager forward (the fast path's), then the authors' way.
REFERENCES = ("batched_eager", "per_branch", "uncached")


def batched_path(executor) -> str:
    """Which forward the batched executor ran after the prefill: "graphs" (captured, lopa.graphs), "static"
    (the same uncaptured), "lean" (lopa.fast) or "eager" (the model's own, with lean_reason)."""
    runner = next(iter(getattr(executor.lean.model, "_lopa_graph_runners", {}).values()), None) if executor.lean else None
    if executor.lean is None:
        return f"eager ({executor.lean_reason})"
    if executor.static and runner is not None:
        return "graphs" if runner.capture else "static"
    return "lean"


def equality(loaded: LoadedModel, plan: Plan) -> tuple[list[dict], dict]:
    """Batched vs per-branch vs uncached on one held-out prompt, for every dtype x attention x k.
    -> (rows, the attention ops each executor dispatched per dtype)."""
    rows, ops = [], {}
    prompt = heldout_questions(1)[0]
    original = next(loaded.model.parameters()).dtype
    for dtype in plan.dtypes:
        loaded.model.to(getattr(torch, dtype))
        for attention in ATTENTION_MODES:
            for k in plan.ks:
                # tau_conf 0.99 rather than the paper's 0.9: the bundled model then takes more rounds and
                # lookahead branches win some, so the comparison covers branch selection too.
                settings = DecodeSettings(k=k, attention=attention, block_size=BLOCK, max_new_tokens=plan.equality_tokens,
                                          tau_conf=0.99, cache_schedule="authors" if attention == "full" else "eager")
                ids = loaded.decoder(settings).encode(prompt)
                batched = loaded.decoder(settings, executor="batched")
                fast = batched.run(ids)
                runs = {name: loaded.decoder(settings, executor=name).run(ids) for name in REFERENCES}
                rows.append({"model": loaded.spec.name, "dtype": dtype, "attention": attention, "k": k,
                             "rounds": len(fast.records), "lookahead_wins": sum(r.winner > 0 for r in fast.records),
                             "batched_kernel": batched.executor.kv.kernel,
                             "batched_path": batched_path(batched.executor),
                             **{f"{name}_{key}": value for name, run in runs.items()
                                for key, value in compare(fast, run).items()}})
        # The batched executor's own kernel is in batched_kernel; the references run the model's stock
        # attention, whose SDPA backend the profiler names.
        look = DecodeSettings(k=4, attention="full", block_size=BLOCK, max_new_tokens=2 * BLOCK)
        reference = loaded.decoder(look, executor="per_branch")
        ops[dtype] = attention_ops(reference.run, reference.encode(prompt))
    loaded.model.to(original)
    return rows, ops


# -- 2. the premise ----------------------------------------------------------------------------
def premise(loaded: LoadedModel, plan: Plan) -> list[dict]:
    """ms per verify forward over B windows of 2 x 32 masked tokens behind a random prefix; KV memory
    (the shared prefix stored once; per branch its window, or a whole copy as the per-branch executor keeps)."""
    device = next(loaded.model.parameters()).device
    settings = resolve({"block_size": BLOCK, "max_new_tokens": 2 * BLOCK}, loaded.spec)
    per_token = kv_bytes_per_token(loaded.model)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for wanted in plan.prefixes:
        prompt_ids = random_prompt(loaded, wanted, generator)                               # [P]
        prefix = prompt_ids.numel()
        times = {}
        for B in plan.counts:
            if device.type == "cuda":
                sync(device)
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            times[B] = forward_times(loaded, prompt_ids, settings, plan.repeats, counts=(B,))[B]
            peak = (torch.cuda.max_memory_allocated(device) - before) / 2**20 if device.type == "cuda" else None
            rows.append({"model": loaded.spec.name, "dtype": str(next(loaded.model.parameters()).dtype).removeprefix("torch."),
                         "attention": settings.attention, "prefix": prefix, "B": B, "ms_per_forward": times[B] * 1e3,
                         "ratio_to_b1": times[B] / times[1], "ms_per_branch": times[B] * 1e3 / B,
                         **forward_floor(loaded, B, prefix, times[B]),
                         "prefix_kv_mib": prefix * per_token / 2**20,
                         "window_kv_per_branch_mib": 2 * BLOCK * per_token / 2**20,
                         "copy_kv_per_branch_mib": (prefix + 2 * BLOCK) * per_token / 2**20,
                         "peak_forward_mib": peak})
    return rows


# -- 3. the projection -------------------------------------------------------------------------
def projected_tps(tpf: float, forward_s: float, bookkeeping_s: float) -> float:
    """Tokens per second of rounds that each commit `tpf` tokens and cost one verify forward plus
    the engine's bookkeeping (the decisions around the forward, independent of the model's size)."""
    return tpf / (forward_s + bookkeeping_s)


def projection(premise_rows: list[dict], bench_rows: list[dict], model_name: str) -> list[dict]:
    """For each prefix: the paper's GSM8K TPF and our bundled model's, at B = k + 1 of the measured
    forwards of `model_name`; bookkeeping per round from the bench (the d2f row for vanilla rounds,
    the row itself for ours). LoPA's speedup is over vanilla at the same source and prefix."""
    forward = {(r["prefix"], r["B"]): r["ms_per_forward"] / 1e3 for r in premise_rows if r["model"] == model_name}
    bench = {r["decoder"]: r for r in bench_rows}
    # bookkeeping per round: a bench row's own; the paper's rows take d2f's (vanilla) or lopa-k<k>'s
    keep = lambda decoder, k: bench[decoder if decoder in bench else "d2f" if k == 0 else f"lopa-k{k}" if f"lopa-k{k}" in bench
                                    else "d2f"]["bookkeeping_ms_per_round"] / 1e3
    sources = [("paper GSM8K (D2F-Dream, Table 1)", name, k, tpf) for name, (k, tpf) in PAPER_TPF.items()]
    sources += [(f"ours ({r['model']}, synthetic, TPF useful)", r["decoder"], r["k"], r["tpf_useful"]) for r in bench_rows]
    rows = []
    for prefix in sorted({p for p, _ in forward}):
        for source, decoder, k, tpf in sources:
            if (prefix, k + 1) not in forward or "d2f" not in bench:
                continue
            tps = projected_tps(tpf, forward[prefix, k + 1], keep(decoder, k))
            rows.append({"model": model_name, "prefix": prefix, "source": source, "decoder": decoder, "k": k,
                         "B": k + 1, "tpf": tpf, "round_ms": (forward[prefix, k + 1] + keep(decoder, k)) * 1e3, "tps": tps})
    for row in rows:
        vanilla = next(r for r in rows if r["prefix"] == row["prefix"] and r["source"] == row["source"] and r["k"] == 0)
        row["speedup_over_vanilla"] = row["tps"] / vanilla["tps"]
    return rows


# -- 4. the bench ------------------------------------------------------------------------------
def bench(loaded: LoadedModel, plan: Plan, names: tuple[str, ...] | None = None, n: int | None = None) -> list[dict]:
    """lopa.bench.decoders' rows (default the plan's bench_rows, on its bench_n) on the first held-out
    synthetic problems, as `python -m lopa.bench` runs them, with the cost beside TPF: forwards,
    token-forwards and wall-clock per answer, on this device."""
    problems = read_rows(HELDOUT)[:plan.bench_n if n is None else n]
    base = resolve(None, loaded.spec, defaults=DEFAULTS)
    rows = []
    for name in plan.bench_rows if names is None else names:
        settings = row_settings(name, base)
        details = run_decoder(loaded, name, settings, problems)
        summary, pool = summarize_rows(name, settings, details), pooled(details)     # lopa.trace.pooled: totals first
        rows.append({"model": loaded.spec.name, **{key: summary[key] for key in (
            "decoder", "k", "n", "accuracy", "tpf_useful", "tpf_paper", "tps", "tps_excl_first", "latency_s_mean",
            "forwards_mean", "token_forwards_mean", "device")},
            **{key: pool[key] for key in ("ms_per_forward", "bookkeeping_ms_per_round")}})
    return rows


# -- the report --------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    env, plan = report["environment"], report["plan"]
    out = [f"# lopa.bench.gpu on {env['device']}", "",
           f"torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, Python {env['python']}. "
           f"{env['flash_attn_note']}." + (" **Toy sizes on a CPU: a check that the command works, not a measurement "
                                           "of the premise.**" if plan["toy"] else ""),
           "", f"Reproduce: `python -m lopa.bench.gpu{' --toy' if plan['toy'] and env['device_type'] != 'cpu' else ''}`.",
           ""]
    if "equality" in report:
        eq = report["equality"]
        rows = eq["rows"]
        same = lambda name, dtype: sum(r[f"{name}_decisions_equal"] and r[f"{name}_tokens_equal"] for r in rows if r["dtype"] == dtype)
        out += ["## 1. Equality on the device", "",
                "Batched executor (its fast path: lean forward, on CUDA captured graphs) against its eager forward "
                "(batched_eager), the per-branch (own cache copy, stock attention) and uncached references: "
                "tokens and every round's decisions equal; largest max-prob difference before any divergence.", ""]
        out += [f"- {dtype}: " + ", ".join(f"{name.replace('_', '-')} {same(name, dtype)}/{n}" for name in REFERENCES)
                + " runs equal"
                for dtype in plan["dtypes"] for n in [sum(r["dtype"] == dtype for r in rows)]]
        out += [f"- SDPA backend of the references, {model} {dtype}: {', '.join(ops) or 'none recorded'}"
                for model, by_dtype in eq["attention_ops"].items() for dtype, ops in by_dtype.items()]
        out += ["", table(rows, {"dtype": "dtype", "attention": "attention", "k": "k", "rounds": "rounds",
                                 "lookahead_wins": "lookahead wins", "batched_kernel": "batched kernel",
                                 "batched_path": "batched forward", "batched_eager_decisions_equal": "= eager",
                                 "batched_eager_max_prob_diff": "Δp eager",
                                 "per_branch_decisions_equal": "= per-branch", "per_branch_first_divergent_round": "differs at",
                                 "per_branch_max_prob_diff": "Δp per-branch", "uncached_decisions_equal": "= uncached",
                                 "uncached_first_divergent_round": "differs at", "uncached_max_prob_diff": "Δp uncached"}), ""]
    if "premise" in report:
        out += ["## 2. The premise: one verify forward over B windows of 2 x 32 tokens", ""]
        out += [f"- {v['model']}, prefix {v['prefix']}: B = 8 costs {v['ratio_b8']:.2f}x B = 1 "
                f"({'holds' if v['holds'] else 'does not hold'}: at most {PREMISE_LIMIT}x)" for v in report["verdict"]]
        out += ["", table(report["premise"], {"model": "model", "dtype": "dtype", "prefix": "prefix", "B": "B",
                                              "ms_per_forward": "ms/forward", "ratio_to_b1": "x B=1", "ms_per_branch": "ms/branch",
                                              "floor_ms": "floor ms", "over_floor": "x floor",
                                              "prefix_kv_mib": "prefix KV MiB (once)",
                                              "window_kv_per_branch_mib": "window KV MiB/branch",
                                              "copy_kv_per_branch_mib": "KV MiB/branch if copied",
                                              "peak_forward_mib": "peak MiB (CUDA)"}), ""]
    if "roofline" in report:
        out += roofline_markdown(report["roofline"])
    if "bench" in report:
        out += ["## 3. The bundled model's bench on this device", "", table(report["bench"], {
            "model": "model", "decoder": "decoder", "n": "n", "accuracy": "accuracy", "tpf_useful": "TPF",
            "tps": "tokens/s", "tps_excl_first": "tokens/s excl. 1st", "ms_per_forward": "ms/forward",
            "bookkeeping_ms_per_round": "bookkeeping ms/round"}), ""]
    if "peers" in report:
        out += ["## 3b. The peers' commit rules on the bundled model, alone and under lookahead", "",
                "Forwards, token-forwards (every forward's branches x window, the prompt in the first) and wall-clock "
                "per answer, on this device. Fewer forwards can still be slower: a forward of k + 1 branches costs more "
                "than one of a single window.", "", table(report["peers"], {
                    "model": "model", "decoder": "decoder", "n": "n", "accuracy": "accuracy", "tpf_useful": "TPF",
                    "forwards_mean": "forwards", "token_forwards_mean": "token-forwards", "latency_s_mean": "wall-clock s",
                    "tps": "tokens/s", "bookkeeping_ms_per_round": "bookkeeping ms/round"}), ""]
    if "projection" in report:
        out += [f"## 4. Projection (not a measurement): tokens/s at the {plan['shape_name']}", "",
                "tokens/s = TPF / (verify forward at B = k + 1, measured above + bookkeeping per round, measured by "
                "the bench). Branch parallelism, batching of requests and the first round are not modelled.", "",
                table(report["projection"], {"prefix": "prefix", "source": "TPF from", "decoder": "decoder", "B": "B",
                                             "tpf": "TPF", "round_ms": "ms/round", "tps": "tokens/s",
                                             "speedup_over_vanilla": "x vanilla"}), ""]
    if "peer_projection" in report:
        out += [f"## 4b. The peers projected to the {plan['shape_name']}", "",
                "The same projection over the peers' rows: their TPF and bookkeeping from 3b, the verify forward at "
                "B = k + 1 from the premise.", "",
                table(report["peer_projection"], {"prefix": "prefix", "decoder": "decoder", "B": "B", "tpf": "TPF",
                                                  "round_ms": "ms/round", "tps": "tokens/s",
                                                  "speedup_over_vanilla": "x d2f"}), ""]
    if "replay" in report:
        out += replay.markdown(report["replay"])
    if report["errors"]:
        out += ["## Errors", ""] + [f"- {section}: `{err}`" for section, err in report["errors"].items()]
    out += ["", "Seconds per section: " + ", ".join(f"{k} {v:.0f}" for k, v in report["seconds"].items())]
    return "\n".join(out) + "\n"


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(report))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lopa.bench.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out/gpu", help="folder for report.json and report.md")
    parser.add_argument("--device", help="cuda, cpu, ... (default: the accelerator, else the CPU)")
    parser.add_argument("--toy", action="store_true", help="toy sizes on any device (always on a CPU)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = [load(path, device=args.device) for path in bundled_models()]
    device = next(models[0].model.parameters()).device
    plan = PLANS["toy" if args.toy or device.type == "cpu" else "device"]
    report = {"format": REPORT_FORMAT, "environment": environment(device), "plan": dataclasses.asdict(plan),
              "errors": {}, "seconds": {}, "verdict": []}
    out = Path(args.out)

    def section(name: str, fn) -> None:
        """Run one section; an error is recorded in the report (and the exit status), not fatal to the rest."""
        t0 = time.perf_counter()
        try:
            report[name] = fn()
        except Exception as err:          # noqa: BLE001 - one machine-time window: keep going, report it
            report["errors"][name] = f"{type(err).__name__}: {err}"
        report["seconds"][name] = time.perf_counter() - t0
        print(f"{name}: {report['seconds'][name]:.0f} s" + (f"  ERROR {report['errors'][name]}" if name in report["errors"] else ""),
              file=sys.stderr, flush=True)
        write(report, out)

    def check_equality() -> dict:
        runs = {m.spec.name: equality(m, plan) for m in models}
        return {"rows": [row for rows, _ in runs.values() for row in rows],
                "attention_ops": {name: ops for name, (_, ops) in runs.items()}}
    section("equality", check_equality)
    section("bench", lambda: [row for m in models for row in bench(m, plan)])
    if plan.peer_rows:
        section("peers", lambda: [row for m in models for row in bench(m, plan, plan.peer_rows, plan.peer_n)])

    def over_shapes(measure) -> list[dict]:
        """measure(model) over the plan's random models, one on the device at a time."""
        rows = []
        for big in shaped_models(plan, device):
            rows += measure(big)
            del big
        return rows
    section("premise", lambda: [row for m in models for row in premise(m, plan)] + over_shapes(lambda m: premise(m, plan)))
    section("roofline", lambda: over_shapes(lambda m: cost_curve(m, plan)))

    def measure_replay() -> list[dict]:
        default = next((m for m in models if m.path.name == DEFAULT_MODEL.name), models[0])
        big = next(shaped_models(plan, device))                      # the plan's main shape (Dream-7B's)
        return replay.measure(default, big, replay.row_names(plan.replay_ks), plan.replay_n)
    section("replay", measure_replay)
    if "premise" in report:
        report["verdict"] = [{"model": r["model"], "prefix": r["prefix"], "ratio_b8": r["ratio_to_b1"],
                              "holds": r["ratio_to_b1"] <= PREMISE_LIMIT}
                             for r in report["premise"] if r["B"] == 8 and r["model"] == plan.shape_name]
    if "premise" in report and "bench" in report:
        section("projection", lambda: projection(report["premise"], report["bench"], plan.shape_name))
    if "premise" in report and "peers" in report:
        section("peer_projection", lambda: [r for r in projection(report["premise"], report["peers"], plan.shape_name)
                                            if r["source"].startswith("ours")])
    print(markdown(report))
    print(f"wrote {out / 'report.json'} and {out / 'report.md'}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
