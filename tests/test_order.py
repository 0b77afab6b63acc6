"""Token filling order policies, scripts, replay fidelity and forks (lopa/order.py, lopa/script.py,
Decoder.stream_fork)."""

import json

import pytest
import torch
from fake_model import EOS, MASK, FakeDLLM, table_script
from tiny import tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, ModelSpec, RunResult, decoder_settings
from lopa.engine import fork
from lopa.order import (
    HighestEntropyOrder,
    LeastConfidentOrder,
    LeftToRightOrder,
    MixedOrder,
    RandomOrder,
    RoundView,
)
from lopa.script import Forced, load_script, script_from_json, script_from_trace, script_to_json

PROMPT = torch.tensor([7, 8, 9])
SPEC = ModelSpec(mask_token_id=MASK, eos_token_ids=(EOS,), logit_shift=True, max_context=4096)
QWEN_PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
QWEN_SETTINGS = DecodeSettings(k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                               confidence="max_prob")
TIMING = ("forward_seconds", "round_seconds", "extra", "forced")


def fake_run(table, script=None, **settings):
    model = FakeDLLM(len(PROMPT), table_script(table))
    return Decoder(model, SPEC, DecodeSettings(**settings), executor="uncached", script=script).run(PROMPT)


def decisions(run):
    """Every recorded fact of a run except timings and the forced-decision notes."""
    return [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in run.records]


@pytest.fixture(scope="module")
def qwen():
    return tiny_qwen2(seed=1)


def qwen_decoder(model, settings=QWEN_SETTINGS, **kwargs):
    return Decoder(model, tiny_spec(), settings, **kwargs)


# -- the built-in policies on a scripted fake model ---------------------------------------------------
# Conf rises with the position, so the paper's order looks ahead from the right and the
# autoregressive one from the left.
RISING = {0: (5, 0.95), **{g: (4 + g, 0.3 + 0.05 * g) for g in range(1, 8)}}


def test_confidence_is_the_default_and_looks_ahead_at_the_highest_conf():
    default = fake_run(RISING, k=2, block_size=8, max_new_tokens=8, confidence="max_prob")
    named = fake_run(RISING, k=2, block_size=8, max_new_tokens=8, confidence="max_prob", order="confidence")
    assert decisions(default) == decisions(named)
    r1 = default.records[1]
    assert r1.anchor_positions == [0] and r1.lookahead_positions == [7, 6]


def test_left_to_right_takes_the_lowest_masked_positions():
    res = fake_run(RISING, k=2, block_size=8, max_new_tokens=8, confidence="max_prob", order="left_to_right")
    r1 = res.records[1]
    assert r1.anchor_positions == [0] and r1.lookahead_positions == [1, 2] and r1.lookahead_tokens == [5, 6]
    # With nothing above tau_conf the fallback commits the leftmost masked position, not the surest.
    flat = {g: (4 + g, 0.3 + 0.05 * g) for g in range(8)}
    res = fake_run(flat, k=0, block_size=8, max_new_tokens=8, confidence="max_prob", order="left_to_right")
    assert [r.anchor_positions for r in res.records[1:]] == [[g] for g in range(8)]


def test_the_lookahead_floor_keeps_barely_guessed_positions_out_of_every_order():
    """RISING: position g has max prob 0.3 + 0.05 g, so 0.62 leaves only position 7 (0.65) a candidate."""
    kw = dict(k=2, block_size=8, max_new_tokens=8, confidence="max_prob")
    floored = fake_run(RISING, lookahead_min_prob=0.62, **kw)
    assert floored.records[1].lookahead_positions == [7]
    from visualizations.timeline import predictions
    proposed = [predictions(floored.records[r - 1])[p].max_prob
                for r in range(1, len(floored.records)) for p in floored.records[r].lookahead_positions]
    assert proposed and min(proposed) >= 0.62
    before = predictions(fake_run(RISING, **kw).records[0])
    assert [before[p].max_prob for p in (7, 6)] == pytest.approx([0.65, 0.60])
    assert fake_run(RISING, lookahead_min_prob=0.62, order="left_to_right", **kw).records[1].lookahead_positions == [7]
    for seed in range(4):
        look = fake_run(RISING, lookahead_min_prob=0.58, order="random", order_seed=seed, **kw).records[1]
        assert sorted(look.lookahead_positions) == [6, 7]
    # above every position: no branch to verify, so the round is vanilla D2F's (same commits)
    none = fake_run(RISING, lookahead_min_prob=0.9, **kw)
    vanilla = fake_run(RISING, **{**kw, "k": 0})
    assert all(r.lookahead_positions == [] for r in none.records)
    from visualizations import explain_round
    assert "lookahead floor 0.9" in explain_round(none, 1, None)          # the page says why there was none
    assert [r.filled() for r in none.records] == [r.filled() for r in vanilla.records]
    # 0 is the paper's rule, the same decisions as before the setting existed
    assert decisions(fake_run(RISING, lookahead_min_prob=0.0, **kw)) == decisions(fake_run(RISING, **kw))
    with pytest.raises(ValueError, match=r"lookahead_min_prob must be in \[0, 1\)"):
        DecodeSettings(lookahead_min_prob=1.0)


