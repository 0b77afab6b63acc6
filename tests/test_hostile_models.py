"""Hostile model names and folders (issue #44): a name no file system holds, a config.json with no heads, a
million layers, JSON nested 200,000 deep, a 1 GiB config.json, a config bigger than its weights, a looping link,
a named pipe as the weights or the tokenizer, Qwen2 weights under a DiffusionGemma config. Each is refused by
name at once, in the model box, a share link, `/decode` (in process and through the server) and the command
line: a short message that names it, read within a size and time bound, no traceback, and no other session
waiting on it. And the bundled models are served whatever LOPA_MODEL_DIRS says."""

import html
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import gradio as gr
import pytest
from gradio_client import Client
from servers import plain, serve_demo
from tiny import PROMPT, save_tiny_model_dir

from app.panels import model as model_panel
from app.panels.denoise import callbacks as denoise
from app.panels.settings import share
from app.serving.api import decode
from app.serving.inputs import QUOTE_CHARS
from app.serving.model_cache import MODELS
from app.serving.models import bundled_models
from app.serving.session import Session
from lopa.cli import main
from lopa.models import DEFAULT_MODEL
from lopa.models.folder import MAX_JSON_DEPTH, json_depth, quoted, read_json
from lopa.models.tiny import save_tiny_diffusion_gemma

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::UserWarning")]

HANG_S = 30                 # hang guards only: each of these answers in well under a second
MAX_MESSAGE = 200           # the message itself, before the status line's "**⚠ Error:**" and "— this session ..."


def config(**changes):
    def damage(folder):
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**raw, **changes}))
    return damage


def pipe(name):
    def damage(folder):
        (folder / name).unlink()
        os.mkfifo(folder / name)
    return damage


def nested(folder):
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)


def one_gib(folder):
    os.truncate(folder / "config.json", 2**30)         # sparse: no disk, but 1 GiB to whoever reads it


def loop(folder):
    shutil.rmtree(folder)
    folder.symlink_to(folder)


# name: (what is done to a copy of a good folder, or None: the name alone; what the message says)
CASES = {
    "a name part over 255 bytes": (None, "over 255 bytes"),
    "no attention heads": (config(num_attention_heads=0), "num_attention_heads must be a whole number from 1"),
    "a million layers": (config(num_hidden_layers=10**6), "num_hidden_layers must be a whole number from 1"),
    "layers its layer types disagree with": (config(num_hidden_layers=3),       # transformers' own config check
                                             "(3) must be equal to the number of `layer_types` (2)"),
    "JSON nested 200,000 deep": (nested, f"`config.json` in {{}} nests deeper than {MAX_JSON_DEPTH}"),
    "a 1 GiB config.json": (one_gib, "`config.json` in {} is 1024 MiB"),
    "a config bigger than its weights": (config(hidden_size=65_536), "describes at least"),
    "a looping link": (loop, "a link in it loops"),
    "a pipe as its weights": (pipe("model.safetensors"), "`model.safetensors` in {} is a named pipe"),
    "a pipe as its tokenizer": (pipe("tokenizer.json"), "`tokenizer.json` in {} is a named pipe"),
    "Qwen2 weights under a DiffusionGemma config": (config(model_type="diffusion_gemma"),
                                                    "says diffusion_gemma over another model's weights"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("good") / "model")


# Lets go every reader a pipe holds, every `seconds`: a writer that opens and closes is its end of file.
RELEASE = """import os, sys, time
while True:
    time.sleep(float(sys.argv[1]))
    for pipe in sys.argv[2:]:
        try:
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:                     # no reader waits
            pass
"""


@contextmanager
def pipes_released(folder):
    """While the block runs, a process of its own lets go any reader the pipes in `folder` hold, every HANG_S:
    the code before the fix opened them from safetensors' Rust without releasing the GIL, which stops every
    thread of this process, its hang guards and the in-process server included, until something writes."""
    pipes = [str(f) for f in Path(folder).iterdir() if stat.S_ISFIFO(os.lstat(f).st_mode)] \
        if os.path.isdir(folder) and not os.path.islink(folder) else []
    guard = subprocess.Popen([sys.executable, "-c", RELEASE, str(HANG_S), *pipes]) if pipes else None
    try:
        yield
    finally:
        if guard is not None:
            guard.kill()
            guard.wait()


@pytest.fixture(params=list(CASES))
def hostile(request, good, tmp_path, monkeypatch):
    """(the name a visitor types, what its refusal says): a damaged copy of a good folder where the server may
    load models from (LOPA_MODEL_DIRS)."""
    damage, says = CASES[request.param]
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    folder = tmp_path / ("x" * 300 if damage is None else request.param.replace(" ", "-"))
    if damage is not None:
        shutil.copytree(good, folder)
        damage(folder)
    # The message quotes the folder by its last QUOTE_CHARS characters at most (lopa.models.folder.quoted).
    with pipes_released(folder):
        yield str(folder), says.format(quoted(folder))


def answered(fn, *args, **kwargs):
    """fn(*args, **kwargs) in a thread joined within HANG_S (a hang guard): its value, or its exception."""
    out = {}

    def call():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - raised in the test's thread below
            out["error"] = err
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), f"{fn.__name__} still waits after {HANG_S} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def brief(message: str, name: str) -> str:
    """`message` unescaped, checked short and quoting at most QUOTE_CHARS of `name`."""
    message = html.unescape(message)
    assert len(message) <= MAX_MESSAGE, message
    assert name[-(QUOTE_CHARS + 1):] not in message, message
    return message


