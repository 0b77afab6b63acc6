"""Each session's own model, from one cache (app/serving/model_cache.py): the cache's bound in bytes, least recently
used first and never a model a decode holds; two sessions decoding two models at once, each getting
its own model's tokens; a session's pick that no other session sees, through gradio_client; /decode's
`model`."""

import threading
from pathlib import Path

import pytest
from gradio_client import Client
from servers import plain, serve_demo
from test_checkpoints import save_dream_dir
from tiny import LIVELY, PROMPT, save_tiny_model_dir

from app.panels import model as model_panel
from app.panels.round_view import callbacks as cb
from app.serving import boundary
from app.serving.model_cache import CACHE_ENV, DEFAULT_CACHE_BYTES, MODELS, ModelCache, cache_bytes, model_bytes
from app.serving.models import MODELS_DIR
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session
from lopa import DecodeSettings, RunResult
from lopa.models import DEFAULT_MODEL, load

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("every_round")]

SETTINGS = dict(APP_DEFAULTS, k=3, **LIVELY, attention="block_causal", temperature=0.0, seed=0)
VALUES = [SETTINGS[n] for n in SETTING_NAMES]


def key(folder) -> str:
    return ModelCache.key(folder)


def reference(session: Session):
    """The tokens the session's run would have, decoded alone by its own model (a fresh load)."""
    run = session.run
    return load(Path(session.model)).decoder(DecodeSettings.from_dict(run.settings)).run(run.prompt).tokens


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Three tiny random models of different weights (seeds 0, 1, 2), each named by its folder."""
    root = tmp_path_factory.mktemp("models")
    return [save_tiny_model_dir(root / f"tiny-{seed}", seed=seed) for seed in range(3)]


@pytest.fixture
def empty_cache():
    MODELS.clear()
    yield MODELS
    MODELS.clear()


def test_the_cache_is_bounded_by_bytes_and_evicts_the_least_recently_used(folders):
    a, b, c = folders
    one = model_bytes(load(a))
    assert one > 0 and all(model_bytes(load(f)) == one for f in (b, c))
    cache = ModelCache(default=a, max_bytes=2 * one)
    gone = []
    cache.on_evict.append(gone.append)
    first = cache.get()                                   # the default, loaded once
    assert cache.get(b) is not first and cache.get(a) is first   # a cached model is the same object
    assert list(cache.held()) == [key(b), key(a)]         # least recently used first
    cache.get(c)                                          # over the bound: b, the least recently used, goes
    assert list(cache.held()) == [key(a), key(c)] and gone == [key(b)]
    assert cache.peek(b) is None and cache.peek(a) is first
    assert cache.get(b) is not None and gone == [key(b), key(a)]   # b again: a was the oldest now


def test_a_model_is_never_evicted_while_a_decode_holds_it(folders):
    a, b, c = folders
    cache = ModelCache(default=a, max_bytes=1)            # less than one model
    assert cache.get(a) is not None and list(cache.held()) == [key(a)]   # one model over the bound still loads
    with cache.lease(a) as held:
        cache.get(b)                                      # a is leased, b just asked for: both stay, over the bound
        assert cache.held() == {key(a): (model_bytes(held), 1), key(b): (model_bytes(held), 0)}
        cache.get(c)                                      # b goes, a stays (leased)
        assert set(cache.held()) == {key(a), key(c)}
    assert list(cache.held()) == [key(c)]                 # released: the least recently used goes at once
    with cache.lease(c), cache.lease(c):                  # leases count
        assert cache.held()[key(c)][1] == 2
    assert cache.held()[key(c)][1] == 0
    cache.clear()
    assert cache.held() == {}


def test_a_model_of_another_kind_shares_the_bound_under_its_own_loader(folders):
    """A model the LoPA engine does not decode (a DiffusionGemma checkpoint, app/panels/denoise/) is held by the
    same cache under its own loader: in the same bound, least recently used first out, leased; never handed
    to a LoPA caller (nor a LoPA model to it); its tokenizer found by its folder's name."""
    from types import SimpleNamespace

    import torch
    a, b, c = folders
    loads = []

    def other_kind(folder):
        loads.append(Path(folder))
        return SimpleNamespace(model=torch.nn.Linear(8, 8), tokenizer=f"tokenizer of {Path(folder).name}", path=folder)
    other = 8 * 8 * 4 + 8 * 4                                  # its parameters' bytes (float32)
    cache = ModelCache(default=a, max_bytes=2 * model_bytes(load(a)))      # two LoPA models, or one and the other kind
    gone = []
    cache.on_evict.append(gone.append)
    held = cache.get(c, load=other_kind)
    assert cache.get(c, load=other_kind) is held and loads == [c]        # cached: loaded once
    assert cache.held() == {key(c): (other, 0)}
    cache.get(a)                                                         # both fit
    assert list(cache.held()) == [key(c), key(a)]
    cache.get(b)                                                         # over the bound: the other kind's, oldest, goes
    assert list(cache.held()) == [key(a), key(b)] and gone == [key(c)]
    # Each kind only ever gets its own.
    assert cache.peek(b, load=other_kind) is None
    with pytest.raises(ValueError, match="another kind of model"):
        cache.get(b, load=other_kind)
    cache.get(c, load=other_kind)
    assert cache.peek(c) is None and cache.cached_tokenizer("tiny-2") == "tokenizer of tiny-2"
    with pytest.raises(ValueError, match="another kind of model"):
        cache.get(c)
    # Leased, it stays past the bound until its decode ends.
    small = ModelCache(default=a, max_bytes=1)
    with small.lease(c, load=other_kind):
        small.get(a)
        assert small.held() == {key(c): (other, 1), key(a): (model_bytes(small.peek(a)), 0)}
    assert list(small.held()) == [key(a)]


