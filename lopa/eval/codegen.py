"""HumanEval(+) and MBPP+ through EvalPlus: prompts as the authors wrote them, samples.jsonl, and
EvalPlus's own evaluator run inside our bubblewrap sandbox.

Prompts (zhijie-group/LoPA):
- D2F-DiffuCoder (Table 2; scale_diffucoder_d2f/model.py `_build_prompt`, generate.py): a fixed
  ChatML text (their system line, "Can you complete the following Python function?", the problem
  in a ```python fence, the assistant turn opened with ```python); the reply is cut at the next
  ```, written as the whole solution, sanitized by `evalplus.sanitize`, then graded.
- D2F-Dream HumanEval (Table 1; test_dream_d2f_LoPA.sh): lm-eval's `humaneval` task, 0-shot, no
  chat template, BOS prepended, the whole reply kept (escape_until=true): the bare problem prompt,
  and prompt + completion is the program. Its grading is not EvalPlus's: `lopa reproduce` runs
  HumanEval's own `test` + check(entry_point) on it as code_eval does, sandboxed (lopa.eval.code_eval);
  here only the decoding and the saved samples are shared.

Data is never downloaded: EvalPlus reads the problem file named by HUMANEVAL_OVERRIDE_PATH /
MBPP_OVERRIDE_PATH (evalplus/data/humaneval.py, mbpp.py), which we set to a local copy
(HumanEvalPlus-v0.1.10.jsonl / MbppPlus-v0.2.0.jsonl from the EvalPlus releases), cut to the
problems decoded.

Isolation: `evalplus.evaluate` executes the completions (and the canonical solutions, for the
expected outputs). The whole evaluator runs under `bwrap` with the prefix of
lopa.tasks.sandbox (every namespace unshared, so no network and its own PID namespace; a
read-only view of only the system and Python folders; a private writable /sandbox holding only the
samples and the problems, a host folder, since the results come back through it, so the sandbox's
write limit holds here for /tmp only; no capabilities; killed with its parent), inside which EvalPlus applies
its own per-test time and memory limits. Without bubblewrap grading refuses to run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lopa.eval import code_eval
from lopa.tasks.prompts import encode
from lopa.tasks.sandbox import bwrap_command

OVERRIDE_ENV = {"humaneval": "HUMANEVAL_OVERRIDE_PATH", "mbpp": "MBPP_OVERRIDE_PATH"}
# scale_diffucoder_d2f/model.py, DiffuCoder._build_prompt (the authors' words, kept exactly).
DIFFUCODER_PROMPT = ("<|im_start|>system\nYou are an intelligent programming assistant to produce Python algorithmic "
                     "solutions<|im_end|>\n<|im_start|>user\nCan you complete the following Python function?\n"
                     "```python\n{prompt}\n```\n<|im_end|>\n<|im_start|>assistant\n```python\n")


def prompt_text(problem: dict, style: str, bos: str | None = None) -> str:
    """The prompt string for one problem: "diffucoder" (their chat text, prompt stripped as
    generate.py does) or "completion" (lm-eval humaneval: the bare prompt after BOS)."""
    if style == "diffucoder":
        return DIFFUCODER_PROMPT.format(prompt=problem["prompt"].strip())
    if style == "completion":
        return (bos or "") + problem["prompt"]
    raise ValueError(f"prompt style must be diffucoder or completion, got {style!r}")


def solution_from(problem: dict, text: str, style: str) -> str:
    """The program EvalPlus grades: the reply up to its closing fence (diffucoder), or prompt +
    completion (completion)."""
    return text.split("```")[0] if style == "diffucoder" else problem["prompt"] + text


def generate_samples(loaded, settings, problems: list[dict], style: str, out: str | Path) -> dict:
    """Decode every problem, write samples.jsonl (raw), samples-sanitized.jsonl (what is graded)
    and runs.jsonl (each decode's counters). Returns the TPF summary over the decodes."""
    from evalplus.sanitize import sanitize

    from lopa.eval.lmeval import summarize_runs
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    bos = loaded.tokenizer.bos_token if style == "completion" else None
    samples, runs = [], []
    for problem in problems:
        text = prompt_text(problem, style, bos)
        result = loaded.decoder(settings).run(encode(loaded.tokenizer, text))
        samples.append({"task_id": problem["task_id"], "solution": solution_from(problem, result.text, style)})
        runs.append({"task_id": problem["task_id"], "completion": result.text, **result.metrics()})
    write_samples(out / "samples.jsonl", samples)
    write_samples(out / "samples-sanitized.jsonl",
                  [{**s, "solution": sanitize(s["solution"], p["entry_point"])} for s, p in zip(samples, problems)])
    write_samples(out / "runs.jsonl", runs)
    return summarize_runs(runs)


def write_samples(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def grade(dataset: str, samples: str | Path, problems: list[dict], timeout: float = 3600.0) -> dict:
    """Grade `samples` (EvalPlus samples.jsonl) against `problems` with `evalplus.evaluate`, inside
    bubblewrap. Writes <samples>_eval_results.json beside the samples, as EvalPlus does. Returns
    {"base": pass@1 %, "plus": pass@1 % (base and extra tests), "n", "sandbox", "per_task"}."""
    if dataset not in OVERRIDE_ENV:
        raise ValueError(f"EvalPlus datasets are {tuple(OVERRIDE_ENV)}, got {dataset!r}")
    code_eval.require_bubblewrap()
    samples = Path(samples)
    with tempfile.TemporaryDirectory(prefix="lopa-evalplus-") as work:
        work = Path(work)
        shutil.copy(samples, work / "samples.jsonl")
        write_samples(work / "problems.jsonl", problems)
        env = {OVERRIDE_ENV[dataset]: "/sandbox/problems.jsonl", "TOKENIZERS_PARALLELISM": "false"}
        command = bwrap_command(work, env=env) + [sys.executable, "-I", "-m", "evalplus.evaluate", "--dataset", dataset,
                                                  "--samples", "/sandbox/samples.jsonl", "--parallel", "1"]
        proc = subprocess.run(command, cwd=work, env={"PATH": os.defpath}, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        result_file = work / "samples_eval_results.json"
        if proc.returncode != 0 or not result_file.is_file():
            raise RuntimeError(f"evalplus.evaluate failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        target = samples.with_name(samples.stem + "_eval_results.json")
        shutil.copy(result_file, target)
    results = json.loads(target.read_text())["eval"]
    per_task = {tid: {"base": r[0]["base_status"], "plus": r[0]["plus_status"]} for tid, r in results.items()}
    n = len(per_task)
    passed = lambda key: sum(all(t[k] == "pass" for k in key) for t in per_task.values())
    return {"base": 100 * passed(("base",)) / n, "plus": 100 * passed(("base", "plus")) / n, "n": n,
            "sandbox": "bubblewrap", "per_task": per_task, "results_file": str(target)}
