"""The command line against bad input: each case ends in one `error:` line and exit status 2
(130 for Ctrl-C), checked before any work where it can be, and never a traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(180)
PROMPT = "Tom has 23 apples. He gives 7 to Ann. How many apples does Tom have now?"


def lopa(*args, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "lopa", *args], capture_output=True, env=env, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def a_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "a_file"
    path.write_text("not a folder")
    return path


CASES = {
    "undecodable prompt bytes": (["--prompt", b"Tom \xff\xfe has 3 apples"], "not valid UTF-8"),
    "unknown device": (["--prompt", PROMPT, "--device", "bogus"], "unknown device 'bogus'; available here: cpu"),
    "absent device": (["--prompt", PROMPT, "--device", "cuda"], "device 'cuda' is not available here"),
    "non-finite timeout": (["--prompt", PROMPT, "--backend", "bp", "--bp-timeout", "nan"], "--bp-timeout must be"),
    "infinite timeout": (["--prompt", PROMPT, "--backend", "bp", "--bp-timeout", "inf"], "--bp-timeout must be"),
    "trace under a file": (["--prompt", PROMPT, "--trace", "{a_file}/run.json"], "is not a folder"),
    "trace where nothing can be created": (["--prompt", PROMPT, "--trace", "/proc/run.json"], "cannot write there"),
    "trace of an unknown kind": (["--prompt", PROMPT, "--trace", "run.txt"], "must end in .json or .parquet"),
    "no such model": (["--prompt", PROMPT, "--model", "/no/such/model"], "no model at /no/such/model"),
    "empty prompt": (["--prompt", "   "], "the prompt is empty"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2(case, a_file, tmp_path):
    args, message = CASES[case]
    args = [a.replace("{a_file}", str(a_file)) if isinstance(a, str) else a for a in args]
    done = lopa("generate", *args, cwd=tmp_path)
    err = done.stderr.decode("utf-8", "replace").strip().splitlines()
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert not any("Traceback" in line for line in err)
    assert not list(tmp_path.glob("*.json"))                       # nothing half-written


def test_ctrl_c_exits_130_without_a_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    # One block of 448 positions filled one token per forward: hundreds of forwards, so the decode is
    # still running when Ctrl-C comes (a 32-token block ended at its EOS before it on an idle machine).
    proc = subprocess.Popen([sys.executable, "-m", "lopa", "generate", "--prompt", PROMPT, "--decoder", "one_token",
                             "--executor", "uncached", "--max-new-tokens", "448", "--block-size", "448"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
                            # a suite started in the background (`.ci/run &`) inherits SIGINT ignored, and
                            # Python then never raises KeyboardInterrupt: give the child the default back
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err, deadline = b"", time.monotonic() + 60
    while b"Loading weights: 100%" not in err and time.monotonic() < deadline and proc.poll() is None:
        err += os.read(proc.stderr.fileno(), 4096)          # until the model is loaded and decoding starts
    time.sleep(1)
    assert proc.poll() is None, "the decode finished before Ctrl-C could interrupt it"
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    err += rest
    assert proc.returncode == 130 and b"interrupted" in err and b"Traceback" not in err, err[-2000:]


def test_a_stalled_decode_ends_in_one_line(tmp_path, capsys, monkeypatch):
    """mask_argmax='authors' on a model whose argmax is the mask token everywhere: the authors' loop
    would spin for good; the engine stops after a bounded number of rounds and the CLI says why."""
    import lopa.engine as engine
    from lopa.cli import main

    def stalled(self, *args, **kwargs):
        raise engine.DecodeStalled("decoding made no progress after 9 rounds: use mask_argmax='next_best'")
        yield
    monkeypatch.setattr(engine.Decoder, "_rounds", stalled)
    assert main(["generate", "--prompt", "Tom has 3 apples.", "--mask-argmax", "authors"]) == 2
    err = capsys.readouterr().err
    assert "made no progress" in err and "Traceback" not in err
