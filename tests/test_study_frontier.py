"""The frontier study: its fronts and its goal on hand-made rows with known answers, its cells, and the
study end to end on a tiny model (2 problems), each row checked against the same decode run by hand."""

import json

import pandas as pd
import pytest
from tiny import study_setup

from lopa import DecodeSettings
from lopa.study import STUDIES, frontier

FLAGS = ["--block-size", "8", "--max-new-tokens", "16", "--tau-add", "0.3", "--tau-act", "0.6", "--confidence", "max_prob"]


def cell(name, accuracy, tpf, token_forwards, tps, rule="threshold", k=0):
    return {"cell": name, "rule": rule, "knob": "tau_conf", "value": 0.9, "k": k, "accuracy": accuracy, "tpf": tpf,
            "token_forwards": token_forwards, "tps": tps}


# -- the fronts and the goal on hand-made rows --------------------------------------------------------
def test_each_front_keeps_the_cells_no_other_beats_on_accuracy_and_that_measure():
    rows = frontier.fronts([
        cell("a", 0.90, 4.0, 500, 200),     # the fewest token-forwards at the top accuracy: on that front
        cell("b", 0.90, 8.0, 900, 100),     # the most TPF at the top accuracy
        cell("c", 0.80, 9.0, 400, 300),     # less accurate, but the most TPF, fewest token-forwards, most tokens/s
        cell("d", 0.80, 3.0, 600, 150),     # beaten by a on every measure
        cell("e", 0.90, 8.0, 900, 100),     # b's twin: a tie dominates neither
    ])
    front = {m: [r["cell"] for r in rows if r[f"front_{m}"]] for m in ("tpf", "token_forwards", "tps")}
    assert front == {"tpf": ["b", "c", "e"],
                     "token_forwards": ["a", "c"],             # fewer is better: a beats b and e here
                     "tps": ["a", "c"]}
    assert [r["cell"] for r in rows if r["front_all"]] == ["c"]


def test_an_ungraded_table_ranks_by_the_measure_alone():
    rows = frontier.fronts([cell("a", None, 4.0, 500, 200), cell("b", None, 8.0, 900, 100)])
    assert [(r["front_tpf"], r["front_token_forwards"], r["front_tps"]) for r in rows] == [(False, True, True),
                                                                                           (True, False, False)]


def test_the_goal_asks_for_d2f_s_accuracy_lopa_s_tpf_and_twice_d2f_s_tokens_per_second():
    rows = [cell("d2f", 0.90, 4.0, 500, 100), cell("lopa", 0.91, 10.0, 2000, 60, k=14),
            cell("near", 0.895, 10.0, 400, 200),   # 0.5 points down, LoPA's TPF, 2x D2F's tokens/s: reaches it
            cell("slow", 0.90, 12.0, 400, 199),    # just under 2x
            cell("wrong", 0.88, 12.0, 400, 300),   # 2 points down
            cell("short", 0.90, 9.9, 400, 300)]    # under LoPA's TPF
    refs = frontier.goal(rows, {"d2f": "d2f", "lopa": "lopa"})
    assert refs["reached_by"] == ["near"]
    near = rows[2]
    assert near["accuracy_points_vs_d2f"] == pytest.approx(-0.5)
    assert (near["tpf_over_lopa"], near["tps_over_d2f"]) == (pytest.approx(1.0), pytest.approx(2.0))
    assert rows[3]["tps_over_d2f"] == pytest.approx(1.99) and not rows[3]["goal"]
    assert frontier.goal(rows, {"d2f": "d2f", "lopa": "absent"}) is None


