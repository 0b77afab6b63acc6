"""The generated-code sandbox under bubblewrap against a hostile completion: every escape that
monkeypatching Python could not stop, each checked from outside the sandbox (files, processes,
signals, the network, the verdict, how much it can write). Skipped only where bubblewrap is not
installed; installed but unable to start is a failure with bwrap's reason (conftest.bubblewrap).
The issue's battery for both the bubblewrap and the fallback modes is tests/test_sandbox_battery.py."""

import os
import signal
import socket
import subprocess
import time

import pytest

from lopa.tasks import humaneval, sandbox
from lopa.tasks.sandbox import Program

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("bubblewrap")]
ADD_TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n\ncheck(add)\n"


def run(program: str, timeout: float = 20):
    result = sandbox.run_program(program, timeout=timeout)
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


# -- the verdict: only the tests, in a process the candidate cannot reach, can give a pass ---------
FORGERIES = {
    # any bytes in a calling frame's globals (where a verdict token would be), written to every
    # open descriptor, then an exit that skips everything after
    "frame read, pipe write, _exit": """
import posix, sys
found, frame = [b"passed"], sys._getframe()
while frame is not None:
    found += [value for value in frame.f_globals.values() if isinstance(value, bytes)]
    frame = frame.f_back
for fd in range(3, 256):
    try:
        posix.write(fd, found[-1])
    except OSError:
        pass
posix._exit(0)
""",
    # the protocol itself: "my code ran to its end", a made-up verdict, then gone
    "forged ready and verdict": """
import json, os, posix, struct
for message in ({"ready": True}, {"value": True}, "passed"):
    data = json.dumps(message).encode()
    for fd in range(3, 256):
        try:
            posix.write(fd, struct.pack(">Q", len(data)) + data)
            posix.write(fd, b"passed")
        except OSError:
            pass
posix._exit(0)
""",
    # everything in its own memory that looks like a token, to every descriptor, then a clean exit
    "memory scan": """
import gc, posix
for obj in gc.get_objects():
    for value in (obj.values() if isinstance(obj, dict) else ()):
        if isinstance(value, (bytes, str)) and 16 <= len(value) <= 64:
            for fd in range(3, 64):
                try:
                    posix.write(fd, value if isinstance(value, bytes) else value.encode())
                except OSError:
                    pass
import sys
sys.exit(0)
""",
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_the_candidate_cannot_forge_the_verdict(forgery):
    """The issue's battery: a program that never defines `add` and never lets a test run."""
    result = run(Program(FORGERIES[forgery], ADD_TEST))
    assert not result.passed and result.status.startswith("failed"), result.status


def test_the_candidate_cannot_see_the_test_process_or_read_the_test():
    """The candidate looks for the test's process and text everywhere it can read; the tests then
    ask it what it found (any sighting fails the run)."""
    candidate = """
import os, sys
seen = []
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        seen.append(open(f'/proc/{pid}/cmdline', 'rb').read())
    except OSError:
        pass
sightings = [c for c in seen if b' test ' in c.replace(b'\\0', b' ')]
leaked = False
for top in ('/sandbox', '/tmp'):
    for folder, subfolders, files in os.walk(top):
        if folder.startswith(sys.prefix):     # the interpreter, bound in read-only (a venv may live under /tmp)
            subfolders.clear()
            continue
        for name in files:
            try:                              # the marker not spelled out: this file is read too
                leaked |= 'MARKER-' + '7f3a' in open(os.path.join(folder, name), errors='replace').read()
            except OSError:
                pass
"""
    test = "# MARKER-7f3a: only the test process has this text\nassert sightings == [] and not leaked\n"
    assert run(Program(candidate, test)).passed


def test_values_cross_as_data_and_objects_stay_with_the_candidate():
    """What a HumanEval or MBPP test needs of the candidate: plain values (copied), its own objects
    (classes, generators, modules it imported) used through requests, its exceptions by type."""
    candidate = """
import math
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b
def longest(pairs):
    return max(p.b - p.a for p in pairs)
def evens(n):
    yield from range(0, n, 2)
def shape(x):
    return {"t": (1, 2.5, None), "s": {3}, "b": b"\\x00", "c": 1j, "n": float("inf")}
def fail(x):
    raise ValueError(x)
def mutate(xs):
    xs.append(1)
    return len(xs)
"""
    test = """
assert longest([Pair(1, 5), Pair(2, 3)]) == 4
assert list(evens(7)) == [0, 2, 4, 6]
assert shape(0) == {"t": (1, 2.5, None), "s": {3}, "b": b"\\x00", "c": 1j, "n": float("inf")}
assert math.isclose(math.sqrt(2) ** 2, 2)
try:
    fail("x")
    raise AssertionError("no exception")
except ValueError as error:
    assert str(error) == "x"
xs = []
assert mutate(xs) == 1 and xs == []
"""
    result = run(Program(candidate, test))
    assert result.passed, result.status


def test_a_function_of_the_tests_cannot_be_passed_to_the_candidate():
    result = run(Program("def apply(f, x):\n    return f(x)\n", "assert apply(lambda v: v + 1, 1) == 2\n"))
    assert result.status.startswith("failed: TypeError") and "cannot be passed" in result.status


def test_an_exception_the_tests_catch_broadly_does_not_hide_a_vanished_candidate():
    candidate = "import posix\ndef add(a, b):\n    posix._exit(0)\n"
    test = "try:\n    add(1, 2)\nexcept Exception:\n    pass\n"
    assert run(Program(candidate, test)).status.startswith("failed: CandidateGone")


# -- writes: one bounded tmpfs, everything else read-only ------------------------------------------
@pytest.mark.parametrize("folder", ["/tmp", "/sandbox", "."])
def test_filling_the_disk_or_memory_stops_at_the_write_limit(folder):
    """The issue's case: 64 files of 15 MB, each under the file-size and memory limits."""
    start = time.monotonic()
    program = f"for i in range(64):\n    open(f'{folder}/fill{{i}}', 'wb').write(b'0' * (15 << 20))\n"
    result = run(Program(program, "pass\n"), timeout=30)
    assert not result.passed
    assert result.status.startswith("failed: wrote past the sandbox's write limit (64 MiB, 4,096 files)"), result.status
    assert time.monotonic() - start < 25


def test_nothing_else_is_writable_and_the_work_directory_is_bounded():
    candidate = f"""
import os
writable = []
for folder in ("/", "/dev", "/usr", "/etc", "/proc", "{os.path.dirname(sandbox.__file__)}"):
    try:
        open(os.path.join(folder, "probe"), "w").close()
        writable.append(folder)
    except OSError:
        pass
sizes = [os.statvfs(f).f_blocks * os.statvfs(f).f_frsize for f in ("/sandbox", "/tmp", "/dev/shm")]
inodes = [os.statvfs(f).f_files for f in ("/sandbox", "/dev/shm")]
same = os.stat("/tmp").st_dev == os.stat("/sandbox").st_dev
"""
    test = (f"assert writable == [], writable\nassert same and sizes[0] <= {sandbox.WRITE_LIMIT_BYTES}, sizes\n"
            f"assert sizes[2] <= {sandbox.SHM_LIMIT_BYTES}, sizes\n"
            f"assert inodes[0] <= {sandbox.FILE_COUNT_LIMIT} and inodes[1] <= {sandbox.SHM_FILE_COUNT_LIMIT}, inodes\n")
    result = run(Program(candidate, test))
    assert result.passed, result.status


def test_a_full_tmpfs_names_the_limit_it_ran_into():
    """A write past /dev/shm names its 1 MiB, not the work directory's 64 MiB; a failed write() names
    no file, so its message names both."""
    shm = sandbox._explain("failed: OSError: [Errno 28] No space left on device: '/dev/shm/x'", True)
    assert shm.startswith(f"failed: wrote past the sandbox's /dev/shm limit ({sandbox.SHM_LIMIT_BYTES >> 20} MiB")
    either = sandbox._explain("failed: OSError: [Errno 28] No space left on device", True)
    assert "write limit (64 MiB" in either and f"/dev/shm limit ({sandbox.SHM_LIMIT_BYTES >> 20} MiB" in either