def no_traceback(capfd, caplog) -> None:
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err + caplog.text


class Link:
    """A page request whose address carries `query` (what app.panels.settings.share.open_canvas_link reads)."""
    def __init__(self, query: dict):
        self.query_params = query


# -- each surface, in process --------------------------------------------------------------------------
def test_the_model_box_refuses_it_by_name_at_once(hostile, capfd, caplog):
    name, says = hostile
    session = Session()
    info, status, box = answered(model_panel.pick_model, session, name)
    assert status.startswith("**⚠ Error:**") and status.endswith("this session still uses `open-gsm-dllm`.")
    core = status.removeprefix("**⚠ Error:** ").split(" — this session")[0]
    assert says in brief(core, name)
    assert session.model is None and session.canvas_model is None and box["value"] == str(MODELS.default)
    assert denoise.folder_line(session) == denoise.NO_FOLDER       # the DiffusionGemma panel took nothing either
    no_traceback(capfd, caplog)


def test_a_share_link_naming_it_says_what_it_dropped(hostile, request, capfd, caplog):
    name, says = hostile
    if request.node.callspec.params["hostile"] in ("a config bigger than its weights",
                                                   "layers its layer types disagree with"):
        says = "not a DiffusionGemma checkpoint"        # a LoPA model: the DiffusionGemma panel reads no further
    session = Session()
    line, *inputs, status = answered(share.open_canvas_link, Link({"canvas": name, "canvas_seed": "3"}), session)
    assert session.canvas_model is None and line == gr.skip() and all(x == gr.skip() for x in inputs)
    assert status.startswith("**⚠ The shared link was read in part.** Dropped: canvas=") and says in html.unescape(status)
    no_traceback(capfd, caplog)


def test_decode_refuses_it_by_name(hostile, capfd, caplog):
    name, says = hostile
    with pytest.raises(gr.Error) as refused:
        answered(decode, PROMPT, model=name)
    assert says in brief(refused.value.message, name)
    no_traceback(capfd, caplog)


