"""The studies: their statistics on hand-made data with known answers, the branch score rules and the
removal/change split on hand-made scores, the adaptive budget at its two extremes through the engine,
and each study end to end on a tiny model, checked against `lopa generate` run by hand."""

import json
import math
import re

import pandas as pd
import pytest
import torch
from tiny import LIVELY, study_setup, tiny_qwen2, tiny_spec, tiny_tokenizer

from lopa import Decoder, DecodeSettings
from lopa.cli import main as lopa_main
from lopa.order import AdaptiveOrder, make_order
from lopa.rules import score_split
from lopa.study import adaptive, adaptive_fit, calibration, orders
from lopa.study.stats import (
    afp,
    aup,
    bootstrap_ci,
    kendall_tau,
    order_tau,
    pareto_front,
    percentile_among,
    rankdata,
    ratio_of_means,
    spearman,
)

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"


# -- statistics ---------------------------------------------------------------------------------------
def test_ranks_and_rank_correlations_on_hand_made_data():
    assert rankdata([10, 20, 20, 30]).tolist() == [1, 2.5, 2.5, 4]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # y ranks [1, 2, 3.5, 5, 3.5]: sum of centred products 8, sums of squares 10 and 9.5
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # 5 concordant pairs, 1 tied in y, none discordant: tau-b = 5 / sqrt(6 * 5)
    assert kendall_tau([1, 2, 3, 4], [1, 1, 2, 3]) == pytest.approx(5 / math.sqrt(30))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3])) and math.isnan(kendall_tau([1, 2], [3, 3]))


def test_bootstrap_interval_and_ratio_of_means():
    assert ratio_of_means([(2, 1), (4, 3)]) == pytest.approx(1.5)
    assert bootstrap_ci([(2, 1)] * 5, ratio_of_means, n_boot=50) == (2.0, 2.0)     # no spread, no interval
    groups = [(x, 1.0) for x in (1.0, 2.0, 3.0, 4.0)]
    lo, hi = bootstrap_ci(groups, ratio_of_means, n_boot=500, seed=1)
    assert 1.0 <= lo < ratio_of_means(groups) < hi <= 4.0
    assert bootstrap_ci(groups, ratio_of_means, n_boot=100, seed=3) == bootstrap_ci(groups, ratio_of_means, n_boot=100, seed=3)


def test_order_metrics_afp_and_kendall_tau_of_the_fill_order():
    assert afp([1, 1, 2, 3, 3, 3]) == 2.0 and afp([5, 5, 5]) == 3.0 and afp([]) == 0.0
    assert order_tau({0: 1, 1: 2, 2: 3}) == pytest.approx(1.0)       # left to right
    assert order_tau({0: 3, 1: 2, 2: 1}) == pytest.approx(-1.0)      # right to left
    assert math.isnan(order_tau({0: 4, 1: 4}))                      # all in one round: no order
    assert percentile_among(5, [1, 5, 9, 10]) == pytest.approx(37.5)


def test_the_cost_curve_never_falls_with_more_branches():
    assert adaptive_fit.monotone([2.0, 4.0, 6.0]) == [2.0, 4.0, 6.0]
    assert adaptive_fit.monotone([3.0, 1.0, 2.0]) == [2.0, 2.0, 2.0]            # never cheaper with more branches
    assert adaptive_fit.monotone([1.0, 5.0, 3.0, 4.0]) == [1.0, 4.0, 4.0, 4.0]  # a spike averaged with what follows


def test_aup_and_the_pareto_front():
    assert aup([(4.0, 0.5)]) == pytest.approx(2.0)                          # the best accuracy: weight 1
    assert aup([(4.0, 0.5)], y_max=1.0) == pytest.approx(4 * 0.5 * math.exp(-1.5))
    assert aup([(3.0, 1.0), (1.0, 1.0)]) == pytest.approx(3.0)             # sorted by TPF, trapezoids
    assert aup([(1.0, 1.0), (3.0, 0.5)]) == pytest.approx(1.0 + 2 * (1.0 + 0.5 * math.exp(-1.5)) / 2)
    assert pareto_front([(1, 5), (2, 4), (1.5, 3), (2, 4)]) == [0, 1, 3]


