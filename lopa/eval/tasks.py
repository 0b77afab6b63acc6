"""lm-eval task configs for the paper's lm-eval columns, each pointed at local files (nothing is
downloaded). The prompts, few-shot examples, stop strings and (for GSM8K and MATH) filters and metrics
are lm-eval's own, read from the installed lm-eval's task YAML.

    GSM8K  gsm8k, 4-shot       assets/data/gsm8k/{train,test}.jsonl (shipped) or a folder like it
    MATH   minerva_math_*      a local copy (--math-data DIR), per subject either
           (7 subjects), 4     DIR/<subject>/{train,test}.jsonl, or a snapshot of the hub dataset
                               EleutherAI/hendrycks_math: DIR/<subject>/{train,test}-00000-of-00001.parquet
                               (`hf download EleutherAI/hendrycks_math --repo-type dataset --local-dir DIR`).
                               <subject> is the dataset's config name (algebra, counting_and_probability,
                               number_theory, precalculus, ...) or lm-eval's task suffix (counting_and_prob, ...)
    MBPP   mbpp, 3-shot        a local copy (--mbpp-data, see the MBPP section below): the task's prompt
                               and few-shot examples, its metric replaced (lopa.eval.code_eval grades)
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from lopa.tasks.sources import GSM8K_DIR, SPLITS, local_split_files, mbpp_test_files

MATH_SUBJECTS = ("algebra", "counting_and_prob", "geometry", "intermediate_algebra", "num_theory", "prealgebra",
                 "precalc")


def lm_eval_task_yaml(relative: str) -> Path:
    import lm_eval
    return Path(lm_eval.__file__).parent / "tasks" / relative


class _DataOnlyLoader(yaml.SafeLoader):
    """Reads an lm-eval task YAML as data: `!function utils.x` stays the string "utils.x", so the
    task's utils module (which for mbpp / humaneval loads code_eval from the hub) is never imported."""


_DataOnlyLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def read_task_yaml(relative: str) -> dict:
    return yaml.load(lm_eval_task_yaml(relative).read_text(), Loader=_DataOnlyLoader)  # noqa: S506 (SafeLoader)


def _local_dataset(builder: str, files: dict) -> dict:
    """The config keys that make lm-eval read `files` with datasets' generic builder."""
    return {"dataset_path": builder, "dataset_name": None, "dataset_kwargs": {"data_files": files}}


def task_configs(task: str, data: str | Path | None = None) -> dict[str, dict]:
    """{local task name: lm-eval task config} for `task` ("gsm8k", "math" or "mbpp")."""
    if task == "gsm8k":
        folder = Path(data) if data else GSM8K_DIR
        if not all((folder / f"{split}.jsonl").is_file() for split in SPLITS):
            raise FileNotFoundError(f"GSM8K needs train.jsonl and test.jsonl in {folder}")
        files = {split: [str((folder / f"{split}.jsonl").resolve())] for split in SPLITS}
        return {"lopa_gsm8k": {"include": str(lm_eval_task_yaml("gsm8k/gsm8k.yaml")), **_local_dataset("json", files)}}
    if task == "math":
        return _math_configs(data)
    if task == "mbpp":
        return {"lopa_mbpp": mbpp_config(data)}
    raise ValueError(f"lm-eval tasks here are gsm8k, math and mbpp, got {task!r}")


