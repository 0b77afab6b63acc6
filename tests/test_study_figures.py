"""The studies' figures read as words: titles escaped line by line (no literal <br>), wrapped to the
panel, legends without None or code names, bar labels not clipped; PNGs redrawn from shipped tables."""

import pytest

from app.panels.studies import callbacks as studies
from lopa.study import APP_STUDIES
from lopa.study.common import STUDIES_DIR, load_results
from lopa.study.figures import title_lines

SHIPPED = STUDIES_DIR / "open-gsm-dllm"
LONG = ("open-gsm-dllm (1.4M parameters, cpu); x86_64 CPU, 2 cores, 1 torch thread(s), no GPU, shared: two ship "
        "lanes side by side <script>")


def shipped(study):
    results = load_results(study, SHIPPED)
    if results is None:
        pytest.skip(f"no shipped {study} results in {SHIPPED}")
    return results


def texts(fig) -> list[str]:
    """Every piece of text a plotly figure shows: title, subplot titles, legend names, axis titles, labels."""
    out = [fig.layout.title.text or ""] + [a.text or "" for a in fig.layout.annotations]
    for trace in fig.data:
        out.append(str(trace.name or ""))
        text = getattr(trace, "text", None)
        out += [str(t) for t in (text if isinstance(text, (list, tuple)) else [text] if text else [])]
    for axis in (fig.layout[k] for k in fig.layout if k.startswith(("xaxis", "yaxis"))):
        out.append(axis.title.text or "")
    return out


@pytest.mark.parametrize("study", APP_STUDIES)
def test_shipped_figures_read_as_words(study):
    tables, meta = shipped(study)
    fig = studies.figure(study, tables, meta["summary"], LONG)
    shown = texts(fig)
    assert not any("&lt;br&gt;" in t or "None" in t for t in shown), [t for t in shown if "None" in t or "&lt;br" in t]
    title = fig.layout.title.text
    assert "&lt;script&gt;" in title and "<script>" not in title            # escaped, line by line
    assert all(len(line) <= 55 for line in title.split("<br>"))             # wrapped to the panel
    assert fig.layout.margin.t >= 50 + 18 * len(title.split("<br>"))         # room above the subplot titles
    for trace in fig.data:
        if trace.type == "bar" and trace.textposition == "outside":
            assert trace.cliponaxis is False                                  # "100%" above a bar stays whole
    # each subplot title fits its own panel's share of a phone's width (about 44 characters across)
    domains = [fig.layout[k].domain for k in fig.layout if k.startswith("xaxis") and fig.layout[k].domain]
    for note in fig.layout.annotations:
        share = min((d[1] - d[0] for d in domains if d[0] <= (note.x or 0) <= d[1]), default=1.0)
        words = [w for w in (note.text or "").split("<br>") if " " in w]     # a single long word cannot break
        assert all(len(line) <= max(8, int(44 * share)) for line in words), (note.text, share)


def test_title_lines_wrap_at_spaces_and_keep_breaks():
    lines = title_lines(LONG + "\nLoPA closes 51% of the gap", 40)
    assert all(len(line) <= 40 for line in lines) and lines[-1] == "LoPA closes 51% of the gap"
    assert " ".join(lines[:-1]) == LONG


@pytest.mark.parametrize("study", APP_STUDIES)
def test_the_png_is_redrawn_from_shipped_tables(study, tmp_path):
    pytest.importorskip("matplotlib")
    import shutil
    import sys
    from pathlib import Path
    shipped(study)
    folder = tmp_path / "model"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("*.png"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from replot_studies import replot
    assert folder / f"{study}.png" in replot(folder)
    assert (folder / f"{study}.png").stat().st_size > 10_000


def test_the_shown_command_drops_the_hardware_note():
    command = ("python -m lopa.study orders --n 200 --hardware-note 'shared: two ship lanes side by side' "
               "--hardware-note=x --out assets/studies/open-gsm-dllm")
    assert studies.shown_command(command) == "python -m lopa.study orders --n 200 --out assets/studies/open-gsm-dllm"


def test_app_study_titles_are_numbered_as_listed():
    assert [t.split(". ")[0] for t in studies.titles().values()] == [str(i) for i in range(1, len(studies.titles()) + 1)]