# -- the removal / change split on a real run ---------------------------------------------------------
def test_the_split_matches_the_recorded_scores_of_a_real_run():
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=3, **LIVELY), tiny_tokenizer()).run(PROMPT)
    checked = 0
    for rec in run.records:
        for j in range(1, len(rec.branch_scores)):
            parts = score_split(rec.branch_positions[0], rec.branch_conf[0], rec.branch_positions[j],
                                rec.branch_conf[j], rec.lookahead_positions[j - 1])
            if parts is not None and not math.isinf(rec.branch_scores[j]):
                assert parts["delta"] == pytest.approx(rec.branch_scores[j] - rec.branch_scores[0], abs=1e-6)
                assert parts["removal"] + parts["change"] == pytest.approx(parts["delta"], abs=1e-12)
                checked += 1
    assert checked > 0


# -- the adaptive budget ------------------------------------------------------------------------------
def adaptive_run(cost, k=4):
    settings = DecodeSettings(k=k, **LIVELY)
    return Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, tiny_tokenizer(), order=AdaptiveOrder(cost)).run(PROMPT)


def test_free_branches_make_the_adaptive_budget_take_the_largest_k_every_round():
    run = adaptive_run(torch.ones(5), k=4)
    rounds = [r for r in run.records if r.kind == "round"]
    assert rounds and any(len(r.lookahead_positions) == 4 for r in rounds)
    for r in rounds:        # every masked position the anchor left is a candidate; at most k of them
        assert len(r.lookahead_positions) == min(4, len(r.branch_positions[0]))


def test_dear_branches_make_the_adaptive_budget_vanilla_token_for_token():
    run = adaptive_run([1.0] + [1e6] * 4, k=4)
    vanilla = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=0, **LIVELY), tiny_tokenizer()).run(PROMPT)
    assert all(r.lookahead_positions == [] for r in run.records)
    assert run.tokens == vanilla.tokens and run.text == vanilla.text
    assert [r.anchor_positions for r in run.records] == [r.anchor_positions for r in vanilla.records]
    assert run.metrics()["forwards"] == vanilla.metrics()["forwards"]


def test_branch_rounds_count_what_adaptive_order_sees_on_hand_made_records():
    from types import SimpleNamespace as Record
    tau = 0.9
    records = [
        Record(kind="prefill", winner=0, branch_positions=[[0, 1, 2, 3]], branch_max_prob=[[0.95, 0.8, 0.75, 0.1]]),
        # anchor commits 0; position 1 (0.8) and 2 (0.75) are within 0.2 under tau: near 2; its branch wins
        Record(kind="round", winner=1, lookahead_positions=[1], anchor_positions=[0],
               branch_positions=[[1, 2, 3], [2, 3]], branch_max_prob=[[0.8, 0.75, 0.1], [0.85, 0.5]]),
        # seen from the winner (branch 1): 2 at 0.85 is committed by this round's anchor, 3 at 0.5 is far: near 0
        Record(kind="round", winner=0, lookahead_positions=[3], anchor_positions=[2],
               branch_positions=[[3], []], branch_max_prob=[[0.3], []]),
        Record(kind="round", winner=0, lookahead_positions=[], anchor_positions=[3],    # no branch: not counted
               branch_positions=[[]], branch_max_prob=[[]]),
        Record(kind="final", winner=0, lookahead_positions=[], anchor_positions=[], branch_positions=[[]],
               branch_max_prob=[[]]),
    ]
    assert adaptive_fit.branch_rounds(records, tau) == {"rounds": 2, "wins": 1, "near": 2, "near_won": 2}
    assert adaptive.lost_rounds(records) == 1                   # the round whose branch the anchor beat


def test_skip_bound_charges_k1_only_for_the_branches_that_won():
    # two k = 1 decodes: 100 tokens in 1.0 s with 3 lost branch rounds, 50 in 0.5 s with none; a round
    # costs 0.1 s with one branch and 0.05 s without, so an oracle saves 3 * 0.05 s of the 1.5 s
    df = pd.DataFrame({"config": ["k=1", "k=1", "k=0"], "latency_s": [1.0, 0.5, 9.0], "tokens": [100, 50, 7],
                       "lost_rounds": [3, 0, 0]})
    bound = adaptive.skip_bound(df[df.config == "k=1"], [0.05, 0.1])
    assert bound["lost_rounds"] == 3
    assert bound["tps"] == pytest.approx(150 / 1.35) and bound["tps_ratio"] == pytest.approx(1.5 / 1.35)