def test_left_to_right_with_one_token_per_round_is_the_one_token_baseline():
    falling = {g: (4 + g, 0.8 - 0.05 * g) for g in range(8)}   # the leftmost is also the surest
    one_token = decoder_settings("one_token", DecodeSettings(block_size=4, max_new_tokens=8, confidence="max_prob"))
    base = fake_run(falling, **one_token.to_dict())
    l2r = fake_run(falling, **one_token.replace(order="left_to_right").to_dict())
    assert decisions(l2r) == decisions(base)
    assert l2r.metrics()["tpf_paper"] == base.metrics()["tpf_paper"]
    # Where the surest position is not the leftmost, the orders differ but both fill one token per round.
    other = fake_run(RISING, **one_token.replace(order="left_to_right", tau_conf=0.99).to_dict())
    assert [r.anchor_positions for r in other.records[1:]] == [[g] for g in range(8)]


def test_random_lookahead_is_seeded_and_drawn_from_the_free_masked_positions():
    runs = {seed: fake_run(RISING, k=3, block_size=8, max_new_tokens=8, confidence="max_prob", order="random",
                           order_seed=seed) for seed in (0, 1, 2, 3)}
    again = fake_run(RISING, k=3, block_size=8, max_new_tokens=8, confidence="max_prob", order="random", order_seed=0)
    assert decisions(again) == decisions(runs[0])
    firsts = {tuple(run.records[1].lookahead_positions) for run in runs.values()}
    assert len(firsts) > 1                                  # the seed matters
    for run in runs.values():
        r1 = run.records[1]
        assert r1.anchor_positions == [0] and len(r1.lookahead_positions) == 3
        assert set(r1.lookahead_positions) <= set(range(1, 8))
    # The exact draw: top-3 of uniform keys from a generator seeded by (seed, round).
    keys = torch.rand(8, generator=torch.Generator().manual_seed(2 * 1_000_003 + 1))
    keys[0] = -1                                            # position 0 was committed by the anchor
    assert runs[2].records[1].lookahead_positions == keys.argsort(descending=True)[:3].tolist()


def _view(W=8, k=1, round=1, masked=None):
    settings = DecodeSettings(k=k, block_size=W, max_new_tokens=W)
    ones = torch.ones(W)
    return RoundView(round, 0, W, torch.arange(W) + 2, ones * 0.5, ones * 0.5,
                     torch.ones(W, dtype=torch.bool) if masked is None else masked, [True], settings, MASK, 16)


def test_random_lookahead_is_uniform_and_helpers_do_not_change_their_inputs():
    view = _view()
    before = [t.clone() for t in (view.token, view.max_prob, view.conf, view.masked)]
    counts = torch.zeros(8)
    for seed in range(4000):
        counts[RandomOrder(seed).lookahead(view, view.masked)] += 1
    assert (counts / 4000 - 1 / 8).abs().max() < 0.03          # 1/8 each, within ~5 standard errors
    free = view.masked.clone()
    free[[0, 3]] = False
    assert all(int(RandomOrder(s).lookahead(view, free)) not in (0, 3) for s in range(50))
    assert LeftToRightOrder().lookahead(view, free).tolist() == [1]
    for old, new in zip(before, (view.token, view.max_prob, view.conf, view.masked)):
        assert torch.equal(old, new)