def _math_configs(data) -> dict[str, dict]:
    if data is None:
        raise ValueError("MATH is not shipped: pass a local copy (math_data / --math-data DIR), either "
                         "DIR/<subject>/{train,test}.jsonl or `hf download EleutherAI/hendrycks_math "
                         "--repo-type dataset --local-dir DIR`")
    folder, configs = Path(data).resolve(), {}
    for subject in MATH_SUBJECTS:
        relative = f"minerva_math/minerva_math_{subject}.yaml"
        # The hub snapshot names each subject's folder by its config (counting_and_probability);
        # lm-eval's task names shorten some (counting_and_prob): either is accepted.
        names = (read_task_yaml(relative)["dataset_name"], subject)
        found = next((hit for name in names if (hit := local_split_files(folder / name))), None)
        if found is None:
            raise FileNotFoundError(f"MATH subject {names[0]}: no {{train,test}}.jsonl nor hub parquet shards "
                                    f"({{train,test}}-*.parquet) in {folder}/{names[0]} or {folder}/{names[1]}")
        configs[f"lopa_minerva_math_{subject}"] = {"include": str(lm_eval_task_yaml(relative)), **_local_dataset(*found)}
    return configs


# -- MBPP 3-shot ---------------------------------------------------------------------------------
# Table 1's MBPP column as the authors ran it, made offline and safe.
#
# They ran lm-eval's `mbpp` task (scale_dream_d2f/eval_dream7.sh: 3-shot, --apply_chat_template
# --fewshot_as_multiturn, add_bos_token=true, stop at "[DONE]"), which grades each response in the
# evaluating process with HF `code_eval`, loaded from the hub when its utils module is imported. Here
# lm-eval runs a local copy of that task that only generates: prompt template, target, stop string and
# the three few-shot examples are read from the installed lm-eval's own mbpp.yaml and utils.py (as
# data: the module is parsed, never imported), the metric is lm-eval's no-op `bypass`, and the data
# are local files. lopa.eval.code_eval then grades each saved response against its `test_list` in the
# bubblewrap sandbox, the program being exactly the one code_eval would have run.
#
# Local data (--mbpp-data), the test split of google-research-datasets/mbpp, config "full"
# (task_id, text, code, test_list, test_setup_code, challenge_test_list), as
#     DIR/full/test-00000-of-00001.parquet   a snapshot of the hub dataset
#                                            (`hf download google-research-datasets/mbpp --repo-type dataset --local-dir DIR`)
#     DIR/test.jsonl or DIR/full/test.jsonl  the same rows as JSON lines
#     FILE.jsonl / FILE.parquet              the test split itself
MBPP_YAML = "mbpp/mbpp.yaml"
# What the local task keeps from lm-eval's mbpp.yaml; its metric (code_eval in-process), its
# `unsafe_code` flag (nothing here executes code) and its hub dataset are replaced.
MBPP_KEPT_KEYS = ("output_type", "test_split", "doc_to_text", "doc_to_target", "target_delimiter", "generation_kwargs",
             "num_fewshot", "metadata")


def mbpp_fewshot_samples() -> list[dict]:
    """The three examples lm-eval's mbpp task puts before each problem (its utils.list_fewshot_samples),
    read from the source as a literal: importing the module would load code_eval from the hub."""
    source = lm_eval_task_yaml("mbpp/utils.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "list_fewshot_samples":
            returned = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
            return ast.literal_eval(returned.value)
    raise RuntimeError("this lm-eval's mbpp/utils.py has no list_fewshot_samples(): the mbpp task changed")


def mbpp_config(data: str | Path | None) -> dict:
    """lm-eval's mbpp task, generation only, reading `data`."""
    if data is None:
        raise ValueError("MBPP is not shipped: pass a local copy (mbpp_data / --mbpp-data DIR), e.g. "
                         "`hf download google-research-datasets/mbpp --repo-type dataset --local-dir DIR`")
    upstream = read_task_yaml(MBPP_YAML)
    builder, files = mbpp_test_files(data)
    fewshot = {k: v for k, v in upstream["fewshot_config"].items() if k != "samples"}
    return {**{k: upstream[k] for k in MBPP_KEPT_KEYS if k in upstream},
            "dataset_path": builder, "dataset_name": None, "dataset_kwargs": {"data_files": {"test": files}},
            "fewshot_config": {**fewshot, "samples": mbpp_fewshot_samples()},
            "metric_list": [{"metric": "bypass", "aggregation": "bypass", "higher_is_better": True}]}
