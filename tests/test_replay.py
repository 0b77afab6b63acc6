"""lopa.bench.replay at toy size: real decodes of the bundled model replayed on a random toy shape keep
their round structure exactly, and the report has a row per decoder."""

import pytest
import torch

from lopa.bench import replay
from lopa.bench.decoders import DEFAULTS, row_settings
from lopa.bench.gpu_plan import TOY_SHAPE, random_model
from lopa.forward import BatchedExecutor
from lopa.models import load
from lopa.models.loading import DEFAULT_MODEL
from lopa.resolution import resolve
from lopa.settings import DecodeSettings
from lopa.tasks.sources import HELDOUT, read_rows

NAMES = replay.row_names((0, 1, 4))            # d2f, lopa-k1, lopa-k4 and the adaptive row
# Two held-out problems; the bundled model's answer to the second outgrows its first block, so that block
# is cached mid-decode and the prefix grows (most of its answers fit in two blocks and cache nothing).
PROBLEMS = read_rows(HELDOUT)[4:6]


@pytest.fixture(scope="module")
def replayed():
    loaded = load(DEFAULT_MODEL, device="cpu")
    shape = dict(TOY_SHAPE, num_hidden_layers=1)
    toy = random_model(shape, "toy", torch.device("cpu"), torch.float32)
    base = resolve(None, loaded.spec, defaults=DEFAULTS)
    traces = replay.decode_traces(loaded, {name: row_settings(name, base) for name in NAMES}, PROBLEMS)
    return traces, replay.replay_all(toy, traces)


def test_every_forward_is_replayed_with_the_recorded_prefix_windows_and_branches(replayed):
    traces, replays = replayed
    for name in NAMES:
        for decoded, rounds in zip(traces[name], replays[name], strict=True):
            run = decoded["run"]
            assert len(rounds) == len(run.records)
            forwards = [(record, r) for record, r in zip(run.records, rounds) if record.kind != "final"]
            assert len(forwards) == run.metrics()["forwards"] == sum(r["kind"] != "final" for r in rounds)
            for record, r in forwards:
                # the prefix cache read by the forward: nothing in the prefill (its input holds the prompt), else
                # the prompt and every position the earlier rounds cached, as the real decode's cache held them
                expected = 0 if record.kind == "prefill" else len(run.prompt_ids) + record.window_start
                assert r["prefix"] == expected, (name, record.round)
                assert r["B"] == len(record.branch_tokens)
                assert r["lengths"] == [len(w) for w in record.branch_tokens]
                assert r["forward_s"] > 0 and r["commit_s"] >= 0
                assert r["bookkeeping_s"] == pytest.approx(record.round_seconds - record.forward_seconds)
    grown = [r["prefix"] - len(d["run"].prompt_ids) for name in NAMES for d, rounds in zip(traces[name], replays[name])
             for r in rounds if r["kind"] == "round"]
    assert max(grown) == 32                             # a cached block joined the prefix
    lookahead = [r["B"] for rounds in replays["lopa-k4"] for r in rounds if r["kind"] == "round"]
    assert max(lookahead) == 5                          # the anchor and 4 lookahead branches were replayed


def test_the_report_has_every_decoder_beside_d2f(replayed):
    traces, replays = replayed
    rows = replay.summarize(traces, replays, "toy")
    assert [r["decoder"] for r in rows] == NAMES
    by_name = {r["decoder"]: r for r in rows}
    assert by_name["d2f"]["tps_over_d2f"] == 1.0 and by_name[replay.ADAPTIVE_ROW]["order"] == "adaptive"
    for name, r in by_name.items():
        runs = [d["run"] for d in traces[name]]
        assert r["n"] == 2 and r["tokens_useful"] == sum(run.metrics()["tokens_useful"] for run in runs)
        assert r["forwards"] == sum(run.metrics()["forwards"] for run in runs)
        seconds = r["replayed_s"] + r["bookkeeping_s"]
        assert r["tps"] == pytest.approx(r["tokens_useful"] / seconds)
        assert r["tps_device"] == pytest.approx(r["tokens_useful"] / r["replayed_s"])
        assert r["tps_over_d2f"] == pytest.approx(r["tps"] / by_name["d2f"]["tps"])
    text = "\n".join(replay.markdown(rows))
    assert all(f"| {name} |" in text for name in NAMES)


def test_an_extra_prefix_lengthens_every_replayed_prefix_by_as_much(replayed):
    traces, _ = replayed
    toy = random_model(dict(TOY_SHAPE, num_hidden_layers=1), "toy", torch.device("cpu"), torch.float32)
    run = traces["lopa-k1"][1]["run"]
    ex = BatchedExecutor(toy.model, toy.spec, DecodeSettings.from_dict(run.settings))
    plain, longer = (replay.replay_run(ex, run, torch.Generator().manual_seed(0), extra) for extra in (0, 40))
    assert [r.get("prefix") for r in longer] == [None if r["kind"] == "final" else 0 if r["kind"] == "prefill"
                                                 else r["prefix"] + 40 for r in plain]


def test_the_standing_names_the_fastest_fixed_k_and_the_adaptive_row_against_it():
    rows = [{"decoder": "d2f", "order": "confidence", "tps": 100.0}, {"decoder": "lopa-k2", "order": "confidence", "tps": 150.0},
            {"decoder": "lopa-k14-adaptive", "order": "adaptive", "tps": 120.0}]
    assert replay.standing(rows) == "Fastest fixed k: lopa-k2 at 150 tokens/s; lopa-k14-adaptive 120 (0.80x)."


def test_the_adaptive_row_is_priced_at_the_replays_shape():
    """Its cost curve is the replay model's verify forwards (with the bundled decode's bookkeeping), timed
    through the replay's executor, and the decode records it."""
    loaded = load(DEFAULT_MODEL, device="cpu")
    toy = random_model(dict(TOY_SHAPE, num_hidden_layers=1), "toy", torch.device("cpu"), torch.float32)
    base = resolve(None, loaded.spec, defaults=DEFAULTS)
    rows = {name: row_settings(name, base) for name in ("d2f", "lopa-k2-adaptive")}
    orders = replay.adaptive_orders(loaded, toy, rows, "batched_eager")
    assert list(orders) == ["lopa-k2-adaptive"]
    traces = replay.decode_traces(loaded, rows, PROBLEMS[:1], orders)
    recorded = traces["lopa-k2-adaptive"][0]["run"].order
    assert recorded["source"].startswith("measured on cpu, float32") and ", timing toy, in " in recorded["source"]
    assert "through the batched_eager executor" in recorded["source"] and len(recorded["cost"]) == 3
    assert traces["d2f"][0]["run"].order is None
