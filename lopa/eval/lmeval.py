"""The tasks lm-eval runs (GSM8K, MATH and MBPP: a lopa.tasks Task declared with `lm_eval`) through lm-eval
(0.4.x): the engine registered as an lm-eval model, the tasks read from local files (lopa.eval.tasks), every
completion and every decode's counters saved.

The authors ran their numbers through lm-eval with their own model class (zhijie-group/LoPA
scale_dream_d2f/scale_dream_d2f.py, `generate_until`): the task's prompt (few-shot, and the chat
template when --apply_chat_template is given) is decoded until EOS or 512 tokens, the answer is cut
at the task's stop strings, and lm-eval's filters and metrics score it. `LoPALM` does the same with
our engine. Offline: the task config is lm-eval's own YAML (included, so prompt, filters and metric
are exactly lm-eval's) with only the dataset replaced by local files. MBPP's metric runs generated code
in-process, so its task only generates and lopa.eval.code_eval grades the saved responses in the
sandbox (lopa.eval.tasks, lopa.eval.code_eval).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from lopa.eval import code_eval
from lopa.eval.tasks import task_configs
from lopa.tasks.prompts import encode
from lopa.tasks.task import Task
from lopa.trace import pooled


@functools.cache
def _model_class():
    """LoPALM, defined (and registered with lm-eval, once) on first use, so that importing this
    module does not import lm-eval."""
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model

    @register_model("lopa")
    class LoPALM(LM):
        """The engine as an lm-eval model: `generate_until` only (the paper's tasks are generative).
        `runs` collects each decode's metrics in request order, for the TPF columns."""

        def __init__(self, loaded, settings, add_bos: bool = True):
            super().__init__()
            self.loaded, self.settings, self.add_bos, self.runs = loaded, settings, add_bos, []

        def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
            from tqdm import tqdm
            tokenizer, answers = self.loaded.tokenizer, []
            for request in tqdm(requests, disable=disable_tqdm, desc="lopa generate_until"):
                context, gen_kwargs = request.args
                # The authors prepend the BOS text (add_bos_token=true in their scripts).
                if self.add_bos and tokenizer.bos_token and not context.startswith(tokenizer.bos_token):
                    context = tokenizer.bos_token + context
                ids = encode(tokenizer, context)
                # A prompt longer than the context leaves room for the answer by losing its left end,
                # as the authors' generate_until does ("cutoff on the left side"); recorded per decode.
                room = self.loaded.spec.max_context - self.settings.max_new_tokens
                truncated = max(0, len(ids) - room)
                result = self.loaded.decoder(self.settings).run(ids[truncated:])
                text = result.text
                for stop in gen_kwargs.get("until", []) or []:     # as their generate_until without escape_until
                    if stop:
                        text = text.split(stop)[0]
                self.runs.append({"context_sha1": hashlib.sha1(context.encode()).hexdigest(), "completion": text,
                                  "prompt_tokens_cut": truncated, **result.metrics()})
                answers.append(text)
            return answers

        def loglikelihood(self, requests):
            raise NotImplementedError("the LoPA engine generates; loglikelihood tasks are not supported")

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError("the LoPA engine generates; loglikelihood tasks are not supported")

        @property
        def tokenizer_name(self) -> str:
            return self.loaded.spec.name.replace("/", "__")

        def chat_template(self, chat_template=False):
            return getattr(self.loaded.tokenizer, "chat_template", None) if chat_template else None

        def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
            return self.loaded.tokenizer.apply_chat_template(
                chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt)

    return LoPALM


def run_lm_eval(loaded, settings, task: Task, shots: int, out: str | Path, chat: bool = False,
                data: str | Path | None = None, limit: int | None = None) -> dict:
    """Run `task` (a Task lm-eval runs: lopa.tasks.TASKS["gsm8k"], ["math"] or ["mbpp"]) through lm-eval
    with `loaded` decoding under `settings`, on the local copy `data`. Writes to `out`: the task configs,
    lm-eval's sample log (samples_<task>.jsonl: doc, prompt, response, filtered answer, metrics), the
    engine's per-decode counters (runs.jsonl), for a code task (MBPP) the sandbox's verdicts
    (graded_lopa_mbpp.jsonl), and results.json. Returns {"score": task.metric or pass@1 in %, "metrics":
    lm-eval's, TPFs, "n"}."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")       # local files only, never the hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    if task.code:                                          # refuse before hours of decoding, not after
        code_eval.require_bubblewrap()
    out = Path(out)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    configs = task_configs(task, data)
    for name, config in configs.items():                 # JSON is YAML: lm-eval reads these as task files
        (out / "tasks" / f"{name}.yaml").write_text(json.dumps({"task": name, **config}, indent=1))
    lm = _model_class()(loaded, settings)
    results = simple_evaluate(model=lm, tasks=list(configs), num_fewshot=shots, limit=limit, log_samples=True,
                              apply_chat_template=chat, fewshot_as_multiturn=chat,
                              task_manager=TaskManager(include_path=str(out / "tasks")), bootstrap_iters=0)
    for name, samples in results["samples"].items():
        with open(out / f"samples_{name}.jsonl", "w") as f:
            for sample in samples:
                f.write(json.dumps(sample, default=str) + "\n")
    with open(out / "runs.jsonl", "w") as f:
        for run in lm.runs:
            f.write(json.dumps(run) + "\n")
    per_task = {name: results["results"][name] for name in configs}
    if task.code:
        # one sample log (the task's one lm-eval task), graded in the sandbox as code_eval would
        graded = code_eval.grade_lm_eval_samples(out / f"samples_{next(iter(configs))}.jsonl")
        score, n, extra = graded["score"], graded["n"], {"graded": graded["results_file"], "sandbox": graded["sandbox"]}
    else:
        # lm-eval logs one sample per filter (GSM8K has two): count documents
        counts = [len({sample["doc_id"] for sample in results["samples"][name]}) for name in configs]
        # task.metric (GSM8K: lm-eval's strict match, the `#### N` answer; MATH: minerva's exact match),
        # the sample-weighted mean over the task's parts.
        score = 100 * sum(per_task[name][task.metric] * k for name, k in zip(configs, counts)) / sum(counts)
        n, extra = sum(counts), {}
    summary = {"task": task.name, "shots": shots, "chat": chat, "n": n, "score": score, **extra, **summarize_runs(lm.runs),
               "lm_eval": per_task, "settings": settings.to_dict()}
    (out / "results.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def summarize_runs(runs: list[dict]) -> dict:
    """TPF over a set of decodes (lopa.trace.pooled): ours (useful tokens over forwards) and the authors'."""
    total = pooled(runs)
    return {"tpf_useful": total["tpf_useful"], "tpf_authors": total["tpf_authors"], "forwards": total["forwards"],
            "latency_s": total["latency_s"], "prompts_cut": sum(r.get("prompt_tokens_cut", 0) > 0 for r in runs)}
