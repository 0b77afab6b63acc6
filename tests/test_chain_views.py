"""Lookahead chains in the explorer's views (lookahead_depth > 1), on hand-made rounds: the branches table shows
each row's chain and which tokens were kept or cut, the canvas numbers the winner's kept chain, and the round's
explanation says in one line why a chain was cut, from the trace's own numbers. Depth 1 draws as before."""

import dataclasses
import html
import re

import pytest
from tiny import LIVELY, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings
from lopa.chains import chain_cut
from lopa.trace import RoundRecord, RunResult
from visualizations import branches_table, explain_round, token_canvas

NAMES = {10: "ten", 12: "twelve", 13: "thirteen", 15: "fifteen", 16: "sixteen", 50: "fifty", 99: "ninety"}
SPEC = {"mask_token_id": 1, "eos_token_ids": [2]}
MASKED = [1, 2, 3, 4, 5, 6, 7]              # after the anchor commits position 0


def record(r, kind, rows, winner=0, **kw):
    """A round over one block of 8 (window at 0). rows: per verified row, {masked position: (argmax, max prob)}."""
    return RoundRecord(round=r, kind=kind, window_start=0, branch_tokens=[[1] * 8] * len(rows),
                       branch_positions=[list(row) for row in rows],
                       branch_max_prob=[[mp for _, mp in row.values()] for row in rows],
                       branch_conf=[[mp for _, mp in row.values()] for row in rows],
                       branch_argmax=[[t for t, _ in row.values()] for row in rows],
                       branch_scores=kw.pop("scores", [0.5] * len(rows)), branch_rank=[0] * len(rows), winner=winner,
                       block_states=["active_full"], committed=kw.pop("committed", 0), n_cached_blocks=0,
                       forward_seconds=0.01, round_seconds=0.01,
                       **{"anchor_positions": [], "anchor_tokens": [], "lookahead_positions": [], "lookahead_tokens": [],
                          **kw})


def row(filled=(), **at):
    """A row's predictions at every still-masked position: 50 at 0.4 unless `at` says (p<pos>=(token, max prob))."""
    return {p: at.get(f"p{p}", (50, 0.4)) for p in MASKED if p not in filled}


def chain_run(at3, floor=0.0):
    """Round 1 of a depth-2 run with k = 2: the anchor commits 0; branch 1's chain is (2, 3) proposing (12, 13), branch
    2's is (5, 6) proposing (15, 16). Rows: 0 anchor, 1 = {2}, 2 = {5}, 3 = {2, 3}, 4 = {5, 6}. Row 2 predicts 99 at 6,
    so chain 2 is cut after its first token; `at3` is what row 1 predicts at 3 (chain 1's second token). Row 4, past
    the cut, scores highest but is no candidate; the winner is the best of rows 0, chain 1's kept row, 2."""
    prefill = record(0, "prefill", [{p: (t, 0.5) for p, t in enumerate([10, 50, 12, 13, 50, 15, 16, 50])}])
    kept = 2 if at3[0] == 13 and at3[1] >= floor else 1                     # what lopa.chains.kept_lengths finds
    winner = 3 if kept == 2 else 1
    rnd = record(1, "round", [row(), row({2}, p3=at3), row({5}, p6=(99, 0.6)), row({2, 3}), row({5, 6})],
                 winner=winner, scores=[0.50, 0.55, 0.52, 0.60, 0.90], committed=1 + kept,
                 anchor_positions=[0], anchor_tokens=[10], lookahead_positions=[2, 5], lookahead_tokens=[12, 15],
                 chain_positions=[[2, 3], [5, 6]], chain_tokens=[[12, 13], [15, 16]], chain_rows=[[1, 3], [2, 4]],
                 chain_kept=[kept, 1])
    settings = DecodeSettings(k=2, lookahead_depth=2, block_size=8, max_new_tokens=8, lookahead_min_prob=floor)
    tokens = [10, 1, 12, 13 if kept == 2 else 1, 1, 1, 1, 1]
    return RunResult(prompt="", prompt_ids=[5], settings=settings.to_dict(), spec=SPEC, records=[prefill, rnd],
                     tokens=tokens)


def branch_row(table: str, j: int) -> str:
    return table.split(f'data-branch="{j}"')[1].split("</tr>")[0]


def test_a_chain_kept_whole_and_one_cut_after_a_token_read_from_the_trace():
    run = chain_run(at3=(13, 0.7))
    rec = run.records[1]
    assert chain_cut(rec, 0, 0.0) is None
    assert chain_cut(rec, 1, 0.0) == {"kept": 1, "proposed": 2, "position": 6, "token": 16, "row": 2, "predicted": 99,
                                 "max_prob": 0.6, "floor": 0.0, "failed": "token"}
    floored = chain_run(at3=(13, 0.2), floor=0.3).records[1]       # the same token, under the lookahead floor
    assert chain_cut(floored, 0, 0.3)["failed"] == "floor" and chain_cut(floored, 0, 0.3)["max_prob"] == 0.2
    blind = dataclasses.replace(rec, branch_positions=[*rec.branch_positions[:2], [1, 2, 3, 4, 7], *rec.branch_positions[3:]])
    assert chain_cut(blind, 1, 0.0)["failed"] == "none"       # a shared trace without the row's prediction there
    assert "row B2 (the anchor plus its first token) records no prediction there" in explain_round(
        RunResult(**{**run.__dict__, "records": [run.records[0], dataclasses.replace(blind, winner=2)]}), 1, NAMES)