def test_the_summary_pools_each_cell_and_finds_the_references_from_the_table():
    df = pd.DataFrame([  # two problems; D2F, LoPA and one eb cell
        {"problem": p, "cell": c, "rule": r, "knob": kn, "value": v, "own_value": True, "k": k, "tokens": t,
         "forwards": f, "latency_s": s, "token_forwards": tf, "correct": ok}
        for p, c, r, kn, v, k, t, f, s, tf, ok in [
            (0, "threshold tau_conf=0.9 k=0", "threshold", "tau_conf", 0.9, 0, 20, 10, 0.1, 300, 1.0),
            (1, "threshold tau_conf=0.9 k=0", "threshold", "tau_conf", 0.9, 0, 40, 10, 0.3, 500, 0.0),
            (0, "threshold tau_conf=0.9 k=4", "threshold", "tau_conf", 0.9, 4, 20, 4, 0.2, 900, 1.0),
            (1, "threshold tau_conf=0.9 k=4", "threshold", "tau_conf", 0.9, 4, 40, 6, 0.2, 1100, 1.0),
            (0, "eb eb_gamma=1 k=0", "eb", "eb_gamma", 1.0, 0, 20, 2, 0.05, 100, 1.0),
            (1, "eb eb_gamma=1 k=0", "eb", "eb_gamma", 1.0, 0, 40, 3, 0.05, 100, 0.0)]])
    s = frontier.summarize_frontier(df)
    by = {r["cell"]: r for r in s["cells"]}
    d2f = by["threshold tau_conf=0.9 k=0"]
    assert (d2f["accuracy"], d2f["tpf"], d2f["token_forwards"], d2f["tps"]) == (0.5, 3.0, 400, pytest.approx(150))
    assert s["goal"]["d2f"] == "threshold tau_conf=0.9 k=0" and s["goal"]["lopa"] == "threshold tau_conf=0.9 k=4"
    eb = by["eb eb_gamma=1 k=0"]          # TPF 12 >= LoPA's 6, 600 tokens/s = 4x D2F's, D2F's accuracy
    assert eb["goal"] and s["goal"]["reached_by"] == ["eb eb_gamma=1 k=0"]
    assert s["lopa"]["front"] == {"tpf": True, "token_forwards": True, "tps": True}   # the only one at 100%
    # eb matches D2F's accuracy and beats it on all three; LoPA too, on TPF and tokens/s (more accurate).
    assert s["d2f"]["front"] == {"tpf": False, "token_forwards": False, "tps": False}
    assert s["d2f"]["dominated_by"] == {"tpf": 2, "token_forwards": 1, "tps": 2}
    assert s["d2f"]["best"] == {"tpf": 12.0, "token_forwards": 100, "tps": pytest.approx(600)}
    assert "reached by" not in frontier.report(s) and "eb eb_gamma=1 k=0" in frontier.report(s).splitlines()[-1]


def test_each_rule_sweeps_its_own_knob_from_the_settings_own_value():
    base = DecodeSettings(tau_conf=0.8, eb_gamma=0.3, confidence="max_prob")
    configs = frontier.cells(base, ("threshold", "eb"), 2, (0, 4))
    assert [(name, own) for name, _, own in configs] == [
        ("threshold tau_conf=0.8 k=0", True), ("threshold tau_conf=0.8 k=4", True),
        ("threshold tau_conf=0.7 k=0", False), ("threshold tau_conf=0.7 k=4", False),
        ("eb eb_gamma=0.3 k=0", True), ("eb eb_gamma=0.3 k=4", True),
        ("eb eb_gamma=1 k=0", False), ("eb eb_gamma=1 k=4", False)]
    eb = configs[-1][1]
    assert (eb.commit, eb.eb_gamma, eb.k, eb.confidence) == ("eb", 1.0, 4, "neg_entropy")   # eb reads entropy
    assert frontier.sweep_values(DecodeSettings(tau_conf=0.7), "threshold", 3) == [0.7, 0.5]  # no value twice


def test_the_command_line_refuses_an_unknown_rule_or_k_naming_the_flag(capsys):
    for flags, words in ((["--rules", "bogus"], "--rules: unknown rule 'bogus'"), (["--ks", "x"], "--ks: whole numbers"),
                         (["--ks", "0,-1"], "--ks: give k from 0 to"), (["--values", "4"], "--values must be in [1, 3]")):
        with pytest.raises(SystemExit):
            frontier.main(flags)
        assert words in capsys.readouterr().err, flags


