"""The app through a fake ZeroGPU boundary (tests/fake_spaces.py): every GPU function runs in a
spawned worker on pickled, JSON-able arguments and sends pickled results back, as the `spaces`
package does. Run, Step, Stop, a closed page, scrubbing, export, forks and the typed API must give
the same tokens as the local path. The worker keeps no paused decode (LOPA_RESUME_CACHE=0), so every
Step and every continued Run replays the recorded rounds: ZeroGPU's worst case."""

import sys
import types

import gradio as gr
import pytest
from fake_spaces import FakeZeroGPU, WorkerError

from app.panels import forks, traces
from app.panels.round_view import callbacks as cb
from app.serving import boundary, gpu
from app.serving.api import decode
from app.serving.model_cache import MODELS
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session
from lopa import DecodeSettings, RunResult

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("every_round")]

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32, confidence="max_prob",
                attention="block_causal", temperature=0.0, seed=0)


def values(**changes):
    return [{**SETTINGS, **changes}[n] for n in SETTING_NAMES]


def decisions(run):
    """What a run decided, round by round (timings left out)."""
    return [(r.kind, r.anchor_positions, r.anchor_tokens, r.lookahead_positions, r.winner, r.branch_tokens)
            for r in run.records]


@pytest.fixture(scope="module")
def worker(app_model_dir):
    fake = FakeZeroGPU(env={"LOPA_RESUME_CACHE": "0", "OMP_NUM_THREADS": "1"},
                       setup=("fake_spaces", "load_app_model", (str(app_model_dir),)))
    yield fake
    fake.close()


@pytest.fixture
def zerogpu(worker, monkeypatch):
    """The app's GPU functions, decorated by the fake spaces.GPU (as app/serving/gpu.py does on a Space)."""
    for name, fn in (("decode_rounds_on_gpu", boundary.decode_rounds), ("top_tokens_on_gpu", boundary.top_tokens_at),
                     ("study_steps_on_gpu", boundary.study_steps),
                     ("best_order_steps_on_gpu", boundary.best_order_steps)):
        monkeypatch.setattr(boundary, name, worker.GPU(fn))
    return worker


def local(settings=None, prompt=PROMPT):
    """The local path: the engine in this process, no boundary."""
    return MODELS.get().decoder(DecodeSettings(**{**SETTINGS, **(settings or {})})).run(prompt)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_run_then_steps_then_run_give_the_local_tokens(zerogpu, temperature):
    reference = local({"temperature": temperature, "seed": 3})
    v = values(temperature=temperature, seed=3)
    session = Session()
    calls = zerogpu.calls
    list(cb.run_stream(session, PROMPT, *v))
    assert zerogpu.calls == calls + 1                               # one GPU call streams the whole run
    assert session.run.tokens == reference.tokens and decisions(session.run) == decisions(reference)
    assert session.status() == "done" and session.names and session.run.text == reference.text

    stepped = Session()
    for r in range(3):                                              # each Step: one GPU call
        status = cb.step_once(stepped, PROMPT, *v)[0]
        assert f"round {r}" in status and len(stepped.run.records) == r + 1
    assert stepped.status() == "paused"
    list(cb.run_stream(stepped, PROMPT, *v))                        # continues: replayed in the worker
    assert stepped.run.tokens == reference.tokens and decisions(stepped.run) == decisions(reference)
    assert stepped.run.run_id == stepped.runs["1"].run.run_id and not stepped.run.stopped


def test_stop_and_a_closed_page_through_the_boundary(zerogpu):
    reference = local()
    session = Session()
    gen = cb.run_stream(session, PROMPT, *values())
    next(gen), next(gen), next(gen)                                 # start, round 0, round 1
    assert cb.stop_run(session)[0] == cb.stop_pending() and session.stop_requested
    list(gen)
    assert session.run.stopped and len(session.run.records) == 3 and session.status() == "stopped"

    gen = cb.run_stream(session, PROMPT, *values())
    next(gen), next(gen)
    gen.close()                                                     # the browser went away
    assert session.status() == "paused"
    list(cb.run_stream(session, PROMPT, *values()))                 # Run picks it up (replayed)
    assert session.run.tokens == reference.tokens and decisions(session.run) == decisions(reference)


def test_the_best_order_search_through_the_boundary_finds_the_local_order(zerogpu):
    from app.panels import best_order
    through, here = Session(), Session()
    for session in (through, here):
        list(cb.run_stream(session, PROMPT, *values(k=1)))
    calls = zerogpu.calls
    assert "Best order found" in list(best_order.compare_with_best(through))[-1][0]
    assert zerogpu.calls == calls + 1                               # one GPU call streams the whole search
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(boundary, "best_order_steps_on_gpu", boundary.best_order_steps)   # the local path
        list(best_order.compare_with_best(here))
    found, expected = through.runs["1.1"].run, here.runs["1.1"].run
    assert found.tokens == expected.tokens and decisions(found) == decisions(expected)
    assert found.metrics()["forwards"] < through.runs["1"].run.metrics()["forwards"]


