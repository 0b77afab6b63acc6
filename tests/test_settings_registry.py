"""One declaration per decode setting (lopa.settings.SETTINGS): every surface of the core (the CLI
flags, the trace schema, transformers' generation config, presets, the policy / rule / schedule
tables, the bench and study commands) agrees with it, and the ranges hold with one message."""

import argparse
import typing

import pytest
import torch
from tiny import LIVELY, PROMPT, tiny_qwen2, tiny_spec, tiny_tokenizer

from lopa import Decoder, DecodeSettings
from lopa.blocks import CACHE_SCHEDULES
from lopa.cli import build_parser
from lopa.cli import main as lopa_main
from lopa.hf.config import LOPA_FIELDS, LopaGenerationConfig
from lopa.order import ORDERS, AdaptiveOrder, LeastConfidentOrder, RoundView, make_order
from lopa.resolution import add_settings_arguments, settings_from_args
from lopa.rules import BRANCH_SCORES, COMMIT_RULES, WINDOW_RULES
from lopa.schema import Settings
from lopa.script import script_from_trace
from lopa.settings import NOT_IN_PRESETS, PAPER_PRESETS, SETTINGS
from lopa.study import common as study_common
from lopa.trace import RunResult


def settings_flags(parser) -> dict:
    """{dest: action} of a parser's flags that name a decode setting."""
    return {a.dest: a for a in parser._actions if a.dest in SETTINGS}


def generate_parser():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["generate"]


# -- parity: each surface against the registry --------------------------------------------------------
def test_the_cli_has_one_flag_per_setting_with_its_choices():
    flags = settings_flags(generate_parser())
    assert set(flags) == set(SETTINGS)
    for name, spec in SETTINGS.items():
        assert flags[name].option_strings == [spec.flag]
        assert tuple(flags[name].choices or ()) == tuple(spec.choices or ())


def test_the_trace_schema_stores_every_setting_with_its_default_and_choices():
    fields = Settings.model_fields
    assert list(fields) == list(SETTINGS)
    for name, spec in SETTINGS.items():
        assert fields[name].default == spec.default
        if spec.choices:
            assert typing.get_args(fields[name].annotation) == spec.choices
    assert Settings().model_dump() == DecodeSettings().to_dict()


def test_the_generation_config_carries_every_setting_and_round_trips():
    assert set(LOPA_FIELDS) | {"max_new_tokens", "temperature"} == set(SETTINGS)
    chosen = DecodeSettings(k=3, order="adaptive", branch_cost=0.2, lookahead_min_prob=0.3, temperature=0.5,
                            cache_schedule="authors", block_size=8, max_new_tokens=16)
    assert LopaGenerationConfig.from_settings(chosen).to_settings() == chosen


def test_presets_policies_rules_and_schedules_cover_the_registry():
    assert PAPER_PRESETS["gsm8k"] == {n: s.paper for n, s in SETTINGS.items()
                                      if s.paper is not None and n not in NOT_IN_PRESETS}
    for name, preset in PAPER_PRESETS.items():
        assert set(preset) <= set(SETTINGS), name
        DecodeSettings(**preset)                              # every row is in range
    assert tuple(ORDERS) == SETTINGS["order"].choices
    assert tuple(BRANCH_SCORES) == SETTINGS["branch_score"].choices
    assert tuple(COMMIT_RULES) + tuple(WINDOW_RULES) == SETTINGS["commit"].choices
    assert tuple(CACHE_SCHEDULES) == SETTINGS["cache_schedule"].choices
    for spec in SETTINGS.values():                             # the paper's value and the default are in range
        spec.check(spec.default)
        if spec.paper is not None:
            spec.check(spec.paper)


@pytest.mark.parametrize("command, per_row", [
    ("bench", ("k", "commit")), ("orders", ("order", "order_seed")), ("calibration", ("branch_score",)),
    ("adaptive", ("k", "order", "branch_cost")), ("errors", ()), ("headroom", ("order", "order_seed")),
    ("departures", ("attention", "k", "cache_schedule", "mask_argmax")), ("oracle", ("k",)),
    ("lopa.bench.round", ("k",)), ("lopa.bench.fork", ("k", "commit")), ("lopa.bench.replay", ("k", "order")),
    ("lopa.bench.bp", ("attention",)),         # its --attention takes one mode or a list, a table each
])
def test_bench_and_study_commands_take_every_setting_they_do_not_set_per_row(command, per_row, monkeypatch):
    """Each command's parser offers exactly the settings it passes on; capture it at parse time."""
    import importlib
    seen = {}

    def capture(self, argv=None, namespace=None):
        seen["parser"] = self
        raise SystemExit(0)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    name = command if "." in command else "lopa.bench.decoders" if command == "bench" else f"lopa.study.{command}"
    module = importlib.import_module(name)
    with pytest.raises(SystemExit):
        module.main([])
    assert set(settings_flags(seen["parser"])) == set(SETTINGS) - set(per_row)


