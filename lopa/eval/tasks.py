"""lm-eval task configs for the tasks lm-eval runs (a Task with `lm_eval`: lopa.tasks.gsm8k,
lopa.tasks.hendrycks_math, lopa.tasks.mbpp), each pointed at the local files the task finds (nothing is
downloaded). The prompts, few-shot examples, stop strings and (for GSM8K and MATH) filters and metrics
are lm-eval's own, read from the installed lm-eval's task YAML.

    GSM8K  gsm8k, 4-shot       assets/data/gsm8k/{train,test}.jsonl (shipped) or a folder like it
    MATH   minerva_math_*      a local copy (--math-data DIR): the layouts in lopa.tasks.hendrycks_math
           (7 subjects), 4
    MBPP   mbpp, 3-shot        a local copy (--mbpp-data): the layouts in lopa.tasks.mbpp; the task's prompt
                               and few-shot examples, its metric replaced (lopa.eval.code_eval grades)
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from lopa.tasks import TASKS
from lopa.tasks.task import Task


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


def task_configs(task: Task, data: str | Path | None = None) -> dict[str, dict]:
    """{local task name: lm-eval task config} for each lm-eval task that runs `task` (task.lm_eval: its
    YAML and the local copy's files); a code task's config only generates (generation_only)."""
    if task.lm_eval is None:
        runs = ", ".join(name for name, t in TASKS.items() if t.lm_eval)
        raise ValueError(f"lm-eval runs {runs} here, not {task.name}")
    build = generation_only if task.code else included
    return {f"lopa_{Path(relative).stem}": build(relative, builder, files)
            for relative, (builder, files) in task.lm_eval(data).items()}


def included(relative: str, builder: str, files: dict) -> dict:
    """lm-eval's own task YAML, included whole, reading `files`."""
    return {"include": str(lm_eval_task_yaml(relative)), **_local_dataset(builder, files)}


# -- MBPP 3-shot ---------------------------------------------------------------------------------
# Table 1's MBPP column as the authors ran it, made offline and safe (generation_only of mbpp/mbpp.yaml).
#
# They ran lm-eval's `mbpp` task (scale_dream_d2f/eval_dream7.sh: 3-shot, --apply_chat_template
# --fewshot_as_multiturn, add_bos_token=true, stop at "[DONE]"), which grades each response in the
# evaluating process with HF `code_eval`, loaded from the hub when its utils module is imported. Here
# lm-eval runs a local copy of that task that only generates: prompt template, target, stop string and
# the three few-shot examples are read from the installed lm-eval's own mbpp.yaml and utils.py (as
# data: the module is parsed, never imported), the metric is lm-eval's no-op `bypass`, and the data
# are local files (lopa.tasks.mbpp). lopa.eval.code_eval then grades each saved response against its
# `test_list` in the bubblewrap sandbox, the program being exactly the one code_eval would have run.
#
# What the local task keeps from lm-eval's YAML; its metric (code_eval in-process), its
# `unsafe_code` flag (nothing here executes code) and its hub dataset are replaced.
KEPT_KEYS = ("output_type", "test_split", "doc_to_text", "doc_to_target", "target_delimiter", "generation_kwargs",
             "num_fewshot", "metadata")


def fewshot_samples(relative: str) -> list[dict]:
    """The examples the lm-eval task at `relative` puts before each problem (the utils.list_fewshot_samples
    beside it; mbpp's three), read from the source as a literal: importing the module would load code_eval
    from the hub."""
    source = lm_eval_task_yaml(str(Path(relative).parent / "utils.py")).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "list_fewshot_samples":
            returned = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
            return ast.literal_eval(returned.value)
    raise RuntimeError(f"this lm-eval's {Path(relative).parent}/utils.py has no list_fewshot_samples(): the task changed")


def generation_only(relative: str, builder: str, files: dict) -> dict:
    """lm-eval's task at `relative` (mbpp/mbpp.yaml), generation only, reading `files`."""
    upstream = read_task_yaml(relative)
    fewshot = {k: v for k, v in upstream["fewshot_config"].items() if k != "samples"}
    return {**{k: upstream[k] for k in KEPT_KEYS if k in upstream}, **_local_dataset(builder, files),
            "fewshot_config": {**fewshot, "samples": fewshot_samples(relative)},
            "metric_list": [{"metric": "bypass", "aggregation": "bypass", "higher_is_better": True}]}
