"""The task layer (lopa.tasks) on hand-made inputs: problem files, prompts, grading, the hardware
line and result files; and a study's settings resolved on the model."""

import argparse
import csv
import gzip
import json
import sys

import pandas as pd
import pytest
import torch

from lopa.settings import ModelSpec
from lopa.tasks import grading, hardware, humaneval, mbpp, prompts, results, sources

GSM = [{"question": "Tom has 3 apples. He buys 2 more. How many apples does Tom have now?",
        "answer": "Tom now has <<3+2=5>>5 apples.\n#### 5"},
       {"question": "Mia has 4 eggs. How many eggs does Mia have now?", "answer": "#### 4"}]


def write_jsonl(path, rows, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text + "\n")           # a trailing blank line is no row
    return path


# -- problems ---------------------------------------------------------------------------------------
def test_rows_read_from_jsonl_and_gzip_alike_and_missing_fields_name_the_file(tmp_path):
    plain = write_jsonl(tmp_path / "p.jsonl", GSM)
    packed = write_jsonl(tmp_path / "p.jsonl.gz", GSM, gz=True)
    assert sources.read_rows(plain, sources.GSM8K_FIELDS) == sources.read_rows(packed) == GSM
    with pytest.raises(ValueError, match=r"p\.jsonl is not HumanEval-format JSONL: rows lack entry_point, prompt, task_id, test"):
        sources.read_rows(plain, humaneval.FIELDS, "HumanEval")
    assert sources.first_row(packed) == GSM[0]
    (tmp_path / "notes.txt").write_text("not json\n")
    assert sources.first_row(tmp_path / "notes.txt") is None and sources.first_row(tmp_path / "absent") is None


def test_a_study_reads_files_prompt_lists_and_fresh_problems(tmp_path):
    data = write_jsonl(tmp_path / "p.jsonl", GSM)
    got, where = sources.load_problems(str(data), 5, 0)
    assert [(p["id"], p["answer"]) for p in got] == [(0, GSM[0]["answer"]), (1, "#### 4")] and "p.jsonl" in where
    (tmp_path / "prompts.txt").write_text("first question\n\n  second question \n")
    got, _ = sources.load_problems(str(tmp_path / "prompts.txt"), 5, 0)
    assert [(p["question"], p["answer"]) for p in got] == [("first question", None), ("second question", None)]
    fresh, where = sources.load_problems("synthetic", 3, 7)
    assert len(fresh) == 3 and "seed 7" in where
    assert fresh == sources.load_problems("synthetic", 3, 7)[0]            # a seed draws the same problems
    with pytest.raises(ValueError, match="no problems at .*nowhere.jsonl"):
        sources.load_problems(str(tmp_path / "nowhere.jsonl"), 1, 0)


def test_the_bench_takes_a_file_or_a_family_it_can_name(tmp_path):
    data = write_jsonl(tmp_path / "p.jsonl", GSM)
    assert sources.bench_problems(str(data), 1) == (GSM[:1], "p.jsonl")
    family = {"name": "synthetic-gsm", "phrasing": "adverbs"}
    drawn, where = sources.bench_problems("ignored", 2, family, seed=3)
    assert len(drawn) == 2 and where == "synthetic-gsm-adverbs-seed3"
    with pytest.raises(ValueError, match="names no problem family"):
        sources.bench_problems(str(data), 1, None, seed=3)
    with pytest.raises(FileNotFoundError, match="no problems at"):
        sources.bench_problems(str(tmp_path / "absent.jsonl"), 1)


def test_local_split_and_mbpp_layouts(tmp_path):
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("{}\n")
    assert sources.local_split_files(tmp_path) == (
        "json", {"train": [str(tmp_path / "train.jsonl")], "test": [str(tmp_path / "test.jsonl")]})
    shards = tmp_path / "hub" / "full"
    shards.mkdir(parents=True)
    (shards / "test-00000-of-00001.parquet").write_bytes(b"")
    assert sources.local_split_files(shards, splits=("train",)) is None
    assert mbpp.test_files(tmp_path / "hub") == ("parquet", [str(shards / "test-00000-of-00001.parquet")])
    assert mbpp.test_files(tmp_path / "test.jsonl") == ("json", [str(tmp_path / "test.jsonl")])
    (tmp_path / "mbpp.csv").write_text("")
    with pytest.raises(ValueError, match="must be .jsonl or .parquet, got mbpp.csv"):
        mbpp.test_files(tmp_path / "mbpp.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no MBPP test split"):
        mbpp.test_files(tmp_path / "empty")


