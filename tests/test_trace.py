"""The trace: round-trips, metrics, and re-deriving every decision without the model."""

import json

import pytest
import torch
from tiny import tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, RunResult
from lopa.rules import COMMIT_RULES, BlockPredictions, branch_score, lookahead_positions, select_winner
from lopa.trace import predictions

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
SETTINGS = DecodeSettings(k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                          confidence="max_prob")


@pytest.fixture(scope="module")
def run():
    return Decoder(tiny_qwen2(seed=1), tiny_spec(), SETTINGS).run(PROMPT)


def test_json_round_trip(run):
    back = RunResult.from_json(run.to_json())
    assert back.records == run.records and back.tokens == run.tokens and back.settings == run.settings


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_file_round_trip(run, tmp_path, suffix):
    back = RunResult.load(run.save(tmp_path / f"trace{suffix}"))
    assert back.records == run.records and back.prompt_ids == run.prompt_ids and back.spec == run.spec


def test_dataframe_round_trip(run):
    df = run.to_dataframe()
    assert len(df) == len(run.records) and "branch_scores" in df.columns
    assert RunResult.from_dataframe(df).records == run.records


def test_a_record_as_plain_data_is_asdicts_and_shares_nothing_with_it(run):
    """RoundRecord.to_dict (what a decode streams to the app, and what a trace saves) equals
    dataclasses.asdict, nested forced decisions, chains and executor timings included, and holds none of
    the record's own lists or dicts (a change to one leaves the other as it was)."""
    import dataclasses

    def containers(value, found):
        if isinstance(value, (list, tuple, dict)):
            found.add(id(value))
            for v in (value.values() if isinstance(value, dict) else value):
                containers(v, found)
        return found

    rich = dataclasses.replace(run.records[1], forced=[{"action": "commit", "position": 12, "token": 7}],
                               extra={"gather_s": 0.5, "bytes": [1, 2], "nested": {"a": (1, 2.5, None)}},
                               chain_positions=[[3, 4]], chain_tokens=[[5, 6]], chain_rows=[[1, 2]], chain_kept=[2])
    for record in [*run.records, rich]:
        plain = record.to_dict()
        assert plain == dataclasses.asdict(record)
        mine = set().union(*(containers(getattr(record, f.name), set()) for f in dataclasses.fields(record)))
        assert not mine & containers(plain, set())
    assert isinstance(rich.to_dict()["extra"]["nested"]["a"], tuple)


def test_a_version_1_trace_keeps_its_meaning_of_full_attention(tmp_path):
    """lopa-trace/1 called prompt-blind full attention "full"; it loads as full_prompt_blind, and a
    trace-scripted replay of it with those settings reproduces the run."""
    from lopa.script import load_script
    settings = SETTINGS.replace(attention="full_prompt_blind")
    model = tiny_qwen2(seed=1)
    run = Decoder(model, tiny_spec(attention="full_prompt_blind"), settings).run(PROMPT)
    old = json.loads(run.to_json())
    old.update(format="lopa-trace/1", settings={**old["settings"], "attention": "full"},
               spec={**old["spec"], "attention": "full"})
    for key in ("cache_schedule", "mask_argmax"):        # fields version 1 did not have
        del old["settings"][key]
    back = RunResult.from_json(json.dumps(old))
    assert back.settings["attention"] == back.spec["attention"] == "full_prompt_blind"
    assert back.records == run.records
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    script, _ = load_script(path)
    replay = Decoder(model, tiny_spec(), DecodeSettings.from_dict(back.settings), script=script).run(PROMPT)
    assert replay.tokens == run.tokens and [r.branch_scores for r in replay.records] == [r.branch_scores for r in run.records]


def test_corrupt_and_foreign_files_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON trace"):
        RunResult.load(bad)
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="not a LoPA trace"):
        RunResult.load(bad)
    pq = tmp_path / "bad.parquet"
    pq.write_bytes(b"PAR1garbage")
    with pytest.raises(ValueError):
        RunResult.load(pq)
    with pytest.raises(ValueError, match=".json or .parquet"):
        RunResult.load(tmp_path / "x.txt")