# -- end to end on a tiny model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    return study_setup(tmp_path_factory.mktemp("frontier"))


def test_the_study_writes_its_files_and_each_row_is_that_decode(tiny_setup):
    from lopa.models import load
    from lopa.study.common import decode_one
    model, data, root = tiny_setup
    out = root / "out"
    assert frontier.main(["--model", str(model), "--data", str(data), "--n", "2", "--rules", "threshold,eb,stable",
                          "--values", "2", "--ks", "0,2", "--out", str(out), *FLAGS]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(STUDIES["frontier"].files())
    df = pd.read_parquet(out / "frontier.parquet")
    assert len(df) == 2 * 3 * 2 * 2 and set(df.rule) == {"threshold", "eb", "stable"}
    meta = json.loads((out / "frontier.json").read_text())
    assert meta["command"].startswith("python -m lopa.study frontier") and "CPU" in meta["hardware"] and meta["date"]
    summary = meta["summary"]
    assert summary["problems"] == 2 and len(summary["cells"]) == 12
    assert summary["goal"]["d2f"] == "threshold tau_conf=0.9 k=0" and summary["goal"]["lopa"] == "threshold tau_conf=0.9 k=2"
    for r in summary["cells"]:              # pooled from the table's own rows
        rows = df[df.cell == r["cell"]]
        assert r["tpf"] == pytest.approx(rows.tokens.sum() / rows.forwards.sum())
        assert r["token_forwards"] == pytest.approx(rows.token_forwards.mean())
    loaded = load(str(model), device="cpu")
    problem = {"id": 1, **json.loads(data.read_text().splitlines()[1])}
    base = DecodeSettings(**meta["settings"])             # what the study's flags resolved to on the model
    for name, settings, _ in frontier.cells(base, ("stable", "eb"), 2, (2,)):
        run, row = decode_one(loaded, settings, problem, data=str(data))
        mine = df[(df.problem == 1) & (df.cell == name)].iloc[0]
        assert (mine.forwards, mine.tokens, mine.token_forwards) == (row["forwards"], row["tokens"],
                                                                     run.metrics()["token_forwards"]), name


def test_a_live_run_counts_every_decode_and_names_the_references(tiny_setup):
    from tiny import save_commit_filter

    from lopa.models import load
    model, data, _ = tiny_setup
    base = DecodeSettings(k=0, block_size=8, max_new_tokens=16, tau_add=0.3, tau_act=0.6, confidence="max_prob")
    without = tuple(r for r in frontier.RULES if r != "learned")
    assert frontier.runnable(load(str(model), device="cpu"), frontier.RULES, base) == without
    save_commit_filter(model, "max_prob")                      # with a filter for the run's Conf, every rule runs
    loaded = load(str(model), device="cpu")
    assert frontier.runnable(loaded, frontier.RULES, base.replace(confidence="neg_entropy")) == without
    problems = [{"id": i, **json.loads(line)} for i, line in enumerate(data.read_text().splitlines())]
    steps = list(frontier.live(loaded, problems, base, **STUDIES["frontier"].live_values({"values": 1})))
    per_problem = len(frontier.RULES) * 2                      # one value each, k = 0 and the live k
    assert [s["done"] for s in steps] == list(range(1, 2 * per_problem + 1))
    assert {s["total"] for s in steps} == {2 * per_problem}
    assert [s["complete"] for s in steps if "complete" in s] == [0, 1]
    summary, tables = frontier.live_summary([s["row"] for s in steps], [])
    assert summary["goal"]["lopa"].endswith(f"k={frontier.LIVE_K}")     # the app's k is 0: LIVE_K
    assert len(tables[""]) == 2 * per_problem


def test_editing_is_a_knob_of_every_cell(tiny_setup):
    """--editing off,on runs every cell twice; the editing cells are named "+edit" and decode with the run's
    edit_threshold, the references without; on, for a run that does not edit, is refused with what to do."""
    model, data, root = tiny_setup
    base = DecodeSettings(edit_threshold=0.6)
    assert frontier.editing_thresholds(base, "off,on") == [1.0, 0.6]
    configs = frontier.cells(base, ("threshold", "joint"), 1, (0, 2), [1.0, 0.6])
    assert [name for name, _, _ in configs][:2] == ["threshold tau_conf=0.9 k=0", "threshold tau_conf=0.9 k=0 +edit"]
    assert [s.edit_threshold for _, s, _ in configs] == [1.0, 0.6] * 4
    with pytest.raises(ValueError, match="edit-threshold"):
        frontier.editing_thresholds(DecodeSettings(), "on")
    out = root / "editing"
    assert frontier.main(["--model", str(model), "--data", str(data), "--n", "2", "--rules", "threshold",
                          "--values", "1", "--ks", "0,2", "--editing", "off,on", "--edit-threshold", "0.5",
                          "--out", str(out), *FLAGS]) == 0
    meta = json.loads((out / "frontier.json").read_text())
    cells = {c["cell"]: c for c in meta["summary"]["cells"]}
    assert set(cells) == {"threshold tau_conf=0.9 k=0", "threshold tau_conf=0.9 k=2",
                          "threshold tau_conf=0.9 k=0 +edit", "threshold tau_conf=0.9 k=2 +edit"}
    assert meta["summary"]["goal"]["d2f"] == "threshold tau_conf=0.9 k=0"
    assert not cells["threshold tau_conf=0.9 k=0"]["editing"] and cells["threshold tau_conf=0.9 k=0 +edit"]["editing"]
    assert cells["threshold tau_conf=0.9 k=0"]["edits"] == 0
    assert {"fixed_by_editing", "broken_by_editing"} <= set(cells["threshold tau_conf=0.9 k=2 +edit"])


def test_standings_place_each_rule_against_lopa_and_the_best_other_rule():
    """Hand-made cells: D2F 90%; the goal's accuracy floor is 89%. threshold's fastest accurate cell is LoPA's
    reference itself; dawn's fastest accurate cell runs 300 tokens/s (its 500-tokens/s cell is too inaccurate);
    learned has no accurate cell."""
    def cell(name, rule, acc, tps, tpf):
        return {"cell": name, "rule": rule, "accuracy": acc, "tps": tps, "tpf": tpf}
    rows = [cell("d2f", "threshold", 0.90, 100.0, 3.0), cell("lopa", "threshold", 0.90, 150.0, 6.0),
            cell("dawn a", "dawn", 0.895, 300.0, 9.0), cell("dawn b", "dawn", 0.80, 500.0, 12.0),
            cell("learned a", "learned", 0.85, 900.0, 15.0)]
    st = {s["rule"]: s for s in frontier.standings(rows, {"d2f": "d2f", "lopa": "lopa"})}
    assert st["threshold"]["cell"] == "lopa" and st["threshold"]["best_other_tps"] == "dawn a"
    assert st["dawn"]["cell"] == "dawn a" and st["dawn"]["tps_over_lopa"] == pytest.approx(2.0)
    assert st["dawn"]["tps_over_best_other"] == pytest.approx(2.0) and st["dawn"]["tpf_over_best_other"] == pytest.approx(1.5)
    assert st["learned"]["cell"] is None


def test_editing_cells_count_the_answers_editing_fixed_and_broke():
    """Hand-made: problem 0 right only with editing (fixed), problem 1 right only without (broken), problem 2
    right both ways, problem 3 ungraded."""
    rows = [{"rule": "threshold", "value": 0.9, "k": 0, "problem": p, "editing": e, "correct": c}
            for p, (off, on) in enumerate([(0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (None, None)])
            for e, c in ((False, off), (True, on))]
    cells = [{"cell": "a", "rule": "threshold", "value": 0.9, "k": 0, "editing": False},
             {"cell": "a +edit", "rule": "threshold", "value": 0.9, "k": 0, "editing": True}]
    frontier.edit_effects(pd.DataFrame(rows), cells)
    assert "fixed_by_editing" not in cells[0]
    assert (cells[1]["fixed_by_editing"], cells[1]["broken_by_editing"]) == (1, 1)