# -- HumanEval's program text --------------------------------------------------------------------------
ADD = {"task_id": "T/0", "entry_point": "add", "prompt": "def add(a, b):\n", "test": "def check(c):\n    assert c(1, 2) == 3\n"}


def test_a_reply_becomes_candidate_and_test():
    candidate, test = humaneval.program_parts(ADD, "    return a + b\n\ndef main():\n    pass\n", chat=False)
    assert candidate == "def add(a, b):\n    return a + b\n"                   # cut at the stop sequence
    assert test == "\ndef check(c):\n    assert c(1, 2) == 3\n\n\ncheck(add)\n"
    reply = "Here.\n```python\ndef helper():\n    pass\n```\n```python\ndef add(a, b):\n    return a + b\n```"
    candidate, _ = humaneval.program_parts(ADD, reply, chat=True)
    assert candidate == "def add(a, b):\n\ndef add(a, b):\n    return a + b\n"  # the block that defines it


def test_humaneval_prompt_follows_the_model_template():
    base = ModelSpec(mask_token_id=0, eos_token_ids=(1,), logit_shift=True)
    chat = ModelSpec(mask_token_id=0, eos_token_ids=(1,), logit_shift=True, prompt_template="<u>{prompt}</u>")
    assert humaneval.prompt_text(base, ADD) == ADD["prompt"] and not humaneval.is_chat(base)
    assert humaneval.prompt_text(chat, ADD).startswith("<u>Complete the following") and humaneval.is_chat(chat)