def test_the_adaptive_over_k1_interval_brackets_every_problem_and_collapses_when_they_agree():
    rows = [{"problem": p, "config": c, "tokens": 40, "latency_s": t}
            for p, (ta, t1) in enumerate([(1.0, 1.1), (1.0, 1.2), (1.0, 1.0)]) for c, t in (("adaptive", ta), ("k=1", t1))]
    lo, hi = adaptive.tps_ratio_ci(pd.DataFrame(rows), "adaptive", "k=1")
    assert 1.0 <= lo < hi <= 1.2 + 1e-9                     # per-problem ratios 1.1, 1.2, 1.0
    same = [dict(r, latency_s=1.0) for r in rows]
    assert adaptive.tps_ratio_ci(pd.DataFrame(same), "adaptive", "k=1") == pytest.approx((1.0, 1.0))


def test_the_adaptive_configuration_carries_the_fitted_gain_model_into_its_settings_and_order():
    base = DecodeSettings(**LIVELY)
    configs = adaptive.configurations(base.replace(adaptive_rank="least_confident"), [0, 1], 4, [1.0, 1.3, 1.7, 2.1, 2.6],
                                      {"adaptive_win": 0.6, "adaptive_release": 0.8, "adaptive_lift": 2.5, "problems": 4})
    name, settings, order = configs[-1]
    assert [c[0] for c in configs] == ["k=0", "k=1", "adaptive"]
    assert (settings.order, settings.k, settings.adaptive_win, settings.adaptive_lift) == ("adaptive", 4, 0.6, 2.5)
    assert order.gain == {"win": 0.6, "release": 0.8, "lift": 2.5}      # the trace's settings rebuild this order
    assert [c[1].order for c in configs[:2]] == ["least_confident"] * 2  # fixed k propose what the budget ranks
    _, settings, order = adaptive.configurations(base, [0], 4, [1.0] * 5)[-1]
    assert (settings.adaptive_win, settings.adaptive_lift) == (base.adaptive_win, base.adaptive_lift)


def test_branch_score_setting_picks_the_winner_by_that_rule():
    settings = DecodeSettings(k=3, branch_score="count", **LIVELY)
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, tiny_tokenizer()).run(PROMPT)
    for rec in run.records:
        if rec.kind == "round":
            counts = [float(sum(m > LIVELY["tau_conf"] for m in mp)) if mp else float("inf") for mp in rec.branch_max_prob]
            assert rec.branch_scores == counts
    with pytest.raises(ValueError, match="branch_score"):
        DecodeSettings(branch_score="best")


def test_the_branch_score_setting_survives_a_trace_round_trip(tmp_path):
    from lopa import RunResult
    settings = DecodeSettings(k=2, branch_score="loo", **LIVELY)
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, tiny_tokenizer()).run(PROMPT)
    for suffix in (".json", ".parquet"):
        loaded = RunResult.load(run.save(tmp_path / f"run{suffix}"))
        assert loaded.settings["branch_score"] == "loo"


# -- each study end to end, against `lopa generate` ---------------------------------------------------
@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    return study_setup(tmp_path_factory.mktemp("study"))


FLAGS = ["--block-size", "8", "--max-new-tokens", "16", "--tau-conf", "0.12", "--tau-add", "0.3", "--tau-act", "0.6",
         "--confidence", "max_prob"]


def generate(capsys, model, question, *flags):
    """`lopa generate` run by hand: its printed forwards and TPF."""
    capsys.readouterr()
    assert lopa_main(["generate", "--model", str(model), "--prompt", question, *FLAGS, *flags]) == 0
    out = capsys.readouterr().out
    return (int(re.search(r"forwards\s+(\d+)", out).group(1)), float(re.search(r"tpf_useful\s+([\d.]+)", out).group(1)))


