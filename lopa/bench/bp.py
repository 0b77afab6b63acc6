"""Branch-parallel cost on this machine: time per round and where it goes, bytes per round, tokens/s.

    python -m lopa.bench.bp                          # bundled model, R = 1..4, k = 7, 2 held-out prompts
    python -m lopa.bench.bp --workers 1,2 --k 14 --prompts 4 --attention full --device cuda
    python -m lopa.bench.bp --attention block_causal,full    # both, one table each (default: the model's own)

For each R (ranks) the same prompts are decoded by a BPGroup of R ranks and by the single-process batched
engine (the reference), and the table shows, per round with a forward (means):
    round_ms      wall time of the round as the Decoder sees it
    fwd_ms        rank 0's forward + summaries; fwd_max_ms the slowest rank's
    gather_ms     waiting for and receiving every rank's summaries (includes waiting on stragglers)
    commit_ms     the commit verb (a K/V broadcast when commit_plan needs one: bcast %)
    ipc_ms        caller <-> rank 0 socket round trips (BPGroup only; torchrun has none)
    KB/round      what rank 0 exchanged with its peers; full-logits KB what gathering logits would cost
and tokens/s (useful tokens / latency) beside the single-process engine's, and whether the tokens
matched it. On a CPU the forward is compute-bound, so spreading branches over ranks can win only
when there are idle cores; on a shared 2-core box R > 2 only adds contention (design note, "Why
it is faster, and where it is not").
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from statistics import mean

import torch

from lopa.engine import Decoder
from lopa.models.loading import DEFAULT_MODEL
from lopa.resolution import add_settings_arguments, settings_from_args
from lopa.settings import ATTENTION_MODES
from lopa.tasks.hardware import hardware
from lopa.tasks.sources import heldout_questions
from lopa.trace import pooled

DEFAULTS = {"k": 7, "max_new_tokens": 128}     # 8 branches a round; the model's own values come first


def random_model_dir() -> Path:
    """No bundled model: a random tiny Qwen2 with a word-level tokenizer (speed only, nonsense text)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    words = ["<|mask|>", "<|endoftext|>", "<|pad|>"] + [str(d) for d in range(10)] + [f"w{i}" for i in range(1011)]
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(words), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         eos_token_id=1, pad_token_id=2, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    model.config.lopa = {"mask_token_id": 0, "eos_token_ids": [1], "pad_token_id": 2, "logit_shift": True,
                         "block_size": 32, "attention": "block_causal"}
    path = Path(tempfile.mkdtemp(prefix="lopa-bench-bp-"))
    model.save_pretrained(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, mask_token="<|mask|>", eos_token="<|endoftext|>",
                            pad_token="<|pad|>", unk_token="w0").save_pretrained(path)
    return path


def round_stats(runs) -> dict:
    """Means over every round that ran a forward, of every run; TPF and tokens/s pooled over the runs."""
    rounds = [r for run in runs for r in run.records if r.kind != "final"]
    x = [r.extra for r in rounds]
    get = lambda key: mean(e.get(key, 0.0) for e in x) if x else 0.0   # noqa: E731
    pool = pooled([run.metrics() for run in runs])      # TPF and tokens/s: totals over the runs (lopa.trace.pooled)
    return {
        "round_ms": 1e3 * mean(r.round_seconds for r in rounds),
        "fwd_ms": 1e3 * (get("forward_s") if x[0] else mean(r.forward_seconds for r in rounds)),
        "fwd_max_ms": 1e3 * (mean(max(e["rank_forward_s"]) for e in x) if x[0] else 0.0),
        "gather_ms": 1e3 * get("gather_s"), "commit_ms": 1e3 * get("commit_s"), "ipc_ms": 1e3 * get("ipc_s"),
        "bcast_pct": 100 * get("commit_broadcast"),
        "kb": get("bytes") / 1e3, "full_kb": get("full_logits_bytes") / 1e3,
        **{key: pool[key] for key in ("tps", "tpf_useful")},
    }


