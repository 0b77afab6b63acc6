"""What-if forks, the run list and the comparison of any two runs, through the app's callbacks
(plain functions, no server) on a tiny random model."""

import dataclasses
import json

import gradio as gr
import pytest
from tiny import app_model

from app.panels import forks, traces
from app.panels.compare import COMPARE_OUTPUTS, compare_runs
from app.panels.round_view import callbacks as cb
from app.panels.round_view import views
from app.serving.request import read_request
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session
from visualizations.timeline import fills

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32, confidence="max_prob",
                attention="block_causal", temperature=0.0, seed=0)


def values(order="confidence", order_seed=0, lookahead_min_prob=0.0, **changes):
    chosen = {**SETTINGS, "order": order, "order_seed": order_seed, "lookahead_min_prob": lookahead_min_prob, **changes}
    return [chosen[n] for n in SETTING_NAMES] + [SINGLE, 2]


@pytest.fixture(scope="module", autouse=True)
def tiny_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def live(outputs):
    return dict(zip(views.LIVE_OUTPUTS, outputs))


def decoded(session, *args):
    outs = [live(o) for o in cb.run_stream(session, PROMPT, *args)]
    return outs[-1]


def late_filled_cell(run, r):
    """A position still masked after round r that the run fills after round r + 1."""
    done = fills(run.records)
    rec = run.records[r]
    return next(p for p in rec.branch_positions[rec.winner] if p in done and done[p].round > r + 1)


def test_the_order_selector_reaches_the_engine():
    settings = read_request(values("random", 7)).resolve()
    assert settings.order == "random" and settings.order_seed == 7
    session = Session()
    last = decoded(session, *values("left_to_right"))
    assert session.run.settings["order"] == "left_to_right" and last["status"].startswith("Done")
    with pytest.raises(ValueError, match="order must be one of"):
        read_request(values("sideways"))
    # the lookahead floor is an order input too: it reaches the engine and names the run
    last = decoded(session, *values(lookahead_min_prob=0.5))
    assert session.run.settings["lookahead_min_prob"] == 0.5 and "floor 0.5" in last["run_list"]["choices"][-1][0]
    with pytest.raises(ValueError, match=r"lookahead_min_prob must be in \[0, 1\)"):
        read_request(values(lookahead_min_prob=1.0))


def test_click_fill_first_fork_appears_in_the_run_list_and_compares():
    session = Session()
    last = decoded(session, *values())
    assert [value for _, value in last["run_list"]["choices"]] == ["1"] and last["run_list"]["value"] == "1"
    parent = session.run
    r = 2
    p = late_filled_cell(parent, r)
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, f"{r}:{p}:123")))
    assert panel["whatif_panel"]["visible"] and f"position {p}" in panel["whatif_info"]
    tokens = [value for _, value in panel["whatif_token"]["choices"]]
    assert len(tokens) == 5 and panel["whatif_target"] == {"run": "1", "round": r, "position": p}
    second = tokens[1]                                   # fill with the model's second choice
    outs = [live(o) for o in forks.fill_first(session, panel["whatif_target"], second)]
    child = session.run
    assert session.current == "1.1" and child.forked_from == {"run_id": parent.run_id, "round": r}
    assert child.records[:r + 1] == parent.records[:r + 1]
    step = child.records[r + 1]
    assert {"action": "commit", "position": p, "token": int(second)} in step.forced
    counted = [int(o["counters"].split('data-rounds="')[1].split('"')[0]) for o in outs]
    assert counted[-1] == len(child.records) and outs[-1]["status"].startswith("Done")
    ids = [value for _, value in outs[-1]["run_list"]["choices"]]
    assert ids == ["1", "1.1"] and outs[-1]["run_list"]["value"] == "1.1"
    label = dict((v, k) for k, v in outs[-1]["run_list"]["choices"])["1.1"]
    assert "rounds" in label and "TPF" in label and ("answer changed" in label or "same answer" in label)
    assert (outs[-1]["compare_a"]["value"], outs[-1]["compare_b"]["value"]) == ("1", "1.1")
    # The what-if panel then names the fork shown, and offers the parent's cell no more.
    after = dict(zip(forks.WHATIF_OUTPUTS, forks.after_fork(session, panel["whatif_target"])))
    assert "into run 1.1, shown now" in after["whatif_info"] and after["whatif_target"] is None
    assert not after["fill_first"]["interactive"] and not after["hold_back"]["interactive"]
    # Compare the fork with its parent: the forced position is filled in a different round.
    out = dict(zip(COMPARE_OUTPUTS, compare_runs(session, "1", "1.1")))
    assert f"first diverge in round {r + 1}" in out["compare_summary"] and "Speed-up" in out["compare_summary"]
    assert f'data-position="{p}" data-differs="1"' in out["compare_diff"]
    assert f'data-first-divergence="{r + 1}"' in out["compare_diff"]
    assert any(trace.type == "scatter" for trace in out["lopa_tfo"].data)       # outlined positions
    # Hold back, forked from the fork (a fork of a fork), delays the position by at least a round.
    q = late_filled_cell(child, r + 1)
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, f"{r + 1}:{q}:124")))
    list(forks.hold_back(session, panel["whatif_target"]))
    grandchild = session.run
    assert session.current == "1.1.1" and q not in fills(grandchild.records, r + 2)
    assert {"action": "hold", "position": q} in grandchild.records[r + 2].forced
    # Select the original again.
    shown = live(cb.select_run(session, "1"))
    assert session.run is parent and "Showing run 1" in shown["status"]


