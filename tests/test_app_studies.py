"""The Studies section's callbacks as plain functions: shipped results, a live run with progress and
Stop, bad input; and the results shipped in assets/studies/ load with their command, hardware and date."""

import plotly.graph_objects as go
import pytest
from tiny import app_model

from app import studies
from lopa.models import DEFAULT_MODEL
from lopa.study import APP_STUDIES as STUDIES
from lopa.study.common import STUDIES_DIR, load_results, weights_digest

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")     # gr.Warning outside a request


@pytest.fixture(scope="module", autouse=True)
def tiny_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def named(outputs):
    assert len(outputs) == len(studies.STUDY_OUTPUTS)
    return dict(zip(studies.STUDY_OUTPUTS, outputs))


@pytest.mark.parametrize("study", STUDIES)
def test_a_live_study_streams_progress_and_ends_with_its_plot(study, monkeypatch):
    monkeypatch.setattr(studies, "_base", lambda loaded: studies.DecodeSettings(k=2, block_size=8, max_new_tokens=16,
                                                                                 tau_conf=0.12, tau_add=0.3, tau_act=0.6))
    outs = [named(o) for o in studies.run_study(studies.new_study_state(), study, 1, 2, 15)]
    assert "<progress" in outs[-2]["study_progress"] and "Done" in outs[-1]["study_status"]
    assert isinstance(outs[-1]["study_plot"], go.Figure) and outs[-1]["study_summary"].startswith("```")
    done = [int(o["study_progress"].split('value="')[1].split('"')[0]) for o in outs if "value=" in o["study_progress"]]
    assert done == sorted(done) and done[-1] > 1                                      # one step per decode


def test_stop_ends_a_live_study_after_the_current_decode(monkeypatch):
    monkeypatch.setattr(studies, "_base", lambda loaded: studies.DecodeSettings(k=2, block_size=8, max_new_tokens=16))
    state = studies.new_study_state()
    gen = studies.run_study(state, "orders", 2, 3, 15)
    next(gen), next(gen)                                   # started, first decode done
    assert "Stopping" in studies.stop_study(state)
    last = named(list(gen)[-1])
    assert "stopped" in last["study_status"] and isinstance(last["study_plot"], go.Figure)
    assert studies.stop_study(state) == "Nothing is running."


@pytest.mark.parametrize("bad, message", [((99, 2), "problems"), ((2, 0), "random orders"), (("x", 2), "whole number")])
def test_live_study_inputs_are_bounded_with_a_message(bad, message):
    out = named(list(studies.run_study(studies.new_study_state(), "orders", *bad, 15))[-1])
    assert message in out["study_status"] and "Error" in out["study_status"]
    out = named(list(studies.run_study(studies.new_study_state(), "<b>x</b>", 1, 1, 15))[-1])
    assert "unknown study" in out["study_status"]


@pytest.mark.parametrize("study", STUDIES)
def test_shipped_results_load_with_command_hardware_and_date(study):
    shipped = load_results(study, STUDIES_DIR)
    assert shipped is not None, f"assets/studies/{study}.json is missing: run python -m lopa.study {study}"
    tables, meta = shipped
    assert meta["command"].startswith(f"python -m lopa.study {study}") and "CPU" in meta["hardware"] and meta["date"]
    out = named(studies.show_shipped(study))
    assert "Shipped results" in out["study_status"] and out["study_plot"] is None
    assert out["study_image"]["value"].endswith(f"{study}.png") and out["study_image"]["visible"]
    out = named(studies.show_interactive(study))
    assert isinstance(out["study_plot"], go.Figure) and not out["study_image"]["visible"]
    assert meta["hardware"].split(",")[0] in out["study_status"]
    # Shipped results describe the weights that ship: a retrained model needs the studies rerun.
    assert meta["weights_sha256"] == weights_digest(DEFAULT_MODEL), f"rerun python -m lopa.study {study} on the bundled model"
    assert "not the bundled model's current weights" not in out["study_status"]


def test_results_from_other_weights_say_so():
    assert studies.stale_note({"weights_sha256": weights_digest(DEFAULT_MODEL)}) == ""
    assert "not the bundled model's current weights" in studies.stale_note({"weights_sha256": "000000000000"})
    assert "not the bundled model's current weights" in studies.stale_note({})