def decode_all(make_decoder, prompts, repeats: int):
    """One warm-up run, then `repeats` timed runs of every prompt."""
    make_decoder().run(prompts[0])
    return [make_decoder().run(p) for _ in range(repeats) for p in prompts]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lopa.bench.bp", description=__doc__.split("\n")[0])
    ap.add_argument("--model", help=f"model directory (default {DEFAULT_MODEL}, else a random one)")
    ap.add_argument("--workers", default="1,2,3,4", help="world sizes to try (default 1,2,3,4)")
    ap.add_argument("--prompts", type=int, default=2, help="held-out questions to decode (default 2)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs of each prompt (default 1)")
    ap.add_argument("--attention", dest="attentions", help="one or more of " + ", ".join(ATTENTION_MODES) + ", comma-separated: a table "
                    "each (default: the model's own)")
    ap.add_argument("--device", default="cpu", help="cpu (gloo), cuda (NCCL: rank r on cuda:r), npu (HCCL)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank and for the reference")
    add_settings_arguments(ap, per_row=("attention",), choose_decoder=False, defaults=DEFAULTS)
    args = ap.parse_args(argv)
    attentions = args.attentions.split(",") if args.attentions else []     # per row: not a settings flag
    if any(a not in ATTENTION_MODES for a in attentions):
        ap.error(f"--attention takes {', '.join(ATTENTION_MODES)} (comma-separated), got {args.attentions[:60]!r}")

    from lopa.distributed.group import BPGroup
    from lopa.models import load
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model) if args.model else DEFAULT_MODEL
    if not (model_dir / "config.json").is_file():
        print(f"no model at {model_dir}: using a random tiny Qwen2")
        model_dir = random_model_dir()
    loaded = load(str(model_dir), device=args.device)
    prompts = heldout_questions(args.prompts)
    worlds = [int(w) for w in args.workers.split(",")]
    resolved = settings_from_args(args, loaded.spec, defaults=DEFAULTS)

    print(f"hardware: {hardware(loaded, f'load average {os.getloadavg()[0]:.1f}')} (the same threads in every rank)")
    print(f"model: {loaded.describe()}; {len(prompts)} held-out prompt(s) x {args.repeats}; k = {resolved.k} "
          f"({resolved.k + 1} branches a round), max_new_tokens {resolved.max_new_tokens}\n")
    head = (f"{'attention':12s} {'backend':9s} {'round_ms':>8s} {'fwd_ms':>7s} {'fwd_max':>7s} {'gather':>7s} "
            f"{'commit':>7s} {'ipc':>6s} {'bcast%':>6s} {'KB/rnd':>7s} {'full-logits KB':>14s} {'TPF':>5s} "
            f"{'tok/s':>7s} {'vs 1p':>6s} same")
    print(head)
    print("-" * len(head))
    for attention in attentions or [resolved.attention]:
        settings = resolved.replace(attention=attention)
        ref_runs = decode_all(lambda s=settings: Decoder(loaded.model, loaded.spec, s, loaded.tokenizer), prompts,
                              args.repeats)
        ref = round_stats(ref_runs)
        print(f"{attention:12s} {'single':9s} {ref['round_ms']:8.1f} {ref['fwd_ms']:7.1f} {'':>7s} {'':>7s} "
              f"{'':>7s} {'':>6s} {'':>6s} {'':>7s} {'':>14s} {ref['tpf_useful']:5.2f} {ref['tps']:7.1f} {1:6.2f}")
        for world in worlds:
            with BPGroup.start(str(model_dir), workers=world, device=args.device, threads=args.threads) as group:
                runs = decode_all(lambda g=group, s=settings: g.decoder(s), prompts, args.repeats)
            s = round_stats(runs)
            same = all(a.tokens == b.tokens for a, b in zip(runs, ref_runs))
            print(f"{'':12s} {f'BP R={world}':9s} {s['round_ms']:8.1f} {s['fwd_ms']:7.1f} {s['fwd_max_ms']:7.1f} "
                  f"{s['gather_ms']:7.1f} {s['commit_ms']:7.1f} {s['ipc_ms']:6.1f} {s['bcast_pct']:6.0f} "
                  f"{s['kb']:7.2f} {s['full_kb']:14.1f} {s['tpf_useful']:5.2f} {s['tps']:7.1f} {s['tps'] / ref['tps']:6.2f} "
                  f"{'yes' if same else 'NO'}")
    print("\nper round, means over rounds with a forward; KB/round = control + summaries + K/V broadcasts that "
          "rank 0 exchanged with its peers; full-logits KB = the same gather with [positions x V] logits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
