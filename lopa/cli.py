"""Command line (`lopa`, or `python -m lopa`):

    lopa generate --prompt "..." --k 4     decode one prompt, print the answer and the metrics;
                                           --trace run.json (or .parquet) writes the round-by-round trace
    lopa app [--host H] [--port P]         start the explorer app on the bundled model
    lopa hf-export DIR                     let transformers' generate() decode DIR with LoPA (lopa.hf)
    lopa reproduce --table N --model M     a paper table's rows through lm-eval / EvalPlus, beside the paper's
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sys
from pathlib import Path

import torch

from lopa.cost import curve_words, run_curve
from lopa.engine import DecodeStalled
from lopa.order import budget_warning, describe_order
from lopa.resolution import add_settings_arguments, choice_type, settings_from_args
from lopa.settings import DecodeSettings


def _read_script(args) -> None:
    """--script: a script file or a recorded trace. A trace also supplies its settings (flags still
    override them) and, when --prompt is absent, its prompt ids: `--script run.json` replays run.json."""
    from lopa.script import load_script
    args.script_rounds, args.script_settings, args.prompt_ids = None, None, None
    if args.script:
        args.script_rounds, trace = load_script(args.script)
        if trace is not None:
            args.script_settings = {k: v for k, v in trace.settings.items() if k in DecodeSettings.__dataclass_fields__}
            args.prompt_ids = trace.prompt_ids
    if args.prompt is None and args.prompt_ids is None:
        raise ValueError("--prompt is required (unless --script is a recorded trace: its prompt is used)")


def _check_inputs(args) -> None:
    """What can be checked before any model loads, so that a bad flag loses no work."""
    if args.prompt is not None:
        try:
            args.prompt.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(f"the prompt is not valid UTF-8 text (undecodable byte at character {err.start}); "
                             "pass it as UTF-8") from None
    if not (math.isfinite(args.bp_timeout) and args.bp_timeout > 0):
        raise ValueError(f"--bp-timeout must be a positive number of seconds, got {args.bp_timeout}")
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if args.trace:
        trace = Path(args.trace)
        if trace.suffix not in (".json", ".parquet"):
            raise ValueError(f"--trace must end in .json or .parquet, got {trace.name!r}")
        folder = trace.parent
        if not folder.is_dir():
            raise ValueError(f"--trace {trace}: {folder} is not a folder")
        existed = trace.exists()
        try:                                         # the real test: create it now, not after decoding
            with open(trace, "ab"):
                pass
        except OSError as err:
            raise ValueError(f"--trace {trace}: cannot write there ({err.strerror})") from None
        if not existed:
            trace.unlink()


def _generate(args) -> int:
    _check_inputs(args)
    _read_script(args)
    if args.backend == "bp":
        from lopa.distributed.launch import generate_bp
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
    curve = run_curve(settings, describe_order(decoder.base_order))      # order=adaptive: what prices its branches
    if curve:
        print(curve_words(*curve), file=sys.stderr)
    warning = budget_warning(settings, *curve) if curve else None   # "adaptive" that can never branch is vanilla D2F
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
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
    print("  (tpf_useful, ours: tokens up to the first EOS / forwards; tpf_paper: every appended position / "
          "forwards; tpf_authors, the paper's tables: every appended position / (forwards + 1))")
    if args.trace:
        print(f"trace written to {result.save(args.trace)}")
    return 0


def _reproduce(args) -> int:
    from lopa.eval.reproduce import reproduce
    from lopa.models import load_from_args
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.table not in (1, 2):                     # before any model loads
        from lopa.eval.paper import NOT_REPRODUCED
        raise ValueError(f"Table {args.table}: " + NOT_REPRODUCED.get(args.table, "the paper has Tables 1-7")
                         + "; reproduce runs Tables 1 and 2")
    print(reproduce(args, load_from_args(args)))
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


def _hf_export(args) -> int:
    from lopa.hf import add_transformers_support
    path = add_transformers_support(args.model_dir)
    print(f"{path}: custom_generate/ added and plain generate() guarded; load it with "
          f"AutoModelForCausalLM.from_pretrained({str(path)!r}, trust_remote_code=True) to decode with LoPA")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse, except that an error quotes at most a short prefix of a bad value: its own messages
    (`invalid int value: '...'`) quote a value of any length, and a command line can be 100 KB."""

    def error(self, message):
        super().error(re.sub(r"'([^']{57})[^']{4,}'", lambda m: f"'{m.group(1)}...'", message))


