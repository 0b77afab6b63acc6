"""The lm-eval columns on the data layouts users actually have, offline: MBPP 3-shot (generation through
lm-eval, grading as code_eval does but in the sandbox), MATH from `DIR/<subject>/{train,test}.jsonl`
and from a snapshot of the hub dataset, and Table 1's HumanEval graded with its own tests.
Every data file here is hand-made in the test, in the layout the real one has."""

import json
from types import SimpleNamespace

import pytest

from lopa.tasks import TASKS

pytest.importorskip("lm_eval")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
needs_bwrap = pytest.mark.usefixtures("bubblewrap")   # generated code runs only inside bubblewrap: skips where it is
                                                  # not installed, fails where it cannot start

# Three MBPP test-split rows (config "full": task_id, text, code, test_list, test_setup_code,
# challenge_test_list). The canned replies below pass, fail, and pass with a `__main__` block that
# would fail the run if it ran (it does not under exec(program, {}), which code_eval uses).
MBPP_ROWS = [
    {"task_id": 11, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
     "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 12, "text": "Write a function to double a number.", "code": "def double(x):\n    return 2 * x",
     "test_list": ["assert double(1) == 2", "assert double(5) == 10", "assert double(0) == 0"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 13, "text": "Write a function to triple a number.", "code": "def triple(x):\n    return 3 * x",
     "test_list": ["assert triple(1) == 3", "assert triple(2) == 6", "assert triple(0) == 0"],
     "test_setup_code": "", "challenge_test_list": []},
]
CANNED = {"add two numbers": "def add(a, b):\n    return a + b\n[DONE] trailing text the stop string cuts",
          "double a number": "def double(x):\n    return x + 3\n[DONE]",
          "triple a number": "def triple(x):\n    return 3 * x\n\nif __name__ == '__main__':\n    raise SystemExit(1)\n[DONE]"}



class _CharTokenizer:
    """One id per character, and a visible chat template, so the test can read back what lm-eval built."""
    bos_token = None
    chat_template = "<role>{content}</role>"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, continue_final_message=False):
        text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


class _CannedDecoder:
    """Stands in for the engine: answers each prompt with the canned reply for the problem it ends with."""

    def __init__(self, prompts):
        self.prompts = prompts

    def run(self, ids):
        prompt = "".join(map(chr, ids.tolist()))
        self.prompts.append(prompt)
        question = prompt[prompt.rindex("here is your task:"):]
        text = next(reply for key, reply in CANNED.items() if key in question)
        metrics = {"forwards": 4, "tokens_useful": 10, "tokens_paper": 16, "latency_s": 0.0}
        return SimpleNamespace(text=text, metrics=lambda: metrics)


def _canned_model(prompts):
    return SimpleNamespace(tokenizer=_CharTokenizer(), spec=SimpleNamespace(max_context=10**6, name="canned"),
                           decoder=lambda settings: _CannedDecoder(prompts))


def _write_parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@needs_bwrap
def test_mbpp_three_shot_from_a_hub_snapshot_graded_in_the_sandbox(tmp_path, offline):
    """lm-eval's own mbpp prompt, 3 few-shot examples as chat turns, the reply cut at [DONE], then one
    pass/fail per problem from the sandbox: pass, fail, pass (the __main__ block does not run)."""
    from lopa import DecodeSettings
    from lopa.eval.code_eval import grade_lm_eval_samples
    from lopa.eval.lmeval import run_lm_eval
    snapshot = tmp_path / "mbpp"            # google-research-datasets/mbpp as `hf download` lays it out
    _write_parquet(snapshot / "full" / "test-00000-of-00001.parquet", MBPP_ROWS)
    _write_parquet(snapshot / "full" / "prompt-00000-of-00001.parquet", MBPP_ROWS[:1])
    prompts = []
    summary = run_lm_eval(_canned_model(prompts), DecodeSettings(max_new_tokens=64), TASKS["mbpp"], 3, tmp_path / "out",
                          chat=True, data=snapshot)
    assert summary["n"] == 3 and summary["score"] == pytest.approx(200 / 3) and summary["sandbox"] == "bubblewrap"
    graded = {json.loads(line)["task_id"]: json.loads(line) for line in
              (tmp_path / "out" / "graded_lopa_mbpp.jsonl").read_text().splitlines()}
    assert {k: v["passed"] for k, v in graded.items()} == {"11": True, "12": False, "13": True}
    assert "AssertionError" in graded["12"]["status"] or graded["12"]["status"].startswith("failed")
    # the authors' flags: few-shot as multi-turn chat, each shot an assistant turn ending in [DONE]
    assert len(prompts) == 3 and all(p.count("<assistant>") == 4 and p.count("[DONE]</assistant>") == 3
                                     for p in prompts)
    assert "You are an expert Python programmer, and here is your task: Write a function to add two numbers." \
        in prompts[0] and "assert add(1, 2) == 3\nassert add(0, 0) == 0" in prompts[0]
    # the saved sample log re-grades to the same verdicts
    again = grade_lm_eval_samples(tmp_path / "out" / "samples_lopa_mbpp.jsonl", tmp_path / "regraded.jsonl")
    assert again["per_task"] == {k: v["status"] for k, v in graded.items()}


