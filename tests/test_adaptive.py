"""order=adaptive prices its branches by a cost curve measured on the running device (lopa.cost): by
default, once per process and shape; the linear model where nothing can be timed or when asked (cost_curve,
or a branch_cost set without it); the trace records the curve and where it came from, an older trace still
loads, and the app's run line says which curve a run used."""

import json
from types import SimpleNamespace

import pytest
import torch
from fake_model import EOS, MASK, FakeDLLM
from tiny import LIVELY, tiny_qwen2, tiny_spec

from lopa import cost
from lopa.engine import Decoder
from lopa.forward import BatchedExecutor
from lopa.order import budget_warning, describe_order
from lopa.resolution import resolution, resolve
from lopa.settings import DecodeSettings, ModelSpec
from lopa.tasks.timing import forward_times
from lopa.trace import RunResult

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
ADAPTIVE = DecodeSettings(k=2, order="adaptive", **LIVELY)


@pytest.fixture
def measured(monkeypatch):
    """Every measurement this test makes: [(settings, executor)], through the real lopa.cost.measure."""
    calls, real = [], cost.measure

    def counting(model, spec, settings, executor, decode):
        calls.append((settings, executor))
        return real(model, spec, settings, executor, decode)
    monkeypatch.setattr(cost, "measure", counting)
    return calls


def test_an_adaptive_decode_measures_its_curve_once_and_the_next_reuses_it(measured):
    model = tiny_qwen2(seed=1)
    first = Decoder(model, tiny_spec(), ADAPTIVE).run(PROMPT)
    again = Decoder(model, tiny_spec(), ADAPTIVE).run(PROMPT)
    assert len(measured) == 1                                       # the second decode did not measure
    order = first.order
    assert order["name"] == "adaptive" and order["source"].startswith("measured on cpu, float32")
    assert len(order["cost"]) == ADAPTIVE.k + 1 and all(c > 0 for c in order["cost"])
    assert order["cost"] == sorted(order["cost"])                    # monotone: more branches never cost less
    assert again.order == order                                      # the same curve, from the cache
    Decoder(model, tiny_spec(), ADAPTIVE.replace(k=3)).run(PROMPT)   # another shape is another curve
    Decoder(tiny_qwen2(seed=1), tiny_spec(), ADAPTIVE)                # and another model object another
    assert [(s.k, executor) for s, executor in measured] == [(2, "batched"), (3, "batched"), (2, "batched")]


def test_the_curve_times_one_row_per_token_of_a_chain(monkeypatch):
    """At lookahead_depth d a branch verifies d rows: the curve times B = 1 + b * d rows for b = 0 .. k."""
    timed = []

    def record(executor, spec, vocab, prompt, settings, counts, repeats, **sweeping):
        timed.append(list(counts))
        return {B: [1e-3 * B] * repeats for B in counts}
    monkeypatch.setattr(cost, "verify_samples", record)
    curve = cost.cost_curve(tiny_qwen2(), tiny_spec(), ADAPTIVE.replace(k=3, lookahead_depth=2), "batched",
                            lambda *a, **kw: Decoder(*a[:3], executor=kw["executor"]).run(a[3]))
    assert timed == [[1, 3, 5, 7, 1]]                                  # B = 1 at both ends of a sweep
    steps = [b - a for a, b in zip(curve.seconds, curve.seconds[1:])]
    assert steps == pytest.approx([2e-3] * 3)                          # bookkeeping is the same for every b


@pytest.mark.parametrize("why, model, executor, settings", [
    ("asked", "tiny", "batched", ADAPTIVE.replace(cost_curve="linear", branch_cost=0.5)),
    ("reference", "tiny", "per_branch", ADAPTIVE),
    ("reference", "tiny", "uncached", ADAPTIVE),
    ("object", "tiny", "object", ADAPTIVE),
    ("fake", "fake", "uncached", ADAPTIVE),
])
def test_the_linear_model_stands_in_where_nothing_is_timed_or_when_asked(measured, why, model, executor, settings):
    if model == "fake":     # a scripted fake: its "forward" is a Python loop, nothing a round would pay
        net = FakeDLLM(len(PROMPT), lambda g, visible: (EOS if g >= 6 else 5 + g % 4, 0.95), vocab=24)
        spec = ModelSpec(mask_token_id=MASK, eos_token_ids=(EOS,), logit_shift=True, max_context=512)
    else:
        net, spec = tiny_qwen2(seed=1), tiny_spec()
    chosen = BatchedExecutor(net, spec, settings) if executor == "object" else executor
    run = Decoder(net, spec, settings, executor=chosen).run(PROMPT)
    assert measured == []
    source = run.order["source"]
    assert source.startswith(f"linear, branch_cost {settings.branch_cost:g}")
    assert run.order["cost"] == [1 + settings.branch_cost * b for b in range(settings.k + 1)]
    expected = {"asked": source == "linear, branch_cost 0.5", "reference": f"the {executor} executor is a reference"
                in source, "object": "BatchedExecutor executor is not timed" in source,
                "fake": "FakeDLLM is not a transformers model" in source}
    assert expected[why], source


