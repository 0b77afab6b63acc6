"""A study is declared once (lopa/study/declaration.py) and every surface comes from the declaration: a
study written as one new file in lopa/study/ is a command (`python -m lopa.study --help` lists it, its
own --help has its knobs, in range), a choice of the app's study dropdown with an input for its live
knob, and a live run that hands its live() its own knobs only; the shipped file names are the ones the
declarations say."""

import importlib
import sys
import textwrap

import gradio as gr
import pytest
from tiny import app_model

import lopa.study
from lopa import DecodeSettings
from lopa.study import Knob, Study
from lopa.study.common import STUDIES_DIR

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")     # gr.Warning outside a request

TOY = '''
"""A toy study: each problem decoded `laps` times."""

from lopa.study.common import decode_one
from lopa.study.declaration import Knob, Study

STUDY = Study("toy", "A toy study", rank=99, n=1, figure=True, app=True, units="laps",
              knobs=(Knob("laps", int, 2, "decodes per problem (default 2)", low=1, live=(1, 3, 2)),))


def live(loaded, problems, base, laps):
    total = len(problems) * laps
    for i, problem in enumerate(problems):
        for lap in range(laps):
            _, row = decode_one(loaded, base, problem)
            yield {"done": i * laps + lap + 1, "total": total, "row": {**row, "lap": lap}, "rounds": [],
                   **({"complete": problem["id"]} if lap == laps - 1 else {})}


def live_summary(rows, rounds):
    import pandas as pd
    df = pd.DataFrame(rows)
    return {"problems": int(df.problem.nunique()), "laps": len(df)}, {"": df}


def figure(tables, summary, title):
    import plotly.graph_objects as go
    return go.Figure(layout={"title": title})


def png(tables, summary, title, path):
    path.write_bytes(b"")


def report(summary):
    return f"{summary['laps']} laps"


def main(argv=None):
    args = STUDY.parse(argv)
    print(f"laps {args.laps}")
    return 0
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """lopa.study with one more module, toy.py, in a folder of the package (as a new file in lopa/study/ is)."""
    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    (tmp_path / "helper.py").write_text("raise AssertionError('a module that declares no study is never imported')\n")
    monkeypatch.setattr(lopa.study, "__path__", [*lopa.study.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    lopa.study.discover.cache_clear()
    yield lopa.study.STUDIES["toy"]
    sys.modules.pop("lopa.study.toy", None)
    lopa.study.discover.cache_clear()


def test_a_study_in_one_new_file_is_a_command_with_its_knobs(toy, capsys):
    assert toy.module == "toy" and list(lopa.study.STUDIES)[-1] == "toy"
    assert lopa.study.main(["--help"]) == 0
    assert "  toy             A toy study" in capsys.readouterr().out.splitlines()
    with pytest.raises(SystemExit):
        lopa.study.main(["toy", "--help"])
    shown = capsys.readouterr().out
    assert "--laps LAPS" in shown and "decodes per problem (default 2)" in shown and "each problem decoded" in shown
    assert lopa.study.main(["toy", "--laps", "3"]) == 0 and capsys.readouterr().out.strip().endswith("laps 3")
    with pytest.raises(SystemExit):
        lopa.study.main(["toy", "--laps", "0"])
    assert "--laps must be in [1, inf]; got 0" in capsys.readouterr().err


def test_a_study_in_one_new_file_is_in_the_apps_list_with_an_input_for_its_live_knob(toy):
    from app.panels.studies import build_studies_panel
    from app.panels.studies import callbacks as studies
    last = f"{len(studies.study_choices())}. A toy study"        # it ranks after every shipped study
    assert studies.study_choices()[-1] == (last, "toy")
    assert studies.live_knobs()["laps"][1] == ("toy",) and studies.live_knobs()["random"][1] == ("orders", "headroom")
    assert "laps" in studies.run_signature().parameters
    with gr.Blocks():
        panel = build_studies_panel()
    assert (last, "toy") in panel["study"].choices
    assert panel["study_laps"].label == "laps (toy)" and panel["study_laps"].value == 2
    assert panel["study_random"].label == "random orders (orders, headroom)" and panel["study_random"].value == 5
    assert studies.knob_keys() == ["study_random", "study_values", "study_laps"]


@pytest.fixture
def tiny_app_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def test_a_live_run_hands_a_study_its_own_knobs_only(toy, tiny_app_model, monkeypatch):
    """The toy's live() takes `laps` and nothing else: the app's other knob (random orders) never reaches it."""
    from app.panels.studies import callbacks as studies
    monkeypatch.setattr(studies, "_base", lambda loaded: DecodeSettings(k=2, block_size=8, max_new_tokens=8))
    outs = list(studies.run_study(studies.new_study_state(), "toy", 1, laps=3))
    assert "Done" in outs[-1][0] and "3 laps" in outs[-1][4] and "3 / 3 laps" in outs[-1][1]
    refused = list(studies.run_study(studies.new_study_state(), "toy", 1, laps=9))[-1][0]
    assert "laps" in refused and "9" in refused


def test_the_knobs_check_their_range():
    knob = Knob("random", int, 20, "random orders", low=0, high=50)
    assert knob.flag == "--random" and knob.check(0) == 0 and knob.check(None) is None
    with pytest.raises(ValueError, match=r"--random must be in \[0, 50\]; got 51"):
        knob.check(51)
    assert Knob("k_max", int, 14, "").flag == "--k-max" and Knob("k_max", int, 14, "").words == "k max"


def test_the_shipped_files_are_the_ones_the_declarations_name():
    folders = [d for d in STUDIES_DIR.iterdir() if d.is_dir()]
    assert folders
    for folder in folders:
        for name, study in lopa.study.STUDIES.items():        # the app's and the command line's alike
            if not (folder / study.file("json")).is_file():
                continue                                # not shipped for this model
            shipped = sorted(p.name for p in folder.iterdir() if p.name.split(".")[0] in
                             {name, *(f"{name}_{suffix}" for suffix in study.tables)})
            assert shipped == sorted(study.files()), (folder.name, name)


def test_a_study_without_a_module_finds_its_own_through_the_registry():
    orders = lopa.study.STUDIES["orders"].load()
    assert orders.STUDY.module == "" and orders.STUDY.load() is orders
    assert Study("x", "X", rank=1).varies_k is False and lopa.study.STUDIES["adaptive"].varies_k


def test_each_app_study_s_live_run_takes_its_declared_knobs_and_no_other():
    """What the boundary hands live() is the study's own live knobs: calibration and adaptive declare none."""
    import inspect
    taken = {name: list(inspect.signature(lopa.study.STUDIES[name].load().live).parameters)[3:]
             for name in lopa.study.APP_STUDIES}
    assert taken == {name: [k.name for k in lopa.study.STUDIES[name].live_knobs] for name in lopa.study.APP_STUDIES}
    assert taken == {"orders": ["random"], "calibration": [], "adaptive": [], "headroom": ["random"],
                     "frontier": ["values"], "depth": []}


def test_two_studies_of_one_name_are_refused(tmp_path, monkeypatch):
    (tmp_path / "again.py").write_text('from lopa.study.declaration import Study\n\nSTUDY = Study("orders", "Again", rank=1)\n')
    monkeypatch.setattr(lopa.study, "__path__", [*lopa.study.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    lopa.study.discover.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="two studies are called 'orders'"):
            lopa.study.discover()
    finally:
        sys.modules.pop("lopa.study.again", None)
        lopa.study.discover.cache_clear()
