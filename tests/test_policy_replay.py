"""Policies describe themselves: a run's trace records the order policy that ran where its settings do
not name it, so every recorded run replays to the same tokens from the trace alone (lopa.order
describe_order / order_from_description / trace_order, lopa.schema.Policy); the adaptive budget says
when it can never branch (lopa.order.budget_warning); mask_argmax="excluded"; a model's own decode
values in config.json (lopa.models.loading.spec_from_pretrained)."""

import json

import pytest
import torch
from tiny import LIVELY, save_tiny_model_dir, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, RunResult
from lopa.engine import fork
from lopa.order import (
    AdaptiveOrder,
    ConfidenceOrder,
    FlooredOrder,
    RandomOrder,
    SecondBranchAt,
    budget_warning,
    describe_order,
    linear_cost,
    make_order,
    order_from_description,
    trace_order,
)
from lopa.rules import summarize

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
SETTINGS = DecodeSettings(k=3, **LIVELY)


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(seed=1)


def decisions(run):
    return [(r.anchor_positions, r.anchor_tokens, r.lookahead_positions, r.winner) for r in run.records]


def replay(model, trace: RunResult) -> RunResult:
    """A fresh decode from nothing but a trace: its prompt ids, settings and recorded policy."""
    settings = DecodeSettings.from_dict(trace.settings)
    return Decoder(model, tiny_spec(), settings, order=trace_order(trace)).run(torch.tensor(trace.prompt_ids))


# The policies studies pass as order=: a measured cost curve (the adaptive study), one second branch at
# one round (its add estimate), a floor around a seeded random ranking.
STUDY_POLICIES = {
    "measured cost curve": (SETTINGS.replace(order="adaptive", adaptive_win=0.5, adaptive_release=1.0, adaptive_lift=0.1),
                            lambda s: AdaptiveOrder([1.0, 1.3, 2.5, 4.0], base=ConfidenceOrder(), win=0.5,
                                                    release=1.0, lift=0.1)),
    "second branch at round 2": (SETTINGS.replace(k=2), lambda s: SecondBranchAt(make_order(s), 2)),
    "floor around random": (SETTINGS, lambda s: FlooredOrder(RandomOrder(7), 0.05)),
}


@pytest.mark.parametrize("name", STUDY_POLICIES)
def test_a_study_policy_replays_to_the_same_tokens_from_its_saved_trace_alone(model, tmp_path, name):
    settings, policy = STUDY_POLICIES[name]
    run = Decoder(model, tiny_spec(), settings, order=policy(settings)).run(PROMPT)
    assert run.order == describe_order(policy(settings))          # the trace says which policy ran
    for suffix in (".json", ".parquet"):
        loaded = RunResult.load(run.save(tmp_path / f"run{suffix}"))
        assert loaded.order == run.order
        again = replay(model, loaded)
        assert again.tokens == run.tokens and decisions(again) == decisions(run)
        assert again.order == run.order                           # and its replay records the same


def test_the_adaptive_study_policy_decides_differently_from_its_settings_alone(model):
    """Why the policy must be recorded: the settings' own (linear) cost model takes other decisions."""
    settings, policy = STUDY_POLICIES["measured cost curve"]
    run = Decoder(model, tiny_spec(), settings, order=policy(settings)).run(PROMPT)
    from_settings = Decoder(model, tiny_spec(), settings).run(PROMPT)
    assert decisions(run) != decisions(from_settings)
    assert decisions(replay(model, run)) == decisions(run)


def test_a_run_of_the_settings_own_policy_records_none(model):
    run = Decoder(model, tiny_spec(), SETTINGS.replace(order="random", order_seed=3)).run(PROMPT)
    assert run.order is None and "order" not in run.header()
    assert decisions(replay(model, run)) == decisions(run)


def test_a_fork_of_a_loaded_trace_keeps_its_study_policy(model, tmp_path):
    settings, policy = STUDY_POLICIES["second branch at round 2"]
    run = Decoder(model, tiny_spec(), settings, order=policy(settings)).run(PROMPT)
    loaded = RunResult.load(run.save(tmp_path / "run.json"))

    class Loaded:                         # what fork() needs of a model: .decoder(settings, order=)
        def decoder(self, settings, order=None):
            return Decoder(model, tiny_spec(), settings, order=order)
    same = fork(loaded, 1, model=Loaded())          # nothing forced: the fork is the run again
    assert same.tokens == run.tokens and same.order == run.order


class Bare:
    """A policy of someone's own, with no describe()."""
    def anchor(self, view):
        return ConfidenceOrder().anchor(view)

    def lookahead(self, view, free):
        return ConfidenceOrder().lookahead(view, free)


