"""The headroom study (lopa/study/headroom.py): the search for the best filling order finds a known best
order on hand-made predictions, never leaves LoPA's round (the commit rule, then at most one extra token),
is replayable, never needs more forwards than LoPA, and the study end to end on a tiny model."""

import json
import math
import re

import pandas as pd
import pytest
import torch
from fake_model import EOS, MASK, FakeDLLM
from tiny import LIVELY, save_tiny_model_dir, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, ModelSpec
from lopa.cli import main as lopa_main
from lopa.script import script_from_trace
from lopa.study import headroom
from lopa.trace import predictions

PROMPT = torch.tensor([7, 8, 9])
SPEC = ModelSpec(mask_token_id=MASK, eos_token_ids=(EOS,), logit_shift=True, max_context=4096)
KEY = 6          # the position that, once filled, makes every other position sure


def key_script(g, visible):
    """Position 0 is sure; the others are unsure (0.6 to 0.45, falling) until KEY is visible, then sure;
    KEY itself is the least sure of all (0.3), so the paper's top-Conf lookahead never proposes it at k = 1."""
    if g == 0:
        return 5, 0.95
    if g >= 8:
        return EOS, 0.99
    if g == KEY:
        return 4 + g, 0.3
    return 4 + g, 0.99 if KEY in visible else 0.6 - 0.025 * g


SETTINGS = DecodeSettings(k=1, block_size=8, max_new_tokens=8, confidence="max_prob")


def lopa_run(settings=SETTINGS, script=key_script):
    return Decoder(FakeDLLM(len(PROMPT), script), SPEC, settings, executor="uncached", keep_states=True).run(PROMPT)


def rule_commits(previous, tau: float, block_size: int) -> set[int]:
    """D2F's commit rule (design note, step 4) recomputed from the previous round's record: per active block,
    every masked position whose max prob passes tau; if none does and the block is fully activated, the one
    with the highest Conf (the first on a tie)."""
    seen, chosen = predictions(previous), set()
    for b, state in enumerate(previous.block_states):
        if not state.startswith("active"):
            continue
        masked = sorted(p for p in seen if p // block_size == b)
        sure = {p for p in masked if seen[p].max_prob > tau}
        if sure:
            chosen |= sure
        elif state == "active_full" and masked:
            chosen.add(max(masked, key=lambda p: (seen[p].conf, -p)))
    return chosen


def assert_lopa_rounds(run, settings):
    """Every round of `run` is LoPA's: the anchor commits exactly what the commit rule takes from the last
    forward, plus at most one extra token; a round the search forced verifies that single branch."""
    for r in range(1, len(run.records)):
        record = run.records[r]
        rule = rule_commits(run.records[r - 1], settings.tau_conf, settings.block_size)
        committed = {p for p, _, _ in record.filled()}
        assert rule <= committed and len(committed - rule) <= 1, (r, rule, committed)
        forced = [f["position"] for f in record.forced if f["action"] == "commit"]
        assert set(record.anchor_positions) == rule | set(forced) and len(forced) <= 1, (r, record.anchor_positions)
        if forced:
            assert len(record.branch_tokens) == 1 and record.lookahead_positions == []


def test_the_search_finds_the_known_best_order_that_lopa_misses():
    lopa = lopa_run()
    assert lopa.records[1].lookahead_positions == [1]                 # top Conf: not the key
    assert lopa.metrics()["forwards"] > 2
    best, choices, spent = headroom.search(lopa)
    # Round 1: the anchor's position 0 plus the key; round 2 commits everything else: 2 forwards, the fewest
    # there can be (the prompt forward, then one verify).
    assert best.records[1].anchor_positions == [0, KEY] and best.records[1].forced[0]["position"] == KEY
    assert best.metrics()["forwards"] == 2 and best.tokens == lopa.tokens
    assert [c["position"] for c in choices] == [KEY] and (choices[0]["conf_rank"], choices[0]["free"]) == (7, 7)   # the least sure
    assert choices[0]["saved"] == lopa.metrics()["forwards"] - 2 and not choices[0]["in_lopa_top_k"]
    assert spent > 0
    assert_lopa_rounds(best, SETTINGS)
    # The order found is a trace like any other: replaying it reproduces it.
    model = FakeDLLM(len(PROMPT), key_script)
    replay = Decoder(model, SPEC, SETTINGS, executor="uncached", script=script_from_trace(best)).run(PROMPT)
    assert replay.tokens == best.tokens and replay.metrics()["forwards"] == 2


def test_a_candidate_budget_that_excludes_the_key_sees_less():
    lopa = lopa_run()
    best, choices, _ = headroom.search(lopa, max_candidates=3)       # the 3 most confident free positions only
    assert KEY not in best.records[1].anchor_positions                # round 1 cannot try the key
    assert 2 < best.metrics()["forwards"] <= lopa.metrics()["forwards"]
    assert all(c["conf_rank"] is None or c["conf_rank"] <= 3 for c in choices)


def test_the_search_a_round_at_a_time_and_its_deadline():
    import time
    lopa = lopa_run()
    steps = list(headroom.iter_search(lopa, deadline=time.perf_counter() + 600))
    best, _, _ = headroom.search(lopa)
    assert steps[-1]["best"].tokens == best.tokens and steps[-1]["rounds"] == best.metrics()["forwards"] == 2
    assert [s["round"] for s in steps] == list(range(1, len(steps) + 1)) and not any(s["out_of_time"] for s in steps)
    # A deadline already passed: no rollout runs; the search ends after its first round with LoPA's run.
    (late,) = headroom.iter_search(lopa, deadline=time.perf_counter())
    assert late["out_of_time"] and late["best"] is lopa and late["spent"] == 0 and late["choices"] == []


def test_the_rollout_stops_at_the_bound():
    lopa = lopa_run()
    child, ran = headroom.rollout(lopa, 0, (1,), bound=2)
    assert child is None and ran == 1          # its first forward already reaches 2 in all
    child, ran = headroom.rollout(lopa, 0, (KEY,), bound=99)
    assert child is not None and child.metrics()["forwards"] == 2 and ran == 1


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("attention", ["block_causal", "full"])
def test_on_a_real_model_the_search_never_needs_more_forwards_and_keeps_lopas_round(k, attention):
    settings = DecodeSettings(k=k, attention=attention, **LIVELY)
    prompt = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
    lopa = Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, keep_states=True).run(prompt)
    best, choices, _ = headroom.search(lopa)
    assert best.metrics()["forwards"] <= lopa.metrics()["forwards"]
    assert sum(c["saved"] for c in choices) == lopa.metrics()["forwards"] - best.metrics()["forwards"]
    assert_lopa_rounds(best, settings)
    replay = Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, script=script_from_trace(best)).run(prompt)
    assert replay.tokens == best.tokens and replay.metrics()["forwards"] == best.metrics()["forwards"]