def test_orders_study_writes_its_files_and_agrees_with_lopa_generate(tiny_setup, capsys):
    model, data, root = tiny_setup
    out = root / "orders"
    assert orders.main(["--model", str(model), "--data", str(data), "--n", "2", "--random", "2", "--k", "2",
                        "--bootstrap", "20", "--out", str(out), *FLAGS]) == 0
    for name in ("orders.csv", "orders.parquet", "orders.html", "orders.png", "orders.json"):
        assert (out / name).stat().st_size > 0, name
    df = pd.read_parquet(out / "orders.parquet")
    assert len(df) == 2 * (3 + 3 + 2) and set(df.order) == {"vanilla", "lopa", "left_to_right", "random",
                                                             "least_confident", "highest_entropy", "mixed"}
    meta = json.loads((out / "orders.json").read_text())
    assert meta["command"].startswith("python -m lopa.study orders") and "CPU" in meta["hardware"] and meta["date"]
    assert meta["summary"]["problems"] == 2
    # Each proposal rule: pooled TPF (all tokens over all forwards) and its ratio to LoPA's, with an interval.
    for rule in ("least_confident", "highest_entropy", "mixed"):
        rows = df[df.order == rule]
        assert meta["summary"]["per_order"][rule]["tpf_pooled"] == pytest.approx(rows.tokens.sum() / rows.forwards.sum())
        lopa_rows = df[df.order == "lopa"]
        ratio = (rows.tokens.sum() / rows.forwards.sum()) / (lopa_rows.tokens.sum() / lopa_rows.forwards.sum())
        assert meta["summary"]["proposals"][rule]["tpf_over_lopa"] == pytest.approx(ratio)
        assert meta["summary"]["per_order"][rule]["tps"] > 0
    question = json.loads(data.read_text().splitlines()[1])["question"]
    row = df[(df.problem == 1) & (df.order == "mixed")].iloc[0]
    forwards, tpf = generate(capsys, model, question, "--k", "2", "--order", "mixed")
    assert (forwards, tpf) == (row.forwards, pytest.approx(row.tpf, abs=5e-4))
    row = df[(df.problem == 1) & (df.order == "random") & (df.seed == 1)].iloc[0]
    forwards, tpf = generate(capsys, model, question, "--k", "2", "--order", "random", "--order-seed", "1")
    assert (forwards, tpf) == (row.forwards, pytest.approx(row.tpf, abs=5e-4))
    row = df[(df.problem == 1) & (df.order == "vanilla")].iloc[0]
    assert generate(capsys, model, question, "--decoder", "d2f") == (row.forwards, pytest.approx(row.tpf, abs=5e-4))


def test_calibration_study_writes_its_files_and_agrees_with_lopa_generate(tiny_setup, capsys):
    model, data, root = tiny_setup
    out = root / "calibration"
    assert calibration.main(["--model", str(model), "--data", str(data), "--n", "2", "--k", "2", "--metrics", "max_prob",
                             "--rules", "mean,count", "--bootstrap", "10", "--out", str(out), *FLAGS]) == 0
    for name in ("calibration_runs.parquet", "calibration_rounds.parquet", "calibration_problems.parquet", "calibration.html", "calibration.png",
                 "calibration.json"):
        assert (out / name).stat().st_size > 0, name
    runs, rounds = pd.read_parquet(out / "calibration_runs.parquet"), pd.read_parquet(out / "calibration_rounds.parquet")
    assert len(runs) == 4 and {"score_mean", "score_loo", "score_count", "target"} <= set(rounds.columns)
    finite = rounds[rounds.score_count != float("inf")]
    assert len(finite) and (finite.score_count == finite.target).all()       # "count" is the target itself
    question = json.loads(data.read_text().splitlines()[0])["question"]
    row = runs[(runs.problem == 0) & (runs.rule == "count")].iloc[0]
    got = generate(capsys, model, question, "--k", "2", "--branch-score", "count")
    assert got == (row.forwards, pytest.approx(row.tpf, abs=5e-4))