def test_the_table_shows_one_row_per_chain_with_why_it_was_cut_in_view():
    """Issue 58: one row per chain (its kept prefix, the row the branch score weighed), not one per prefix; why a
    chain was cut is in the cell's text, not only in a hover title (a touch screen shows none)."""
    run = chain_run(at3=(13, 0.7))
    table = html.unescape(branches_table(run, 1, NAMES))
    assert "<th>chain: kept ✓ / cut ✗, and why</th>" in table
    assert re.findall(r'data-branch="(\d+)"', table) == ["0", "3", "2"]       # the anchor, then each chain's kept row
    assert table.count("<span data-chain=") == len(run.records[1].chain_rows) == 2
    whole = branch_row(table, 3)                                               # branch 1's chain: both tokens kept
    assert 'B1: <b class="lopa-chain-kept">2←twelve ✓</b> <b class="lopa-chain-kept">3←thirteen ✓</b>' in whole
    assert "B1's chain was kept whole (2 tokens). Kept 2 of 2; scored as row B3 (its rows: B1, B3)." in whole
    assert "★" in whole
    cut = branch_row(table, 2)                                                 # branch 2's: 15 kept, 16 cut
    assert '<b class="lopa-chain-kept">5←fifteen ✓</b> <s class="lopa-chain-cut">6←sixteen</s> ✗' in cut
    why = re.search(r'<small class="lopa-chain-why">(.*?)</small>', cut).group(1)      # shown text, no title
    assert "at position 6, row B2 (the anchor plus its first token) predicts 'ninety' there" in why
    assert "B4 past the cut: verified, not candidates" in why and "title=" not in cut
    assert "one row per chain" in table and "a row past a cut does not compete" in table
    assert 'href="#term-chain"' in table


def test_the_explanation_says_in_one_line_why_the_winning_chain_was_cut():
    whole = html.unescape(explain_round(chain_run(at3=(13, 0.7)), 1, NAMES))
    assert "**Winner: B3**, a chain of 2 tokens" in whole and "*Chain:* B1's chain was kept whole (2 tokens)." in whole
    assert "each started a chain of up to 2 tokens, every prefix of every chain a row. All 5 rows" in whole
    other = html.unescape(explain_round(chain_run(at3=(77, 0.7)), 1, NAMES))      # row 1 predicts another token at 3
    assert "**Winner: B1**" in other
    assert ("*Chain:* B1's chain was cut after 1 of its 2 tokens: at position 3, row B1 (the anchor plus its first "
            "token) predicts '#77' there (max prob 0.700), not the chain's 'thirteen'.") in other
    floored = html.unescape(explain_round(chain_run(at3=(13, 0.2), floor=0.3), 1, NAMES))
    assert ("*Chain:* B1's chain was cut after 1 of its 2 tokens: at position 3, row B1 (the anchor plus its first "
            "token) predicts the chain's 'thirteen' there at max prob 0.200, under the lookahead floor 0.3.") in floored


def test_the_canvas_numbers_the_winner_s_kept_chain():
    canvas = token_canvas(chain_run(at3=(13, 0.7)), 1, NAMES)
    for pos, i in ((2, 1), (3, 2)):
        cell = re.search(rf'<div class="lopa-cell [^>]*data-position="{pos}".*?</div>', canvas).group(0)
        assert re.search(r'class="lopa-cell lopa-lookahead lopa-chain\b', cell) and f">+{i}</span>" in cell
        assert f'data-chain="{i}" title="token {i} of the 2 the winning chain kept' in cell
    one = token_canvas(chain_run(at3=(77, 0.7)), 1, NAMES)     # a chain cut to one token reads as LoPA's one "+"
    assert "lopa-chain" not in one and one.count('data-state="lookahead"') == 1 and ">+</span>" in one


@pytest.mark.parametrize("depth", [1, 2])
def test_chain_marks_appear_only_where_a_chain_ran(depth):
    """A real decode: at depth 1 the table, canvas and explanation carry no chain marks; at depth 2 every round with
    branches shows a chain cell per lookahead row."""
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=3, lookahead_depth=depth, **LIVELY)).run(
        list(range(3, 20)))
    rounds = [r for r, rec in enumerate(run.records) if rec.kind == "round" and rec.lookahead_positions]
    assert rounds
    for r in rounds:
        views = branches_table(run, r) + token_canvas(run, r) + explain_round(run, r)
        if depth == 1:
            assert "chain" not in views
        else:
            assert branches_table(run, r).count("<span data-chain=") == len(run.records[r].chain_rows)