# -- disagreements that once were ---------------------------------------------------------------------
def test_study_flags_reach_the_decoder():
    parser = argparse.ArgumentParser()
    study_common.add_common_arguments(parser, n=2)
    args = parser.parse_args(["--lookahead-min-prob", "0.3", "--cache-schedule", "authors", "--mask-argmax", "authors",
                              "--branch-score", "loo", "--k", "2"])
    base = study_common.base_settings(args, tiny_spec(block_size=8))
    assert (base.lookahead_min_prob, base.cache_schedule, base.mask_argmax, base.branch_score, base.k) == \
        (0.3, "authors", "authors", "loo", 2)


def test_order_adaptive_is_a_flag_recorded_in_the_trace_and_replays(tmp_path):
    args = generate_parser().parse_args(["--prompt", "x", "--order", "adaptive", "--branch-cost", "0.05", "--k", "3",
                                         "--adaptive-win", "0.5", "--adaptive-release", "0.25", "--adaptive-lift", "1.5",
                                         "--adaptive-rank", "least_confident"])
    settings = settings_from_args(args, tiny_spec(block_size=8)).replace(**LIVELY)
    assert settings.order == "adaptive"
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, tiny_tokenizer()).run(PROMPT)
    assert any(r.lookahead_positions for r in run.records)      # a cheap branch: it verifies some
    assert any(len(r.lookahead_positions) < 3 for r in run.records if r.kind == "round")   # and not always k
    loaded = RunResult.load(run.save(tmp_path / "adaptive.json"))
    assert loaded.settings["order"] == "adaptive" and loaded.settings["branch_cost"] == 0.05
    assert (loaded.settings["adaptive_win"], loaded.settings["adaptive_lift"]) == (0.5, 1.5)   # the gain model too
    assert make_order(DecodeSettings.from_dict(loaded.settings)).gain == {"win": 0.5, "release": 0.25, "lift": 1.5}
    assert isinstance(make_order(DecodeSettings.from_dict(loaded.settings)).base, LeastConfidentOrder)   # its ranking
    again = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings.from_dict(loaded.settings), tiny_tokenizer())
    assert again.run(PROMPT).tokens == run.tokens                # from its settings alone
    replay = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings.from_dict(loaded.settings).replace(order="confidence"),
                     tiny_tokenizer(), script=script_from_trace(loaded)).run(torch.tensor(loaded.prompt_ids))
    assert replay.tokens == run.tokens                           # its decisions, whatever the policy
    assert [r.lookahead_positions for r in replay.records] == [r.lookahead_positions for r in run.records]


def test_adaptive_under_a_floor_ranks_above_it_and_counts_near_over_every_free_position(monkeypatch):
    """The floor narrows the ranking, never the count of positions just under tau_conf."""
    import lopa.order as order_module
    seen = []

    def spy(n_candidates, n_near, cost, **gain):
        seen.append(n_near)
        return torch.tensor(n_candidates)
    monkeypatch.setattr(order_module, "choose_k", spy)
    settings = DecodeSettings(k=4, order="adaptive", branch_cost=0.0, lookahead_min_prob=0.5, block_size=8,
                              max_new_tokens=8)
    policy = make_order(settings)
    max_prob = torch.tensor([0.95, 0.92, 0.75, 0.55, 0.2, 0.1, 0.05, 0.3])           # [W]
    view = RoundView(1, 0, 8, torch.arange(8), max_prob, max_prob, torch.ones(8, dtype=torch.bool), [True],
                     settings, mask_id=0)
    free = torch.ones(8, dtype=torch.bool)
    free[:2] = False                                   # the anchor committed positions 0 and 1
    look = policy.lookahead(view, free)
    assert seen == [1]                                 # 0.75 > tau_conf - 0.2; committed 0.95 and 0.92 are not free
    assert look.tolist() == [2, 3]                     # only positions at or above the floor are ranked
    assert isinstance(policy, AdaptiveOrder)