def test_a_policy_that_cannot_describe_itself_is_recorded_as_unknown_and_refuses_a_replay(model, tmp_path):
    run = Decoder(model, tiny_spec(), SETTINGS, order=Bare()).run(PROMPT)
    assert run.order == {"name": "unknown", "type": "Bare"}
    loaded = RunResult.load(run.save(tmp_path / "run.json"))
    with pytest.raises(ValueError, match=r"Bare\) did not record its parameters"):
        trace_order(loaded)


@pytest.mark.parametrize("order, message", [
    ({"name": "adaptive"}, "order policy 'adaptive' needs 'cost'"),
    ({"name": "nope"}, "order.name"),
    ({"name": "floor", "floor": 0.1, "base": {"name": "floor", "floor": 0.1, "base": {"name": "floor", "floor": 0.1,
      "base": {"name": "floor", "floor": 0.1, "base": {"name": "confidence"}}}}}, "nest at most 4 deep"),
    ({"name": "second_branch_at", "round": 2, "sneaky": 1}, "unknown field 'sneaky'"),
    ({"name": "adaptive", "cost": [1.0, -2.0]}, "order.cost.1"),
])
def test_the_schema_refuses_a_bad_recorded_policy(model, order, message):
    run = Decoder(model, tiny_spec(), SETTINGS).run(PROMPT)
    data = json.loads(run.to_json())
    data["order"] = order
    with pytest.raises(ValueError, match=message):
        RunResult.from_json(json.dumps(data))


def test_order_from_description_round_trips_every_builtin_policy():
    for name in ("confidence", "left_to_right", "least_confident", "highest_entropy", "mixed"):
        assert describe_order(order_from_description({"name": name})) == {"name": name}
    adaptive = make_order(SETTINGS.replace(order="adaptive", adaptive_rank="random", order_seed=4, lookahead_min_prob=0.2))
    assert describe_order(order_from_description(describe_order(adaptive))) == describe_order(adaptive)


# -- the adaptive budget that can never branch --------------------------------------------------------
ADAPTIVE = DecodeSettings(order="adaptive", k=4, block_size=32, max_new_tokens=64)


@pytest.mark.parametrize("changes, branches", [
    ({}, False),                                                           # a win worth 0.2 forwards, a branch 1
    ({"adaptive_win": 0.9, "adaptive_release": 2.3}, True),                # 0.9 * 2.3 = 2.07 > 1
    ({"adaptive_win": 0.9, "adaptive_release": 1.1}, False),               # 0.99 < 1: still never
    ({"adaptive_win": 0.5, "adaptive_release": 0.0, "adaptive_lift": 0.05}, True),   # 0.5 * 0.05 * 64 = 1.6 > 1
    ({"branch_cost": 0.05}, True),                                         # 0.07 > 0.05: a GPU's cost
    ({"branch_cost": 0.0, "adaptive_win": 0.0}, True),                     # free branches: ties go to more k
    ({"adaptive_win": 0.9, "adaptive_release": 2.3, "lookahead_depth": 3}, False),   # 2.07 < 3 rows a branch
])
def test_budget_warning_says_when_no_round_can_branch(changes, branches):
    settings = ADAPTIVE.replace(**changes)
    warning = budget_warning(settings)
    assert (warning is None) == branches
    if warning:
        assert "vanilla D2F" in warning and f"{settings.adaptive_win:.2f}" in warning


def test_the_cost_model_counts_a_branchs_rows_at_every_depth():
    assert linear_cost(ADAPTIVE) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert linear_cost(ADAPTIVE.replace(lookahead_depth=3, branch_cost=0.5)) == [1.0, 2.5, 4.0, 5.5, 7.0]


def test_budget_warning_is_silent_unless_the_order_is_adaptive_with_branches():
    assert budget_warning(ADAPTIVE.replace(order="confidence")) is None
    assert budget_warning(ADAPTIVE.replace(k=0)) is None
    assert budget_warning(ADAPTIVE, cost=[1.0, 1.01, 1.02, 1.03, 1.04]) is None          # a measured, cheap curve


def test_budget_warning_agrees_with_what_the_budget_does(model):
    """No warning and branches, a warning and none: the pure function and the policy agree."""
    for changes in ({}, {"adaptive_win": 0.9, "adaptive_release": 2.3}):
        settings = SETTINGS.replace(order="adaptive", k=3, **changes)
        run = Decoder(model, tiny_spec(), settings).run(PROMPT)
        branched = any(r.lookahead_positions for r in run.records)
        assert branched == (budget_warning(settings) is None)


# -- mask_argmax="excluded" ---------------------------------------------------------------------------
def test_excluded_takes_the_mask_token_out_of_the_softmax():
    logits = torch.tensor([[3.0, 1.0, 0.0, 2.0]])               # the mask (id 0) is the argmax
    token, max_prob, conf = summarize(logits, "max_prob", 0.0, mask_token_id=0, mask_argmax="excluded")
    others = torch.softmax(torch.tensor([1.0, 0.0, 2.0]), -1)
    assert token.tolist() == [3] and torch.allclose(max_prob, others.max()) and torch.allclose(conf, others.max())
    raw = summarize(logits, "max_prob", 0.0, mask_token_id=0, mask_argmax="next_best")
    assert raw[0].tolist() == [3] and raw[1] < max_prob           # same token, the raw softmax's smaller share
    assert logits.tolist() == [[3.0, 1.0, 0.0, 2.0]]              # the caller's logits unchanged


