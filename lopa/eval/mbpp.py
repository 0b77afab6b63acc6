"""MBPP 3-shot (paper Table 1) as the authors ran it, made offline and safe.

They ran lm-eval's `mbpp` task (scale_dream_d2f/eval_dream7.sh: 3-shot, --apply_chat_template
--fewshot_as_multiturn, add_bos_token=true, stop at "[DONE]"), which grades each response in the
evaluating process with HF `code_eval`, loaded from the hub when its utils module is imported. Here
lm-eval runs a local copy of that task that only generates: prompt template, target, stop string and
the three few-shot examples are read from the installed lm-eval's own mbpp.yaml and utils.py (as
data: the module is parsed, never imported), the metric is lm-eval's no-op `bypass`, and the data
are local files. lopa.eval.code_eval then grades each saved response against its `test_list` in the
bubblewrap sandbox, the program being exactly the one code_eval would have run.

Local data (--mbpp-data), the test split of google-research-datasets/mbpp, config "full"
(task_id, text, code, test_list, test_setup_code, challenge_test_list), as
    DIR/full/test-00000-of-00001.parquet   a snapshot of the hub dataset
                                           (`hf download google-research-datasets/mbpp --repo-type dataset --local-dir DIR`)
    DIR/test.jsonl or DIR/full/test.jsonl  the same rows as JSON lines
    FILE.jsonl / FILE.parquet              the test split itself
"""

from __future__ import annotations

import ast
from pathlib import Path

from lopa.eval.tasks import lm_eval_task_yaml, local_split_files, read_task_yaml

TASK_YAML = "mbpp/mbpp.yaml"
# What the local task keeps from lm-eval's mbpp.yaml; its metric (code_eval in-process), its
# `unsafe_code` flag (nothing here executes code) and its hub dataset are replaced.
KEPT_KEYS = ("output_type", "test_split", "doc_to_text", "doc_to_target", "target_delimiter", "generation_kwargs",
             "num_fewshot", "metadata")


def fewshot_samples() -> list[dict]:
    """The three examples lm-eval's mbpp task puts before each problem (its utils.list_fewshot_samples),
    read from the source as a literal: importing the module would load code_eval from the hub."""
    source = lm_eval_task_yaml("mbpp/utils.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "list_fewshot_samples":
            returned = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
            return ast.literal_eval(returned.value)
    raise RuntimeError("this lm-eval's mbpp/utils.py has no list_fewshot_samples(): the mbpp task changed")


def test_files(data: str | Path) -> tuple[str, list[str]]:
    """("json" | "parquet", files of the test split) for a local MBPP copy (see the module docstring)."""
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


def task_config(data: str | Path | None) -> dict:
    """lm-eval's mbpp task, generation only, reading `data`."""
    if data is None:
        raise ValueError("MBPP is not shipped: pass a local copy (mbpp_data / --mbpp-data DIR), e.g. "
                         "`hf download google-research-datasets/mbpp --repo-type dataset --local-dir DIR`")
    upstream = read_task_yaml(TASK_YAML)
    builder, files = test_files(data)
    fewshot = {k: v for k, v in upstream["fewshot_config"].items() if k != "samples"}
    return {**{k: upstream[k] for k in KEPT_KEYS if k in upstream},
            "dataset_path": builder, "dataset_name": None, "dataset_kwargs": {"data_files": {"test": files}},
            "fewshot_config": {**fewshot, "samples": fewshot_samples()},
            "metric_list": [{"metric": "bypass", "aggregation": "bypass", "higher_is_better": True}]}