def test_adaptive_rank_names_the_ranking_the_budget_verifies_a_prefix_of():
    settings = DecodeSettings(k=2, order="adaptive", branch_cost=0.0, block_size=8, max_new_tokens=8)
    max_prob = torch.tensor([0.95, 0.85, 0.75, 0.55, 0.2, 0.1, 0.05, 0.3])           # [W]
    free = torch.ones(8, dtype=torch.bool)
    free[0] = False
    for rank, expect in [("confidence", [1, 2]), ("least_confident", [6, 5]), ("left_to_right", [1, 2])]:
        chosen = settings.replace(adaptive_rank=rank)
        view = RoundView(1, 0, 8, torch.arange(8), max_prob, max_prob, torch.ones(8, dtype=torch.bool), [True],
                         chosen, mask_id=0)
        assert make_order(chosen).lookahead(view, free).tolist() == expect, rank
    with pytest.raises(ValueError, match="adaptive_rank"):
        DecodeSettings(order="adaptive", adaptive_rank="adaptive")


# -- ranges: one message naming the setting, its range and the value ---------------------------------------
@pytest.mark.parametrize("fields, message", [
    (dict(tau_conf="x"), "tau_conf must be in (0, 1] (a number), got 'x'"),
    (dict(seed=2**70), f"seed must be an integer in 0..4294967295, got {2**70}"),
    (dict(k=True), "k (lookahead branches) must be an integer in 0..32, got True"),
    (dict(temperature=float("nan")), "temperature must be in [0, 10], got nan"),
    (dict(max_new_tokens=10**20), "max_new_tokens must be an integer in 1..8192"),
    (dict(order="sideways"), "order must be one of ('confidence', 'random', 'left_to_right', 'adaptive', "),
    (dict(branch_cost=-1.0), "branch_cost must be in [0, 100], got -1.0"),
])
def test_every_setting_has_a_range_and_one_message(fields, message):
    with pytest.raises(ValueError) as err:
        DecodeSettings(**fields)
    assert message in str(err.value)


def test_a_typed_value_is_read_the_same_way_everywhere():
    assert SETTINGS["k"].parse("4") == SETTINGS["k"].parse(4.0) == 4
    assert SETTINGS["tau_conf"].parse("0.5") == 0.5
    for value, message in [("2.5", "(a whole number), got '2.5'"), ("1e20", "got '1e20'"), (None, "is empty"),
                           ({"a": 1}, "(a number), got {'a': 1}")]:
        with pytest.raises(ValueError, match=r"^k \(lookahead branches\)") as err:
            SETTINGS["k"].parse(value)
        assert message in str(err.value)


def test_the_cli_refuses_an_out_of_range_seed_in_one_line(capsys):
    assert lopa_main(["generate", "--prompt", "hi", "--seed", str(2**70)]) == 2
    assert "error: seed must be an integer in 0..4294967295" in capsys.readouterr().err


def test_a_new_flag_is_generated_for_each_command_from_the_registry():
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, per_row=("k",), choose_decoder=False, defaults={"max_new_tokens": 128})
    assert "k" not in settings_flags(parser) and "default 128" in parser.format_help()


def test_every_setting_is_declared_in_words_once_and_the_cli_says_them():
    """Issue 58: each setting has a name in plain words, each choice a name in words, a help in sentences with
    its range in words and numbers rounded (no Python tuple, no 0.6931471805599453), declared in the registry;
    the command line's flag help says exactly what the app's input says (Setting.explain)."""
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, choose_decoder=False)
    helps = {a.dest: a.help for a in parser._actions if a.dest in SETTINGS}
    assert set(helps) == set(SETTINGS)
    for name, spec in SETTINGS.items():
        assert spec.words and spec.title == f"{spec.words} ({name})", name
        text = spec.explain()
        assert text[0] == text[0].upper() or not text.split()[0].isalpha(), name
        assert text.endswith(".") and "('" not in text and "0.6931471805599453" not in text, (name, text)
        assert helps[name].startswith(text), name                       # the CLI's help is the app's words
        if spec.choices:
            assert [c for c, _ in spec.choice_words] == list(spec.choices), name
            assert all(words and words != c for c, words in spec.choice_words), name
            assert all(spec.choice_title(c) in text for c in spec.choices), name
    assert SETTINGS["stable_js"].allowed() == "A number from 0 to 0.6931."
    assert SETTINGS["tau_conf"].allowed() == "A number above 0, at most 1."
    assert SETTINGS["k"].allowed() == "A whole number from 0 to 32."
    assert SETTINGS["commit"].choice_title("top1") == "one token a round (top1)"