# -- prompts ---------------------------------------------------------------------------------------
class Spaces:
    """A tokenizer that numbers whitespace-separated words in order of first sight."""

    def __init__(self):
        self.ids = {}

    def __call__(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return {"input_ids": [self.ids.setdefault(w, len(self.ids)) for w in text.split()]}


class Loaded:
    def __init__(self, template="{prompt}"):
        self.spec = ModelSpec(mask_token_id=0, eos_token_ids=(1,), logit_shift=True, prompt_template=template)
        self.tokenizer = Spaces()


def test_templates_shots_and_ids():
    loaded = Loaded()
    assert prompts.template_for(loaded.spec, "gsm8k") == prompts.GSM8K_TEMPLATE
    assert prompts.template_for(loaded.spec, "synthetic") == "{prompt}"
    assert prompts.template_for(Loaded("[{prompt}]").spec, "gsm8k") == "[{prompt}]"   # the model's own wins
    shots = prompts.few_shot_prefix(prompts.GSM8K_TEMPLATE, 2)
    assert shots.count("Question: ") == 2 and shots.endswith("\n\n") and prompts.few_shot_prefix("{prompt}", 0) == ""
    ids = prompts.prompt_ids(loaded, "  a b a ", "x {prompt} y", prefix="p ")
    assert ids.dtype == torch.long and ids.tolist() == [0, 1, 2, 3, 2, 4]          # p x a b a y
    assert torch.equal(prompts.question_ids(loaded, "a b"), prompts.encode(loaded.tokenizer, "a b"))
    with_shots = prompts.question_ids(loaded, "a b", data="gsm8k", shots=1)
    assert with_shots.numel() > prompts.question_ids(loaded, "a b", data="gsm8k").numel()


# -- grading ---------------------------------------------------------------------------------------
def test_exact_match_and_the_answer_part():
    assert grading.exact_match("so #### 1,200", "#### 1200") == (1, "1200", "1200")
    assert grading.exact_match("#### 5\n#### 6", "#### 5") == (0, "6", "5")               # the last one counts
    assert grading.exact_match("no number", "#### 5") == (0, None, "5")
    assert grading.exact_match("#### 5", None) == (None, "5", None)                          # a bare prompt
    assert grading.answer_text(" #### 5\n\nQuestion: next #### 9") == " #### 5\n\n"
    scored = grading.score_answer(GSM[0], "Tom now has <<3+2=5>>5 apples.\n#### 5", "plain")
    assert {k: scored[k] for k in ("correct", "steps", "lines", "names_right", "grammar_lines")} == \
        {"correct": 1, "steps": 1, "lines": 1, "names_right": 1, "grammar_lines": 2}


# -- the hardware line -----------------------------------------------------------------------------
def test_one_hardware_line_for_a_cpu_model():
    model = torch.nn.Linear(2, 2)
    line = hardware.hardware(model, "shared machine")
    assert "CPU" in line and "torch thread(s)" in line and line.endswith(", shared machine")
    assert hardware.hardware("cpu") == hardware.hardware(model)
    env = hardware.environment("cpu")
    assert env["device"] == hardware.hardware("cpu") and env["device_type"] == "cpu"
    assert {"python", "torch", "transformers"} <= set(env)


# -- result files ----------------------------------------------------------------------------------
def test_rows_tables_and_meta_round_trip(tmp_path):
    rows = [{"decoder": "d2f", "tpf": 1.5}, {"decoder": "lopa-k2", "tpf": 2.0}]
    path = results.write_csv(tmp_path / "deep" / "summary.csv", rows)
    assert list(csv.DictReader(path.open())) == [{"decoder": "d2f", "tpf": "1.5"}, {"decoder": "lopa-k2", "tpf": "2.0"}]
    tables = {"": pd.DataFrame(rows), "cost": pd.DataFrame({"k": [0, 1]})}
    files = results.write_results(tmp_path, "demo", tables, {"command": ["--n", "2"], "summary": {"n": 2}},
                                  program="lopa.bench")
    assert [f.name for f in files] == ["demo.csv", "demo.parquet", "demo_cost.csv", "demo_cost.parquet", "demo.json"]
    loaded, meta = results.load_results("demo", tmp_path)
    assert meta["command"] == "python -m lopa.bench demo --n 2" and meta["summary"] == {"n": 2} and "torch" in meta
    assert loaded[""].equals(tables[""]) and loaded["cost"].equals(tables["cost"])
    assert results.load_results("absent", tmp_path) is None


def test_plots_wait_on_matplotlib_and_weights_have_a_digest(tmp_path, monkeypatch):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    digest = results.weights_digest(tmp_path)
    assert len(digest) == 12 and digest == results.weights_digest(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert results.weights_digest(tmp_path) != digest
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ModuleNotFoundError
    assert results.save_plot(tmp_path / "x.png", lambda plt: pytest.fail("drew without matplotlib")) is False
    assert not (tmp_path / "x.png").exists()


# -- a study's settings: its flags over the model's own values -------------------------------------
def test_a_study_resolves_its_flags_over_the_model_s_own_values():
    from lopa.study import common
    spec = ModelSpec(mask_token_id=0, eos_token_ids=(1,), logit_shift=True, block_size=16, attention="full",
                     decode={"tau_conf": 0.8})
    parser = argparse.ArgumentParser()
    common.add_common_arguments(parser, n=2, k=0)
    base = common.base_settings(parser.parse_args([]), spec)
    assert (base.attention, base.block_size, base.tau_conf, base.k, base.max_new_tokens) == ("full", 16, 0.8, 0, 128)
    base = common.base_settings(parser.parse_args(["--attention", "block_causal", "--k", "3"]), spec)
    assert (base.attention, base.block_size, base.k) == ("block_causal", 16, 3)      # what the user set wins


# -- the Task declarations: one module per task, taken by the bench and the studies alike ------------------
def _model(family=None, template="{prompt}"):
    from types import SimpleNamespace
    return SimpleNamespace(spec=SimpleNamespace(extra={"problems": family} if family else {}, prompt_template=template))


def test_each_task_is_declared_once_and_data_names_it(tmp_path):
    from lopa.tasks import TASKS, evalplus, gsm8k, hendrycks_math, synthetic, task_for
    assert TASKS == {"synthetic": synthetic.TASK, "gsm8k": gsm8k.TASK, "humaneval": humaneval.TASK, "mbpp": mbpp.TASK,
                     "math": hendrycks_math.TASK, "humaneval+": evalplus.HUMANEVAL_PLUS, "mbpp+": evalplus.MBPP_PLUS}
    assert {name: task.name for name, task in TASKS.items()} == {name: name for name in TASKS}
    data = write_jsonl(tmp_path / "he.jsonl", [{"task_id": "T/0", "prompt": "def f():\n", "test": "", "entry_point": "f"}])
    picks = {d: task_for(d).name for d in ("synthetic", "heldout", "gsm8k", "humaneval", str(data),
                                           str(write_jsonl(tmp_path / "g.jsonl", GSM)))}
    assert picks == {"synthetic": "synthetic", "heldout": "synthetic", "gsm8k": "gsm8k", "humaneval": "humaneval",
                     str(data): "humaneval", str(tmp_path / "g.jsonl"): "synthetic"}
    assert [t.code for t in TASKS.values()] == [False, False, True, True, False, True, True]
    assert task_for("").name == "synthetic"           # no --data: the model's own family, whatever folder this is
    # the eval tasks' local copies name them too
    plus = write_jsonl(tmp_path / "plus.jsonl", [{"task_id": "Mbpp/2", "prompt": "", "entry_point": "f",
                                                  "canonical_solution": "", "base_input": [], "plus_input": []}])
    rows = write_jsonl(tmp_path / "mbpp.jsonl", [{"task_id": 11, "text": "t", "test_list": []}])
    (tmp_path / "math" / "counting_and_prob").mkdir(parents=True)
    (tmp_path / "snapshot" / "full").mkdir(parents=True)
    picks = {d: task_for(str(d)).name for d in (plus, rows, tmp_path / "math", tmp_path / "snapshot")}
    assert picks == {plus: "mbpp+", rows: "mbpp", tmp_path / "math": "math", tmp_path / "snapshot": "mbpp"}
    assert TASKS["humaneval"].problems(str(data), 5) == ([{"task_id": "T/0", "prompt": "def f():\n", "test": "",
                                                           "entry_point": "f"}], "he.jsonl")
    assert TASKS["gsm8k"].problems(str(tmp_path / "g.jsonl"), 1) == (GSM[:1], "g.jsonl")


def test_a_task_grades_the_answer_part_and_the_model_s_family_counts_its_lines():
    from lopa.tasks import TASKS
    reply = " Tom now has <<3+2=5>>5 apples.\n#### 5\n\nQuestion: next #### 9"
    family = _model({"name": "synthetic-gsm", "phrasing": "adverbs"})
    for name in ("synthetic", "gsm8k"):
        row = TASKS[name].grade(family, GSM[0], reply)
        assert list(row)[:3] == ["correct", "predicted", "expected"] and row["correct"] == 1 and row["predicted"] == "5"
    assert TASKS["synthetic"].grade(family, GSM[0], reply)["grammar_lines"] == 2            # the family's lines counted
    assert TASKS["gsm8k"].grade(family, GSM[0], reply)["grammar_lines"] == 0                # GSM8K has no family
    assert TASKS["synthetic"].grade(_model(), GSM[0], reply)["grammar_lines"] == 0          # nor a model that names none
    bare = TASKS["synthetic"].grade(family, {"question": "q", "answer": None}, reply)
    assert bare == {"correct": None, "predicted": "5", "expected": None}                   # a prompt without a reference


def test_the_humaneval_task_grades_a_reply_in_the_sandbox(bubblewrap):
    from lopa.tasks import TASKS
    problem = {"task_id": "T/0", "prompt": "def f():\n", "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}
    assert TASKS["humaneval"].grade(_model(), problem, "    return 1\n")["correct"] == 1
    assert TASKS["humaneval"].grade(_model(), problem, "    return 2\n")["correct"] == 0
