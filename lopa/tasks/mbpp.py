"""MBPP (Austin et al. 2021), the test split of google-research-datasets/mbpp, config "full" (task_id,
text, code, test_list, test_setup_code, challenge_test_list): a reply is a Python function, graded by
the problem's three asserts in the code sandbox, the program exactly the one HF code_eval would run
under lm-eval's mbpp task (the paper's MBPP 3-shot column: lopa.eval runs that task from the local
copy, generation only, and grades its saved replies in the sandbox).

Not shipped; a local copy (--mbpp-data, or --data for the bench) is
    DIR/full/test-00000-of-00001.parquet   a snapshot of the hub dataset
                                           (`hf download google-research-datasets/mbpp --repo-type dataset --local-dir DIR`)
    DIR/test.jsonl or DIR/full/test.jsonl  the same rows as JSON lines
    FILE.jsonl / FILE.parquet              the test split itself
"""

from __future__ import annotations

from pathlib import Path

from lopa.tasks.prompts import encode
from lopa.tasks.sandbox import CODE_EVAL_RUN_NAME, CODE_EVAL_TIMEOUT_S, Program, run_program
from lopa.tasks.sources import local_split_files, read_split
from lopa.tasks.task import Task

FIELDS = ("task_id", "text", "test_list")
LM_EVAL_YAML = "mbpp/mbpp.yaml"
# lm-eval's mbpp.yaml doc_to_text and stop string, as the paper's harness asked for each problem (0-shot here).
PROMPT = ("You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:"
          "\n\n{tests}\n[BEGIN]\n")
STOP = "[DONE]"
NOT_SHIPPED = ("MBPP is not shipped: pass a local copy (mbpp_data / --mbpp-data DIR), e.g. "
               "`hf download google-research-datasets/mbpp --repo-type dataset --local-dir DIR`")


def test_files(data: str | Path) -> tuple[str, list[str]]:
    """("json" | "parquet", files of the test split) for a local MBPP copy (the layouts above)."""
    path = Path(data).resolve()
    if path.is_file():
        builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
        if builder is None:
            raise ValueError(f"MBPP data file must be .jsonl or .parquet, got {path.name}")
        return builder, [str(path)]
    for folder in (path / "full", path):
        found = local_split_files(folder, splits=("test",))
        if found:
            return found[0], found[1]["test"]
    raise FileNotFoundError(f"no MBPP test split in {path}: expected full/test-*.parquet (a hub snapshot), "
                            "test.jsonl or full/test.jsonl")


def lm_eval_files(data: str | Path | None) -> dict:
    """lm-eval's mbpp task on the test split of the local copy `data`."""
    if data is None:
        raise ValueError(NOT_SHIPPED)
    builder, files = test_files(data)
    return {LM_EVAL_YAML: (builder, {"test": files})}


def problems(data: str, n: int | None, seed: int | None = None, family: dict | None = None) -> tuple[list[dict], str]:
    """The first `n` rows (None: all) of the local copy's test split; MBPP has no fresh draws."""
    if data == "mbpp":
        raise ValueError(NOT_SHIPPED.replace("mbpp_data / --mbpp-data", "--data"))
    rows = read_split(*test_files(data), FIELDS, "MBPP")
    return rows[:n], Path(data).name


def prompt_text(spec, problem: dict) -> str:
    return spec.prompt_template.format(prompt=PROMPT.format(text=problem["text"], tests="\n".join(problem["test_list"][:3])))


def prompt(loaded, problem: dict, data: str = "", shots: int = 0):
    """[P] ids of lm-eval's mbpp question in the model's template (the few-shot examples are lm-eval's, under
    lopa.eval; none here)."""
    return encode(loaded.tokenizer, prompt_text(loaded.spec, problem))


def program(problem: dict, reply: str) -> Program:
    """What code_eval runs for one reply under lm-eval's mbpp: the reply up to [DONE] as the candidate, the
    three asserts (the task's doc_to_target) as the test."""
    return Program(reply.split(STOP)[0], "\n".join(problem["test_list"][:3]))


def grade(loaded, problem: dict, reply: str, allow_fallback: bool = False) -> dict:
    """Row fields for one reply: correct (0/1), predicted (the sandbox status), expected."""
    result = run_program(program(problem, reply), timeout=CODE_EVAL_TIMEOUT_S, run_name=CODE_EVAL_RUN_NAME,
                         allow_fallback=allow_fallback)
    return {"correct": int(result.passed), "predicted": result.status, "expected": "passed"}


TASK = Task("mbpp", problems, prompt, grade, code=True, lm_eval=lm_eval_files)
