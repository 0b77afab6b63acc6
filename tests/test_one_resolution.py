"""One resolution of settings on every surface: a tiny random Dream-format checkpoint whose config
asks for full attention and a block size of 16 decodes the same tokens, and records the same
settings, from the same request through `lopa generate`, the app's Run (its exported trace), the
typed /decode endpoint, transformers' generate() through lopa.hf, and the app's "copy as command"
run again. The app's inputs show that model's own values, and follow the session's model where the
visitor has not touched them."""

import json
import shlex

import pytest
import torch
from test_checkpoints import save_dream_dir

from app.panels import traces
from app.panels.round_view import callbacks as cb
from app.panels.round_view import views
from app.panels.settings import callbacks as settings_panel
from app.panels.settings import share
from app.serving import api
from app.serving.model_cache import MODELS
from app.serving.request import follow_model, read_request, shown_settings
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session
from lopa.cli import main
from lopa.hf.generation import generate
from lopa.models import load
from lopa.trace import RunResult

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::UserWarning")]

PROMPT = "def add(a, b):"
REQUEST = {"k": 2, "max_new_tokens": 32}          # the same request on every surface; the rest is unset
OWN = {"attention": "full", "block_size": 16}      # what the checkpoint's config asks for


@pytest.fixture(scope="module")
def dream_dir(tmp_path_factory):
    path, _ = save_dream_dir(tmp_path_factory.mktemp("one-resolution") / "Dream-tiny-Base", sharded=False)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "lopa": dict(OWN)}))
    return path


@pytest.fixture
def any_folder(monkeypatch):
    monkeypatch.setenv("LOPA_MODEL_DIRS", "*")


def cli_run(tmp_path, argv, name="cli.json") -> RunResult:
    trace = tmp_path / name
    assert main([*argv, "--device", "cpu", "--trace", str(trace)]) == 0
    return RunResult.load(trace)


def app_values(spec, **touched):
    """The settings inputs as the page shows them for the model with `spec`, with `touched` typed in."""
    shown = dict(zip(SETTING_NAMES, follow_model(spec, (), *[APP_DEFAULTS[n] for n in SETTING_NAMES])))
    return [{**shown, **touched}[n] for n in SETTING_NAMES]


def test_every_surface_decodes_the_same_tokens_with_the_model_s_settings(dream_dir, any_folder, tmp_path, capsys):
    flags = [x for name, value in REQUEST.items() for x in (f"--{name.replace('_', '-')}", str(value))]
    runs = {"cli": cli_run(tmp_path, ["generate", "--model", str(dream_dir), "--prompt", PROMPT, *flags])}

    session = Session(model=str(dream_dir))                    # the session's model: the Dream folder
    spec = MODELS.get(str(dream_dir)).spec
    values = app_values(spec, **REQUEST)
    assert [values[SETTING_NAMES.index(n)] for n in OWN] == list(OWN.values())   # the inputs show the model's own
    outs = [dict(zip(views.LIVE_OUTPUTS, o)) for o in cb.run_stream(session, PROMPT, *values, SINGLE, 2)]
    assert outs[-1]["status"].startswith("Done"), outs[-1]["status"]
    exported = traces.export_trace(session, "JSON")[0]["value"]
    runs["app"] = RunResult.load(exported)

    runs["decode"] = RunResult.from_json(json.dumps(api.decode(prompt=PROMPT, model=str(dream_dir), **REQUEST)["trace"]))

    loaded = load(dream_dir, device="cpu")                     # the stock model transformers' generate() runs
    out = generate(loaded.model, torch.tensor([runs["cli"].prompt_ids]), tokenizer=loaded.tokenizer,
                   return_dict_in_generate=True, **REQUEST)
    runs["hf"] = out.traces[0]

    command = shlex.split(cb_command(session, values))
    assert command[:4] == ["python", "-m", "lopa", "generate"] and "--model" in command
    runs["command"] = cli_run(tmp_path, command[3:], "command.json")        # `generate ...`, as copied

    tokens = {surface: run.tokens for surface, run in runs.items()}
    assert all(t == tokens["cli"] for t in tokens.values()), tokens
    for surface, run in runs.items():
        recorded = {name: run.settings[name] for name in (*OWN, *REQUEST)}
        assert recorded == {**OWN, **REQUEST}, (surface, recorded)
        assert run.prompt_ids == runs["cli"].prompt_ids, surface


def cb_command(session, values) -> str:
    folder, spec = share.session_model(session)
    return share.command_line(PROMPT, read_request(values).resolve(spec), spec=spec, folder=folder)


def test_copy_as_command_names_the_model_and_only_what_differs_from_lopa_generate(dream_dir, any_folder):
    spec = MODELS.get(str(dream_dir)).spec
    command = share.command_line(PROMPT, read_request(app_values(spec, order="random")).resolve(spec), spec=spec,
                                 folder=dream_dir)
    parts = shlex.split(command)
    assert parts[parts.index("--model") + 1] == str(dream_dir)
    assert "--attention" not in parts and "--block-size" not in parts       # the model's own: lopa generate's too
    assert parts[parts.index("--order") + 1] == "random" and parts[parts.index("--max-new-tokens") + 1] == "64"
    request = read_request(app_values(spec, attention="block_causal"), ["attention"])
    touched = share.command_line(PROMPT, request.resolve(spec), spec=spec, folder=dream_dir)
    assert "--attention block_causal" in touched                            # a visitor's change is spelled out


def test_a_share_link_names_the_model_and_what_the_visitor_changed(dream_dir, any_folder):
    spec = MODELS.get(str(dream_dir)).spec
    query = share.share_query(PROMPT, read_request(app_values(spec, k=3), ["k"]).resolve(spec), spec=spec,
                              folder=dream_dir)
    assert "model=" in query and "k=3" in query and "attention" not in query and "block_size" not in query


def test_the_inputs_follow_the_session_s_model_where_the_visitor_did_not_touch_them(dream_dir, any_folder):
    spec = MODELS.get(str(dream_dir)).spec
    before = [APP_DEFAULTS[n] for n in SETTING_NAMES]
    before[SETTING_NAMES.index("k")] = 7
    after = dict(zip(SETTING_NAMES, follow_model(spec, ["k"], *before)))
    assert after["k"] == 7                                                  # touched: kept
    assert (after["attention"], after["block_size"]) == ("full", 16)        # untouched: the model's own
    assert after["max_new_tokens"] == 64 and shown_settings(spec).attention == "full"
    # A touched block size carries an untouched length along to whole blocks of it.
    before[SETTING_NAMES.index("block_size")] = 24
    assert dict(zip(SETTING_NAMES, follow_model(spec, ["block_size"], *before)))["max_new_tokens"] == 72
    # The callback on the page: the session's model's values for untouched inputs, gr.skip() elsewhere.
    session = Session(model=str(dream_dir), touched=frozenset({"k"}))
    updates = dict(zip(SETTING_NAMES, settings_panel.follow_session_model(session, *[APP_DEFAULTS[n] for n in SETTING_NAMES])))
    assert updates["attention"]["value"] == "full" and updates["block_size"]["value"] == 16
    assert updates["k"].get("__type__") == "update" and "value" not in updates["k"]     # touched: skipped
