"""Broken and hostile weights files: one clear error naming the file, from the loader, the command
line (exit status 2, no traceback) and the app's model box (which keeps the model it had).
A pickled checkpoint is refused without being unpickled."""

import shutil
import struct

import pytest
import torch
from tiny import save_tiny_model_dir

from lopa.cli import main
from lopa.models import load

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class Boom:
    """Unpickling this runs code: it would create the file named in `path`."""
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def truncated(d):
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:len(data) // 2])


def garbage(d):
    (d / "model.safetensors").write_bytes(b"\x00not safetensors" * 64)


def lying_header(d):
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10 ** 12) + b"{}")


def pickled(d):
    (d / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Boom(str(d / "PWNED"))}, d / "pytorch_model.bin")


CASES = {"truncated": (truncated, "model.safetensors"), "garbage": (garbage, "model.safetensors"),
         "lying header": (lying_header, "model.safetensors"), "pickled": (pickled, "pytorch_model.bin")}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("good") / "model")


@pytest.fixture(params=list(CASES))
def broken(request, good, tmp_path):
    damage, name = CASES[request.param]
    d = tmp_path / request.param.replace(" ", "-")
    shutil.copytree(good, d)
    damage(d)
    return d, name


def test_the_loader_names_the_file_and_runs_nothing(broken):
    d, name = broken
    with pytest.raises(ValueError, match=name):
        load(d)
    assert not (d / "PWNED").exists()


def test_the_command_line_says_it_in_one_line(broken, capsys):
    d, name = broken
    assert main(["generate", "--model", str(d), "--prompt", "how many apples ?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and name in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_the_app_keeps_its_model(broken, good, monkeypatch):
    from app.panels import model as model_panel
    from app.serving.model_cache import MODELS
    monkeypatch.setenv("LOPA_MODEL_DIRS", "*")
    monkeypatch.delenv("SPACE_ID", raising=False)
    from app.serving.session import Session
    d, name = broken
    session = Session()
    model_panel.pick_model(session, str(good))
    before = session.model
    info, status, box = model_panel.pick_model(session, str(d))
    assert "Error" in status and name in status and session.model == before and MODELS.peek(good) is not None


def test_remote_code_in_a_model_folder_never_runs(good, tmp_path):
    """A folder whose config points at its own Python (auto_map) loads without running it, or
    fails clearly; the code runs only with --trust-remote-code."""
    import json
    d = tmp_path / "remote"
    shutil.copytree(good, d)
    marker = tmp_path / "RAN"
    (d / "evil_config.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n"
                                      "from transformers import Qwen2Config as EvilConfig\n")
    config = json.loads((d / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil_config.EvilConfig"}
    (d / "config.json").write_text(json.dumps(config))
    try:
        load(d)
    except ValueError as err:
        assert "remote" in str(err).lower() or "trust" in str(err).lower()
    assert not marker.exists()
