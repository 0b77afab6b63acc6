"""Command line (`lopa`, or `python -m lopa`):

    lopa generate --prompt "..." --k 4     decode one prompt, print the answer and the metrics;
                                           --trace run.json (or .parquet) writes the round-by-round trace
    lopa app [--host H] [--port P]         start the explorer app on the bundled model
"""

from __future__ import annotations

import argparse
import importlib
import sys

import torch

from lopa.settings import DecodeSettings, add_settings_arguments, settings_from_args


def _read_script(args) -> None:
    """--script: a script file or a recorded trace. A trace also supplies its settings (flags still
    override them) and, when --prompt is absent, its prompt ids: `--script run.json` replays run.json."""
    from lopa.order import load_script
    args.script_rounds, args.script_settings, args.prompt_ids = None, None, None
    if args.script:
        args.script_rounds, trace = load_script(args.script)
        if trace is not None:
            args.script_settings = {k: v for k, v in trace.settings.items() if k in DecodeSettings.__dataclass_fields__}
            args.prompt_ids = trace.prompt_ids
    if args.prompt is None and args.prompt_ids is None:
        raise ValueError("--prompt is required (unless --script is a recorded trace: its prompt is used)")


def _generate(args) -> int:
    _read_script(args)
    if args.backend == "bp":
        from lopa.dist.launch import generate_bp
        return generate_bp(args, settings_from_args, _report)
    from lopa.models import load_from_args
    loaded = load_from_args(args)
    settings = settings_from_args(args, loaded.spec)
    return _report(args, loaded.decoder(settings, executor=args.executor), loaded.describe())


def _report(args, decoder, description: str) -> int:
    """Decode args.prompt with `decoder`, print the answer and metrics, write the trace."""
    settings = decoder.settings
    if getattr(args, "script_rounds", None):
        decoder.apply_script(args.script_rounds)
    prompt = args.prompt if args.prompt is not None else torch.tensor(args.prompt_ids, dtype=torch.long)
    for record in decoder.stream(prompt):
        if args.verbose:
            print(f"round {record.round:3d}: committed {record.committed:2d}, winner {record.winner}, "
                  f"forward {record.forward_seconds * 1e3:.1f} ms", file=sys.stderr)
    result = decoder.result()
    print(result.text)
    print()
    forced = sum(len(r.forced) for r in result.records)
    print(f"model: {description}   decoder: {args.decoder}   settings: {settings.to_dict()}"
          + (f"   script: {args.script} ({forced} forced decisions)" if getattr(args, "script", None) else ""))
    for key, value in result.metrics().items():
        print(f"  {key:16s} {value:.3f}" if isinstance(value, float) else f"  {key:16s} {value}")
    print("  (tpf_useful counts tokens up to the first EOS; tpf_paper counts every appended position)")
    if args.trace:
        print(f"trace written to {result.save(args.trace)}")
    return 0


def explorer():
    """The explorer app package: `lopa_explorer.app` when installed from the wheel, the top-level
    `app/` folder in a checkout or on a Space."""
    for name in ("lopa_explorer.app", "app"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name not in (name, name.split(".")[0]):
                raise                                  # the app is there but something it needs is not
            continue
        if hasattr(module, "serve"):
            return module
    raise ValueError("the explorer app is not installed: pip install lopa-explorer (or run from a checkout)")


def _app(args) -> int:
    module = explorer()
    module.serve(args.host or module.DEFAULT_HOST, args.port or module.DEFAULT_PORT)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from lopa.models import add_model_arguments
    parser = argparse.ArgumentParser(prog="python -m lopa", description="LoPA: lookahead parallel decoding for dLLMs")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt, print the answer and metrics")
    gen.add_argument("--model", help="local Hugging Face model directory (default: the bundled tiny-gsm-dllm) "
                                     "or a D2F preset: d2f-dream-base, d2f-dream-instruct, d2f-diffucoder")
    gen.add_argument("--prompt", help="the question (the model's prompt template is applied); "
                                      "optional with --script TRACE, which brings its own")
    gen.add_argument("--script", metavar="FILE.json",
                     help="forced decisions per round, on top of --order: a script {\"rounds\": [{\"round\": 3, "
                          "\"commit\": {\"12\": 57, \"13\": null}, \"hold\": [14]}]} (commit position 12 as token "
                          "57 and 13 as the model's top token in round 3; keep 14 masked), or a recorded trace "
                          "(.json/.parquet), whose every decision is replayed: --script run.json reproduces run.json")
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
    app = sub.add_parser("app", help="start the explorer app (the bundled model unless another is loaded in it)")
    app.add_argument("--host", default=None, help="interface to listen on (default $GRADIO_SERVER_NAME or 0.0.0.0)")
    app.add_argument("--port", type=int, default=None, help="port (default $GRADIO_SERVER_PORT or 7860)")
    app.set_defaults(func=_app)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