def test_the_gap_share_and_the_answer_kept_variant_on_hand_made_rows():
    rows = []
    for p, (van, lopa, best, best_answer) in enumerate([(10, 8, 6, "3"), (10, 9, 8, "4")]):
        for config, f, answer in (("vanilla", van, "3"), ("lopa", lopa, "3"), ("best", best, best_answer)):
            rows.append({"problem": p, "config": config, "k": 2, "seed": -1, "forwards": f, "tokens": 60,
                         "tpf": 60 / f, "latency_s": 1.0, "correct": int(answer == "3"), "answer": answer,
                         "search_forwards": 5 if config == "best" else 0, "search_s": 0.0, "start_k": 2})
    summary = headroom.summarize_headroom(pd.DataFrame(rows), k=2, n_boot=50)
    van, lopa, best = 120 / 20, 120 / 17, 120 / 14          # pooled TPF: all tokens over all forwards
    assert summary["gap_share"] == pytest.approx((lopa - van) / (best - van))
    kept = 120 / 15                                          # 6 + 9: problem 1's search changed the answer: LoPA's run counts
    assert summary["gap_share_answer_kept"] == pytest.approx((lopa - van) / (kept - van))
    assert summary["answers_changed"] == 1 and summary["right_to_wrong"] == 1 and summary["wrong_to_right"] == 0
    assert summary["per_config"]["best found"]["accuracy"] == 0.5
    lo, hi = summary["gap_share_ci95"]
    assert 0 <= lo <= hi <= 1 and summary["problems_best_saves"] == 2


def test_headroom_study_writes_its_files_and_agrees_with_lopa_generate(tmp_path, capsys):
    model = save_tiny_model_dir(tmp_path / "model")
    data = tmp_path / "p.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answer": f"he buys <<1+2=3>>3\n#### {a}"})
                              for q, a in [("Tom has 3 apples ?", 3), ("how many apples does Tom have ?", 4)]))
    flags = ["--block-size", "8", "--max-new-tokens", "16", "--tau-conf", "0.12", "--tau-add", "0.3", "--tau-act", "0.6",
             "--confidence", "max_prob"]
    out = tmp_path / "out"
    assert headroom.main(["--model", str(model), "--data", str(data), "--n", "2", "--k", "2", "--ks", "1,2",
                          "--random", "2", "--bootstrap", "20", "--out", str(out), *flags]) == 0
    printed = capsys.readouterr().out
    assert "share of the vanilla -> best-found TPF gap that LoPA closes" in printed
    for name in ("headroom.parquet", "headroom_choices.parquet", "headroom.html", "headroom.png", "headroom.json"):
        assert (out / name).stat().st_size > 0, name
    df = pd.read_parquet(out / "headroom.parquet")
    assert len(df) == 2 * (1 + 2 + 2 + 1) and set(df.config) == {"vanilla", "lopa", "random", "best"}
    meta = json.loads((out / "headroom.json").read_text())
    assert meta["command"].startswith("python -m lopa.study headroom") and meta["summary"]["problems"] == 2
    assert meta["summary"]["budget"]["depth"] == 1
    for p in (0, 1):
        best, lopas = df[(df.problem == p) & (df.config == "best")].iloc[0], df[(df.problem == p) & (df.config == "lopa")]
        assert best.forwards <= lopas.forwards.min() and best.start_k in (1, 2)
    assert not math.isnan(meta["summary"]["per_config"]["best found"]["tpf"])
    question = json.loads(data.read_text().splitlines()[1])["question"]
    capsys.readouterr()
    assert lopa_main(["generate", "--model", str(model), "--prompt", question, *flags, "--k", "2"]) == 0
    forwards = int(re.search(r"forwards\s+(\d+)", capsys.readouterr().out).group(1))
    assert forwards == df[(df.problem == 1) & (df.config == "lopa") & (df.k == 2)].iloc[0].forwards