def build_parser() -> argparse.ArgumentParser:
    from lopa.models import add_model_arguments
    parser = Parser(prog="python -m lopa", description="LoPA: lookahead parallel decoding for dLLMs")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt, print the answer and metrics")
    gen.add_argument("--model", help="local Hugging Face model directory (default: the bundled open-gsm-dllm) "
                                     "or a D2F preset: d2f-dream-base, d2f-dream-instruct, d2f-diffucoder")
    gen.add_argument("--prompt", help="the question (the model's prompt template is applied); "
                                      "optional with --script TRACE, which brings its own")
    gen.add_argument("--script", metavar="FILE.json",
                     help="forced decisions per round, on top of --order: a script {\"rounds\": [{\"round\": 3, "
                          "\"commit\": {\"12\": 57, \"13\": null}, \"hold\": [14]}]} (commit position 12 as token "
                          "57 and 13 as the model's top token in round 3; keep 14 masked), or a recorded trace "
                          "(.json/.parquet), whose every decision is replayed: --script run.json reproduces run.json")
    gen.add_argument("--trace", help="write the trace to this .json or .parquet file")
    executors = ("batched", "batched_eager", "per_branch", "uncached")
    gen.add_argument("--executor", type=choice_type("executor", executors), choices=executors,
                     help="batched: all branches in one forward (default; the lean forward, on CUDA captured as graphs: lopa.fast); batched_eager: the same over the model's own forward; the others are reference paths")
    gen.add_argument("--device", help="cpu, cuda, ... (default: cuda if available)")
    gen.add_argument("--backend", type=choice_type("backend", ("single", "bp")), choices=("single", "bp"),
                     default="single",
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
    hf = sub.add_parser("hf-export", help="make a model folder decode with LoPA through transformers' generate() "
                                          "(adds custom_generate/ and a guard that stops plain generate())")
    hf.add_argument("model_dir", help="a Hugging Face model folder the engine decodes (a stock transformers class)")
    hf.set_defaults(func=_hf_export)
    rep = sub.add_parser("reproduce", help="run a paper table's rows (lm-eval / EvalPlus) beside the paper's numbers")
    from lopa.eval.reproduce import add_arguments as add_reproduce_arguments
    add_reproduce_arguments(rep)
    rep.add_argument("--trust-remote-code", action="store_true", help="allow the checkpoint's own modeling code")
    add_model_arguments(rep)
    rep.set_defaults(func=_reproduce)
    app = sub.add_parser("app", help="start the explorer app (the bundled model unless another is loaded in it)")
    app.add_argument("--host", default=None, help="interface to listen on (default $GRADIO_SERVER_NAME or 0.0.0.0)")
    app.add_argument("--port", type=int, default=None, help="port (default $GRADIO_SERVER_PORT or 7860)")
    app.set_defaults(func=_app)
    return parser


def main(argv=None) -> int:
    """Exit 0 on success; 2 with one `error:` line for anything the user can fix (bad flags, files,
    devices, a failed branch-parallel rank); 130 on Ctrl-C."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as err:            # OSError: files and sockets (FileNotFoundError included)
        message = str(err)
    except RuntimeError as err:                     # a branch-parallel group's failure names the rank, a
        # stalled decode names the setting to change; other RuntimeErrors are bugs and keep their traceback
        if getattr(args, "backend", None) != "bp" and not isinstance(err, DecodeStalled):
            raise
        message = str(err)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    lines = message.strip().splitlines() or ["(no message)"]
    print(f"error: {lines[0]}", file=sys.stderr)
    if len(lines) > 1 and getattr(args, "verbose", False):
        print("\n".join(lines[1:]), file=sys.stderr)     # e.g. a failed rank's last log lines
    return 2
