"""The batched executor's fast path (lopa.fast, lopa.graphs) against the eager reference (batched_eager)."""

import pytest
import torch
from tiny import LIVELY, decisions, tiny_qwen2, tiny_spec
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from lopa import Decoder, DecodeSettings
from lopa.fast import lean_support
from lopa.forward import BatchedExecutor, EagerBatchedExecutor
from lopa.graphs import bucket, capacity_for
from lopa.models import load
from lopa.models.loading import DEFAULT_MODEL
from lopa.resolution import resolve
from lopa.tasks import synthetic

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
MODES = ["block_causal", "full", "full_prompt_blind"]


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(seed=1)


def numbers(run):
    """Every number a round recorded from its forward, in order."""
    return [(r.branch_max_prob, r.branch_conf, r.branch_scores) for r in run.records]


def settings_for(attention, k, depth=1):
    return DecodeSettings(k=k, attention=attention, lookahead_depth=depth,
                          cache_schedule="authors" if attention == "full" else "eager", **LIVELY)


@pytest.mark.parametrize("attention", MODES)
@pytest.mark.parametrize("k", [0, 4])
def test_lean_forward_is_bit_for_bit_the_eager_one(model, attention, k):
    """Same modules, same ops, same order, same attention function: every number equal, not close."""
    settings = settings_for(attention, k)
    fast = Decoder(model, tiny_spec(), settings, executor="batched")
    assert fast.executor.lean is not None and fast.executor.lean_reason is None
    lean, eager = fast.run(PROMPT), Decoder(model, tiny_spec(), settings, executor="batched_eager").run(PROMPT)
    assert lean.tokens == eager.tokens and decisions(lean) == decisions(eager)
    assert numbers(lean) == numbers(eager)
    assert any(r.winner > 0 for r in lean.records) or k == 0


@pytest.mark.parametrize("make", [
    lambda: LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, attention_bias=True)).eval(),
    lambda: Qwen3ForCausalLM(Qwen3Config(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16)).eval(),
], ids=["llama", "qwen3"])
def test_lean_forward_covers_the_llama_layouts(make):
    torch.manual_seed(3)
    other = make()
    settings = settings_for("block_causal", 3)
    lean = Decoder(other, tiny_spec(), settings, executor="batched")
    assert lean.executor.lean is not None
    assert numbers(lean.run(PROMPT)) == numbers(Decoder(other, tiny_spec(), settings, executor="batched_eager").run(PROMPT))


def test_a_forward_hook_fires_as_without_the_fast_path(model):
    """The lean forward calls neither the model nor its layers: where a hook waits on one, the model's own
    forward runs, so the hook sees every verify forward."""
    settings = settings_for("block_causal", 3)
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        hooked = Decoder(model, tiny_spec(), settings, executor=BatchedExecutor(model, tiny_spec(), settings, static=True)).run(PROMPT)
    finally:
        handle.remove()
    assert len(calls) == hooked.metrics()["forwards"] > 1
    assert numbers(hooked) == numbers(Decoder(model, tiny_spec(), settings, executor="batched_eager").run(PROMPT))


def test_other_layouts_run_the_models_own_forward(model):
    """A model the lean forward does not know decodes through its own forward, and says why."""
    model.config.model_type = "dream"
    try:
        assert "dream" in lean_support(model)
        ex = BatchedExecutor(model, tiny_spec(), settings_for("block_causal", 2))
        assert ex.lean is None and "not one of the lean forward's layouts" in ex.lean_reason
        run = Decoder(model, tiny_spec(), settings_for("block_causal", 2), executor=ex).run(PROMPT)
    finally:
        model.config.model_type = "qwen2"
    assert run.tokens == Decoder(model, tiny_spec(), settings_for("block_causal", 2), executor="batched_eager").run(PROMPT).tokens
    assert isinstance(EagerBatchedExecutor(model, tiny_spec(), settings_for("full", 0)).lean_reason, str)


@pytest.fixture(scope="module")
def bundled():
    loaded = load(str(DEFAULT_MODEL))
    problems, _ = synthetic.TASK.problems("synthetic", 2, 60917, loaded.spec.extra.get("problems"))
    return loaded, [synthetic.TASK.prompt(loaded, p, "", 0) for p in problems]


