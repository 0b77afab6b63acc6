"""What the three studies share: the problems, the base settings, one graded decode, the hardware
line, and the result files (table as CSV + Parquet, interactive HTML, PNG, and a JSON beside them
with the command, hardware and date)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from lopa.models.loading import ASSETS
from lopa.problems import final_answer, read_jsonl, split
from lopa.settings import DecodeSettings, flag_settings
from lopa.study.stats import afp, order_tau
from lopa.trace import fill_rounds

STUDIES_DIR = ASSETS / "studies"             # results shipped with the app (docs/studies.md)
DATA_FILES = {"heldout": ASSETS / "data" / "synthetic" / "heldout.jsonl", "gsm8k": ASSETS / "data" / "gsm8k" / "test.jsonl"}
GSM8K_TEMPLATE = "Question: {prompt}\nAnswer:"      # as lopa.bench.decoders, for base models without a template
DEFAULT_SEED = 15                            # fresh synthetic problems: a seed the shipped held-out file does not use


def add_common_arguments(parser, n: int, per_row=(), k: int = 4) -> None:
    """The flags every study takes: model, problems, output, and every decode setting except
    `per_row`, those the study sets itself for each configuration it runs (so no flag is ignored);
    `k` the study's default lookahead."""
    from lopa.models import add_model_arguments
    from lopa.models.loading import DEFAULT_MODEL
    from lopa.settings import add_settings_arguments
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
    add_settings_arguments(parser, per_row=per_row, choose_decoder=False, defaults={"k": k, "max_new_tokens": 128})
    if "k" not in per_row:
        parser.set_defaults(k=k)


def load_problems(data: str, n: int, seed: int) -> tuple[list[dict], str]:
    """[{"id", "question", "answer" (None for bare prompts)}] and a description of where they came from."""
    if data == "synthetic":
        problems, where = split("heldout", n, seed), f"fresh held-out synthetic problems (lopa.problems, seed {seed})"
    else:
        path = DATA_FILES.get(data, Path(data))
        if not path.is_file():
            raise ValueError(f"no problems at {path}: use synthetic, heldout, gsm8k or a .jsonl / .txt path")
        if path.suffix == ".txt":
            problems = [{"question": line.strip(), "answer": None} for line in path.read_text().splitlines() if line.strip()]
        else:
            problems = read_jsonl(path)
        problems, where = problems[:n], f"{path.name} (first {n})"
    return [{"id": i, "question": p["question"], "answer": p.get("answer")} for i, p in enumerate(problems)], where


def base_settings(args, spec) -> DecodeSettings:
    """The paper's GSM8K row (Table 5) with 128 new tokens, k = 4, the model's block size and attention,
    then every settings flag given."""
    fields = {"max_new_tokens": 128, "attention": spec.attention, "k": 4}
    if spec.block_size:
        fields["block_size"] = spec.block_size
    return DecodeSettings(**{**fields, **flag_settings(args)})


def prompt_ids(loaded, question: str, data: str = "", shots: int = 0) -> torch.Tensor:
    """The same ids `lopa generate --prompt QUESTION` decodes (the model's prompt template applied),
    after `shots` GSM8K training examples as lopa.bench renders them (shots = 0: none)."""
    from lopa.bench.decoders import few_shot_prefix
    template = GSM8K_TEMPLATE if data == "gsm8k" and loaded.spec.prompt_template == "{prompt}" else loaded.spec.prompt_template
    text = few_shot_prefix(template, shots) + template.format(prompt=question.strip())
    return torch.tensor(loaded.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def decode_one(loaded, settings: DecodeSettings, problem: dict, order=None, data: str = "", shots: int = 0):
    """Decode one problem; -> (RunResult, row). The row's TPF and tokens/s come from lopa.trace.metrics."""
    run = loaded.decoder(settings, order=order).run(prompt_ids(loaded, problem["question"], data, shots))
    return run, run_row(run, problem)


def run_row(run, problem: dict) -> dict:
    m = run.metrics()
    text = run.text.split("Question:")[0]
    predicted = final_answer(text)
    expected = final_answer(problem["answer"]) if problem.get("answer") else None
    rounds = {p: r for p, r in fill_rounds(run.records).items() if p < len(run.useful_tokens)}
    looks = [len(r.lookahead_positions) for r in run.records if r.kind == "round"]
    return {"problem": problem["id"], "forwards": m["forwards"], "tokens": m["tokens_useful"],
            "tpf": m["tpf_useful"], "tps": m["tps"], "latency_s": m["latency_s"],
            "correct": None if expected is None else int(predicted is not None and predicted == expected),
            "answer": predicted or "", "afp": afp(rounds.values()), "order_tau": order_tau(rounds),
            "mean_k": sum(looks) / len(looks) if looks else 0.0}


def hardware(loaded, note: str = "") -> str:
    device = next(loaded.model.parameters()).device
    if device.type == "cuda":
        line = f"{torch.cuda.get_device_name(device)} GPU"
    else:
        line = (f"{platform.machine()} CPU, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), no GPU")
    return line + (f", {note}" if note else "")


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


def weights_digest(model_dir: str | Path) -> str:
    """The first 12 hex digits of the sha256 of a model folder's safetensors files: which weights ran."""
    import hashlib
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir or ".").glob("*.safetensors")):
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def write_results(out: str | Path, name: str, tables: dict, meta: dict, figure=None, png=None) -> list[Path]:
    """tables {suffix: DataFrame} -> <name>[_suffix].csv and .parquet; meta -> <name>.json, with the
    command, date and Python/torch versions; then figure -> <name>.html (plotly) and png(path) draws
    <name>.png, where matplotlib is installed (the numbers never wait on a plotting library)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, df in tables.items():
        stem = name if not suffix else f"{name}_{suffix}"
        df.to_csv(out / f"{stem}.csv", index=False)
        df.to_parquet(out / f"{stem}.parquet", index=False)
        written += [out / f"{stem}.csv", out / f"{stem}.parquet"]
    argv = sys.argv[2:] if meta.get("command") is None else meta["command"]
    meta = {"study": name, "command": shlex.join(["python", "-m", "lopa.study", name, *argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "python": platform.python_version(), "torch": torch.__version__,
            **{k: v for k, v in meta.items() if k != "command"}}
    (out / f"{name}.json").write_text(json.dumps(meta, indent=2, default=_plain) + "\n")
    written.append(out / f"{name}.json")
    if figure is not None:
        figure.write_html(out / f"{name}.html", include_plotlyjs="cdn")
        written.append(out / f"{name}.html")
    if png is not None:
        try:
            png(out / f"{name}.png")
            written.append(out / f"{name}.png")
        except ModuleNotFoundError as err:
            if err.name != "matplotlib":
                raise
            print(f"{name}.png not drawn: it needs matplotlib (pip install 'lopa-explorer[bench]'); the numbers "
                  "are written")
    return written


def _plain(value):
    return value.item() if hasattr(value, "item") else str(value)


def load_results(name: str, folder: str | Path = STUDIES_DIR) -> tuple[dict, dict] | None:
    """({suffix: DataFrame}, meta) of a study written by write_results, or None if absent."""
    import pandas as pd
    folder = Path(folder)
    meta_path = folder / f"{name}.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    tables = {}
    for path in sorted(folder.glob(f"{name}*.parquet")):
        suffix = path.stem[len(name) + 1:]
        tables[suffix] = pd.read_parquet(path)
    return tables, meta