def test_adaptive_study_writes_its_files_and_agrees_with_lopa_generate(tiny_setup, capsys):
    model, data, root = tiny_setup
    out = root / "adaptive"
    assert adaptive.main(["--model", str(model), "--data", str(data), "--n", "1", "--ks", "0,1,2", "--k-max", "2",
                          "--repeats", "1", "--calibration-problems", "1", "--out", str(out), *FLAGS]) == 0
    printed = capsys.readouterr().out
    assert "bookkeeping per round" in printed and "x single" in printed          # the cost model is printed
    assert "gain model fitted on 1 calibration problems" in printed
    for name in ("adaptive.parquet", "adaptive_cost.parquet", "adaptive.html", "adaptive.png", "adaptive.json"):
        assert (out / name).stat().st_size > 0, name
    df = pd.read_parquet(out / "adaptive.parquet")
    assert sorted(df.config.unique()) == ["adaptive", "k=0", "k=1", "k=2"] and len(df) == 4
    summary = json.loads((out / "adaptive.json").read_text())["summary"]
    assert len(summary["cost_s"]) == 3 and any(c["pareto"] for c in summary["configs"])
    assert summary["gain"]["problems"] == 1 and 0 <= summary["gain"]["adaptive_win"] <= 1   # recorded: replayable
    k1 = df[df.config == "k=1"].iloc[0]
    assert summary["skip_bound"]["lost_rounds"] == k1.lost_rounds and summary["skip_bound"]["tps_ratio"] >= 1
    assert summary["add_estimate"]["rounds"] >= 1 and summary["add_estimate"]["tps_ratio"] >= 1
    assert "an oracle adding it exactly there" in printed
    assert summary["flags"].startswith("--order adaptive --adaptive-rank confidence --k 2 --branch-cost ")
    assert f"--adaptive-win {summary['gain']['adaptive_win']:.3f}" in summary["flags"] and summary["flags"] in printed
    question = json.loads(data.read_text().splitlines()[0])["question"]
    row = df[(df.problem == 0) & (df.config == "k=2")].iloc[0]
    assert generate(capsys, model, question, "--k", "2") == (row.forwards, pytest.approx(row.tpf, abs=5e-4))


def test_a_second_branch_at_one_round_changes_only_that_round(tiny_setup):
    from lopa.models import load
    from lopa.study.common import question_ids
    model, data, _ = tiny_setup
    loaded = load(str(model))
    base = DecodeSettings(block_size=8, max_new_tokens=16, tau_conf=0.12, tau_add=0.3, tau_act=0.6,
                          confidence="max_prob", attention="block_causal", adaptive_rank="least_confident")
    problem = {"id": 0, "question": "Tom has 3 apples ?", "answer": None}
    ids = question_ids(loaded, problem["question"])
    k1 = loaded.decoder(base.replace(k=1, order="least_confident")).run(ids)
    two = base.replace(k=2, order="least_confident")
    same = loaded.decoder(two, order=adaptive.SecondBranchAt(make_order(two), -1)).run(ids)
    assert same.tokens == k1.tokens and [r.lookahead_positions for r in same.records] == \
        [r.lookahead_positions for r in k1.records]
    at2 = loaded.decoder(two, order=adaptive.SecondBranchAt(make_order(two), 2)).run(ids)
    rounds, k1_rounds = ([r for r in run.records if r.kind == "round"] for run in (at2, k1))
    assert rounds[0].lookahead_positions == k1_rounds[0].lookahead_positions          # the same decode until round 2
    assert len(rounds[1].lookahead_positions) == 2 and rounds[1].lookahead_positions[0] == k1_rounds[1].lookahead_positions[0]
    assert all(len(r.lookahead_positions) <= 1 for r in rounds[2:])
    saves = adaptive.second_branch_saves(loaded, base, problem)
    assert len(saves) == sum(r.kind == "round" for r in k1.records)


def test_add_estimate_counts_only_the_rounds_where_a_second_branch_pays():
    # cost: 1 s alone, 1.5 s with one branch, 2.0 s with two; a second branch pays where it saves > 0.5 forwards
    e = adaptive.add_estimate([0, 1, 0, 2, -1], k1_seconds=10.0, cost=[1.0, 1.5, 2.0])
    assert (e["rounds"], e["paying_rounds"], e["mean_saved"]) == (5, 2, 0.4)
    assert e["tps_ratio"] == pytest.approx(10.0 / (10.0 - (0.5 + 1.5)))


