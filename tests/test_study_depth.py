"""The depth study (lopa/study/depth.py): its chain measurement on a scripted model whose cuts are known, its
summary and goal on hand-made rows, its declaration, and the study end to end on a tiny model (2 problems),
each row checked against the same decode run by hand."""

import json

import pandas as pd
import pytest
import torch
from fake_model import EOS, FakeDLLM
from tiny import study_setup

from lopa import Decoder, DecodeSettings, ModelSpec
from lopa.models.loading import ASSETS
from lopa.study import STUDIES, depth
from lopa.study.common import STUDIES_DIR

PROMPT = torch.tensor([7, 8, 9])
SPEC = ModelSpec(mask_token_id=0, eos_token_ids=(EOS,), logit_shift=True, max_context=4096)
SETTINGS = DecodeSettings(k=1, block_size=8, max_new_tokens=8, confidence="max_prob", lookahead_depth=3)
FLAGS = ["--block-size", "8", "--max-new-tokens", "16", "--tau-add", "0.3", "--tau-act", "0.6", "--confidence", "max_prob"]


def script(second_once_first_seen):
    """Position 0 is sure (the anchor's), 1 the most confident of the rest (round 1's lookahead, its chain
    1, 2, 3); position 2 is 7 at 0.7 until 1 is visible, then `second_once_first_seen` (token, max prob)."""
    def rule(g, visible):
        if g == 0:
            return 5, 0.95
        if g >= 8:
            return EOS, 0.99
        if g == 1:
            return 6, 0.8
        if g == 2:
            return second_once_first_seen if 1 in visible else (7, 0.7)
        return 4 + g, 0.69 - 0.005 * g
    return rule


def decode(rule, settings=SETTINGS):
    return Decoder(FakeDLLM(len(PROMPT), rule), SPEC, settings, executor="uncached").run(PROMPT)


@pytest.mark.parametrize(("second", "floor", "reason", "row_prob"),
                         [((8, 0.7), 0.0, "token", 0.7),     # the row holding 1 predicts another token at 2
                          ((7, 0.6), 0.65, "floor", 0.6)])   # the same token, under the lookahead floor
def test_a_cut_chain_says_where_and_why(second, floor, reason, row_prob):
    run = decode(script(second), SETTINGS.replace(lookahead_min_prob=floor))
    counts, cuts = depth.chain_cuts(run.records, 8, 3)
    first = run.records[1]
    assert first.chain_positions[0] == [1, 2, 3] and first.chain_kept == [1]
    assert cuts[0] == {"round": 1, "branch": 1, "chain": 3, "cut_at": 2, "reason": reason, "position": 2, "gap": 1,
                       "later_block": False, "proposed_max_prob": pytest.approx(0.7),
                       "row_max_prob": pytest.approx(row_prob)}
    m = run.metrics()          # the trace's own counts agree
    assert (counts["chain_tokens"], counts["chain_kept"]) == (m["chain_tokens"], m["chain_kept"])
    assert counts["cut"] == len(cuts) and counts["chains"] >= counts["cut"] >= 1
    assert counts["rounds"] == sum(r.kind == "round" for r in run.records)


def test_a_chain_that_stands_is_not_cut_and_one_short_of_the_depth_is_counted():
    run = decode(script((7, 0.99)))                          # the row holding 1 predicts 7 at 2, as proposed
    counts, cuts = depth.chain_cuts(run.records, 8, 3)
    assert run.records[1].chain_kept[0] >= 2 and not [c for c in cuts if c["round"] == 1]
    lengths = [len(c) for r in run.records for c in r.chain_positions if len(c) >= 2]
    assert counts["short"] == sum(n < 3 for n in lengths) and counts["chains"] == len(lengths)
    assert counts["won_chain"] == sum(sum(a for _, _, a in r.filled()) >= 2 for r in run.records if r.chain_rows)
    assert depth.chain_cuts(decode(script((7, 0.99)), SETTINGS.replace(lookahead_depth=1)).records, 8, 1) == ({}, [])


