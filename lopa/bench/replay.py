"""Tokens/s at a real model's shape, measured by replaying real decodes' round structure.

    python -m lopa.bench.replay [--shape dream-7b|toy] [--problems N] [--ks 0,1,2,4,8,14] [--no-adaptive]
                                [--extra-prefix P] [--executor batched] [--device cuda|cpu] [--threads N] [--out DIR]

1. The bundled model (assets/models/open-gsm-dllm) decodes held-out problems at D2F (k = 0), LoPA
   k = 1..14 and the adaptive order (`lopa-k14-adaptive`), every problem by every row before the next. The
   adaptive row prices its branches by a cost curve measured at the replay's shape on this device (its
   verify forwards through the replay's executor, lopa.cost.measure), so it decides as that device pays.
2. Each trace is replayed on a random-weight model of the given shape (Dream-7B's: 28 layers, hidden 3584,
   bf16 on a GPU) through the batched executor: the same prompt length, and per round the same window of
   every branch (the recorded tokens, the mask where the round had it, so block-causal packing packs
   alike), the same winner and the same commit, so the prefix cache grows as it did. Every verify
   forward and every commit is timed (synchronised on CUDA).
3. Per row: useful tokens, forwards, the replayed device seconds, the bookkeeping the real decode spent
   outside its forwards (round_seconds - forward_seconds: the engine's decisions, independent of the
   model's size), and tokens/s = useful tokens / (replayed + bookkeeping) (lopa.trace.pooled), beside
   D2F's. The rows' replays are interleaved problem by problem (lopa.tasks.turns), so a shared machine's
   load falls on them alike.

What it leaves out: the forward's values (random weights decide nothing here; the round structure is the
real model's), request batching and branch parallelism.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import astuple
from pathlib import Path

import torch

from lopa.bench.decoders import DEFAULTS, row_settings
from lopa.bench.gpu_plan import PLANS, REPLAY_KS, environment, shaped_models
from lopa.bench.tables import table
from lopa.blocks import Branch
from lopa.cost import measure as measure_cost
from lopa.cost import sync
from lopa.engine import decode
from lopa.forward import EXECUTORS, LocalExecutor, make_executor
from lopa.models import load
from lopa.models.loading import DEFAULT_MODEL, LoadedModel
from lopa.order import make_order
from lopa.resolution import add_settings_arguments, resolve, settings_from_args
from lopa.settings import DecodeSettings
from lopa.tasks import synthetic
from lopa.tasks.sources import HELDOUT, read_rows
from lopa.tasks.turns import in_turns
from lopa.trace import RoundRecord, RunResult, pooled

ADAPTIVE_ROW = "lopa-k14-adaptive"       # order=adaptive: it verifies the prefix of the 14 that pays


def row_names(ks, adaptive: bool = True) -> list[str]:
    return [("d2f" if k == 0 else f"lopa-k{k}") for k in ks] + ([ADAPTIVE_ROW] if adaptive else [])


# -- 1. decode ---------------------------------------------------------------------------------
def adaptive_orders(loaded: LoadedModel, replay_model: LoadedModel, rows: dict[str, DecodeSettings],
                    executor: str = "batched") -> dict:
    """{row: its order policy} for the adaptive rows, priced at the replay's shape: verify forwards of
    `replay_model` timed through the replay's executor, plus the bundled decode's bookkeeping
    (lopa.cost.measure), so the budget decides as the device running that shape pays."""
    return {name: make_order(s, *astuple(measure_cost(loaded.model, loaded.spec, s, executor, decode,
                                                      timed=(replay_model.model, replay_model.spec))))
            for name, s in rows.items() if s.order == "adaptive" and s.k}


def decode_traces(loaded: LoadedModel, rows: dict[str, DecodeSettings], problems: list[dict],
                  orders: dict | None = None) -> dict[str, list[dict]]:
    """Every problem decoded by every row before the next, rows in Williams orders. -> per row, per
    problem {"run": RunResult, "correct": bool}. orders: a row's own policy (adaptive_orders)."""
    out = {name: [] for name in rows}
    for i, problem in enumerate(problems):
        for name in in_turns(list(rows), i):
            decoder = loaded.decoder(rows[name], order=(orders or {}).get(name))
            run = decoder.run(synthetic.TASK.prompt(loaded, problem, "", 0))
            out[name].append({"run": run, "correct": bool(synthetic.TASK.grade(loaded, problem, run.text)["correct"])})
    return out