# -- proposal rules: which positions the branches try ------------------------------------------------------
def _ranked_view(k):
    """Window of 8: max prob falls with the position, Conf (as if neg_entropy) is ranked differently, so
    the lowest max prob (7) and the lowest Conf (5) are different positions."""
    view = _view(k=k)
    max_prob = torch.tensor([0.95, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    conf = torch.tensor([-0.1, -0.5, -0.2, -0.9, -0.3, -2.0, -0.4, -1.5])
    return RoundView(view.round, 0, 8, view.token, max_prob, conf, view.masked, [True], view.settings, MASK, 16)


def test_the_adaptive_budget_is_choose_k_per_round_whatever_it_has_solved_before():
    from lopa.order import AdaptiveOrder
    from lopa.rules import choose_k
    cost = torch.tensor([1.0, 1.5, 2.0, 2.6, 3.3])
    policy = AdaptiveOrder(cost, base=LeastConfidentOrder(), win=0.5, release=0.5, lift=0.5)
    view = _ranked_view(4)                     # tau_conf 0.9: positions 1..7 sit 0.1 .. 0.7 under it
    for near, free in [(0.15, [1, 2, 3]), (0.45, [1, 2, 3, 4, 5, 6, 7]), (0.15, [1, 2, 3]), (0.0, [7])] * 2:
        policy.near = near
        mask = torch.zeros(8, dtype=torch.bool)
        mask[free] = True
        n_near = int((mask & (view.max_prob > 0.9 - near)).sum())
        expected = int(choose_k(min(len(free), 4), n_near, cost, win=0.5, release=0.5, lift=0.5))
        assert policy.lookahead(view, mask).tolist() == LeastConfidentOrder().lookahead(view, mask).tolist()[:expected]
    assert len(policy.budget) == 3 and {k for k, _ in policy.budget} == {3, 4, 1}


@pytest.mark.parametrize("policy, k, expected", [
    (LeastConfidentOrder(), 3, [7, 6, 5]),          # lowest max prob first
    (HighestEntropyOrder(), 3, [5, 7, 3]),          # lowest Conf (= highest entropy) first
    (MixedOrder(), 4, [2, 4, 5, 7]),                # two highest Conf (0 is taken), then the two lowest
    (MixedOrder(), 3, [2, 4, 5]),                   # ceil(3/2) = 2 highest, 1 lowest
    (MixedOrder(), 1, [2]),                         # k = 1: the paper's
    (MixedOrder(), 9, [2, 4, 6, 1, 3, 5, 7]),       # k > free: five highest, then the rest lowest first
])
def test_proposal_rules_on_hand_made_predictions(policy, k, expected):
    view = _ranked_view(k)
    free = view.masked.clone()
    free[0] = False                                  # position 0 is the anchor's
    before = [t.clone() for t in (view.max_prob, view.conf, view.masked, free)]
    assert policy.lookahead(view, free).tolist() == expected
    for old, new in zip(before, (view.max_prob, view.conf, view.masked, free)):
        assert torch.equal(old, new)                 # helpers never change their inputs
    assert torch.equal(policy.anchor(view).positions, torch.tensor([0]))    # the paper's anchor: 0.95 > 0.9


@pytest.mark.parametrize("order, first", [("least_confident", [1, 2]), ("highest_entropy", [1, 2]),
                                          ("mixed", [7, 1])])
def test_proposal_rules_through_the_engine_are_recorded_and_reloaded(order, first, tmp_path):
    """RISING: max prob and Conf rise with the position, so the least sure free positions are the lowest."""
    run = fake_run(RISING, k=2, block_size=8, max_new_tokens=8, confidence="max_prob", order=order)
    assert run.settings["order"] == order and run.records[1].lookahead_positions == first
    back = RunResult.load(run.save(tmp_path / "run.json"))
    assert back.settings["order"] == order and back.records[1].lookahead_positions == first


# -- scripted decisions ----------------------------------------------------------------------------------
def test_scripted_commit_hold_and_their_record():
    table = {0: (5, 0.95), 1: (6, 0.95), 2: (7, 0.5), 3: (8, 0.4), 4: (9, 0.3), 5: (10, 0.3), 6: (2, 0.3), 7: (2, 0.3)}
    base = fake_run(table, k=1, block_size=8, max_new_tokens=8, confidence="max_prob")
    assert base.records[1].anchor_positions == [0, 1] and base.records[1].lookahead_positions == [2]
    script = {1: Forced(commit={5: 11, 6: None}, hold=(1, 2))}
    res = fake_run(table, script=script, k=1, block_size=8, max_new_tokens=8, confidence="max_prob")
    r1 = res.records[1]
    assert r1.anchor_positions == [0, 5, 6] and r1.anchor_tokens == [5, 11, 2]   # 6: the model's own top token
    assert 1 not in r1.anchor_positions and r1.lookahead_positions == [3]        # held: no commit, no branch
    assert r1.forced == [{"action": "commit", "position": 5, "token": 11}, {"action": "commit", "position": 6, "token": 2},
                         {"action": "hold", "position": 1}, {"action": "hold", "position": 2}]
    assert res.records[2].forced == [] and 1 in res.records[2].anchor_positions  # next round: the policy again
    back = RunResult.from_json(res.to_json())
    assert back.records[1].forced == r1.forced


@pytest.mark.parametrize("forced, message", [
    (Forced(commit={40: None}), r"round 1: position 40 is not a generated position"),
    (Forced(hold=(-1,)), r"round 1: position -1 is not a generated position"),
    (Forced(commit={0: 3}), None),                                              # valid: control case
    (Forced(commit={2: 99}), r"round 1: token id 99 at position 2 is outside the vocabulary \(0\.\.15\)"),
    (Forced(commit={2: MASK}), r"round 1: position 2 cannot be committed to the mask token"),
    (Forced(commit={2: None}, hold=(2,)), r"round 1: position 2 is both committed and held back"),
])
def test_bad_scripts_name_the_round_and_the_position(forced, message):
    table = {g: (4 + g, 0.95) for g in range(8)}
    if message is None:
        fake_run(table, script={1: forced}, k=0, block_size=8, max_new_tokens=8)
        return
    with pytest.raises(ValueError, match=message):
        fake_run(table, script={1: forced}, k=0, block_size=8, max_new_tokens=8)


def test_committed_positions_cannot_be_scripted_again():
    table = {g: (4 + g, 0.6) for g in range(8)}
    with pytest.raises(ValueError, match=r"round 3: position 0 is not masked at that round"):
        fake_run(table, script={3: Forced(commit={0: None})}, k=0, block_size=8, max_new_tokens=8,
                 order="left_to_right")


def test_script_json_round_trip_and_schema_errors(tmp_path):
    script = {2: Forced(commit={4: 7, 5: None}, hold=(6,)), 3: Forced(lookahead=(1, 2), exclusive=True)}
    assert script_from_json(json.loads(json.dumps(script_to_json(script)))) == script
    for bad, message in [({"rounds": [{"round": 0}]}, "round' >= 1"), ({"rounds": [{"round": 2, "hold": ["x"]}]},
                         "round 2: positions and tokens must be integers"), ({"rounds": [{"round": 2, "bogus": 1}]},
                         r"round 2: unknown keys \['bogus'\]"), ({"hello": 1}, "not a LoPA script")]:
        with pytest.raises(ValueError, match=message):
            script_from_json(bad)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(script_to_json(script)))
    assert load_script(path) == (script, None)


# -- replay fidelity -------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 2, 8])
@pytest.mark.parametrize("attention", ["block_causal", "full"])
@pytest.mark.parametrize("order", ["confidence", "random", "left_to_right", "least_confident", "highest_entropy",
                                   "mixed"])
def test_a_run_scripted_with_its_own_decisions_reproduces_it(qwen, order, attention, k, tmp_path):
    settings = QWEN_SETTINGS.replace(k=k, attention=attention, order=order, order_seed=5)
    run = qwen_decoder(qwen, settings).run(QWEN_PROMPT)
    replay = qwen_decoder(qwen, settings, script=script_from_trace(run)).run(QWEN_PROMPT)
    assert replay.tokens == run.tokens and decisions(replay) == decisions(run)
    assert replay.metrics()["forwards"] == run.metrics()["forwards"]
    # The trace file itself is a valid script, under any policy: its decisions are pinned.
    script, trace = load_script(run.save(tmp_path / "run.json"))
    other = settings.replace(order="left_to_right" if order != "left_to_right" else "random")
    again = qwen_decoder(qwen, other, script=script).run(torch.tensor(trace.prompt_ids))
    assert again.tokens == run.tokens and [r.branch_scores for r in again.records] == [r.branch_scores for r in run.records]


# -- forks -------------------------------------------------------------------------------------------------
def _counting(model):
    """Count the model's forward passes (a batched k + 1 forward is one)."""
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("order", ["confidence", "random"])
def test_fork_keeps_the_prefix_applies_the_forced_decisions_then_follows_the_policy(qwen, order):
    settings = QWEN_SETTINGS.replace(order=order, order_seed=3)
    parent = qwen_decoder(qwen, settings, keep_states=True).run(QWEN_PROMPT)
    r = 2
    masked = parent.records[r].branch_positions[parent.records[r].winner]
    p, q = masked[-1], masked[0]                                # fill the last masked position first, hold the first
    child = fork(parent, at_round=r, commit={p: 9}, hold=[q])
    assert child.records[:r + 1] == parent.records[:r + 1]      # identical prefix
    step = child.records[r + 1]
    assert p in step.anchor_positions and step.anchor_tokens[step.anchor_positions.index(p)] == 9
    assert q not in step.anchor_positions and q not in step.lookahead_positions
    assert {"action": "commit", "position": p, "token": 9} in step.forced
    assert {"action": "hold", "position": q} in step.forced
    assert child.forked_from == {"run_id": parent.run_id, "round": r} and child.run_id != parent.run_id
    assert all(rec.forced == [] for rec in child.records[r + 2:])
    # The rest follows the policy: a fresh decode with the same forced decisions agrees exactly,
    # and so does the reference path (no saved state: the parent's decisions replayed from round 1).
    fresh = qwen_decoder(qwen, settings, script={r + 1: Forced(commit={p: 9}, hold=(q,))}).run(QWEN_PROMPT)
    assert fresh.tokens == child.tokens and decisions(fresh) == decisions(child)
    loaded = RunResult.from_json(parent.to_json())
    assert loaded.decoder is None

    class Model:          # anything with .decoder(settings), like a LoadedModel
        def decoder(self, s):
            return qwen_decoder(qwen, s)
    replayed = fork(loaded, at_round=r, commit={p: 9}, hold=[q], model=Model())
    assert replayed.tokens == child.tokens and decisions(replayed) == decisions(child)
    # Forks of forks.
    grandchild = fork(child, at_round=r + 1, commit={child.records[r + 1].branch_positions[0][0]: None})
    assert grandchild.records[:r + 2] == child.records[:r + 2]
    assert grandchild.forked_from["run_id"] == child.run_id


def test_a_fork_can_pin_its_round_to_the_anchor_and_one_extra_token(qwen):
    """lookahead=(): the forked round verifies the anchor's branch only, so exactly the forced token is
    added to the anchor's commits (the headroom search's round); the rounds after follow the policy."""
    settings = QWEN_SETTINGS.replace(k=3)
    parent = qwen_decoder(qwen, settings, keep_states=True).run(QWEN_PROMPT)
    r = 1
    plain = fork(parent, at_round=r, commit={}, lookahead=())
    step = plain.records[r + 1]
    assert step.lookahead_positions == [] and len(step.branch_tokens) == 1 and step.winner == 0
    assert step.anchor_positions == parent.records[r + 1].anchor_positions     # the commit rule's, nothing else
    free = [p for p in parent.records[r].branch_positions[parent.records[r].winner]
            if p not in step.anchor_positions]
    extra = fork(parent, at_round=r, commit={free[-1]: None}, lookahead=())
    step = extra.records[r + 1]
    assert sorted(step.anchor_positions) == sorted(plain.records[r + 1].anchor_positions + [free[-1]])
    assert len(step.branch_tokens) == 1 and all(len(rec.lookahead_positions) <= 3 for rec in extra.records[r + 2:])
    replayed = qwen_decoder(qwen, settings, script=script_from_trace(extra)).run(QWEN_PROMPT)
    assert replayed.tokens == extra.tokens and decisions(replayed) == decisions(extra)


def test_a_late_fork_resumes_from_the_saved_state_instead_of_redoing_the_run(qwen):
    parent = qwen_decoder(qwen, QWEN_SETTINGS.replace(max_new_tokens=64), keep_states=True).run(QWEN_PROMPT)
    late = max(rec.round for rec in parent.records if rec.kind == "round") - 1
    position = parent.records[late].branch_positions[parent.records[late].winner][0]
    from lopa.engine import fork_decoder
    resumed = fork_decoder(parent)
    calls, handle = _counting(qwen)
    list(resumed.stream_fork(parent, late, {position: None}))
    handle.remove()
    new_forwards = sum(rec.kind != "final" for rec in resumed.records[late + 1:])
    assert len(calls) == new_forwards                          # only the fork's own rounds
    replay = qwen_decoder(qwen, QWEN_SETTINGS.replace(max_new_tokens=64))
    calls, handle = _counting(qwen)
    list(replay.stream_fork(RunResult.from_json(parent.to_json()), late, {position: None}))
    handle.remove()
    assert len(calls) == new_forwards + late + 1                # the reference path redoes rounds 0..late
    assert resumed.result().tokens == replay.result().tokens


def test_fork_errors(qwen):
    parent = qwen_decoder(qwen).run(QWEN_PROMPT)
    with pytest.raises(ValueError, match="forks need a model"):
        fork(RunResult.from_json(parent.to_json()), at_round=1)
    with pytest.raises(ValueError, match="cannot fork at round 99"):
        fork(parent, at_round=99)


def test_traces_from_before_orders_still_load():
    run = fake_run({g: (4 + g, 0.95) for g in range(8)}, k=1, block_size=8, max_new_tokens=8)
    data = json.loads(run.to_json())
    for key in ("run_id", "forked_from"):
        data.pop(key)
    for record in data["records"]:
        record.pop("forced")
    data["settings"].pop("order"), data["settings"].pop("order_seed")
    old = RunResult.from_json(json.dumps(data))
    assert old.records == run.records and old.run_id == "" and old.forked_from is None
    assert DecodeSettings.from_dict(old.settings).order == "confidence"


# -- command line --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tiny import save_tiny_model_dir
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny"))


def _cli(args, capsys):
    from lopa.cli import main
    code = main(args)
    return code, capsys.readouterr()


def test_cli_order_and_a_trace_as_script_reproduces_the_trace(model_dir, tmp_path, capsys):
    run_json, again_json = tmp_path / "run.json", tmp_path / "again.json"
    common = ["generate", "--model", str(model_dir), "--k", "3", "--max-new-tokens", "32", "--tau-conf", "0.12"]
    code, _ = _cli(common + ["--prompt", "how many apples does Tom have ?", "--order", "random", "--order-seed", "3",
                             "--trace", str(run_json)], capsys)
    assert code == 0
    run = RunResult.load(run_json)
    assert run.settings["order"] == "random" and run.settings["order_seed"] == 3
    code, out = _cli(["generate", "--model", str(model_dir), "--script", str(run_json), "--trace", str(again_json)],
                     capsys)
    assert code == 0 and "forced decisions" in out.out
    again = RunResult.load(again_json)
    assert again.tokens == run.tokens and decisions(again) == decisions(run) and again.settings == run.settings


def test_cli_script_file_and_bad_scripts(model_dir, tmp_path, capsys):
    args = ["generate", "--model", str(model_dir), "--prompt", "how many apples does Tom have ?", "--k", "2",
            "--max-new-tokens", "16", "--order", "left_to_right", "--trace", str(tmp_path / "t.json")]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rounds": [{"round": 1, "commit": {"7": None}, "hold": [0]}]}))
    code, _ = _cli(args + ["--script", str(script)], capsys)
    assert code == 0
    r1 = RunResult.load(tmp_path / "t.json").records[1]
    assert 7 in r1.anchor_positions and 0 not in r1.anchor_positions + r1.lookahead_positions
    for bad, message in [({"rounds": [{"round": 1, "commit": {"99": None}}]}, "round 1: position 99 is not a generated"),
                         ({"rounds": [{"round": 1, "commit": {"3": 12345}}]}, "round 1: token id 12345 at position 3"),
                         ({"rounds": [{"round": 2, "commit": {"0": None}}]}, "round 2: position 0 is not masked")]:
        script.write_text(json.dumps(bad))
        code, out = _cli(args + ["--script", str(script)], capsys)
        assert code == 2 and message in out.err, out.err
    code, out = _cli(["generate", "--model", str(model_dir)], capsys)
    assert code == 2 and "--prompt is required" in out.err


def test_cli_help_documents_orders_and_scripts(capsys):
    from lopa.cli import main
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = capsys.readouterr().out
    assert "--order" in text and "--order-seed" in text and "--script" in text and "reproduces" in text


def test_top_tokens_recompute_the_rounds_prediction(qwen):
    from lopa.forward import top_tokens
    run = qwen_decoder(qwen).run(QWEN_PROMPT)
    for r in (1, 2):
        rec = run.records[r]
        for p, token, prob in zip(rec.branch_positions[rec.winner], rec.branch_argmax[rec.winner],
                                  rec.branch_max_prob[rec.winner]):
            best = top_tokens(qwen, run.spec, run, r, p)
            assert len(best) == 5 and best[0][0] == token and best[0][1] == pytest.approx(prob, abs=1e-4)
            assert [b[1] for b in best] == sorted((b[1] for b in best), reverse=True)