# -- the summary and the goal on hand-made rows --------------------------------------------------------
def row(problem, cell, k, d, tokens, forwards, correct, latency=0.1, chains=0, cut=0, chain_tokens=0, chain_kept=0):
    return {"problem": problem, "cell": cell, "k": k, "depth": d, "tokens": tokens, "forwards": forwards,
            "correct": correct, "latency_s": latency, "token_forwards": 100 * (k + 1) * d, "rounds": forwards - 1,
            "chains": chains, "short": 0, "cut": cut, "chain_tokens": chain_tokens, "chain_kept": chain_kept,
            "won_chain": 0}


def test_the_summary_pools_each_cell_and_judges_the_goal():
    df = pd.DataFrame([
        row(0, "d2f", 0, 1, 30, 10, 1.0), row(1, "d2f", 0, 1, 30, 10, 1.0),
        row(0, "lopa-k14", 14, 1, 30, 3, 1.0), row(1, "lopa-k14", 14, 1, 30, 3, 1.0),                  # TPF 10
        row(0, "lopa-k4-d4", 4, 4, 30, 2, 1.0, chains=8, cut=2, chain_tokens=24, chain_kept=20),
        row(1, "lopa-k4-d4", 4, 4, 30, 3, 1.0, chains=4, cut=0, chain_tokens=12, chain_kept=12),     # TPF 12 = 1.2x
        row(0, "lopa-k14-d2", 14, 2, 30, 2, 0.0), row(1, "lopa-k14-d2", 14, 2, 30, 2, 1.0),          # 15, 50 points down
        row(0, "best-d1", 4, 1, 30, 3, 1.0)])                                                          # problem 0 only
    cuts = pd.DataFrame([{"cell": "lopa-k4-d4", "cut_at": 2, "reason": "token", "later_block": False, "gap": 1,
                          "proposed_max_prob": 0.5, "row_max_prob": 0.9},
                         {"cell": "lopa-k4-d4", "cut_at": 4, "reason": "token", "later_block": True, "gap": 3,
                          "proposed_max_prob": 0.4, "row_max_prob": 0.8}])
    s = depth.summarize_depth(df, cuts)
    by = {r["cell"]: r for r in s["cells"]}
    assert [r["cell"] for r in s["cells"]] == ["d2f", "lopa-k4-d4", "lopa-k14", "lopa-k14-d2", "best-d1"]
    deep = by["lopa-k4-d4"]
    assert deep["tpf"] == 12.0 and deep["tpf_over_lopa_k14"] == pytest.approx(1.2)
    assert (deep["chains"], deep["chains_cut"], deep["cut_share"], deep["kept_share"]) == (12, 2, 2 / 12, 32 / 36)
    assert deep["cut_at"] == {"2": 1, "4": 1} and deep["cut_reason"] == {"token": 2} and deep["cut_later_block"] == 1
    assert deep["tpf_searched"] == 15.0 and deep["tpf_over_best_d1"] == pytest.approx(1.5)      # problem 0: 30/2 vs 30/3
    assert deep["goal"] and s["goal"]["reached_by"] == ["lopa-k4-d4"]
    assert by["lopa-k14-d2"]["accuracy_points_vs_d2f"] == pytest.approx(-50) and not by["lopa-k14-d2"]["goal"]
    assert by["best-d1"]["tps"] is None and not by["best-d1"]["goal"] and s["goal"]["best_tpf_cell"] == "lopa-k14-d2"
    assert s["searched"] == 1 and "lopa-k4-d4" in depth.report(s).splitlines()[-1]
    # Under best-d1's TPF on the searched problems, 1.2x LoPA k = 14 is not enough.
    slower = df.copy()
    slower.loc[(slower.cell == "best-d1"), "forwards"] = 1
    assert depth.summarize_depth(slower, cuts)["goal"]["reached_by"] == []