@needs_bwrap
def test_mbpp_on_the_bundled_model_from_a_jsonl_copy(tmp_path, offline):
    from lopa import DecodeSettings
    from lopa.eval.lmeval import run_lm_eval
    from lopa.models import load
    _write_jsonl(tmp_path / "mbpp" / "test.jsonl", MBPP_ROWS[:2])
    summary = run_lm_eval(load(), DecodeSettings(k=2, max_new_tokens=32), TASKS["mbpp"], 3, tmp_path / "out",
                          data=tmp_path / "mbpp")
    assert summary["n"] == 2 and 0.0 <= summary["score"] <= 100.0 and summary["tpf_authors"] > 0
    samples = (tmp_path / "out" / "samples_lopa_mbpp.jsonl").read_text().splitlines()
    assert len(samples) == 2 and len((tmp_path / "out" / "graded_lopa_mbpp.jsonl").read_text().splitlines()) == 2


def test_without_bubblewrap_mbpp_refuses_before_decoding(tmp_path, monkeypatch):
    from lopa import DecodeSettings
    from lopa.eval import code_eval
    from lopa.eval.lmeval import run_lm_eval
    monkeypatch.setattr(code_eval, "bubblewrap_available", lambda: False)
    _write_jsonl(tmp_path / "mbpp" / "test.jsonl", MBPP_ROWS)
    prompts = []
    with pytest.raises(RuntimeError, match="only inside bubblewrap"):
        run_lm_eval(_canned_model(prompts), DecodeSettings(), TASKS["mbpp"], 3, tmp_path / "out", data=tmp_path / "mbpp")
    assert prompts == []
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        code_eval.grade_programs({"x": "pass"}, tmp_path / "graded.jsonl")


def test_mbpp_task_keeps_lm_evals_prompt_and_shots_and_drops_its_metric(tmp_path):
    from lopa.eval.tasks import fewshot_samples, read_task_yaml, task_configs
    _write_jsonl(tmp_path / "test.jsonl", MBPP_ROWS)
    config = task_configs(TASKS["mbpp"], tmp_path)["lopa_mbpp"]
    upstream = read_task_yaml("mbpp/mbpp.yaml")
    assert config["doc_to_text"] == upstream["doc_to_text"] and config["generation_kwargs"]["until"] == ["[DONE]"]
    assert [s["task_id"] for s in config["fewshot_config"]["samples"]] == [2, 3, 4] == \
        [s["task_id"] for s in fewshot_samples("mbpp/mbpp.yaml")]
    assert config["metric_list"] == [{"metric": "bypass", "aggregation": "bypass", "higher_is_better": True}]
    assert "unsafe_code" not in config and config["dataset_kwargs"]["data_files"]["test"] == [str(tmp_path / "test.jsonl")]
    with pytest.raises(FileNotFoundError, match="full/test-"):
        task_configs(TASKS["mbpp"], tmp_path / "empty")


# MATH: one problem per subject and split, with a \boxed answer as the dataset's solutions have.
def _math_rows(subject, split):
    return [{"problem": f"What is $1 + {i}$? ({subject})", "level": "Level 1", "type": subject.title(),
             "solution": f"$1 + {i} = \\boxed{{{1 + i}}}$."} for i in range(2 if split == "train" else 1)]


