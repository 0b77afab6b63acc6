"""Redraw the shipped studies' PNGs from their shipped tables (no model runs): after a change to the
figure code in lopa/study/figures.py, `python scripts/replot_studies.py [assets/studies/<model> ...]`.
The title is the one the app's interactive plot shows for the same results (figures.shipped_title)."""

from __future__ import annotations

import sys
from pathlib import Path

from lopa.study import APP_STUDIES
from lopa.study import figures as f
from lopa.study.common import STUDIES_DIR, load_results

PNG = {"orders": lambda t, s, title, path: f.orders_png(t[""], s, title, path),
       "calibration": lambda t, s, title, path: f.calibration_png(t["runs"], t["rounds"], s, title, path),
       "adaptive": lambda t, s, title, path: f.adaptive_png(s, title, path),
       "headroom": lambda t, s, title, path: f.headroom_png(t[""], s, title, path)}


def replot(folder: Path) -> list[Path]:
    written = []
    for study in APP_STUDIES:
        shipped = load_results(study, folder)
        if shipped is None or study not in PNG:
            continue
        tables, meta = shipped
        path = folder / f"{study}.png"
        PNG[study](tables, meta["summary"], f.shipped_title(study, meta), path)
        written.append(path)
    return written


if __name__ == "__main__":
    folders = [Path(a) for a in sys.argv[1:]] or sorted(d for d in STUDIES_DIR.iterdir() if d.is_dir())
    for folder in folders:
        for path in replot(folder):
            print(f"wrote {path}")