def test_the_bound_is_one_setting(monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert cache_bytes() == DEFAULT_CACHE_BYTES
    # Enough for both bundled models and a 7B-class checkpoint in bfloat16 (Dream-v0-7B: 7.6 G parameters).
    bundled = sum(p.stat().st_size for p in MODELS_DIR.glob("*/*.safetensors"))
    assert DEFAULT_CACHE_BYTES >= 7.6e9 * 2 + bundled
    monkeypatch.setenv(CACHE_ENV, "16e9")
    assert cache_bytes() == 16_000_000_000
    monkeypatch.setenv(CACHE_ENV, "1_000")
    assert cache_bytes() == 1000
    for bad in ("lots", "-1", "1.5", "inf"):
        monkeypatch.setenv(CACHE_ENV, bad)
        with pytest.raises(ValueError, match=CACHE_ENV):
            cache_bytes()


def test_model_choices_name_folders(folders, monkeypatch):
    assert MODELS.folder("") == MODELS.default and MODELS.folder(None) == MODELS.default
    assert MODELS.folder("sure-gsm-dllm") == MODELS_DIR / "sure-gsm-dllm"
    assert MODELS.folder(str(folders[0])) == folders[0]
    with pytest.raises(ValueError, match="no model in"):
        MODELS.folder(str(folders[0].parent))             # a folder without config.json
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(MODELS_DIR))
    with pytest.raises(ValueError, match="only loads models from"):
        MODELS.folder(str(folders[0]))


def test_two_sessions_on_two_models_decode_at_once_each_with_its_own_tokens(folders, empty_cache):
    a, b = folders[:2]
    sessions = [Session(), Session()]
    for session, folder in zip(sessions, (a, b)):
        assert "now decodes with" in model_panel.pick_model(session, str(folder))[1]
    # Interleaved in one thread: both decodes are live at once, each holding its own model.
    streams = [cb.run_stream(s, PROMPT, *VALUES) for s in sessions]
    for stream in streams:
        next(stream)
    next(streams[0]), next(streams[1])
    held = MODELS.held()
    assert held[key(a)][1] == 1 and held[key(b)][1] == 1
    for stream in streams:
        for _ in stream:
            pass
    assert all(leases == 0 for _, leases in MODELS.held().values())
    runs = [s.run for s in sessions]
    assert [r.spec["name"] for r in runs] == ["tiny-0", "tiny-1"] and runs[0].tokens != runs[1].tokens
    for session in sessions:
        assert session.run.tokens == reference(session)

    # Two threads, started together.
    again = [Session(model=str(a)), Session(model=str(b))]
    start, errors = threading.Barrier(2), []

    def decode(session):
        try:
            start.wait(timeout=30)
            for _ in cb.run_stream(session, PROMPT, *VALUES):
                pass
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
    threads = [threading.Thread(target=decode, args=(s,)) for s in again]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors and [s.run.tokens for s in again] == [r.tokens for r in runs]


