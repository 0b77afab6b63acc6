"""Result files: rows as CSV, tables as CSV + Parquet, a JSON beside them with the command, date and
software, and plots where matplotlib is installed (the numbers never wait on a plotting library)."""

from __future__ import annotations

import csv
import datetime
import hashlib
import json
import shlex
import sys
from pathlib import Path

from lopa.tasks.hardware import software

MATPLOTLIB_HINT = "pip install 'lopa-explorer[bench]'"


def write_csv(path: str | Path, rows: list[dict]) -> Path:
    """`rows` (dicts with the same keys, the first row's order) as a CSV file with a header."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_jsonl(path: str | Path, rows: list[dict]) -> Path:
    """`rows` as JSON lines, one a row (EvalPlus samples and problems, a run's decodes)."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def save_plot(path: str | Path, draw) -> bool:
    """draw(pyplot) -> a Figure, saved to `path` and closed; False (nothing drawn) where matplotlib
    is not installed."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = draw(plt)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def weights_digest(model_dir: str | Path) -> str:
    """The first 12 hex digits of the sha256 of a model folder's safetensors files: which weights ran."""
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir or ".").glob("*.safetensors")):
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def write_results(out: str | Path, name: str, tables: dict, meta: dict, figure=None, png=None,
                  program: str = "lopa.study") -> list[Path]:
    """tables {suffix: DataFrame} -> <name>[_suffix].csv and .parquet; meta -> <name>.json, with the
    command (`python -m <program> <name> <meta["command"]>`, default this process's arguments), date and
    software; then figure -> <name>.html (plotly) and png(path) draws <name>.png, where matplotlib is
    installed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, df in tables.items():
        stem = name if not suffix else f"{name}_{suffix}"
        df.to_csv(out / f"{stem}.csv", index=False)
        df.to_parquet(out / f"{stem}.parquet", index=False)
        written += [out / f"{stem}.csv", out / f"{stem}.parquet"]
    argv = sys.argv[2:] if meta.get("command") is None else meta["command"]
    versions = {key: value for key, value in software().items() if key in ("python", "torch")}
    meta = {"study": name, "command": shlex.join(["python", "-m", program, name, *argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            **versions, **{k: v for k, v in meta.items() if k != "command"}}
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
            print(f"{name}.png not drawn: it needs matplotlib ({MATPLOTLIB_HINT}); the numbers are written")
    return written


def _plain(value):
    return value.item() if hasattr(value, "item") else str(value)


def load_results(name: str, folder: str | Path) -> tuple[dict, dict] | None:
    """({suffix: DataFrame}, meta) of results written by write_results, or None if absent."""
    import pandas as pd
    folder = Path(folder)
    meta_path = folder / f"{name}.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    tables = {}
    for path in sorted(folder.glob(f"{name}*.parquet")):
        tables[path.stem[len(name) + 1:]] = pd.read_parquet(path)
    return tables, meta