@pytest.mark.parametrize("attention", MODES)
@pytest.mark.parametrize("k, depth", [(0, 1), (4, 1), (6, 2)])
def test_static_path_decodes_the_eager_tokens(bundled, attention, k, depth):
    """The path CUDA graphs capture, run uncaptured: windows padded to buckets (B up to 16 rows with chains),
    the prefix a fixed-capacity buffer masked past its length. Float sums run in another order, so the
    numbers are close (a random tiny model's near-ties would then swap; the bundled model has few), the
    tokens and decisions equal."""
    loaded, prompts = bundled
    settings = resolve({"k": k, "attention": attention, "lookahead_depth": depth, "max_new_tokens": 64}, loaded.spec)
    for prompt in prompts:
        ex = BatchedExecutor(loaded.model, loaded.spec, settings, static=True)
        static = Decoder(loaded.model, loaded.spec, settings, loaded.tokenizer, executor=ex).run(prompt)
        eager = loaded.decoder(settings, executor="batched_eager").run(prompt)
        assert static.tokens == eager.tokens and decisions(static) == decisions(eager)
        for a, b in zip(static.records, eager.records):
            for pa, pb in zip(a.branch_max_prob, b.branch_max_prob):
                assert pa == pytest.approx(pb, abs=1e-5)
    for runner in loaded.model._lopa_graph_runners.values():
        assert runner.buckets and all(B & (B - 1) == 0 and L % settings.block_size == 0 for B, L in runner.buckets)
        assert runner.owner is None                      # the decode ended: released
    if k:
        assert any(B > 1 for runner in loaded.model._lopa_graph_runners.values() for B, _ in runner.buckets)


def test_one_decode_at_a_time_holds_the_static_buffers(model):
    """A second decode while the first is live runs the lean forward unstatic, never on the first's buffers."""
    settings = settings_for("block_causal", 2)
    first = Decoder(model, tiny_spec(), settings, executor=BatchedExecutor(model, tiny_spec(), settings, static=True))
    live = first.stream(PROMPT)
    next(live), next(live)
    assert first.executor.graph is not None
    second = Decoder(model, tiny_spec(), settings, executor=BatchedExecutor(model, tiny_spec(), settings, static=True))
    run = second.run(PROMPT)
    assert second.executor.graph is None
    for _ in live:
        pass
    assert first.result().tokens == run.tokens
    third = BatchedExecutor(model, tiny_spec(), settings, static=True)
    again = Decoder(model, tiny_spec(), settings, executor=third).stream(PROMPT)
    next(again), next(again)
    assert third.graph is not None                       # the first decode's end released the buffers
    again.close()
    assert third.graph is None                           # and a stopped decode releases them too


def test_a_cast_model_gets_new_static_buffers(model):
    """A graph reads the weights where they were captured: after model.to(dtype) the old runner is dropped."""
    settings = settings_for("block_causal", 2)
    Decoder(model, tiny_spec(), settings, executor=BatchedExecutor(model, tiny_spec(), settings, static=True)).run(PROMPT)
    before = set(model._lopa_graph_runners)
    model.to(torch.float64)
    try:
        run = Decoder(model, tiny_spec(), settings, executor=BatchedExecutor(model, tiny_spec(), settings, static=True)).run(PROMPT)
        assert not before & set(model._lopa_graph_runners)
        assert all(r.kv.keys[0].dtype == torch.float64 for r in model._lopa_graph_runners.values())
    finally:
        model.to(torch.float32)
    assert run.tokens


def test_buckets():
    assert [bucket(n) for n in (1, 2, 3, 5, 9, 15, 16, 17)] == [1, 2, 4, 8, 16, 16, 16, 32]
    assert [bucket(n, 32) for n in (1, 32, 33, 64, 65)] == [32, 32, 64, 64, 96]
    assert capacity_for(100) == 512 and capacity_for(513) == 1024


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_captured_graphs_decode_the_eager_tokens():
    model = tiny_qwen2(seed=1).cuda()
    settings = settings_for("block_causal", 4)
    ex = BatchedExecutor(model, tiny_spec(), settings)
    assert ex.static
    captured = Decoder(model, tiny_spec(), settings, executor=ex).run(PROMPT)
    runner = next(iter(model._lopa_graph_runners.values()))
    assert all(slot["graph"] is not None for slot in runner.buckets.values())
    assert captured.tokens == Decoder(model, tiny_spec(), settings, executor="batched_eager").run(PROMPT).tokens