def test_budget_flags_fit_the_cost_curve_as_a_line_and_parse_back_into_settings():
    from lopa.cli import build_parser
    from lopa.resolution import settings_from_args
    gain = {"adaptive_win": 0.9, "adaptive_release": 1.25, "adaptive_lift": 0.5}
    flags = adaptive_fit.budget_flags([2.0, 3.0, 4.0, 5.0], gain, "least_confident", 3)    # 1 + 0.5 (B - 1) exactly
    settings = settings_from_args(build_parser().parse_args(["generate", "--prompt", "x", *flags.split()]))
    assert (settings.order, settings.adaptive_rank, settings.k, settings.branch_cost) == ("adaptive", "least_confident", 3, 0.5)
    assert (settings.adaptive_win, settings.adaptive_release, settings.adaptive_lift) == (0.9, 1.25, 0.5)


# -- the study registry and the studies that were scripts --------------------------------------------------
def test_every_study_is_a_command_of_the_one_registry():
    import subprocess
    import sys

    from lopa.study import APP_STUDIES, STUDIES
    for name, study in STUDIES.items():
        module = study.load()
        assert callable(module.main), name
        if study.app:                                   # what the app and its GPU boundary call
            assert all(callable(getattr(module, f)) for f in ("live", "live_summary", "figure", "report")), name
    assert APP_STUDIES == ("orders", "calibration", "adaptive", "headroom", "frontier", "depth")
    usage = subprocess.run([sys.executable, "-m", "lopa.study"], capture_output=True, text=True)
    assert usage.returncode == 2 and all(name in usage.stderr for name in STUDIES)


def test_errors_study_charges_each_wrong_answer_to_its_first_error(tiny_setup, capsys):
    from lopa.study import errors
    assert errors.line_errors("Tom has 3 apples .", "<<3+2=5>>5\n#### 5", "<<3+2=6>>6\n#### 6")[0] == \
        ["line 1: arithmetic wrong (+) for its own operands"]
    model, data, root = tiny_setup
    out = root / "errors"
    assert errors.main(["--model", str(model), "--data", str(data), "--n", "2", "--k", "2", "--lookahead-min-prob",
                        "0.1", "--out", str(out), *FLAGS]) == 0
    printed = capsys.readouterr().out
    assert "right:" in printed and "| first error in a wrong answer |" in printed
    meta = json.loads((out / "errors.json").read_text())
    assert meta["settings"]["k"] == 2 and meta["settings"]["lookahead_min_prob"] == 0.1     # the flags reached it
    assert len(pd.read_parquet(out / "errors.parquet")) == 2


def test_teacher_forced_study_counts_its_probes(tiny_setup, capsys):
    from lopa.study import teacher_forced
    model, data, root = tiny_setup
    assert teacher_forced.main(["--model", str(model), "--data", str(data), "--n", "2", "--out", str(root / "tf")]) == 0
    table = pd.read_parquet(root / "tf" / "teacher-forced.parquet")
    assert set(table.probe) >= {"result line 1", "result ####"} and (table.total > 0).all()
    assert (table.right <= table.total).all()


def test_departures_study_measures_both_departures(tiny_setup, capsys):
    from lopa.study import departures
    model, data, root = tiny_setup
    assert departures.main(["--prompts", "1", "--block-size", "8", "--max-new-tokens", "16",
                            "--out", str(root / "dep")]) == 0
    table = pd.read_parquet(root / "dep" / "departures.parquet")
    assert len(table) == 6 and set(table.attention) == {"full", "full_prompt_blind", "block_causal"}
    assert (table.predictions > 0).all() and (table.rounds > 0).all()


def test_a_study_writes_its_numbers_without_matplotlib(tmp_path, monkeypatch, capsys):
    """On a requirements.txt install (no matplotlib) the tables and JSON are written, the PNG is
    skipped with a message saying how to get it, and the study does not fail."""
    import sys

    from lopa.study.common import write_results
    from lopa.study.figures import adaptive_png
    monkeypatch.setitem(sys.modules, "matplotlib", None)           # import matplotlib -> ModuleNotFoundError
    summary = {"configs": [{"config": "k=0", "tpf": 1.0, "tps": 1.0, "pareto": True}]}
    files = write_results(tmp_path, "adaptive", {"": pd.DataFrame({"a": [1]})}, {"command": [], "summary": summary},
                          png=lambda path: adaptive_png(summary, "t", path))
    assert [f.name for f in files] == ["adaptive.csv", "adaptive.parquet", "adaptive.json"]
    assert "needs matplotlib" in capsys.readouterr().out
