"""HumanEval(+) and MBPP+ decoded as the authors did: their prompts, samples.jsonl as EvalPlus reads it,
graded by the task (lopa.tasks.evalplus.evaluate: EvalPlus's own evaluator inside bubblewrap).

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

Data is never downloaded: the problems are the task's (lopa.tasks.evalplus, lopa.tasks.humaneval).
"""

from __future__ import annotations

from pathlib import Path

from lopa.tasks.prompts import encode
from lopa.tasks.results import write_jsonl

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
    write_jsonl(out / "samples.jsonl", samples)
    write_jsonl(out / "samples-sanitized.jsonl",
                [{**s, "solution": sanitize(s["solution"], p["entry_point"])} for s, p in zip(samples, problems)])
    write_jsonl(out / "runs.jsonl", runs)
    return summarize_runs(runs)