@pytest.mark.parametrize("rule", ["eb", "stable"])
def test_a_peer_s_run_and_its_forks_take_its_rule(rule):
    """A peer's commit rule (and its knob) chosen in the settings reaches the engine, names the run, shows in the
    counters, and a fork of the run decodes under the same settings; at k = 0 the branches panel says in one line
    that there is no branch to compare."""
    session = Session()
    chosen = dict(commit=rule, confidence="neg_entropy", eb_gamma=0.4, stable_js=0.2)
    last = decoded(session, *values(**chosen))
    parent = session.run
    assert {name: parent.settings[name] for name in chosen} == chosen
    assert f"commit {rule}" in last["run_list"]["choices"][-1][0] and 'data-counter="commit"' in last["counters"]
    assert "lopa-no-branches" not in last["branches"]            # k = 3: LoPA's branches over the rule
    r = 1
    p = late_filled_cell(parent, r)
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, f"{r}:{p}:7")))
    list(forks.fill_first(session, panel["whatif_target"], [v for _, v in panel["whatif_token"]["choices"]][0]))
    child = session.run
    assert child.forked_from == {"run_id": parent.run_id, "round": r} and child.settings == parent.settings
    vanilla = Session()
    decoded(vanilla, *values(k=0, **chosen))
    view = dict(zip(views.VIEW_OUTPUTS, cb.show_round(vanilla, 1)))
    assert "lopa-no-branches" in view["branches"] and "<table" not in view["branches"]
    assert view["branches"].count("</div>") == 1                 # one line in place of the table
    assert "lopa-canvas" in view["canvas"] and view["heatmap"] is not None    # the same canvas and heatmap


def test_a_finished_run_rests_on_its_final_round_at_the_end_of_the_slider():
    session = Session()
    decoded(session, *values())
    run = session.run
    final = dataclasses.replace(run.records[-1], round=len(run.records), kind="final")
    session.run = dataclasses.replace(run, records=run.records + [final])
    out = live(views.live_outputs(session, "done"))
    assert f'data-round="{len(run.records)}"' in out["canvas"]
    assert out["round_slider"]["value"] == out["round_slider"]["maximum"] == len(run.records)


def test_a_loaded_trace_is_viewed_and_compared_and_forks_say_they_need_its_model(tmp_path):
    session = Session()
    decoded(session, *values())
    data = json.loads(session.run.to_json())
    data["spec"]["name"] = "some-7b-model"
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(data))
    out = live(traces.load_trace(session, str(path)))
    assert "Replaying" in out["status"] and session.current == "2"
    compared = dict(zip(COMPARE_OUTPUTS, compare_runs(session, "1", "2")))
    assert "same decisions in every round" in compared["compare_summary"]
    r = 1
    rec = session.run.records[r]
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, f"{r}:{rec.branch_positions[rec.winner][-1]}:1")))
    assert "forks need the model this run was made with (`some-7b-model`)" in panel["whatif_info"]
    assert panel["fill_first"]["interactive"] is False and panel["hold_back"]["interactive"] is False
    last = live(list(forks.hold_back(session, {"run": "2", "round": 1, "position": 0}))[-1])
    assert "forks need the model" in last["status"]


def test_a_loaded_trace_of_the_loaded_model_forks_by_replaying_it(tmp_path):
    session = Session()
    decoded(session, *values())
    original = session.run
    live(traces.load_trace(session, str(original.save(tmp_path / "run.json"))))
    assert session.run.decoder is None                      # no saved states: the fork replays rounds 0..r
    r = 1
    p = late_filled_cell(original, r)
    list(forks.fill_first(session, {"run": session.current, "round": r, "position": p}, str(original.tokens[p])))
    fork = session.run
    assert fork.records[:r + 1] == original.records[:r + 1] and p in fork.records[r + 1].anchor_positions


def test_bad_clicks_and_selections_answer_plainly():
    session = Session()
    assert forks.pick_cell(session, "junk") == tuple(gr.skip() for _ in forks.WHATIF_OUTPUTS)
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, "1:3:9")))
    assert "Run a decode" in panel["whatif_info"]
    decoded(session, *values())
    # a position the run had already filled by round 2 (which one depends on the model's logits)
    early = next(p for p, fill in fills(session.run.records).items() if fill.round < 2)
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, f"2:{early}:9")))
    assert "is not masked after round 2" in panel["whatif_info"]
    assert "no run" in live(cb.select_run(session, "9"))["status"]
    assert "pick two runs" in compare_runs(session, "1", None)[0]