def test_a_branch_cost_asked_for_chooses_the_linear_curve_unless_the_curve_is_asked_for_too():
    settings, sources = resolution({"order": "adaptive", "branch_cost": 0.3})
    assert settings.cost_curve == "linear" and sources["cost_curve"] == "user"
    assert resolve({"order": "adaptive"}).cost_curve == "measured"                       # the default
    assert resolve({"branch_cost": 0.3, "cost_curve": "measured"}).cost_curve == "measured"
    spec = tiny_spec(decode={"branch_cost": 0.2})                                         # a model's config
    assert resolve({}, spec).cost_curve == "linear"
    assert resolve({"cost_curve": "measured"}, spec).cost_curve == "measured"
    assert resolve({"branch_cost": 0.4}, tiny_spec(decode={"cost_curve": "measured"})).cost_curve == "linear"


def test_the_trace_records_the_curve_and_a_trace_from_before_it_loads_as_linear(tmp_path):
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), ADAPTIVE).run(PROMPT)
    loaded = RunResult.load(run.save(tmp_path / "adaptive.json"))
    assert loaded.order == run.order and loaded.settings["cost_curve"] == "measured"
    assert cost.run_curve(ADAPTIVE, loaded.order) == (run.order["cost"], run.order["source"])
    old = json.loads(run.to_json())           # what the version before cost_curve wrote: neither field
    del old["order"], old["settings"]["cost_curve"]
    before = RunResult.from_json(json.dumps(old))
    assert before.settings["cost_curve"] == "linear" and before.order is None
    assert cost.run_curve(DecodeSettings.from_dict(before.settings), before.order) == ([1.0, 2.0, 3.0],
                                                                                        "linear, branch_cost 1")
    shipped = RunResult.load("assets/traces/lopa.json")                # a shipped trace, not adaptive
    assert cost.run_curve(DecodeSettings.from_dict(shipped.settings), shipped.order) is None


def test_the_run_line_says_which_curve_an_adaptive_run_used():
    from app.panels.round_view.views import describe_run
    model = tiny_qwen2(seed=1)
    adaptive = Decoder(model, tiny_spec(), ADAPTIVE).run(PROMPT)
    line = describe_run(SimpleNamespace(run=adaptive))
    assert "Adaptive cost curve: measured on cpu, float32" in line
    shown = ", ".join(f"{c / adaptive.order['cost'][0]:.2f}" for c in adaptive.order["cost"])
    assert f"branches costs {shown} rounds without" in line
    linear = Decoder(model, tiny_spec(), ADAPTIVE.replace(cost_curve="linear")).run(PROMPT)
    assert "Adaptive cost curve: linear, branch_cost 1; a round with b = 0, 1, ... branches costs 1.00, 2.00, 3.00" \
        in describe_run(SimpleNamespace(run=linear))
    vanilla = Decoder(model, tiny_spec(), ADAPTIVE.replace(order="confidence")).run(PROMPT)
    assert "cost curve" not in describe_run(SimpleNamespace(run=vanilla))


def test_budget_warning_reads_the_curve_it_is_given():
    """The same settings never branch under a dear measured curve and do under a cheap one."""
    settings = ADAPTIVE.replace(adaptive_win=0.5, adaptive_release=1.0)
    dear, cheap = [1.0, 2.0, 3.0], [1.0, 1.2, 1.4]
    warning = budget_warning(settings, dear, "measured on cpu in 5 ms")
    assert "vanilla D2F" in warning and "cost curve: measured on cpu in 5 ms" in warning
    assert budget_warning(settings, cheap, "measured on cpu in 5 ms") is None
    assert "linear, branch_cost 1" in budget_warning(settings)                     # no curve: the settings' model


