"""A question's prompt: the model's template (or GSM8K's, for base models without one), after the
few-shot examples, tokenized as every command decodes it.

GSM8K here is a quick mode with our own prompt builder (the first N train rows as shots, the answer
cut at "Question:", the last `####` number): fast and dependency-free, but not the harness the paper
used (lm-eval: lopa.eval).
"""

from __future__ import annotations

import functools

import torch

from lopa.tasks.sources import SHOTS_FROM, read_rows

# lm-eval's GSM8K format, for base models that have no prompt template of their own (Dream):
# the shots then read "Question: ...\nAnswer: ... #### 72", and the answer ends at the next "Question:".
GSM8K_TEMPLATE = "Question: {prompt}\nAnswer:"


def template_for(spec, data: str = "") -> str:
    """The template a question is written into: the model's own, or GSM8K_TEMPLATE for GSM8K on a
    model that has none."""
    return GSM8K_TEMPLATE if data == "gsm8k" and spec.prompt_template == "{prompt}" else spec.prompt_template


def few_shot_prefix(template: str, shots: int) -> str:
    """The first `shots` GSM8K training problems, each rendered as the model's prompt + answer."""
    if shots == 0:
        return ""
    examples = _training_examples()[:shots]
    return "".join(template.format(prompt=ex["question"]) + " " + ex["answer"] + "\n\n" for ex in examples)


@functools.cache
def _training_examples() -> tuple[dict, ...]:
    return tuple(read_rows(SHOTS_FROM, ("question", "answer"), "GSM8K"))


def encode(tokenizer, text: str) -> torch.Tensor:
    """[P] token ids of a prompt text, no special tokens added (a template carries its own)."""
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def prompt_ids(loaded, question: str, template: str | None = None, prefix: str = "") -> torch.Tensor:
    """[P] ids of `question` in `template` (default: the model's, as `lopa generate --prompt` decodes
    it), after `prefix` (few_shot_prefix; "" for none)."""
    text = prefix + (template or loaded.spec.prompt_template).format(prompt=question.strip())
    return encode(loaded.tokenizer, text)


def question_ids(loaded, question: str, data: str = "", shots: int = 0) -> torch.Tensor:
    """[P] ids of `question` as a study decodes it: the template for `data` (template_for) after
    `shots` GSM8K training examples (0: none)."""
    template = template_for(loaded.spec, data)
    return prompt_ids(loaded, question, template, few_shot_prefix(template, shots))
