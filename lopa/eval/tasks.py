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
    MBPP   mbpp, 3-shot        a local copy (--mbpp-data), lopa.eval.mbpp: the task's prompt and few-shot
                               examples, its metric replaced (grading runs in the sandbox instead)
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lopa.models.loading import ASSETS

GSM8K_DIR = ASSETS / "data" / "gsm8k"
MATH_SUBJECTS = ("algebra", "counting_and_prob", "geometry", "intermediate_algebra", "num_theory", "prealgebra",
                 "precalc")
SPLITS = ("train", "test")


def lm_eval_task_yaml(relative: str) -> Path:
    import lm_eval
    return Path(lm_eval.__file__).parent / "tasks" / relative


class _DataOnlyLoader(yaml.SafeLoader):
    """Reads an lm-eval task YAML as data: `!function utils.x` stays the string "utils.x", so the
    task's utils module (which for mbpp / humaneval loads code_eval from the hub) is never imported."""


_DataOnlyLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def read_task_yaml(relative: str) -> dict:
    return yaml.load(lm_eval_task_yaml(relative).read_text(), Loader=_DataOnlyLoader)  # noqa: S506 (SafeLoader)


def local_split_files(folder: Path, splits=SPLITS) -> tuple[str, dict] | None:
    """("json" | "parquet", {split: [files]}) for a folder that holds every split as
    <split>.jsonl or as the hub's <split>-NNNNN-of-NNNNN.parquet shards; None if it does not."""
    for builder, pattern in (("json", "{split}.jsonl"), ("parquet", "{split}-*.parquet")):
        found = {split: sorted(str(p) for p in folder.glob(pattern.format(split=split))) for split in splits}
        if all(found.values()):
            return builder, found
    return None


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
        from lopa.eval.mbpp import task_config
        return {"lopa_mbpp": task_config(data)}
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
