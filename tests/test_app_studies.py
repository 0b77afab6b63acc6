"""The Studies section's callbacks as plain functions: shipped results, a live run with progress and
Stop, bad input; and the results shipped in assets/studies/<model>/ load with their command, hardware and
date, for the weights of the bundled model they are named after."""

import plotly.graph_objects as go
import pytest
from tiny import app_model

from app.panels.status import stop_pending
from app.panels.studies import callbacks as studies
from app.serving.model_cache import MODELS
from app.serving.models import MODELS_DIR
from app.serving.session import Session
from lopa import DecodeSettings
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
    monkeypatch.setattr(studies, "_base", lambda loaded: DecodeSettings(k=2, block_size=8, max_new_tokens=16,
                                                                                 tau_conf=0.12, tau_add=0.3, tau_act=0.6))
    outs = [named(o) for o in studies.run_study(studies.new_study_state(), study, 1, 2, seed=15)]
    assert "<progress" in outs[-2]["study_progress"] and "Done" in outs[-1]["study_status"]
    assert isinstance(outs[-1]["study_plot"], go.Figure) and outs[-1]["study_summary"].startswith("```")
    done = [int(o["study_progress"].split('value="')[1].split('"')[0]) for o in outs if "value=" in o["study_progress"]]
    assert done == sorted(done) and done[-1] > 1                                      # one step per decode
    # the decodes' cost beside TPF, per decoder, live and at the end
    for progress in (outs[-2]["study_progress"], outs[-1]["study_progress"]):
        assert "<th>TPF</th><th>forwards / decode</th><th>token-forwards / decode</th>" in progress
        assert "<th>wall-clock / decode (s)</th>" in progress and "Fewer forwards can still be slower" in progress


def test_the_live_cost_table_pools_each_decoder_s_decodes():
    rows = [{"problem": 0, "order": "lopa", "tokens": 10, "forwards": 5, "token_forwards": 100, "latency_s": 1.0},
            {"problem": 1, "order": "lopa", "tokens": 20, "forwards": 5, "token_forwards": 300, "latency_s": 3.0},
            {"problem": 0, "order": "vanilla", "tokens": 12, "forwards": 12, "token_forwards": 96, "latency_s": 0.5}]
    table = studies.cost_table(rows)
    assert ('<tr data-decoder="lopa"><td>lopa</td><td>2</td><td>3.00</td><td>5.0</td><td>200</td><td>2.00</td>'
            '<td>7.5</td></tr>') in table
    assert '<tr data-decoder="vanilla"><td>vanilla</td><td>1</td><td>1.00</td><td>12.0</td><td>96</td>' in table
    assert studies.cost_table([]) == ""
    assert 'data-decoder="mean / loo"' in studies.cost_table([{"metric": "mean", "rule": "loo", "tokens": 1}])


@pytest.mark.parametrize("study", ["orders", "headroom"])
def test_stop_ends_a_live_study_after_the_current_decode(study, monkeypatch):
    monkeypatch.setattr(studies, "_base", lambda loaded: DecodeSettings(k=2, block_size=8, max_new_tokens=16))
    state = studies.new_study_state()
    gen = studies.run_study(state, study, 2, 3, seed=15)
    next(gen), next(gen)                                   # started, first decode done
    assert studies.stop_study(state) == stop_pending() and state["stop"]
    last = named(list(gen)[-1])
    # No problem is complete yet: nothing is summarized or plotted (the numbers and the plot describe
    # complete problems only; tests/test_study_progress.py stops after one).
    assert "Stopped before the first problem" in last["study_status"] and last["study_summary"] == ""
    assert studies.stop_study(state) == "Nothing is running."


def test_a_stop_pressed_after_run_but_before_the_run_starts_is_kept(monkeypatch):
    """Run arms the session first (outside the queue); a Stop pressed before the queued run starts stops it
    after its first step instead of being reset by it."""
    monkeypatch.setattr(studies, "_base", lambda loaded: DecodeSettings(k=2, block_size=8, max_new_tokens=16))
    state = studies.new_study_state()
    assert studies.stop_study(state) == "Nothing is running."
    studies.arm_study(state)
    assert studies.stop_study(state) == stop_pending() and state["stop"]      # the run still waits in the queue
    outs = [named(o) for o in studies.run_study(state, "orders", 2, 3, seed=15)]
    assert "Stopped before the first decode" in outs[-1]["study_status"] and len(outs) == 2
    assert not state["running"] and not state["armed"]
    # The API calls run_study without Run's first step: a stale flag from an earlier run does not stop it.
    outs = [named(o) for o in studies.run_study(state, "orders", 1, 1, seed=15)]
    assert "Done:" in outs[-1]["study_status"] and "stopped" not in outs[-1]["study_status"]


def test_stop_reaches_a_headroom_run_inside_its_search(monkeypatch):
    """The search is a problem's long step: it reports each rollout, and Stop is read there."""
    monkeypatch.setattr(studies, "_base", lambda loaded: DecodeSettings(k=2, block_size=8, max_new_tokens=16))
    state = studies.new_study_state()
    gen = studies.run_study(state, "headroom", 2, 1, seed=15)
    for out in map(named, gen):
        if "Searching problem 1" in str(out["study_status"]):
            studies.stop_study(state)
            break
    else:
        pytest.fail("the search reported no round")
    last = named(list(gen)[-1])
    assert "Stopped before the first problem" in last["study_status"]
    # Stopped at the search's first rollout: the 5 plain decodes of problem 1 and that rollout.
    assert 'value="' in last["study_progress"] and int(last["study_progress"].split('value="')[1].split('"')[0]) == 6