def test_scrub_and_export_after_a_run_through_the_boundary(zerogpu):
    through, here = Session(), Session()
    list(cb.run_stream(through, PROMPT, *values()))                 # through the fake ZeroGPU boundary
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(boundary, "decode_rounds_on_gpu", boundary.decode_rounds)   # the local path
        list(cb.run_stream(here, PROMPT, *values()))
    for r in (0, 1, here.n_rounds - 1):                             # scrubbing reads the session: no GPU call
        calls = zerogpu.calls
        assert cb.show_round(through, r)[0] == cb.show_round(here, r)[0]       # the canvas
        assert zerogpu.calls == calls
    update, status = traces.export_trace(through, "JSON")
    assert "Exported" in status
    loaded = RunResult.load(update["value"])
    assert loaded.tokens == here.run.tokens and decisions(loaded) == decisions(here.run)


def test_forks_and_top_tokens_through_the_boundary(zerogpu):
    session, reference = Session(), Session()
    list(cb.run_stream(session, PROMPT, *values()))
    r = 1
    record = session.run.records[r]
    p = record.branch_positions[record.winner][-1]
    panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(session, f"{r}:{p}:1")))
    assert panel["fill_first"]["interactive"] is True
    token = panel["whatif_token"]["value"]
    list(forks.fill_first(session, panel["whatif_target"], token))
    fork = session.run
    assert fork.records[:r + 1] == session.runs["1"].run.records[:r + 1] and fork.forked_from["round"] == r
    assert {"action": "commit", "position": p, "token": int(token)} in fork.records[r + 1].forced

    with pytest.MonkeyPatch.context() as mp:                        # the same fork on the local path
        for name, fn in (("decode_rounds_on_gpu", boundary.decode_rounds), ("top_tokens_on_gpu", boundary.top_tokens_at)):
            mp.setattr(boundary, name, fn)
        list(cb.run_stream(reference, PROMPT, *values()))
        local_panel = dict(zip(forks.WHATIF_OUTPUTS, forks.pick_cell(reference, f"{r}:{p}:1")))
        assert local_panel["whatif_token"] == panel["whatif_token"]
        list(forks.fill_first(reference, local_panel["whatif_target"], token))
    assert fork.tokens == reference.run.tokens and decisions(fork) == decisions(reference.run)


def test_the_typed_api_and_bad_input_through_the_boundary(zerogpu):
    result = decode(PROMPT, **{k: v for k, v in SETTINGS.items()})
    assert result["trace"]["tokens"] == local().tokens
    session = Session()
    out = list(cb.run_stream(session, "   ", *values()))[-1]
    assert "prompt is empty" in out[0] and session.live is None   # the message crossed as a value
    with pytest.raises(gr.Error, match="prompt is empty"):
        decode("   ")


def test_the_fake_boundary_refuses_what_zerogpu_cannot_carry(worker):
    session = Session()
    with pytest.raises(TypeError, match="not a plain"):
        worker.GPU(boundary.top_tokens_at)(session, {}, 0, 0, 1)    # a session never crosses
    fn = worker.GPU(boundary.top_tokens_at)
    with pytest.raises(WorkerError, match="ZeroGPU worker error: KeyError"):
        fn(str(MODELS.default), {}, 0, 0, 1)                        # only the class name comes back


def test_gpu_is_spaces_gpu_only_on_a_zerogpu_space(monkeypatch):
    seen = []
    fake = types.ModuleType("spaces")
    fake.GPU = lambda fn: seen.append(fn) or (lambda *a: ("on gpu", fn(*a)))
    monkeypatch.setitem(sys.modules, "spaces", fake)

    def f(x):
        return x + 1
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert gpu.gpu(f) is f and not seen                             # locally, and on a CPU Space
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert gpu.gpu(f)(1) == ("on gpu", 2) and seen == [f]
    monkeypatch.setitem(sys.modules, "spaces", None)                # ZeroGPU flag but no package: identity
    assert gpu.gpu(f) is f


def test_a_zero_gpu_space_decodes_without_cuda_graphs(monkeypatch):
    """Each ZeroGPU call decodes in a worker forked for it, where a graph capture would serve one decode: the
    boundary turns the batched executor's capture off (lopa.graphs) before any worker forks."""
    from lopa.graphs import graphs_enabled
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.delenv("LOPA_CUDA_GRAPHS", raising=False)
    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=lambda fn: fn))
    assert gpu.gpu(len)("abc") == 3
    assert not graphs_enabled()