@pytest.mark.parametrize("layout", ["jsonl", "hub"])
def test_math_runs_through_lm_eval_on_both_local_layouts(tmp_path, offline, layout):
    """DIR/<subject>/{train,test}.jsonl and the hub snapshot of EleutherAI/hendrycks_math
    (<config>/{train,test}-00000-of-00001.parquet, configs named counting_and_probability, ...):
    all seven minerva_math subjects, 4-shot, the bundled model, no network."""
    from lopa import DecodeSettings
    from lopa.eval.lmeval import run_lm_eval
    from lopa.eval.tasks import read_task_yaml
    from lopa.models import load
    from lopa.tasks.hendrycks_math import SUBJECTS as MATH_SUBJECTS
    data = tmp_path / "math"
    for subject in MATH_SUBJECTS:
        config = read_task_yaml(f"minerva_math/minerva_math_{subject}.yaml")["dataset_name"]
        for split in ("train", "test"):
            if layout == "hub":
                _write_parquet(data / config / f"{split}-00000-of-00001.parquet", _math_rows(config, split))
            else:
                _write_jsonl(data / subject / f"{split}.jsonl", _math_rows(config, split))
    summary = run_lm_eval(load(), DecodeSettings(k=2, max_new_tokens=32), TASKS["math"], 4, tmp_path / "out", data=data)
    assert summary["n"] == 7 and 0.0 <= summary["score"] <= 100.0
    for subject in MATH_SUBJECTS:
        rows = [json.loads(line) for line in
                (tmp_path / "out" / f"samples_lopa_minerva_math_{subject}.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and f"({read_task_yaml(f'minerva_math/minerva_math_{subject}.yaml')['dataset_name']})" \
            in rows[0]["doc"]["problem"]
        assert rows[0]["target"] == "1"                       # minerva's answer, cut from \boxed{1}
        assert rows[0]["arguments"][0][0].count("Problem:") == 5    # lm-eval's 4 shots, then the problem


def test_math_names_the_missing_subject(tmp_path):
    from lopa.eval.tasks import task_configs
    _write_jsonl(tmp_path / "algebra" / "train.jsonl", _math_rows("algebra", "train"))
    _write_jsonl(tmp_path / "algebra" / "test.jsonl", _math_rows("algebra", "test"))
    with pytest.raises(FileNotFoundError, match="counting_and_probability"):
        task_configs(TASKS["math"], tmp_path)


HUMANEVAL = [
    {"task_id": "HumanEval/0", "prompt": 'def add(a, b):\n    """Sum of a and b."""\n', "entry_point": "add",
     "canonical_solution": "    return a + b\n", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"},
    {"task_id": "HumanEval/1", "prompt": 'def double(x):\n    """Twice x."""\n', "entry_point": "double",
     "canonical_solution": "    return 2 * x\n", "test": "def check(candidate):\n    assert candidate(5) == 10\n"},
]


@needs_bwrap
def test_table_1_humaneval_runs_its_own_tests_as_code_eval_does(tmp_path):
    """prompt + the whole reply + HumanEval's `test` + check(entry_point), 3 s, sandboxed. The reply is
    not cut at lm-eval's stop strings (the authors' escape_until=true), so a trailing `__main__`
    block is part of the program, and does not run, as under code_eval's exec."""
    from lopa.eval.code_eval import grade_programs, humaneval_program
    replies = {"HumanEval/0": "    return a + b\n\nif __name__ == '__main__':\n    print(add(input(), 1))\n",
               "HumanEval/1": "    return x + 3\n"}
    program = humaneval_program(HUMANEVAL[0], replies["HumanEval/0"])
    assert program.endswith("print(add(input(), 1))\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n\ncheck(add)")
    graded = grade_programs({p["task_id"]: humaneval_program(p, replies[p["task_id"]]) for p in HUMANEVAL},
                            tmp_path / "graded.jsonl")
    assert graded["per_task"]["HumanEval/0"] == "passed" and graded["per_task"]["HumanEval/1"].startswith("failed")
    assert graded["score"] == 50.0 and graded["n"] == 2


# -- the tasks eval offers are declared Tasks, and eval runs one from its declaration -------------
def test_each_task_eval_offers_is_a_declared_task():
    """Every column of the tables `lopa reproduce` runs names a Task in lopa.tasks.TASKS, and what runs it is
    read from the declaration: lm-eval for GSM8K, MATH and MBPP, EvalPlus for HumanEval+ and MBPP+, Table 1
    HumanEval decoded here. The declared prompts and subjects are lm-eval's own."""
    import jinja2

    from lopa.eval.paper import TABLES
    from lopa.eval.reproduce import DATA_FLAGS
    from lopa.eval.tasks import read_task_yaml
    from lopa.tasks import hendrycks_math, mbpp
    from lopa.tasks.task import Task
    offered = {column.task for table in TABLES.values() for column in table["columns"]}
    assert offered == set(DATA_FLAGS) == {"gsm8k", "math", "mbpp", "humaneval", "humaneval+", "mbpp+"}
    assert all(isinstance(TASKS[name], Task) and TASKS[name].name == name for name in offered)
    assert {name for name in offered if TASKS[name].lm_eval} == {"gsm8k", "math", "mbpp"}
    assert {name: TASKS[name].evalplus for name in offered if TASKS[name].evalplus} == \
        {"humaneval+": "humaneval", "mbpp+": "mbpp"}
    assert {name: TASKS[name].metric for name in offered if TASKS[name].lm_eval and not TASKS[name].code} == \
        {"gsm8k": "exact_match,strict-match", "math": "exact_match,none"}
    for suffix, config in hendrycks_math.SUBJECTS.items():
        assert read_task_yaml(f"minerva_math/minerva_math_{suffix}.yaml")["dataset_name"] == config
    upstream = read_task_yaml(mbpp.LM_EVAL_YAML)
    assert mbpp.PROMPT.format(text=MBPP_ROWS[0]["text"], tests="\n".join(MBPP_ROWS[0]["test_list"])) == \
        jinja2.Template(upstream["doc_to_text"], keep_trailing_newline=True).render(**MBPP_ROWS[0])
    assert upstream["generation_kwargs"]["until"] == [mbpp.STOP]


def test_eval_runs_a_task_through_its_declaration(tmp_path, offline):
    """A Task declared here, GSM8K's grading on a two-problem copy of its own, runs through lm-eval on a tiny
    model: the configs come from the declaration's lm_eval (not the shipped GSM8K), the score from its metric,
    and the results carry its name."""
    import dataclasses

    from tiny import save_tiny_model_dir

    from lopa import DecodeSettings
    from lopa.eval.lmeval import run_lm_eval
    from lopa.models import load
    from lopa.tasks import gsm8k
    from lopa.tasks.sources import GSM8K_DIR
    folder = tmp_path / "two"
    folder.mkdir()
    (folder / "train.jsonl").write_text((GSM8K_DIR / "train.jsonl").read_text())
    (folder / "test.jsonl").write_text("".join((GSM8K_DIR / "test.jsonl").read_text().splitlines(True)[:2]))
    task = dataclasses.replace(TASKS["gsm8k"], name="two-gsm8k", lm_eval=lambda data: gsm8k.lm_eval_files(folder))
    loaded = load(str(save_tiny_model_dir(tmp_path / "tiny")), device="cpu")
    summary = run_lm_eval(loaded, DecodeSettings(k=1, block_size=8, max_new_tokens=8), task, 0, tmp_path / "out")
    assert summary["task"] == "two-gsm8k" and summary["n"] == 2 and 0.0 <= summary["score"] <= 100.0
    samples = (tmp_path / "out" / "samples_lopa_gsm8k.jsonl").read_text().splitlines()
    assert {json.loads(line)["doc_id"] for line in samples} == {0, 1}
    assert len((tmp_path / "out" / "runs.jsonl").read_text().splitlines()) == 2
    with pytest.raises(ValueError, match="lm-eval runs gsm8k, mbpp, math here, not humaneval"):
        run_lm_eval(loaded, DecodeSettings(), TASKS["humaneval"], 0, tmp_path / "none")


def test_the_mbpp_and_math_tasks_read_local_copies_and_grade_replies(tmp_path, bubblewrap):
    """MBPP from a hub snapshot (Parquet) and MATH from DIR/<subject>/test.jsonl, read by their Tasks; MBPP's
    grade runs the three asserts in the sandbox as code_eval would, MATH's is lm-eval's minerva check."""
    pytest.importorskip("sympy")
    from lopa.tasks import hendrycks_math
    _write_parquet(tmp_path / "mbpp" / "full" / "test-00000-of-00001.parquet", MBPP_ROWS)
    rows, where = TASKS["mbpp"].problems(str(tmp_path / "mbpp"), 2)
    assert [r["task_id"] for r in rows] == [11, 12] and rows[0]["test_list"] == MBPP_ROWS[0]["test_list"]
    assert where == "mbpp"
    grade = TASKS["mbpp"].grade
    assert grade(None, rows[0], CANNED["add two numbers"])["correct"] == 1          # cut at [DONE], then passes
    assert grade(None, rows[1], CANNED["double a number"])["correct"] == 0
    with pytest.raises(ValueError, match="MBPP is not shipped"):
        TASKS["mbpp"].problems("mbpp", 1)
    for config in hendrycks_math.SUBJECTS.values():
        _write_jsonl(tmp_path / "math" / config / "train.jsonl", _math_rows(config, "train"))
        _write_jsonl(tmp_path / "math" / config / "test.jsonl", _math_rows(config, "test"))
    problems, _ = TASKS["math"].problems(str(tmp_path / "math"), 3)
    assert [p["problem"] for p in problems] == ["What is $1 + 0$? (algebra)", "What is $1 + 0$? (counting_and_probability)",
                                                "What is $1 + 0$? (geometry)"]
    right = "So $1 + 0 = 1$.\nFinal Answer: The final answer is $1$. I hope it is correct.\n\nProblem: next"
    assert TASKS["math"].grade(None, problems[0], right) == {"correct": 1, "predicted": "1", "expected": "1"}
    assert TASKS["math"].grade(None, problems[0], right.replace("is $1$", "is $2$"))["correct"] == 0