@pytest.mark.parametrize("bad, message", [((99, 2), "problems"), ((2, 0), "random orders"), (("x", 2), "whole number")])
def test_live_study_inputs_are_bounded_with_a_message(bad, message):
    out = named(list(studies.run_study(studies.new_study_state(), "orders", *bad, seed=15))[-1])
    assert message in out["study_status"] and "Error" in out["study_status"]
    out = named(list(studies.run_study(studies.new_study_state(), "<b>x</b>", 1, 1, seed=15))[-1])
    assert "study must be one of" in out["study_status"] and "&lt;b&gt;x&lt;/b&gt;" in out["study_status"]


# Each bundled model's shipped results, study by study (a model ships them when its studies are rerun).
SHIPPED = sorted((p.parent.name, p.stem) for p in STUDIES_DIR.glob("*/*.json") if p.stem in STUDIES)


def show_model(monkeypatch, path):
    monkeypatch.setattr(MODELS, "default", path)


def test_shipped_results_are_per_bundled_model():
    assert SHIPPED, "no shipped study results in assets/studies/<model>/: run python -m lopa.study ... --out there"
    assert not list(STUDIES_DIR.glob("*.json")), "shipped results go in assets/studies/<model folder name>/"
    for model, _ in SHIPPED:
        assert (MODELS_DIR / model / "config.json").is_file(), f"assets/studies/{model}/ names no bundled model"


@pytest.mark.parametrize("model, study", SHIPPED)
def test_shipped_results_load_with_command_hardware_and_date(model, study, monkeypatch):
    shipped = load_results(study, STUDIES_DIR / model)
    tables, meta = shipped
    assert meta["command"].startswith(f"python -m lopa.study {study}") and "CPU" in meta["hardware"] and meta["date"]
    show_model(monkeypatch, MODELS_DIR / model)
    out = named(studies.show_shipped(study))
    assert "Shipped results" in out["study_status"] and out["study_plot"] is None
    assert out["study_image"]["value"].endswith(f"{model}/{study}.png") and out["study_image"]["visible"]
    out = named(studies.show_interactive(study))
    assert isinstance(out["study_plot"], go.Figure) and not out["study_image"]["visible"]
    assert meta["hardware"].split(",")[0] in out["study_status"]
    # Shipped results describe the weights that ship: a retrained model needs its studies rerun.
    assert meta["weights_sha256"] == weights_digest(MODELS_DIR / model), \
        f"rerun python -m lopa.study {study} --model assets/models/{model} --out assets/studies/{model}"
    assert "current weights" not in out["study_status"]


def fake_results(root, model: str, study: str = "orders", digest: str = "000000000000") -> None:
    """Shipped-looking results of `study` for `model` under `root`: a copy of a shipped table, our meta."""
    import json
    import shutil
    source_model, _ = next(pair for pair in SHIPPED if pair[1] == study)
    folder = root / model
    folder.mkdir(parents=True, exist_ok=True)
    for path in (STUDIES_DIR / source_model).glob(f"{study}*.parquet"):
        shutil.copy(path, folder / path.name)
    meta = json.loads((STUDIES_DIR / source_model / f"{study}.json").read_text())
    (folder / f"{study}.json").write_text(json.dumps({**meta, "model": model, "weights_sha256": digest}))


def test_the_section_shows_the_results_of_the_model_on_show(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(studies, "STUDIES_ROOT", tmp_path)
    show_model(monkeypatch, tiny_model)
    out = named(studies.show_shipped("orders"))            # none for this model: how to make them
    assert f"No shipped results for **{tiny_model.name}** yet" in out["study_status"]
    assert f"--model {tiny_model} --out {tmp_path / tiny_model.name}" in out["study_status"]
    assert not out["study_image"]["visible"] and out["study_summary"] == ""
    fake_results(tmp_path, "other-model")
    assert "Shipped for **other-model** too" in named(studies.show_shipped("orders"))["study_status"]
    fake_results(tmp_path, tiny_model.name, digest=weights_digest(tiny_model))
    out = named(studies.show_shipped("orders"))
    assert "Shipped results" in out["study_status"] and "current weights" not in out["study_status"]
    assert "Shipped for **other-model** too" in out["study_status"] and "random orders" in out["study_summary"]
    # The session's model wins over the default.
    out = named(studies.show_shipped("orders", Session(model=str(tmp_path / "other-model"))))
    assert "on other-model" in out["study_status"] and "not other-model's current weights" in out["study_status"]


def test_results_from_other_weights_say_so(tiny_model):
    assert studies.stale_note({"weights_sha256": weights_digest(tiny_model)}, tiny_model) == ""
    assert "not tiny-dllm's current weights" in studies.stale_note({"weights_sha256": "000000000000"}, tiny_model)
    assert "not tiny-dllm's current weights" in studies.stale_note({}, tiny_model)


def test_the_shipped_picture_and_the_interactive_plot_are_shown_in_the_order_asked():
    """Both write the section's outputs. In one queue slot of their own, the picture asked first (picking a
    study) cannot land after the interactive plot asked next and replace it, however busy the server."""
    from app import build_demo
    fns = list(build_demo().fns.values())
    views = [fn for fn in fns if fn.api_name and fn.api_name.startswith(("show_shipped", "show_interactive"))]
    (slot,) = {(fn.concurrency_id, fn.concurrency_limit) for fn in views}
    assert len(views) == 5 and slot[1] == 1          # picked, shipped clicked, model warmed or picked; interactive
    assert [fn for fn in fns if fn.concurrency_id == slot[0]] == views