def test_the_command_line_says_it_in_one_line(hostile, capsys):
    name, _ = hostile
    assert answered(main, ["generate", "--model", name, "--prompt", "how many apples ?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "Traceback" not in err and len(err.splitlines()) == 1


# -- the bounds themselves -------------------------------------------------------------------------------
def test_a_pipe_holds_no_other_session(good, tmp_path, monkeypatch, capfd, caplog):
    """The pick of a folder whose weights are a pipe runs in the model slot every session shares (and
    loads under the cache's one load lock): another session's pick of a bundled model is answered meanwhile."""
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    folder = shutil.copytree(good, tmp_path / "piped")
    pipe("model.safetensors")(folder)
    MODELS.clear()                                   # the bundled model must load, under the same lock
    try:
        with pipes_released(folder):
            mine = {}
            blocked = threading.Thread(daemon=True, target=lambda: mine.update(
                out=model_panel.pick_model(Session(), str(folder))))
            blocked.start()
            other = answered(model_panel.pick_model, Session(), "sure-gsm-dllm")
            assert "now decodes with `sure-gsm-dllm`" in other[1]
            blocked.join(HANG_S)
            assert not blocked.is_alive() and "`model.safetensors` in" in mine["out"][1]
    finally:
        MODELS.clear()
    no_traceback(capfd, caplog)


def test_a_1_gib_config_is_refused_unread(good, tmp_path, monkeypatch):
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    folder = shutil.copytree(good, tmp_path / "huge")
    one_gib(folder)
    tracemalloc.start()
    try:
        status = model_panel.pick_model(Session(), str(folder))[1]
        note = share.read_canvas_link({"canvas": str(folder)})[2]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "`config.json` in" in status and "huge" in status and "1024 MiB" in note[0]
    assert peak < 64 * 2**20                     # bytes, not seconds: the file was never read


def test_reading_json_never_blocks_nor_recurses(tmp_path):
    """read_json opens non-blocking and checks the open file: a pipe swapped in after check_folder looked
    cannot hold the reader either; nesting is counted before the (recursive) parser runs."""
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ValueError, match="`config.json` in .* is not a regular file"):
        answered(read_json, tmp_path / "config.json")
    (tmp_path / "deep.json").write_text('{"a": ' * 65 + "1" + "}" * 65)
    with pytest.raises(ValueError, match="nests deeper than 64"):
        read_json(tmp_path / "deep.json")
    (tmp_path / "ok.json").write_text(json.dumps({"s": "[[[[{{{" * 100, "n": [[1, 2], {"a": [3]}]}))
    assert read_json(tmp_path / "ok.json")["n"] == [[1, 2], {"a": [3]}] and json_depth('{"s": "[[[[", "n": [[1]]}') == 3
    (tmp_path / "big.json").write_bytes(b" " * 100)
    with pytest.raises(ValueError, match="`big.json` in"):
        read_json(tmp_path / "big.json", limit=10)


# -- the bundled models, whatever LOPA_MODEL_DIRS says ----------------------------------------------------
def as_the_page_does(session, value) -> list[str]:
    """pick_model, then again with each value it puts back in the model box (the box's change event fires
    pick_model again in the page): the statuses, in order."""
    statuses = []
    for _ in range(5):
        info, status, box = model_panel.pick_model(session, value)
        statuses.append(status)
        if box.get("value") in (None, value):
            break
        value = box["value"]
    return statuses


def test_the_bundled_models_are_served_whatever_lopa_model_dirs_says(tmp_path, monkeypatch):
    dg = save_tiny_diffusion_gemma(tmp_path / "diffusiongemma-tiny")
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(dg))         # one checkpoint's folder (docs/checkpoints.md)
    toasts = []
    monkeypatch.setattr(gr, "Warning", lambda message, *args, **kwargs: toasts.append(message))
    session = Session()
    for _, folder in reversed(bundled_models()):          # the model box's choices: each bundled model's folder
        statuses = as_the_page_does(session, folder)
        assert f"now decodes with `{Path(folder).name}`" in statuses[0] and session.model == folder
    assert "now decodes with `sure-gsm-dllm`" in as_the_page_does(session, "sure-gsm-dllm")[0]
    assert decode(PROMPT, model="sure-gsm-dllm", k=2, max_new_tokens=32)["model"] == "sure-gsm-dllm"
    assert toasts == []
    # The allowed folder is accepted: its panel takes it, and nothing is refused on the way.
    fresh = Session()
    statuses = as_the_page_does(fresh, str(dg))
    assert "is a DiffusionGemma checkpoint" in statuses[0] and fresh.canvas_model == str(dg) and toasts == []
    assert "diffusiongemma-tiny" in denoise.folder_line(fresh) and MODELS.key(fresh.model) == MODELS.key(DEFAULT_MODEL)
    # A folder outside it is refused, with one toast: the box shown again picks the model the session kept.
    statuses = as_the_page_does(fresh, str(tmp_path))
    assert "only loads models from `assets/models`" in statuses[0] and len(toasts) == 1
    assert fresh.canvas_model == str(dg) and MODELS.key(fresh.model) == MODELS.key(DEFAULT_MODEL)


# -- through the server --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def url():
    if Path(MODELS.default) != DEFAULT_MODEL:
        pytest.skip("another module moved the default model")
    yield from serve_demo()


def test_through_the_server_each_is_named_and_no_one_waits(url, hostile, capfd, caplog):
    name, says = hostile
    picker, other = Client(url, verbose=False), Client(url, verbose=False)
    mine = picker.submit(name, api_name="/pick_model")
    theirs = other.submit("sure-gsm-dllm", api_name="/pick_model")      # the same model slot, asked after
    assert "now decodes with `sure-gsm-dllm`" in plain(theirs.result(timeout=HANG_S))[1]
    assert says in html.unescape(plain(mine.result(timeout=HANG_S))[1])
    with pytest.raises(Exception) as refused:
        other.predict(prompt=PROMPT, model=name, api_name="/decode")
    assert says in str(refused.value)
    no_traceback(capfd, caplog)