# -- 2. replay ---------------------------------------------------------------------------------
def replay_branches(record: RoundRecord, recorded_mask: int, mask: int, vocab: int, N: int) -> list[Branch]:
    """The round's verified windows on a model whose mask id is `mask` and vocabulary `vocab`: masked
    where the round was masked, the recorded token elsewhere (folded into the vocabulary), behind
    window_start positions the executor never reads (they are in its prefix cache)."""
    branches = []
    for window in record.branch_tokens:
        tokens = torch.tensor(window, dtype=torch.long)                                  # [W]
        tokens = torch.where(tokens == recorded_mask, mask, tokens % (vocab - 2))
        cached = torch.full((record.window_start,), mask, dtype=torch.long)              # [window_start]
        branches.append(Branch(torch.cat([cached, tokens]), record.window_start // N, N, mask))
    return branches


def replay_run(ex: LocalExecutor, run: RunResult, generator: torch.Generator, extra_prefix: int = 0) -> list[dict]:
    """Run's rounds through `ex` (an executor on the replay model): per forward, the prefix it read
    (positions in its prefix cache; 0 in the prefill, whose input holds the prompt; None for an executor
    without a PrefixKV), its branch count and window lengths, the seconds of the verify and of the commit,
    and the real decode's bookkeeping that round. extra_prefix: positions added to the prompt, so every
    prefix is that much longer than recorded (the bundled model's prompts are short; a few-shot GSM8K
    prompt runs to hundreds of tokens)."""
    spec, N = ex.spec, ex.settings.block_size
    vocab = ex.model.config.vocab_size
    ex.start(torch.randint(3, vocab - 2, (len(run.prompt_ids) + extra_prefix,), generator=generator))   # [P0]
    out = []
    for record in run.records:
        bookkeeping = record.round_seconds - record.forward_seconds
        if record.kind == "final":                     # no forward: only the decisions
            out.append({"kind": "final", "bookkeeping_s": bookkeeping})
            continue
        branches = replay_branches(record, run.spec["mask_token_id"], spec.mask_token_id, vocab, N)
        prefix = ex.kv.length if hasattr(ex, "kv") else None
        sync(ex.device)
        t0 = time.perf_counter()
        verified = ex.verify(branches)
        sync(ex.device)
        t1 = time.perf_counter()
        n = record.n_cached_blocks * N - record.window_start        # window positions the winner cached
        ex.commit(record.winner, n)
        sync(ex.device)
        out.append({"kind": record.kind, "prefix": prefix, "B": len(branches), "lengths": verified.lengths,
                    "committed_positions": n, "forward_s": t1 - t0, "commit_s": time.perf_counter() - t1,
                    "bookkeeping_s": bookkeeping})
    return out


def replay_all(replay_model: LoadedModel, traces: dict[str, list[dict]], executor_name: str = "batched",
               extra_prefix: int = 0) -> dict[str, list[list[dict]]]:
    """Every trace replayed through lopa.forward's executor `executor_name`, problem by problem, rows in
    Williams orders, after an untimed replay of each row's first trace (a device's first call at a new
    shape pays for kernel selection)."""
    names = list(traces)
    generator = torch.Generator().manual_seed(0)
    executors = {}

    def executor(run: RunResult) -> LocalExecutor:
        # one per row's settings (the forward reads attention, block size, budget, the confidence), reused:
        # start() empties its cache
        key = json.dumps(run.settings, sort_keys=True)
        if key not in executors:
            settings = DecodeSettings.from_dict(run.settings)
            executors[key] = make_executor(executor_name, replay_model.model, replay_model.spec, settings)
        return executors[key]

    with torch.no_grad():
        for name in names:                                          # warm-up
            replay_run(executor(traces[name][0]["run"]), traces[name][0]["run"], generator, extra_prefix)
    out = {name: [] for name in names}
    with torch.no_grad():
        for i in range(len(traces[names[0]])):
            for name in in_turns(names, i):
                run = traces[name][i]["run"]
                out[name].append(replay_run(executor(run), run, generator, extra_prefix))
    return out


# -- 3. the rows -------------------------------------------------------------------------------
def replayed_metrics(run: RunResult, rounds: list[dict]) -> dict:
    """One decode's replay in lopa.trace.metrics' keys, for lopa.trace.pooled: its useful tokens and
    forwards, forward_s the replayed verifies, latency_s replayed verifies and commits + bookkeeping."""
    forward = sum(r.get("forward_s", 0.0) for r in rounds)
    device = forward + sum(r.get("commit_s", 0.0) for r in rounds)
    bookkeeping = sum(r["bookkeeping_s"] for r in rounds)
    return {"tokens_useful": run.metrics()["tokens_useful"], "forwards": sum(r["kind"] != "final" for r in rounds),
            "rounds": len(rounds), "forward_s": forward, "device_s": device, "bookkeeping_s": bookkeeping,
            "latency_s": device + bookkeeping}


def summarize(traces: dict[str, list[dict]], replays: dict[str, list[list[dict]]], shape_name: str) -> list[dict]:
    """One row per decoder: accuracy, useful tokens, forwards, replayed seconds, tokens/s, and its ratio to D2F."""
    rows = []
    for name, decoded in traces.items():
        decodes = [replayed_metrics(d["run"], r) for d, r in zip(decoded, replays[name])]
        pool = pooled(decodes)
        device_only = pooled([{**d, "latency_s": d["device_s"]} for d in decodes])
        settings = decoded[0]["run"].settings
        rows.append({"shape": shape_name, "decoder": name, "k": settings["k"], "order": settings["order"],
                     "n": len(decoded), "accuracy": sum(d["correct"] for d in decoded) / len(decoded),
                     "tokens_useful": pool["tokens_useful"], "forwards": pool["forwards"], "tpf_useful": pool["tpf_useful"],
                     "replayed_s": sum(d["device_s"] for d in decodes), "bookkeeping_s": sum(d["bookkeeping_s"] for d in decodes),
                     "ms_per_forward": pool["ms_per_forward"], "tps": pool["tps"], "tps_device": device_only["tps"]})
    base = next((r for r in rows if r["decoder"] == "d2f"), None)
    for r in rows:
        r["tps_over_d2f"] = r["tps"] / base["tps"] if base else None
        r["tps_device_over_d2f"] = r["tps_device"] / base["tps_device"] if base else None
    return rows


def measure(loaded: LoadedModel, replay_model: LoadedModel, names: list[str], n: int, executor: str = "batched",
            base: DecodeSettings | None = None, extra_prefix: int = 0) -> list[dict]:
    """Decode the first n held-out problems with `loaded` at every row (over `base`, default: as
    `python -m lopa.bench` decodes), replay on `replay_model`: the rows."""
    base = base or resolve(None, loaded.spec, defaults=DEFAULTS)
    rows = {name: row_settings(name, base) for name in names}
    traces = decode_traces(loaded, rows, read_rows(HELDOUT)[:n], adaptive_orders(loaded, replay_model, rows, executor))
    return summarize(traces, replay_all(replay_model, traces, executor, extra_prefix), replay_model.spec.name)


def standing(rows: list[dict]) -> str:
    """Which fixed k was fastest, and where each other-order row (the adaptive one) stands against it."""
    fixed = [r for r in rows if r["order"] != "adaptive"]
    if not fixed:
        return ""
    best = max(fixed, key=lambda r: r["tps"])
    others = [f"{r['decoder']} {r['tps']:.4g} ({r['tps'] / best['tps']:.2f}x)" for r in rows if r["order"] == "adaptive"]
    return f"Fastest fixed k: {best['decoder']} at {best['tps']:.4g} tokens/s" + (f"; {', '.join(others)}." if others else ".")


def markdown(rows: list[dict]) -> list[str]:
    shape = rows[0]["shape"] if rows else ""
    return [f"## 5. Tokens/s at the {shape}, measured by replay", "",
            "The bundled model's decodes (per row, the same held-out problems), each round replayed through the batched "
            "executor on random weights of this shape: the recorded prefix, windows, branch count, winner and commit. "
            "tokens/s = useful tokens / (replayed verify + commit seconds + the real decode's bookkeeping); "
            "'device only' leaves the bookkeeping out.", "",
            table(rows, {"decoder": "decoder", "n": "n", "accuracy": "accuracy", "tokens_useful": "useful tokens",
                         "forwards": "forwards", "tpf_useful": "TPF", "ms_per_forward": "ms/forward",
                         "replayed_s": "replayed s", "bookkeeping_s": "bookkeeping s", "tps": "tokens/s",
                         "tps_over_d2f": "x d2f", "tps_device": "tokens/s device only",
                         "tps_device_over_d2f": "x d2f (device)"}), "", standing(rows), ""]


SHAPES = {"dream-7b": "device", "toy": "toy"}       # --shape -> the GPU report's plan whose random model it replays on


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lopa.bench.replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=tuple(SHAPES), help="replay model (default: dream-7b on a GPU, toy on a CPU)")
    parser.add_argument("--problems", type=int, default=20, help="held-out problems (default 20)")
    parser.add_argument("--ks", default=",".join(map(str, REPLAY_KS)), help="comma-separated k (0 = D2F); default %(default)s")
    parser.add_argument("--no-adaptive", action="store_true", help=f"leave out the adaptive row ({ADAPTIVE_ROW})")
    parser.add_argument("--extra-prefix", type=int, default=0, help="positions added to every replayed prompt "
                        "(the bundled model's are 25 to 50 tokens; a few-shot GSM8K prompt is hundreds)")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="the model whose decodes are replayed")
    parser.add_argument("--executor", default="batched", choices=tuple(EXECUTORS), help="lopa.forward executor the "
                        "rounds are replayed through (default %(default)s)")
    parser.add_argument("--device")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", help="folder for replay.json and replay.md")
    add_settings_arguments(parser, per_row=("k", "order"), choose_decoder=False, defaults=DEFAULTS)  # rows set k, order
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load(args.model, device=args.device)
    device = next(loaded.model.parameters()).device
    shape = args.shape or ("toy" if device.type == "cpu" else "dream-7b")
    if shape == "dream-7b" and device.type == "cpu":
        parser.error("--shape dream-7b on a CPU would create 7.6 B fp32 weights (30 GB); run it on a GPU, or --shape toy")
    big = next(shaped_models(PLANS[SHAPES[shape]], device))                 # fp32 on a CPU, bf16 on a GPU
    t0 = time.perf_counter()
    rows = measure(loaded, big, row_names([int(k) for k in args.ks.split(",")], not args.no_adaptive), args.problems,
                   args.executor, settings_from_args(args, loaded.spec, defaults=DEFAULTS), args.extra_prefix)
    text = "\n".join([f"# lopa.bench.replay on {environment(device)['device']}", "",
                      f"Replayed: {args.model} on {args.problems} held-out problems"
                      + (f", every prompt {args.extra_prefix} positions longer" if args.extra_prefix else "") + ".", "",
                      *markdown(rows)])
    print(text)
    print(f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "replay.json").write_text(json.dumps({"environment": environment(device), "rows": rows}, indent=1) + "\n")
        (out / "replay.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
