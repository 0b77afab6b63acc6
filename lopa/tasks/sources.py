"""Where problems come from: the data-file map, fresh problems of a model's own family, GSM8K-format
files, prompt lists, and the readers the task modules share (JSONL, a split's JSONL or Parquet files).
Every reader checks a file's rows for the fields its task needs and names the file when they are missing. Nothing here
downloads: data comes from assets/ or from paths the user gives.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from lopa.models.loading import ASSETS
from lopa.problems import family_problems, split

DATA_DIR = ASSETS / "data"
GSM8K_DIR = DATA_DIR / "gsm8k"
SHOTS_FROM = GSM8K_DIR / "train.jsonl"         # the few-shot examples: the first N GSM8K training problems
HELDOUT = DATA_DIR / "synthetic" / "heldout.jsonl"
# --data names every command takes: SYNTHETIC, the synthetic family's held-out problems (drawn fresh where
# the command has a seed for them, every study and the bench's --problem-seed; else the shipped file's),
# and the files in DATA_FILES: "heldout" the shipped held-out file itself, "gsm8k" GSM8K's test split.
SYNTHETIC = "synthetic"
DATA_FILES = {"heldout": HELDOUT, "gsm8k": GSM8K_DIR / "test.jsonl"}
DEFAULT_SEED = 15          # fresh synthetic problems: a seed the shipped held-out file does not use
# The fields a GSM8K-format row must have.
GSM8K_FIELDS = ("question", "answer")
SPLITS = ("train", "test")


def read_rows(path: str | Path, needs=(), kind: str = "") -> list[dict]:
    """The rows of a JSONL file (.jsonl or .jsonl.gz), in file order; a ValueError naming the file
    and the missing fields where the first row lacks any of `needs` (a `kind`-format file)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    missing = set(needs) - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{path} is not {kind or 'the expected'}-format JSONL: rows lack {', '.join(sorted(missing))}")
    return rows


def first_row(path: str | Path) -> dict | None:
    """The first row of a JSONL(.gz) file, or None where it is not one (to tell formats apart)."""
    try:
        opener = gzip.open if Path(path).suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            row = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) else None


def data_file(data: str) -> Path:
    """The file a --data value names: a DATA_FILES name, SYNTHETIC (without a seed: the shipped held-out
    file) or a path; a FileNotFoundError naming it otherwise."""
    path = HELDOUT if data == SYNTHETIC else DATA_FILES.get(data, Path(data))
    if not path.is_file():
        raise FileNotFoundError(f"no problems at {str(path)[:200]}: give {', '.join((SYNTHETIC, *DATA_FILES))} "
                                "or a file path")
    return path


def local_split_files(folder: Path, splits=SPLITS) -> tuple[str, dict] | None:
    """("json" | "parquet", {split: [files]}) for a folder that holds every split as
    <split>.jsonl or as the hub's <split>-NNNNN-of-NNNNN.parquet shards; None if it does not."""
    for builder, pattern in (("json", "{split}.jsonl"), ("parquet", "{split}-*.parquet")):
        found = {s: sorted(str(p) for p in Path(folder).glob(pattern.format(split=s))) for s in splits}
        if all(found.values()):
            return builder, found
    return None


def read_split(builder: str, files: list[str], needs=(), kind: str = "") -> list[dict]:
    """The rows of a split's files as local_split_files finds them ("json": JSONL, read_rows; "parquet": the
    hub's shards, through pandas), in order; a ValueError naming the file where rows lack any of `needs`."""
    if builder == "json":
        return [row for f in files for row in read_rows(f, needs, kind)]
    import pandas as pd
    rows = []
    for f in files:
        table = pd.read_parquet(f)
        missing = set(needs) - set(table.columns)
        if missing:
            raise ValueError(f"{f} is not {kind or 'the expected'}-format Parquet: rows lack {', '.join(sorted(missing))}")
        rows += [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in row.items()} for row in table.to_dict("records")]
    return rows


def heldout_questions(n: int) -> list[str]:
    """The first `n` questions of the shipped held-out file (timing runs need prompts, not answers)."""
    return [p["question"] for p in read_rows(HELDOUT, GSM8K_FIELDS, "GSM8K")[:n]]


def family_source(family: dict, seed: int) -> str:
    """How a set of fresh problems of `family` is named in a report or a file name."""
    return f"{family['name']}-{family.get('phrasing', 'plain')}-seed{seed}"


def bench_problems(data: str, n: int, family: dict | None = None, seed: int | None = None) -> tuple[list[dict], str]:
    """(problems, where they came from) for a GSM8K-format run: `n` fresh held-out problems of the
    model's `family` drawn with `seed` where a seed is given, else the first `n` rows of `data`."""
    if seed is not None:
        if not family:
            raise ValueError("the model names no problem family (config.lopa.problems): give a data file instead")
        return family_problems(family, n, seed), family_source(family, seed)
    path = data_file(data)
    return read_rows(path, GSM8K_FIELDS, "GSM8K")[:n], path.name


def load_problems(data: str, n: int, seed: int) -> tuple[list[dict], str]:
    """A study's problems: [{"id", "question", "answer" (None for bare prompts)}] and a description of
    where they came from. `data` is SYNTHETIC (fresh held-out problems drawn with `seed`), a
    DATA_FILES name, a GSM8K-format .jsonl, or a .txt of prompts, one a line."""
    if data == SYNTHETIC:
        problems, where = split("heldout", n, seed), f"fresh held-out synthetic problems (lopa.problems, seed {seed})"
    else:
        try:
            path = data_file(data)
        except FileNotFoundError as err:
            raise ValueError(f"{err} (or a .txt of prompts, one a line)") from None
        if path.suffix == ".txt":
            problems = [{"question": line.strip(), "answer": None} for line in path.read_text().splitlines() if line.strip()]
        else:
            problems = read_rows(path, ("question",), "GSM8K")
        problems, where = problems[:n], f"{path.name} (first {n})"
    return [{"id": i, "question": p["question"], "answer": p.get("answer")} for i, p in enumerate(problems)], where
