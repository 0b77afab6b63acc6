"""MATH (Hendrycks et al. 2021) as lm-eval's minerva_math tasks ask it: seven subjects, the problem after
"Problem:", the reply's final answer (its "Final Answer: The final answer is ..." line) checked against the
solution's last \\boxed{} answer by lm-eval's own equivalence (lm_eval.tasks.minerva_math.utils, imported
where a reply is graded; it needs lm-eval's [math] extra). The paper's Math 4-shot column: lopa.eval runs
the seven tasks from the local copy, scored by their exact match.

Not shipped; a local copy (--math-data, or --data for the bench) holds, per subject, either
DIR/<subject>/{train,test}.jsonl or a snapshot of the hub dataset EleutherAI/hendrycks_math,
DIR/<subject>/{train,test}-00000-of-00001.parquet
(`hf download EleutherAI/hendrycks_math --repo-type dataset --local-dir DIR`). <subject> is the dataset's
config name (counting_and_probability, ...) or lm-eval's task suffix (counting_and_prob, ...).
"""

from __future__ import annotations

from pathlib import Path

from lopa.tasks.prompts import encode
from lopa.tasks.sources import local_split_files, read_split
from lopa.tasks.task import Task

# lm-eval's task suffix (minerva_math_<suffix>) -> the hub dataset's config name (its dataset_name).
SUBJECTS = {"algebra": "algebra", "counting_and_prob": "counting_and_probability", "geometry": "geometry",
            "intermediate_algebra": "intermediate_algebra", "num_theory": "number_theory",
            "prealgebra": "prealgebra", "precalc": "precalculus"}
FIELDS = ("problem", "solution")
PROMPT = "Problem:\n{problem}\n\nSolution:"     # minerva_math utils.doc_to_text
STOP = "Problem:"                               # the task's stop string: a base model writes the next shot
NOT_SHIPPED = ("MATH is not shipped: pass a local copy (math_data / --math-data DIR), either "
               "DIR/<subject>/{train,test}.jsonl or `hf download EleutherAI/hendrycks_math "
               "--repo-type dataset --local-dir DIR`")


def subject_files(data: str | Path | None) -> dict[str, tuple[str, dict]]:
    """{lm-eval task suffix: (datasets builder, {split: [files]})} of every subject in the local copy `data`."""
    if data is None:
        raise ValueError(NOT_SHIPPED)
    folder, found = Path(data).resolve(), {}
    for suffix, config in SUBJECTS.items():
        hit = local_split_files(folder / config) or local_split_files(folder / suffix)
        if hit is None:
            raise FileNotFoundError(f"MATH subject {config}: no {{train,test}}.jsonl nor hub parquet shards "
                                    f"({{train,test}}-*.parquet) in {folder}/{config} or {folder}/{suffix}")
        found[suffix] = hit
    return found


def lm_eval_files(data: str | Path | None) -> dict:
    """lm-eval's seven minerva_math tasks on the local copy `data`."""
    return {f"minerva_math/minerva_math_{suffix}.yaml": hit for suffix, hit in subject_files(data).items()}


def problems(data: str, n: int | None, seed: int | None = None, family: dict | None = None) -> tuple[list[dict], str]:
    """The first `n` (None: all) test problems, subject after subject in lm-eval's order; MATH has no fresh draws."""
    if data == "math":
        raise ValueError(NOT_SHIPPED.replace("math_data / --math-data", "--data"))
    rows = [row for builder, files in subject_files(data).values()
            for row in read_split(builder, files["test"], FIELDS, "MATH")]
    return rows[:n], Path(data).name


def prompt(loaded, problem: dict, data: str = "", shots: int = 0):
    """[P] ids of the minerva question in the model's template (lm-eval's four shots run under lopa.eval)."""
    return encode(loaded.tokenizer, loaded.spec.prompt_template.format(prompt=PROMPT.format(problem=problem["problem"])))


def grade(loaded, problem: dict, reply: str, allow_fallback: bool = False) -> dict:
    """Row fields for one reply, by lm-eval's minerva_math check: correct (its exact_match), the normalized
    final answers predicted and expected."""
    from lm_eval.tasks.minerva_math import utils
    expected = utils.normalize_final_answer(utils.remove_boxed(utils.last_boxed_only_string(problem["solution"])))
    answer = reply.split(STOP)[0]
    scored = utils.process_results({**problem, "answer": expected}, [answer])
    return {"correct": scored["exact_match"], "predicted": utils.normalize_final_answer(utils.get_unnormalized_answer(answer)),
            "expected": expected}


TASK = Task("math", problems, prompt, grade, lm_eval=lm_eval_files, metric="exact_match,none")
