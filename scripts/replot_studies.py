"""Redraw the shipped studies' PNGs from their shipped tables (no model runs): after a change to the
figure code in lopa/study/figures.py, `python scripts/replot_studies.py [assets/studies/<model> ...]`.
The title is the one the app's interactive plot shows for the same results (figures.shipped_title)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lopa.study import APP_STUDIES, STUDIES  # noqa: E402
from lopa.study.common import STUDIES_DIR, load_results  # noqa: E402
from lopa.study.figures import shipped_title  # noqa: E402


def replot(folder: Path) -> list[Path]:
    """Each app study's PNG (its module's png()) in `folder`, from the shipped tables there."""
    written = []
    for study in APP_STUDIES:
        shipped = load_results(study, folder)
        if shipped is None:
            continue
        tables, meta = shipped
        path = folder / STUDIES[study].file("png")
        STUDIES[study].load().png(tables, meta["summary"], shipped_title(study, meta), path)
        written.append(path)
    return written


if __name__ == "__main__":
    folders = [Path(a) for a in sys.argv[1:]] or sorted(d for d in STUDIES_DIR.iterdir() if d.is_dir())
    for folder in folders:
        for path in replot(folder):
            print(f"wrote {path}")
