"""Evaluation through lm-eval and EvalPlus (lopa/eval), the authors' TPF, and `lopa reproduce`:
all offline (the network is cut for the harness tests), on the bundled model or a tiny random one."""

import json

import pytest
from tiny import save_tiny_model_dir

from lopa.cli import main
from lopa.trace import RoundRecord, RunResult, authors_tpf, metrics

pytest.importorskip("lm_eval")
pytest.importorskip("evalplus")
needs_bwrap = pytest.mark.usefixtures("bubblewrap")   # EvalPlus grading runs only inside bubblewrap: skips where it is
                                                  # not installed, fails where it cannot start

# Two HumanEval+-format problems, written here (no download): EvalPlus compares a solution's outputs
# on base_input / plus_input with the canonical solution's.
PROBLEMS = [
    {"task_id": "HumanEval/0", "prompt": 'def add(a, b):\n    """Sum of a and b."""\n', "entry_point": "add",
     "canonical_solution": "    return a + b\n", "base_input": [[1, 2], [3, 4]], "plus_input": [[-1, 1], [10, 7]],
     "atol": 0, "contract": ""},
    {"task_id": "HumanEval/1", "prompt": 'def double(x):\n    """Twice x."""\n', "entry_point": "double",
     "canonical_solution": "    return 2 * x\n", "base_input": [[1], [5]], "plus_input": [[0], [-3]],
     "atol": 0, "contract": ""},
]



def _record(r, kind):
    return RoundRecord(round=r, kind=kind, window_start=0, anchor_positions=[], anchor_tokens=[],
                       lookahead_positions=[], lookahead_tokens=[], branch_tokens=[[]], branch_positions=[[]],
                       branch_max_prob=[[]], branch_conf=[[]], branch_argmax=[[]], branch_scores=[0.0],
                       branch_rank=[0], winner=0, block_states=["cached"], committed=1, n_cached_blocks=0,
                       forward_seconds=0.0, round_seconds=0.0)


def test_the_authors_tpf_on_a_hand_made_trace():
    """Two blocks of 4 appended (8 positions); EOS (id 1) at position 4, then EOS padding; three
    forwards and a final round without one. Ours: 5 useful tokens / 3 forwards. The authors':
    8 appended positions / (3 + 1) steps (their loop counts the round that finds nothing to do)."""
    records = [_record(0, "prefill"), _record(1, "round"), _record(2, "round"), _record(3, "final")]
    run = RunResult(prompt="", prompt_ids=[5], settings={}, spec={"mask_token_id": 0, "eos_token_ids": [1]},
                    records=records, tokens=[7, 8, 9, 6, 1, 1, 1, 1])
    m = metrics(run)
    assert m["forwards"] == 3 and m["tokens_useful"] == 5 and m["tokens_paper"] == 8
    assert m["tpf_useful"] == pytest.approx(5 / 3)
    assert m["tpf_authors"] == pytest.approx(8 / 4)
    # over several decodes: summed positions over summed steps (their generate_until), one +1 each
    assert authors_tpf(8 + 16, 3 + 5, runs=2) == pytest.approx(24 / 10)
    assert metrics(None)["tpf_authors"] == 0.0