def test_forward_times_times_the_executor_it_is_given():
    """Any executor factory (model, spec, settings) -> Executor is timed, each B warmed up once then timed
    `repeats` times; what it returns is the median."""
    model, spec = tiny_qwen2(seed=1), tiny_spec()
    built = []

    class Counting(BatchedExecutor):
        verifies = 0

        def verify(self, branches):
            Counting.verifies += 1
            return super().verify(branches)

    def factory(*args):
        built.append(args[2])
        return Counting(*args)
    loaded = SimpleNamespace(model=model, spec=spec)
    times = forward_times(loaded, PROMPT, ADAPTIVE, 3, counts=(1, 2, 4), executor=factory)
    assert sorted(times) == [1, 2, 4] and all(t > 0 for t in times.values())
    assert built == [ADAPTIVE] and Counting.verifies == 1 + 3 * (1 + 3)           # prompt, warm-ups, timings
    assert describe_order(Decoder(model, spec, ADAPTIVE, executor=Counting(model, spec, ADAPTIVE)).base_order
                          )["source"].startswith("linear")                       # an executor object: not timed


def test_a_command_that_names_a_branch_cost_names_the_curve_too():
    """settings_diff (links, commands) reproduces a measured run whose branch_cost was changed."""
    from lopa.resolution import settings_diff
    run = DecodeSettings(order="adaptive", k=3, branch_cost=0.5)                    # measured, branch_cost unread
    diff = settings_diff(run, DecodeSettings())
    assert diff == {"k": 3, "order": "adaptive", "branch_cost": 0.5, "cost_curve": "measured"}
    assert resolve(diff) == run
    assert settings_diff(DecodeSettings(k=3), DecodeSettings()) == {"k": 3}


@pytest.mark.parametrize("flags, said", [
    ([], "cost curve: measured on cpu, float32"),
    (["--branch-cost", "0.5"], "cost curve: linear, branch_cost 0.5; a round with b = 0, 1, ... branches costs 1.00, 1.50, 2.00"),
    (["--executor", "uncached"], "cost curve: linear, branch_cost 1 (the uncached executor is a reference, not timed)"),
])
def test_lopa_generate_says_which_curve_prices_the_branches(tmp_path, capsys, flags, said):
    from tiny import save_tiny_model_dir

    from lopa.cli import main
    model = save_tiny_model_dir(tmp_path / "tiny")
    assert main(["generate", "--model", str(model), "--prompt", "how many apples", "--max-new-tokens", "16",
                 "--order", "adaptive", "--k", "2", "--trace", str(tmp_path / "run.json"), *flags]) == 0
    assert said in capsys.readouterr().err
    source = RunResult.load(tmp_path / "run.json").order["source"]          # the trace names the same curve
    assert f"cost curve: {source}".startswith(said.split(";")[0])


class Idle:
    """An executor whose verify does nothing: the clock says what each one took."""
    device = torch.device("cpu")

    def start(self, prompt_ids):
        pass

    def verify(self, branches):
        pass

    def commit(self, winner, n):
        pass


@pytest.mark.parametrize("max_repeats, sweeps", [(5, 3), (2, 2)])
def test_sweeps_go_on_while_the_two_fastest_disagree(monkeypatch, max_repeats, sweeps):
    """B = 1 timed at both ends of a sweep; a third sweep only because the two fastest of each B were
    20% and 50% apart after two, none after the two fastest agree within settle (or at max_repeats)."""
    took = iter([1.0, 2.0, 1.5,  1.2, 3.0, 1.3,  1.05, 2.1, 1.4,  9.0, 9.0, 9.0])       # a verify's seconds, in order
    ticks = iter(x for t in took for x in (0.0, t))
    monkeypatch.setattr(cost, "clock", lambda: next(ticks))
    samples = cost.verify_samples(Idle(), tiny_spec(), 24, PROMPT, ADAPTIVE, [1, 2, 1], 2, settle=0.15,
                                  max_repeats=max_repeats)
    assert len(samples[2]) == sweeps and len(samples[1]) == 2 * sweeps
    assert min(samples[1]) == 1.0 and min(samples[2]) == 2.0
    assert cost.gap(samples) == pytest.approx(0.05 if sweeps == 3 else 0.5)


def test_no_sweep_beyond_the_first_ones_once_the_budget_is_spent(monkeypatch):
    took = iter([1.0, 2.0, 1.5, 1.2, 3.0, 1.3] + [1.0] * 12)
    ticks = iter(x for t in took for x in (0.0, t))
    monkeypatch.setattr(cost, "clock", lambda: next(ticks))
    samples = cost.verify_samples(Idle(), tiny_spec(), 24, PROMPT, ADAPTIVE, [1, 2, 1], 2, settle=0.15,
                                  max_repeats=4, budget_s=0.0)
    assert len(samples[2]) == 2 and cost.gap(samples) == pytest.approx(0.5)       # unsettled, and said so