def test_excluded_is_a_setting_the_trace_records(model):
    run = Decoder(model, tiny_spec(), SETTINGS.replace(mask_argmax="excluded")).run(PROMPT)
    assert RunResult.from_json(run.to_json()).settings["mask_argmax"] == "excluded"
    assert replay(model, run).tokens == run.tokens


# -- a model's own decode values ----------------------------------------------------------------------
def _with_decode(tmp_path, decode):
    path = save_tiny_model_dir(tmp_path / "tiny")
    config = json.loads((path / "config.json").read_text())
    config["lopa"]["decode"] = decode
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_config_decode_values_reach_the_spec_and_sit_under_the_user(tmp_path):
    from lopa.models import load
    from lopa.resolution import resolve
    loaded = load(str(_with_decode(tmp_path, {"adaptive_win": 0.9, "adaptive_release": 2.3})), device="cpu")
    assert loaded.spec.decode == {"adaptive_win": 0.9, "adaptive_release": 2.3}
    settings = resolve({"order": "adaptive", "adaptive_release": 0.5}, loaded.spec)
    assert (settings.adaptive_win, settings.adaptive_release) == (0.9, 0.5)


@pytest.mark.parametrize("decode, message", [
    ({"adaptive_win": 1.5}, "config.lopa.decode: adaptive_win must be in"),
    ({"adaptive_wins": 0.5}, "config.lopa.decode: unknown setting 'adaptive_wins'"),
    ([0.5], "config.lopa.decode must be a"),
])
def test_a_bad_config_decode_value_is_refused_naming_it(tmp_path, decode, message):
    from lopa.models import load
    with pytest.raises(ValueError, match=message):
        load(str(_with_decode(tmp_path, decode)), device="cpu")


def test_the_bundled_models_ship_their_fitted_budget():
    """open-gsm-dllm's fit pays for branches on a CPU (--order adaptive at its defaults verifies them);
    sure-gsm-dllm's never does there, and says so."""
    from lopa.models import load
    from lopa.models.loading import ASSETS
    from lopa.resolution import settings_for_model
    warnings = {}
    for name in ("open-gsm-dllm", "sure-gsm-dllm"):
        spec = load(str(ASSETS / "models" / name), device="cpu").spec
        assert set(spec.decode) >= {"adaptive_win", "adaptive_release", "adaptive_lift"}
        warnings[name] = budget_warning(settings_for_model(spec, order="adaptive"))
    assert warnings["open-gsm-dllm"] is None and "vanilla D2F" in warnings["sure-gsm-dllm"]



@pytest.mark.parametrize("flags, warned", [
    (["--order", "adaptive"], True),                                   # the defaults: a win worth 0.2, a branch 1
    (["--order", "adaptive", "--adaptive-win", "0.9", "--adaptive-release", "2.3"], False),
    (["--order", "confidence"], False),
])
def test_lopa_generate_warns_when_the_adaptive_budget_can_never_branch(tmp_path, capsys, flags, warned):
    from lopa.cli import main
    model = save_tiny_model_dir(tmp_path / "tiny")
    assert main(["generate", "--model", str(model), "--prompt", "how many apples", "--max-new-tokens", "16",
                 *flags]) == 0
    err = capsys.readouterr().err
    assert ("warning: order=adaptive verifies no branch" in err) == warned


def test_the_api_and_the_page_say_when_the_adaptive_budget_can_never_branch():
    """/decode returns the warning in "warnings"; the page's status line after a Run says it too. On the
    bundled models at their shipped budgets: sure-gsm-dllm's never branches on a CPU, open-gsm-dllm's does."""
    from types import SimpleNamespace

    from app.panels.round_view.views import describe_run
    from app.serving.api import decode
    runs = {m: decode("Tom has 3 apples. How many apples does Tom have?", model=m, order="adaptive",
                      max_new_tokens=32) for m in ("sure-gsm-dllm", "open-gsm-dllm")}
    assert "vanilla D2F" in runs["sure-gsm-dllm"]["warnings"][0] and runs["open-gsm-dllm"]["warnings"] == []
    for name, result in runs.items():
        branched = any(r["lookahead_positions"] for r in result["trace"]["records"])
        assert branched == (name == "open-gsm-dllm")
        status = describe_run(SimpleNamespace(run=RunResult.from_json(json.dumps(result["trace"]))))
        assert ("Note: order=adaptive verifies no branch" in status) == (name == "sure-gsm-dllm")
