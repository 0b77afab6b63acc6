"""Command line: `python -m lopa generate --prompt "..." --k 4` decodes one prompt and prints the
answer and the metrics; `--trace run.json` (or .parquet) writes the round-by-round trace."""

from __future__ import annotations

import argparse
import sys

from lopa.settings import (ATTENTION_MODES, COMMIT_RULES, CONFIDENCE_METRICS, DECODERS, PAPER_PRESETS,
                           DecodeSettings, decoder_settings)

DEFAULTS = DecodeSettings()


def add_settings_arguments(parser: argparse.ArgumentParser, choose_decoder: bool = True) -> None:
    """Decoding settings as flags; shared by `generate` and the benchmarks (which choose the
    decoder, k and commit rule per row themselves: choose_decoder=False)."""
    g = parser.add_argument_group("decoding settings (defaults: the paper's GSM8K row, Table 5)")
    if choose_decoder:
        g.add_argument("--decoder", choices=tuple(DECODERS), default="lopa",
                       help="lopa (k lookahead branches), d2f (k=0), single_block (Fast-dLLM style), one_token")
        g.add_argument("--preset", choices=tuple(PAPER_PRESETS), help="start from a paper preset (Table 5)")
        g.add_argument("--k", type=int, help="lookahead branches per round (default 4 for lopa; gsm8k preset 14)")
        g.add_argument("--commit", choices=COMMIT_RULES, help="commit rule (default threshold)")
    g.add_argument("--tau-conf", type=float, help=f"commit threshold on max prob (default {DEFAULTS.tau_conf})")
    g.add_argument("--tau-add", type=float, help=f"block add threshold (default {DEFAULTS.tau_add})")
    g.add_argument("--tau-act", type=float, help=f"block activation threshold (default {DEFAULTS.tau_act})")
    g.add_argument("--block-size", type=int, help=f"block size N (default {DEFAULTS.block_size})")
    g.add_argument("--max-new-tokens", type=int, help=f"multiple of the block size (default {DEFAULTS.max_new_tokens})")
    g.add_argument("--confidence", choices=CONFIDENCE_METRICS, help=f"Conf metric (default {DEFAULTS.confidence})")
    g.add_argument("--attention", choices=ATTENTION_MODES, help="attention inside the window (default: the model's)")
    g.add_argument("--temperature", type=float, help="0 = greedy (default)")
    g.add_argument("--seed", type=int, help="sampling seed (default 0)")


def settings_from_args(args, spec=None) -> DecodeSettings:
    """Preset, then the model's own attention and block size, then explicit flags; the decoder's
    overrides (e.g. k = 0 for d2f) come last."""
    fields = dict(PAPER_PRESETS[args.preset]) if args.preset else {}
    if spec is not None:
        fields.setdefault("attention", spec.attention)
        if spec.block_size:
            fields.setdefault("block_size", spec.block_size)
    flags = {name: getattr(args, name) for name in ("k", "tau_conf", "tau_add", "tau_act", "block_size", "max_new_tokens",
                                                     "commit", "confidence", "attention", "temperature", "seed")}
    fields.update({k: v for k, v in flags.items() if v is not None})
    fields.setdefault("k", 4)
    return decoder_settings(args.decoder, DecodeSettings(**fields))


def _generate(args) -> int:
    if args.backend == "bp":
        from lopa.dist.parallel import generate_bp
        return generate_bp(args, settings_from_args, _report)
    from lopa.models.presets import load_from_args
    loaded = load_from_args(args)
    settings = settings_from_args(args, loaded.spec)
    return _report(args, loaded.decoder(settings, executor=args.executor), loaded.describe())


def _report(args, decoder, description: str) -> int:
    """Decode args.prompt with `decoder`, print the answer and metrics, write the trace."""
    settings = decoder.settings
    for record in decoder.stream(args.prompt):
        if args.verbose:
            print(f"round {record.round:3d}: committed {record.committed:2d}, winner {record.winner}, "
                  f"forward {record.forward_seconds * 1e3:.1f} ms", file=sys.stderr)
    result = decoder.result()
    print(result.text)
    print()
    print(f"model: {description}   decoder: {args.decoder}   settings: {settings.to_dict()}")
    for key, value in result.metrics().items():
        print(f"  {key:16s} {value:.3f}" if isinstance(value, float) else f"  {key:16s} {value}")
    print("  (tpf_useful counts tokens up to the first EOS; tpf_paper counts every appended position)")
    if args.trace:
        print(f"trace written to {result.save(args.trace)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from lopa.models.presets import add_model_arguments
    parser = argparse.ArgumentParser(prog="python -m lopa", description="LoPA: lookahead parallel decoding for dLLMs")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt, print the answer and metrics")
    gen.add_argument("--model", help="local Hugging Face model directory (default: the bundled tiny-gsm-dllm) "
                                     "or a D2F preset: d2f-dream-base, d2f-dream-instruct, d2f-diffucoder")
    gen.add_argument("--prompt", required=True, help="the question (the model's prompt template is applied)")
    gen.add_argument("--trace", help="write the trace to this .json or .parquet file")
    gen.add_argument("--executor", choices=("batched", "per_branch", "uncached"),
                     help="batched: all branches in one forward (default); the others are reference paths")
    gen.add_argument("--device", help="cpu, cuda, ... (default: cuda if available)")
    gen.add_argument("--backend", choices=("single", "bp"), default="single",
                     help="single process (default) or branch-parallel: branches spread over ranks, same results; "
                          "under torchrun each process is one rank, otherwise --workers local ranks are started")
    gen.add_argument("--workers", type=int, default=2, help="branch-parallel ranks without torchrun (default 2)")
    gen.add_argument("--bp-timeout", type=float, default=60.0,
                     help="seconds any branch-parallel collective may wait before the run fails (default 60)")
    gen.add_argument("--trust-remote-code", action="store_true", help="allow the checkpoint's own modeling code")
    gen.add_argument("-v", "--verbose", action="store_true", help="print one line per round")
    add_model_arguments(gen)
    add_settings_arguments(gen)
    gen.set_defaults(func=_generate)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