def test_the_declaration_reaches_the_command_line_and_refuses_bad_lists(capsys):
    study = STUDIES["depth"]
    assert study.file("csv", "cuts") == "depth_cuts.csv" and study.app        # in the app's studies menu (issue 58)
    args = study.parse(["--ks", "4", "--depths", "1,2", "--search", ""])
    assert (args.ks, args.depths, args.search, args.search_n) == ("4", "1,2", "", 30)
    assert [name for name, _ in depth.cells(DecodeSettings(), (4, 14), (1, 2))] == [
        "d2f", "lopa-k4", "lopa-k4-d2", "lopa-k14", "lopa-k14-d2"]
    for flags, words in ((["--depths", "0,2"], "--depths: give values from 1 to 8"), (["--ks", "x"], "--ks: whole numbers"),
                         (["--search", "3"], "--search: give values from 1 to 2")):
        with pytest.raises(SystemExit):
            depth.main(flags)
        assert words in capsys.readouterr().err, flags


# -- end to end on a tiny model -----------------------------------------------------------------------
def test_the_study_writes_its_files_and_each_row_is_that_decode(tmp_path):
    from lopa.models import load
    from lopa.study.common import decode_one
    model, data, root = study_setup(tmp_path)
    out = root / "out"
    assert depth.main(["--model", str(model), "--data", str(data), "--n", "2", "--ks", "2", "--depths", "1,3",
                       "--search", "1,2", "--search-n", "1", "--out", str(out), *FLAGS]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(STUDIES["depth"].files())
    df = pd.read_parquet(out / "depth.parquet")
    assert sorted(df.cell.unique()) == ["best-d1", "d2f", "lopa-k2", "lopa-k2-d3"]      # no depth-2 run: no best-d2
    assert len(df) == 2 * 3 + 1 and list(df[df.cell == "best-d1"].problem) == [0]
    meta = json.loads((out / "depth.json").read_text())
    assert meta["command"].startswith("python -m lopa.study depth") and meta["summary"]["searched"] == 1
    loaded = load(str(model), device="cpu")
    problem = {"id": 1, **json.loads(data.read_text().splitlines()[1])}
    base = DecodeSettings(**meta["settings"])
    for name, settings in depth.cells(base, (2,), (1, 3)):
        run, mine = decode_one(loaded, settings, problem, data=str(data))
        got = df[(df.problem == 1) & (df.cell == name)].iloc[0]
        m = run.metrics()
        assert (got.forwards, got.tokens, got.chain_tokens, got.chain_kept) == (
            mine["forwards"], mine["tokens"], m["chain_tokens"], m["chain_kept"]), name
    cuts = pd.read_parquet(out / "depth_cuts.parquet")
    assert list(cuts.columns) == depth.CUT_COLUMNS
    assert len(cuts) == df.cut.sum() and set(cuts.cell) <= {"lopa-k2-d3"}


# -- the shipped results ----------------------------------------------------------------------------------
SHIPPED = sorted(p.parent for p in STUDIES_DIR.glob("*/depth.json"))


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_summary_is_the_one_its_tables_give_for_the_weights_that_ship(folder):
    import math

    from lopa.study.common import load_results, weights_digest
    tables, meta = load_results("depth", folder)
    assert meta["command"].startswith("python -m lopa.study depth") and "CPU" in meta["hardware"] and meta["date"]
    assert meta["weights_sha256"] == weights_digest(ASSETS / "models" / folder.name), \
        f"rerun python -m lopa.study depth --model {folder.name} --out assets/studies/{folder.name}"
    again = depth.summarize_depth(tables[""], tables["cuts"])
    same = lambda a, b: a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b))  # noqa: E731
    for mine, shipped in zip(again["cells"], meta["summary"]["cells"], strict=True):
        assert all(same(mine[key], shipped[key]) for key in mine), mine["cell"]
    assert again["goal"] == meta["summary"]["goal"]