# -- depth 2: two-step departures, and LoPA's own round read from the winning chain --------------------
KEYS = (5, 6)    # the two positions that, once both filled, make every other position sure


def two_key_script(g, visible):
    """As key_script, but every other position is sure only once BOTH keys are visible: one key alone pays
    nothing, so a search of one extra token per round cannot find the two-step order."""
    if g == 0:
        return 5, 0.95
    if g >= 8:
        return EOS, 0.99
    if g in KEYS:
        return 4 + g, 0.3
    return 4 + g, 0.99 if all(k in visible for k in KEYS) else 0.6 - 0.025 * g


def test_at_depth_2_lopa_s_round_is_the_winning_chain_and_the_search_finds_the_two_step_order():
    deep = SETTINGS.replace(lookahead_depth=2)
    lopa = lopa_run(deep, two_key_script)
    # LoPA at depth 2 wins with a chain: its winner is a row past the k one-token rows, so reading it as a
    # lookahead index (winner - 1) names no branch at all.
    chained = [r for r in lopa.records if r.kind == "round" and r.winner > len(r.lookahead_positions)]
    assert chained and all(len(headroom.lopa_extra(r)) == 2 for r in chained)
    best, choices, spent = headroom.search(lopa)
    assert best.records[1].anchor_positions == [0, *KEYS] and best.metrics()["forwards"] == 2
    assert best.tokens == lopa.tokens and spent > 0
    first = choices[0]
    assert (first["round"], sorted(first["positions"])) == (1, list(KEYS))
    assert first["lopa_positions"] == [p for p, _, ahead in lopa.records[1].filled() if ahead]
    assert first["position"] == first["positions"][0] and first["lopa_position"] == (first["lopa_positions"] or [None])[0]
    # One extra token per round (depth 1, the same script) cannot see it: each key alone saves nothing.
    shallow = lopa_run(SETTINGS, two_key_script)
    one_step, _, _ = headroom.search(shallow)
    assert one_step.metrics()["forwards"] > 2


def test_two_step_candidates_are_pairs_of_the_pool_and_the_engine_s_adjacent_chains_each_once():
    free = [3, 1, 7, 2, 9]                      # LoPA's ranking, best first
    pairs = headroom.two_step_candidates(free, free, pair_pool=2)
    assert pairs == [(3, 1), (3, 7), (1, 2), (7, 9), (3, 2)]   # (3, 1) pooled; then each with the next free after it
    assert headroom.two_step_candidates(free, free, pair_pool=0) == [(3, 7), (1, 2), (7, 9), (3, 2)]


def test_every_round_of_a_depth_2_run_is_searched_against_lopa_s_own_chain():
    lopa = lopa_run(SETTINGS.replace(lookahead_depth=2), two_key_script)
    # One single and one chain a round: too few to find the keys, so the search walks every round of the order
    # it finds, the last of them one where LoPA's winner is its chain (5, 6), row 2 of a k = 1 round.
    steps = list(headroom.iter_search(lopa, max_candidates=1, pair_pool=0))
    best = steps[-1]["best"]
    assert [s["round"] for s in steps] == list(range(1, best.metrics()["forwards"]))
    last = best.records[steps[-1]["round"]]
    assert last.winner == 2 and last.lookahead_positions == [5] and headroom.lopa_extra(last) == (5, 6)
    assert best.metrics()["forwards"] < lopa.metrics()["forwards"] and best.tokens == lopa.tokens
    for c in steps[-1]["choices"]:
        own = [p for p, _, ahead in lopa.records[c["round"]].filled() if ahead]
        assert c["lopa_positions"] == own and set(c["positions"]) != set(own)


def test_departures_read_the_winning_chain_not_a_lookahead_index():
    from lopa.study.departures import lookahead_completions
    lopa = lopa_run(SETTINGS.replace(lookahead_depth=2), two_key_script)
    # round 6: the chain (5, 6) wins as row 2 of a k = 1 round; it fills 5 and 6, and position 7 is the anchor's
    # (the block of 8 is then complete: one event, the last round with a forward)
    assert lookahead_completions(lopa, SETTINGS.block_size) == (1, 0)