def test_metrics(run):
    m = run.metrics()
    assert m["device"] == "cpu" and m["latency_s"] > 0
    # every forward's k + 1 windows, padded to the longest, and the prompt in the prefill
    assert m["token_forwards"] == len(run.prompt_ids) + sum(
        len(r.branch_tokens) * max(map(len, r.branch_tokens)) for r in run.records if r.kind != "final")
    assert m["token_forwards"] > m["forwards"] * SETTINGS.block_size
    forwards = sum(r.kind != "final" for r in run.records)
    assert m["forwards"] == forwards
    assert m["tpf_paper"] == pytest.approx(len(run.tokens) / forwards)
    assert m["tokens_useful"] <= m["tokens_paper"]
    assert m["tps_excl_first"] >= m["tps"] > 0
    assert sum(r.committed for r in run.records) == len(run.tokens)
    assert m["chain_tokens"] == m["chain_kept"] == m["chain_won"] == 0          # depth 1: no chains


def rederive(run, s: DecodeSettings) -> None:
    """Round r's anchor comes from round r-1's winner predictions under the settings' commit rule (the
    stability rule also reads round r-2's, at the same positions); its lookahead from the same
    predictions; its scores and winner from its own branch predictions. No model needed."""
    rule = COMMIT_RULES.get(s.commit)
    for r, (prev, rec) in enumerate(zip(run.records, run.records[1:]), start=1):
        w = prev.winner
        pos = torch.tensor(prev.branch_positions[w])
        max_prob, conf = torch.tensor(prev.branch_max_prob[w]), torch.tensor(prev.branch_conf[w])
        argmax = torch.tensor(prev.branch_argmax[w])
        before = predictions(run.records[r - 2]) if r >= 2 else {}
        prev_token = torch.tensor([before[p].token if p in before else -1 for p in pos.tolist()], dtype=torch.long)
        prev_max_prob = torch.tensor([before[p].max_prob if p in before else float("nan") for p in pos.tolist()])
        anchor = []
        if s.commit == "dawn":            # the rule over the window's graph, which the round recorded
            anchor = dawn_from_trace(rec.extra["commit_reasons"], prev, pos, max_prob, conf, s)
        for b, state in enumerate(prev.block_states if rule else ()):
            in_block = (pos // s.block_size) == b
            if in_block.any():
                block = BlockPredictions(argmax[in_block], max_prob[in_block], conf[in_block], conf[in_block],
                                         prev_token[in_block], prev_max_prob[in_block])
                chosen = rule(block, s, state == "active_full")
                anchor += pos[in_block][chosen].tolist()
        assert rec.anchor_positions == anchor
        assert rec.anchor_tokens == [int(argmax[pos == p]) for p in anchor]
        left = torch.tensor([p not in anchor for p in pos.tolist()])
        look = lookahead_positions(conf, left, s.k)
        assert rec.lookahead_positions == pos[look].tolist()
        if rec.kind == "round":
            scores = torch.stack([branch_score(torch.tensor(c)) for c in rec.branch_conf])
            assert scores.tolist() == pytest.approx(rec.branch_scores)
            free = left & (max_prob >= s.lookahead_min_prob)
            candidates = rederive_chains(rec, pos[look], dict(zip(pos[free].tolist(), argmax[free].tolist())), s) \
                if s.lookahead_depth > 1 else list(range(len(rec.branch_scores)))
            assert candidates[int(select_winner(torch.tensor(rec.branch_scores)[candidates]))] == rec.winner


def dawn_from_trace(why: dict, prev, pos, max_prob, conf, s: DecodeSettings) -> list[int]:
    """commit=dawn's anchor from the graph its round recorded (anchored positions, [j, i] edges) and the last
    winner's predictions at its masked positions: lopa.peers.dawn_select, then D2F's fallback per fully
    activated block, ranked by Conf."""
    from lopa.peers import dawn_select
    index = {p: i for i, p in enumerate(pos.tolist())}
    anchored = torch.tensor([p in set(why["anchored"]) for p in pos.tolist()], dtype=torch.bool)
    edges = torch.zeros(len(index), len(index), dtype=torch.bool)
    for j, i in why["edges"]:
        edges[index[j], index[i]] = True
    parts = dawn_select(anchored, edges, max_prob, torch.ones(len(index), dtype=torch.bool), s.tau_conf,
                        s.dawn_induce, s.dawn_low)
    chosen = parts["sure"] | parts["induced"] | parts["free"]
    for b, state in enumerate(prev.block_states):
        in_block = ((pos // s.block_size) == b).nonzero().flatten()
        if state == "active_full" and in_block.numel() and not bool(chosen[in_block].any()):
            chosen[in_block[conf[in_block].argmax()]] = True
    return pos[chosen].tolist()


def rederive_chains(rec, look_pos, token_at: dict[int, int], s: DecodeSettings) -> list[int]:
    """A round's chains from its lookahead (lopa.chains, left to right: q_j, then the next free positions
    after it; token_at: free position -> the last winner's prediction there), each verified row's tokens
    from them, and how much of each chain was kept from the rows' own predictions: token i >= 2 stands when
    the row holding the chain's first i - 1 tokens predicts it there. -> the rows the winner is chosen
    among (the anchor, each kept chain)."""
    w0, anchor_row = rec.window_start, rec.branch_tokens[0]
    for j, q in enumerate(look_pos.tolist()):
        chain = ([q] + sorted(p for p in token_at if p > q))[:s.lookahead_depth]
        assert rec.chain_positions[j] == chain and rec.chain_tokens[j] == [token_at[p] for p in chain]
        for i, row in enumerate(rec.chain_rows[j]):        # the row of the chain's first i + 1 tokens holds them
            expected = list(anchor_row)
            for p in chain[:i + 1]:
                expected[p - w0] = token_at[p]
            assert rec.branch_tokens[row][:len(expected)] == expected
        kept = 1
        while kept < len(chain):
            seen = predictions(rec, rec.chain_rows[j][kept - 1]).get(chain[kept])
            if seen is None or seen.token != token_at[chain[kept]] or seen.max_prob < s.lookahead_min_prob:
                break
            kept += 1
        assert rec.chain_kept[j] == kept
    return [0] + [rows[n - 1] for rows, n in zip(rec.chain_rows, rec.chain_kept)]


def test_every_decision_can_be_rederived_from_the_trace(run):
    rederive(run, SETTINGS)


@pytest.mark.parametrize("attention", ["block_causal", "full"])
@pytest.mark.parametrize("depth", [2, 3])
def test_every_chain_and_how_much_of_it_was_kept_rederives_from_the_trace(attention, depth, tmp_path):
    """Lookahead chains (lookahead_depth > 1): each round's chains, their rows, the cut and the winner
    re-derive from the saved trace alone; the run commits exactly the kept tokens."""
    s = SETTINGS.replace(lookahead_depth=depth, attention=attention)
    made = Decoder(tiny_qwen2(seed=1), tiny_spec(attention=attention), s).run(PROMPT)
    loaded = RunResult.load(made.save(tmp_path / "chains.json"))
    assert loaded.records == made.records
    rounds = [r for r in loaded.records if r.kind == "round"]
    assert any(max(r.chain_kept) > 1 for r in rounds) and any(len(r.branch_scores) > s.k + 1 for r in rounds)
    if depth == 2:                          # some chain was cut (and re-derives so)
        assert any(n < len(c) for r in rounds for c, n in zip(r.chain_positions, r.chain_kept))
    rederive(loaded, s)
    assert sum(r.committed for r in loaded.records) == len(loaded.tokens)
    assert [len(r.filled()) for r in rounds] == [r.committed for r in rounds]
    m = loaded.metrics()                    # the chains' counters: proposed past the first, kept, won
    assert m["chain_tokens"] == sum(len(c) - 1 for r in rounds for c in r.chain_positions) >= m["chain_kept"] > 0
    assert m["chain_won"] == sum(len(r.filled()) - len(r.anchor_positions) - 1 for r in rounds if r.winner) > 0


# Each peer's knob set where the tiny random model (max probs near 0.1) commits more than one position a
# round under it, where it can; tau_conf 0.12 as SETTINGS.
PEERS = {"eb": {"eb_gamma": 7.0, "confidence": "neg_entropy"}, "factor": {"factor_f": 3.0},
         "frechet": {"frechet_margin": -1.0}, "joint": {}, "stable": {"stable_js": 0.001}}


@pytest.mark.parametrize("k", [0, 3])
def test_a_dependency_aware_decode_rederives_from_the_graph_its_rounds_recorded(k, tmp_path):
    """commit=dawn reads the round's attention, which no trace keeps; each round records the graph it took from it
    (lopa.peers.dawn_graph), and from that graph and the recorded predictions every round's commits, lookahead
    and winner re-derive, with no model."""
    s = SETTINGS.replace(commit="dawn", k=k, dawn_edge=0.02, dawn_low=0.04, dawn_induce=0.06, dawn_sink=0.5)
    made = Decoder(tiny_qwen2(seed=1), tiny_spec(), s).run(PROMPT)
    loaded = RunResult.load(made.save(tmp_path / "dawn.json"))
    rounds = [r for r in loaded.records if r.kind != "prefill"]
    for part in ("edges", "anchored", "induced", "free", "conflict", "fallback"):   # every part of the rule acts
        assert any(r.extra["commit_reasons"][part] for r in rounds), part
    rederive(loaded, s)


@pytest.mark.parametrize("commit", list(PEERS))
@pytest.mark.parametrize("k", [0, 3])
def test_every_peer_rederives_round_by_round_from_its_trace(commit, k, tmp_path):
    """Each peer's rule, alone (k = 0) and under lookahead, re-derives from the saved trace alone."""
    s = SETTINGS.replace(commit=commit, k=k, **PEERS[commit])
    made = Decoder(tiny_qwen2(seed=1), tiny_spec(), s).run(PROMPT)
    loaded = RunResult.load(made.save(tmp_path / "peer.json"))
    assert DecodeSettings.from_dict(loaded.settings) == s
    rederive(loaded, s)


def test_cost_metrics_time_to_first_token_and_work_per_forward():
    from lopa.trace import RoundRecord, RunResult, metrics

    def rec(r, kind, committed, windows, seconds):
        return RoundRecord(round=r, kind=kind, window_start=0, anchor_positions=[], anchor_tokens=[],
                           lookahead_positions=[], lookahead_tokens=[], branch_tokens=windows,
                           branch_positions=[[]] * len(windows), branch_max_prob=[[]] * len(windows),
                           branch_conf=[[]] * len(windows), branch_argmax=[[]] * len(windows),
                           branch_scores=[0.0] * len(windows), branch_rank=[0] * len(windows), winner=0,
                           block_states=["active_full"], committed=committed, n_cached_blocks=0,
                           forward_seconds=0.0 if kind == "final" else seconds / 2, round_seconds=seconds)
    records = [rec(0, "prefill", 0, [[1] * 8], 0.5), rec(1, "round", 3, [[1] * 8] * 3, 0.25),
               rec(2, "final", 5, [[1] * 8], 0.125)]
    run = RunResult(prompt="", prompt_ids=[1], settings={}, spec={"mask_token_id": 9, "eos_token_ids": [0]},
                    records=records, tokens=[1] * 8)
    m = metrics(run)
    assert m["ttft_s"] == 0.75                                # prompt round + the first round that commits
    assert m["ms_per_forward"] == 1e3 * (0.25 + 0.125) / 2   # two forwards; the final round has none
    assert m["verified_per_forward"] == (8 + 24) / 2
    assert m["token_forwards"] == (1 + 8) + 3 * 8               # the prompt and window, then k + 1 = 3 windows of 8
    assert m["device"] == ""                                   # hand-made records say nothing of a device
    assert metrics(None)["ttft_s"] == 0.0


def test_what_each_round_decided_on_from_hand_made_rounds():
    """Round 1 decides on round 0's winner predictions: the anchor commits position 0 (0.95), the
    winning branch B2 adds position 3, proposed at 0.2; round 2 decides on B2's predictions."""
    from lopa.trace import RoundRecord, fill_landscape
    from visualizations.timeline import ANCHOR, LOOKAHEAD, fills

    def rec(r, kind, positions, max_prob, winner=0, **kw):
        return RoundRecord(round=r, kind=kind, window_start=0, branch_tokens=[[]] * len(positions),
                           branch_positions=positions, branch_max_prob=max_prob, branch_conf=max_prob,
                           branch_argmax=[[9] * len(b) for b in positions], branch_scores=[0.0] * len(positions),
                           branch_rank=[0] * len(positions), winner=winner, block_states=["active_full"], committed=0,
                           n_cached_blocks=0, forward_seconds=0.0, round_seconds=0.0,
                           **{"anchor_positions": [], "anchor_tokens": [], "lookahead_positions": [],
                              "lookahead_tokens": [], **kw})
    records = [rec(0, "prefill", [[0, 1, 2, 3]], [[0.95, 0.5, 0.4, 0.2]]),
               rec(1, "round", [[1, 2, 3], [2, 3], [1, 2]], [[0.6, 0.5, 0.3], [0.97, 0.3], [0.96, 0.92]], winner=2,
                   anchor_positions=[0], anchor_tokens=[7], lookahead_positions=[1, 3], lookahead_tokens=[8, 9]),
               rec(2, "round", [[]], [[]], anchor_positions=[1, 2], anchor_tokens=[5, 6])]
    assert records[1].filled() == [(0, 7, False), (3, 9, True)]
    got = {p: (f.round, f.token, f.how, f.max_prob) for p, f in fills(records).items()}
    assert got == {0: (1, 7, ANCHOR, 0.95), 3: (1, 9, LOOKAHEAD, 0.2),        # round 0's predictions
                   1: (2, 5, ANCHOR, 0.96), 2: (2, 6, ANCHOR, 0.92)}          # the winner's (B2's), not the anchor's
    assert fill_landscape(records, useful=4) == {"fill_spread": 0.5, "first_fill_share": 0.5}   # rounds 1, 2, 2, 1


def test_pooled_metrics_total_over_decodes_before_dividing():
    from lopa.trace import authors_tpf, pooled
    rows = [{"tokens_useful": 10, "tokens_paper": 32, "forwards": 2, "latency_s": 1.0, "first_round_s": 0.5},
            {"tokens_useful": 2, "tokens_paper": 32, "forwards": 4, "latency_s": 3.0, "first_round_s": 0.5}]
    total = pooled(rows)
    assert total["tpf_useful"] == 12 / 6 and total["tps"] == 12 / 4.0 and total["tps_excl_first"] == 12 / 3.0
    assert total["tpf_authors"] == authors_tpf(64, 6, 2) == 64 / 8
    assert pooled([{"tokens": 3, "forwards": 3}], tokens="tokens")["tpf_useful"] == 1.0
    assert pooled([])["tpf_useful"] == 0.0


def test_pooled_cost_and_means_over_hand_made_decodes():
    """The numbers the benchmarks took by hand: ms per forward and bookkeeping per round pooled (totals
    before dividing), per-decode means, and a TPF over another forward count (the bench's ceiling)."""
    from lopa.trace import pooled
    rows = [{"tokens_useful": 10, "forwards": 2, "forwards_floor": 1, "rounds": 3, "latency_s": 1.0, "forward_s": 0.5,
             "fill_spread": 1.0, "first_fill_share": 0.5},
            {"tokens_useful": 2, "forwards": 4, "forwards_floor": 1, "rounds": 5, "latency_s": 3.0, "forward_s": 1.5,
             "fill_spread": 0.0, "first_fill_share": 1.0}]
    total = pooled(rows)
    assert (total["rounds"], total["forward_s"]) == (8, 2.0)
    assert total["ms_per_forward"] == 1e3 * 2.0 / 6 and total["bookkeeping_ms_per_round"] == 1e3 * (4.0 - 2.0) / 8
    assert (total["forwards_mean"], total["latency_s_mean"]) == (3.0, 2.0)
    assert (total["fill_spread_mean"], total["first_fill_share_mean"]) == (0.5, 0.75)
    ceiling = pooled(rows, forwards="forwards_floor")
    assert (ceiling["forwards"], ceiling["tpf_useful"], ceiling["forwards_mean"]) == (2, 12 / 2, 1.0)
    assert pooled([{"token_forwards": 30}, {"token_forwards": 50}])["token_forwards_mean"] == 40
    empty = pooled([])
    assert empty["ms_per_forward"] == empty["bookkeeping_ms_per_round"] == empty["forwards_mean"] == 0.0
    assert rows[0]["forwards"] == 2 and len(rows[0]) == 8          # the rows are read, never changed


def test_a_position_committed_twice_is_filled_by_its_last_commit(run):
    """One rule for "which round filled p" (fills, fill_rounds, fill_landscape): the last commit, as a
    committed mask token (mask_argmax="authors") fills nothing."""
    import dataclasses

    from lopa.trace import fill_rounds, fills
    records = list(run.records)
    r = next(i for i, rec in enumerate(records) if i > 1 and rec.anchor_positions)
    p = records[r].anchor_positions[0]
    early = dataclasses.replace(records[1], anchor_positions=[*records[1].anchor_positions, p],
                                anchor_tokens=[*records[1].anchor_tokens, run.spec["mask_token_id"]])
    records[1] = early
    assert fill_rounds(records)[p] == r and fills(records)[p].round == r
    assert fill_rounds(records, upto=1)[p] == 1 and fill_rounds(records) == {q: f.round for q, f in fills(records).items()}