def test_lm_eval_runs_gsm8k_on_a_local_five_problem_subset_offline(tmp_path, offline):
    from lopa import DecodeSettings
    from lopa.eval.lmeval import run_lm_eval
    from lopa.models import load
    from lopa.tasks import TASKS
    from lopa.tasks.sources import GSM8K_DIR
    data = tmp_path / "gsm8k"
    data.mkdir()
    (data / "train.jsonl").write_text((GSM8K_DIR / "train.jsonl").read_text())
    (data / "test.jsonl").write_text("".join((GSM8K_DIR / "test.jsonl").read_text().splitlines(True)[:5]))
    loaded = load()
    summary = run_lm_eval(loaded, DecodeSettings(k=2, max_new_tokens=64), TASKS["gsm8k"], 4, tmp_path / "out", data=data)
    assert summary["n"] == 5 and 0.0 <= summary["score"] <= 100.0
    assert summary["tpf_authors"] > 0 and summary["tpf_useful"] > 0
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples_lopa_gsm8k.jsonl").read_text().splitlines()]
    assert {s["doc_id"] for s in samples} == set(range(5))
    # lm-eval's own 4-shot prompt went to the engine, and the completion is saved for re-grading
    assert all(s["arguments"][0][0].count("Question:") == 5 for s in samples)
    runs = [json.loads(line) for line in (tmp_path / "out" / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 5 and all("completion" in r and r["forwards"] > 0 for r in runs)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["n"] == 5


@needs_bwrap
def test_evalplus_grades_one_passing_and_one_failing_completion_in_the_sandbox(tmp_path, offline):
    from lopa.eval.codegen import solution_from
    from lopa.tasks import TASKS
    from lopa.tasks.evalplus import evaluate
    from lopa.tasks.results import write_jsonl
    samples = write_jsonl(tmp_path / "samples.jsonl", [
        {"task_id": "HumanEval/0", "solution": solution_from(PROBLEMS[0], "    return a + b\n", "completion")},
        {"task_id": "HumanEval/1", "solution": solution_from(PROBLEMS[1], "    return x + 3\n", "completion")}])
    graded = evaluate(TASKS["humaneval+"], samples, PROBLEMS)
    assert graded["per_task"] == {"HumanEval/0": {"base": "pass", "plus": "pass"},
                                  "HumanEval/1": {"base": "fail", "plus": "fail"}}
    assert graded["base"] == graded["plus"] == 50.0 and graded["sandbox"] == "bubblewrap"
    assert (tmp_path / "samples_eval_results.json").is_file()        # EvalPlus's own result file, kept


def test_prompts_follow_the_authors_scripts():
    from lopa.eval.codegen import prompt_text, solution_from
    chat = prompt_text(PROBLEMS[0], "diffucoder")
    assert chat.startswith("<|im_start|>system\nYou are an intelligent programming assistant")
    assert chat.endswith("<|im_start|>assistant\n```python\n") and "```python\ndef add(a, b):" in chat
    assert solution_from(PROBLEMS[0], "def add(a, b):\n    return a + b\n```\nmore", "diffucoder") == \
        "def add(a, b):\n    return a + b\n"
    assert prompt_text(PROBLEMS[0], "completion", bos="<s>") == "<s>" + PROBLEMS[0]["prompt"]


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_reproduce_runs_table_1_end_to_end_on_a_tiny_random_checkpoint(tmp_path, capsys, offline):
    model = save_tiny_model_dir(tmp_path / "tiny")
    problems = tmp_path / "humaneval.jsonl"            # HumanEval format: Table 1 runs the problems' own tests
    tests = {"add": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
             "double": "def check(candidate):\n    assert candidate(5) == 10\n"}
    problems.write_text("".join(json.dumps({**p, "test": tests[p["entry_point"]]}) + "\n" for p in PROBLEMS))
    mbpp = tmp_path / "mbpp" / "test.jsonl"
    mbpp.parent.mkdir()
    mbpp.write_text("".join(json.dumps({"task_id": 11 + i, "text": f"Write a function {p['entry_point']}.",
                                        "code": "", "test_list": [f"assert {p['entry_point']} is not None"] * 3,
                                        "test_setup_code": "", "challenge_test_list": []}) + "\n"
                            for i, p in enumerate(PROBLEMS)))
    code = main(["reproduce", "--table", "1", "--model", str(model), "--limit", "2", "--max-new-tokens", "32",
                 "--tasks", "gsm8k,humaneval,math,mbpp", "--rows", "vanilla,lopa", "--humaneval", str(problems),
                 "--mbpp-data", str(mbpp.parent), "--out", str(tmp_path / "out"), "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    assert "GSM8K 4-shot" in out and "HumanEval 0-shot" in out and "MBPP 3-shot" in out and "72.6" in out
    assert "n/a, Math 4-shot: no local MATH copy" in out and "54.8" in out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["algo"] for r in results["rows"]] == ["Vanilla", "LoPA"] and not results["d2f"]
    for row in results["rows"]:
        assert row["ours"]["gsm8k"]["n"] == 2 and row["ours"]["humaneval"]["n"] == 2 and row["ours"]["mbpp"]["n"] == 2
        assert row["ours"]["humaneval"]["sandbox"] == "bubblewrap"
    assert (tmp_path / "out" / "Dream-lopa-humaneval" / "samples.jsonl").is_file()
    assert (tmp_path / "out" / "Dream-lopa-humaneval" / "graded.jsonl").is_file()
    assert (tmp_path / "out" / "Dream-lopa-mbpp" / "graded_lopa_mbpp.jsonl").is_file()


def test_reproduce_refuses_the_system_tables_before_loading_a_model(capsys):
    assert main(["reproduce", "--table", "3", "--model", "/nonexistent"]) == 2
    assert "8 H200" in capsys.readouterr().err


@needs_bwrap
def test_the_evalplus_tasks_grade_one_reply_through_evalplus(tmp_path, offline):
    """HumanEval+'s Task grades a reply (the body after the prompt) by EvalPlus's evaluator: correct where it
    passes the base and the extra inputs."""
    from lopa.tasks import TASKS
    grade = TASKS["humaneval+"].grade
    assert grade(None, PROBLEMS[0], "    return a + b\n") == {"correct": 1, "predicted": "pass/pass", "expected": "pass/pass"}
    assert grade(None, PROBLEMS[1], "    return x + 3\n")["correct"] == 0
