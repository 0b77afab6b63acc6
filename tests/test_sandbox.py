"""The generated-code sandbox against a hostile completion: every escape that monkeypatching
Python could not stop, each checked from outside the sandbox (files, processes, signals, the
network, the verdict)."""

import os
import signal
import socket
import subprocess
import time

import pytest

from lopa.bench import humaneval

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not humaneval.bubblewrap_available(),
                                 reason="needs bubblewrap (apt-get install bubblewrap) able to create namespaces")]


def run(program: str, timeout: float = 20):
    result = humaneval.run_program(program, timeout=timeout)
    assert result.sandbox == "bubblewrap"
    return result


def gone(marker: str) -> bool:
    """No process on this machine carries `marker` on its command line."""
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1


def test_a_right_program_passes_and_a_wrong_one_fails():
    assert run("assert 1 + 1 == 2\n").passed
    assert run("assert 1 + 1 == 3\n").status.startswith("failed: AssertionError")


@pytest.mark.parametrize("write", [
    "open({path!r}, 'w').write('x')",
    "import pathlib\npathlib.Path({path!r}).write_text('x')",
    "import posix\nfd = posix.open({path!r}, posix.O_WRONLY | posix.O_CREAT)\nposix.write(fd, b'x')",
])
def test_cannot_write_outside_its_work_directory(tmp_path, write):
    target = tmp_path / "written"
    run(write.format(path=str(target)))
    assert not target.exists()


@pytest.mark.parametrize("delete", [
    "import os\nos.unlink({path!r})",
    "import posix\nposix.unlink({path!r})",
    "import pathlib\npathlib.Path({path!r}).unlink()",
])
def test_cannot_delete_files_outside(tmp_path, delete):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    run(delete.format(path=str(victim)))
    assert victim.read_text() == "keep me"


def test_cannot_read_the_checkout_or_home(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    result = run(f"print(open({str(secret)!r}).read())\n")
    assert not result.passed and "FileNotFoundError" in result.status


def test_processes_it_starts_die_with_it():
    """fork + setsid, and _posixsubprocess through a reloaded subprocess module (both bypass the
    removed functions): nothing survives the run."""
    marker = f"lopa-escape-{os.getpid()}-{time.monotonic_ns()}"
    program = f"""
import importlib, posix, subprocess
child = posix.fork()                                  # plain fork + setsid, as a daemon would
if child == 0:
    posix.setsid()
    posix.execv("/bin/sleep", ["/bin/sleep", "60", "{marker}"])
importlib.reload(subprocess)                          # a fresh Popen: _posixsubprocess underneath
subprocess.Popen(["/bin/sleep", "60", "{marker}"], start_new_session=True)
"""
    run(program, timeout=5)
    time.sleep(0.5)
    assert gone(marker)


def test_cannot_signal_processes_outside():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        run(f"import posix, signal\nposix.kill({sleeper.pid}, signal.SIGKILL)\nposix.kill({os.getpid()}, signal.SIGKILL)\n")
        assert sleeper.poll() is None                    # still alive, and so is this test process
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()


def test_no_network_even_to_this_machine():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = run(f"import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n")
    assert not result.passed


@pytest.mark.parametrize("fake", [
    # read the program (and everything else it can see) for a success marker and print it all
    "import glob\nfor f in glob.glob('/sandbox/*') + glob.glob('/proc/self/*'):\n    try:\n        print(open(f).read())\n"
    "    except Exception:\n        pass\nimport os\nos._exit(0)\n",
    "import sys\nprint('passed')\nsys.exit(0)\n",
    "import os\nos._exit(0)\n",
])
def test_cannot_fake_a_pass(fake):
    program = humaneval.build_program({"prompt": "def f():\n", "test": "def check(c):\n    assert c() == 1\n",
                                       "entry_point": "f"}, "    return 0\n" + fake, chat=False)
    result = run(fake + "\n" + program)
    assert not result.passed, result.status


def test_a_runaway_loop_is_killed_at_the_timeout():
    start = time.monotonic()
    assert run("while True:\n    pass\n", timeout=2).status == "timed out"
    assert time.monotonic() - start < 15


def test_fallback_is_labelled(monkeypatch):
    monkeypatch.setattr(humaneval, "bubblewrap_available", lambda: False)
    result = humaneval.run_program("assert True\n", timeout=20)
    assert result.passed and result.sandbox.startswith("fallback")
