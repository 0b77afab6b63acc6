"""What the studies share on top of the task layer (lopa.tasks): their command line, the settings it
resolves to, one graded decode as a study's row, and the start every study makes (model, hardware
line, problems, settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from lopa.models.loading import ASSETS
from lopa.resolution import settings_from_args
from lopa.settings import DecodeSettings
from lopa.study.stats import afp, order_tau
from lopa.tasks import results, task_for
from lopa.tasks.hardware import hardware
from lopa.tasks.prompts import question_ids
from lopa.tasks.results import weights_digest, write_results
from lopa.tasks.sources import DEFAULT_SEED, load_problems
from lopa.trace import fill_rounds

# Names the studies and the app read from here (one definition each, in lopa.tasks).
__all__ = ["DEFAULT_SEED", "hardware", "load_problems", "question_ids", "weights_digest", "write_results"]
STUDIES_DIR = ASSETS / "studies"             # results shipped with the app (docs/studies.md)
DEFAULTS = {"max_new_tokens": 128}           # a study's own defaults, under the model's values (lopa.resolution)


def add_common_arguments(parser, n: int, per_row=(), k: int = 4) -> None:
    """The flags every study takes: model, problems, output, and every decode setting except
    `per_row`, those the study sets itself for each configuration it runs (so no flag is ignored);
    `k` the study's default lookahead."""
    from lopa.models import add_model_arguments
    from lopa.models.loading import DEFAULT_MODEL
    from lopa.resolution import add_settings_arguments
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="model directory or D2F preset name")
    parser.add_argument("--data", default="synthetic",
                        help="synthetic (fresh held-out problems drawn with --problem-seed, default), heldout (the shipped "
                             "file), gsm8k, a GSM8K-format .jsonl, or a .txt of prompts (one a line; no grading)")
    parser.add_argument("--problem-seed", type=int, default=DEFAULT_SEED,
                        help=f"seed of the fresh synthetic problems (default {DEFAULT_SEED})")
    parser.add_argument("--n", type=int, default=n, help=f"problems (default {n})")
    parser.add_argument("--shots", type=int, default=0, help="few-shot GSM8K train examples before each question (paper: 4)")
    parser.add_argument("--out", default="study-out", help="output folder")
    parser.add_argument("--device")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--hardware-note", default="", help="appended to the recorded hardware, e.g. 'shared machine'")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the checkpoint's own modeling code")
    add_model_arguments(parser)
    defaults = {**DEFAULTS, "k": k}
    add_settings_arguments(parser, per_row=per_row, choose_decoder=False, defaults=defaults)
    parser.set_defaults(settings_defaults=defaults)        # what base_settings resolves under


def base_settings(args, spec) -> DecodeSettings:
    """The settings a study's flags resolve to on the model (lopa.resolution.settings_from_args): every
    flag given, over the model's own values, over the study's defaults (128 new tokens, its k) and the
    paper's GSM8K row (Table 5)."""
    return settings_from_args(args, spec, defaults=getattr(args, "settings_defaults", None) or DEFAULTS)


def decode_one(loaded, settings: DecodeSettings, problem: dict, order=None, data: str = "", shots: int = 0):
    """Decode one problem of the task --data `data` names (lopa.tasks.task_for: its prompt after `shots`
    examples, its grade); -> (RunResult, row). The row's TPF and tokens/s come from lopa.trace.metrics."""
    task = task_for(data)
    run = loaded.decoder(settings, order=order).run(task.prompt(loaded, problem, data, shots))
    return run, run_row(run, problem, loaded, data)


def run_row(run, problem: dict, loaded, data: str = "") -> dict:
    """A decode of `problem` as a study's row: its metrics, its grade (the task of `data`), its fill order."""
    m = run.metrics()
    graded = task_for(data).grade(loaded, problem, run.text)
    correct, predicted = graded["correct"], graded["predicted"]
    rounds = {p: r for p, r in fill_rounds(run.records).items() if p < len(run.useful_tokens)}
    looks = [len(r.lookahead_positions) for r in run.records if r.kind == "round"]
    return {"problem": problem["id"], "forwards": m["forwards"], "tokens": m["tokens_useful"],
            "tpf": m["tpf_useful"], "tps": m["tps"], "latency_s": m["latency_s"], "token_forwards": m["token_forwards"],
            "edits": m["edits"], "correct": correct, "answer": predicted or "", "afp": afp(rounds.values()),
            "order_tau": order_tau(rounds),
            "mean_k": sum(looks) / len(looks) if looks else 0.0}


@dataclass
class Started:
    """What every study starts from: the model, the hardware line, the problems and the settings."""
    loaded: object
    hw: str
    problems: list[dict]
    where: str
    base: DecodeSettings

    def meta(self, argv, args, summary: dict) -> dict:
        """The JSON written beside a study's results: command, model, weights, hardware, data, summary."""
        return {"command": argv, "model": self.loaded.describe(), "weights_sha256": weights_digest(getattr(self.loaded, "path", "")),
                "hardware": self.hw, "data": self.where, "seed": args.problem_seed, "settings": self.base.to_dict(),
                "summary": summary}


def start(args) -> Started:
    """Threads, model, problems and settings of a study's command line; prints what it runs on."""
    from lopa.models import load_from_args
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_from_args(args)
    hw = hardware(loaded, args.hardware_note)
    problems, where = load_problems(args.data, args.n, args.problem_seed)
    base = base_settings(args, loaded.spec)
    print(f"model {loaded.describe()}; {where}; {hw}\nsettings: {base.to_dict()}")
    return Started(loaded, hw, problems, where, base)


def load_results(name: str, folder: str | Path = STUDIES_DIR) -> tuple[dict, dict] | None:
    """({suffix: DataFrame}, meta) of a study written by write_results (default: the shipped ones), or None."""
    return results.load_results(name, folder)