def test_a_paused_decode_of_an_evicted_model_resumes_by_replay(folders, empty_cache):
    session = Session(model=str(folders[2]))
    whole = Session(model=str(folders[2]))
    for _ in cb.run_stream(whole, PROMPT, *VALUES):
        pass
    cb.step_once(session, PROMPT, *VALUES)
    cb.step_once(session, PROMPT, *VALUES)
    assert any(model == key(folders[2]) for model, _ in boundary._kept.values())
    MODELS.clear()                                        # the model leaves: what was kept of it goes too
    assert not any(model == key(folders[2]) for model, _ in boundary._kept.values())
    for _ in cb.run_stream(session, PROMPT, *VALUES):     # continues: replays the two rounds, then on
        pass
    assert session.run.tokens == whole.run.tokens and len(session.runs.entries) == 1


def test_a_pick_leaves_other_sessions_alone_and_stops_a_paused_decode(folders):
    mine, other = Session(), Session()
    cb.step_once(mine, PROMPT, *VALUES)
    assert mine.live is not None
    model_panel.pick_model(mine, str(folders[1]))
    assert mine.live is None and mine.run.stopped and other.model is None
    for _ in cb.run_stream(other, PROMPT, *VALUES):
        pass
    assert other.run.spec["name"] == Path(MODELS.default).name
    assert "tiny-1" in model_panel.warm_model(mine) and "tiny-1" not in model_panel.warm_model(other)


# -- through the server --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def url():
    if Path(MODELS.default) != DEFAULT_MODEL:
        pytest.skip("another module moved the default model")
    try:
        MODELS.get()
    except ValueError as err:
        pytest.skip(f"the bundled model does not load right now: {err}")
    yield from serve_demo()


def exported(client) -> tuple[str, RunResult]:
    update, status = plain(client.predict("JSON", api_name="/export_trace"))
    path = update["value"] if isinstance(update, dict) else update
    assert "Exported" in status, status
    return path, RunResult.load(path)


def test_one_session_picks_a_dream_folder_and_a_fresh_session_still_runs_the_default(url, tmp_path, monkeypatch):
    monkeypatch.setenv("LOPA_MODEL_DIRS", "*")
    dream, _ = save_dream_dir(tmp_path / "tiny-dream")
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    info, status, _ = plain(a.predict(str(dream), api_name="/pick_model"))
    assert "now decodes with `tiny-dream`" in status and "tiny-dream" in info
    plain(b.predict(PROMPT, *VALUES, api_name="/run"))
    path, run = exported(b)
    assert run.spec["name"] == "open-gsm-dllm" and "open-gsm-dllm" in Path(path).name
    plain(a.predict("Tom has 3 apples.", *VALUES, api_name="/run"))
    path, run = exported(a)
    assert run.spec["name"] == "tiny-dream" and "tiny-dream" in Path(path).name
    # /decode names its model the same ways, through the same cache; "" is the default.
    assert a.predict(prompt=PROMPT, k=2, max_new_tokens=32, api_name="/decode")["model"] == "open-gsm-dllm"
    out = a.predict(prompt=PROMPT, model="sure-gsm-dllm", k=2, max_new_tokens=32, api_name="/decode")
    assert out["model"] == "sure-gsm-dllm" and out["trace"]["spec"]["name"] == "sure-gsm-dllm"
    out = b.predict(prompt="Tom has 3 apples.", model=str(dream), k=2, api_name="/decode")
    assert out["model"] == "tiny-dream"
    with pytest.raises(Exception, match="no model in"):
        b.predict(prompt=PROMPT, model=str(tmp_path), api_name="/decode")


def test_zerogpu_serves_only_the_models_loaded_at_startup(folders, empty_cache, monkeypatch):
    import gradio as gr

    from app.serving.api import decode
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    session = Session()
    status = model_panel.pick_model(session, str(folders[0]))[1]
    assert "loaded at startup" in status and session.model is None and MODELS.peek(folders[0]) is None
    with pytest.raises(gr.Error, match="loaded at startup"):
        decode(PROMPT, model=str(folders[0]))
    MODELS.get(folders[0])                                # what app.serving.model_cache.preload does at import
    assert "now decodes with `tiny-0`" in model_panel.pick_model(session, str(folders[0]))[1]


def test_the_studies_follow_the_session_model(folders):
    from app.panels.studies import callbacks as studies
    session = Session(model=str(folders[1]))
    assert "No shipped results for **tiny-1**" in studies.show_shipped("orders", session)[0]
    assert "on open-gsm-dllm" in studies.show_shipped("orders", Session())[0]    # another session: the default's
    last = list(studies.run_study(studies.new_study_state(), "orders", 1, 1, seed=15, session=session))[-1]
    assert last[0].startswith("Done"), last[0]
    assert "live: tiny-1" in last[2].layout.title.text
