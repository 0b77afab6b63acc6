"""Checkpoints and export of the trainer's runs (lopa.train.trainer): the decoding contract written
into config.json as `config.lopa`, bf16 safetensors, the resumable state, and the model card's
generated sections."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from lopa.train.layout import BLOCK_SIZE, PROMPT_TEMPLATE
from lopa.train.tokenizer import EOS, MASK, PAD


def lopa_spec(tok, problems: dict | None = None) -> dict:
    """config.lopa: what the engine needs to decode the model, and the problem family it was trained on
    (config.lopa.problems; lopa.problems.family_problems draws fresh problems of it, e.g. `python -m lopa.bench --problem-seed`)."""
    return {
        "mask_token_id": tok.convert_tokens_to_ids(MASK),
        "eos_token_ids": [tok.convert_tokens_to_ids(EOS)],
        "pad_token_id": tok.convert_tokens_to_ids(PAD),
        "logit_shift": True,
        "block_size": BLOCK_SIZE,
        "prompt_template": PROMPT_TEMPLATE,
        "attention": "block_causal",
        **({"problems": problems} if problems else {}),
    }


def export(model, tok, out: Path, problems: dict | None = None):
    """bf16 safetensors + config.json (with config.lopa) + tokenizer, loadable offline."""
    out.mkdir(parents=True, exist_ok=True)
    model.config.lopa = lopa_spec(tok, problems)
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    model.config.dtype = "bfloat16"
    model.save_pretrained(str(out), state_dict=state)
    model.config.dtype = "float32"
    tok.save_pretrained(str(out))
    # save_pretrained rewrote generation_config.json: put back the plain-generate() guard (and
    # custom_generate/), so an exported model never decodes left to right in silence.
    from lopa.hf import add_transformers_support
    add_transformers_support(out)


def save_checkpoint(path: Path, model, opt, step, elapsed, rng, gen, recipe, history=(), seed=None):
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / "state.pt.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                "py_rng": rng.getstate(), "gen": gen.get_state(), "recipe": asdict(recipe),
                "history": list(history), "seed": seed}, tmp)
    tmp.replace(path / "state.pt")  # atomic, so a kill mid-save keeps the previous checkpoint


def update_model_card(path: Path, history: list[dict], n_params: int, recipe):
    """Rewrite the model card's marked sections from the eval history, so every export ships a
    card whose numbers match its weights. Does nothing when the card or the markers are absent."""
    if not path.exists():
        return
    text = path.read_text()
    last = history[-1]
    stats = (f"Parameters: {n_params / 1e6:.2f}M. Trained {last['step']} optimizer steps "
             f"({last['step'] * recipe.batch:,} problems) in {last['minutes']:.0f} minutes of wall time "
             f"on a 2-core CPU, no GPU (threads and schedule: see 'Training recipe').")
    rows = ["| step | wall minutes | exact match | 1-step | 2-step | 3-step | tokens/round |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for h in history:
        by = [f"{h['by_steps'].get(k, float('nan')):.2f}" for k in (1, 2, 3)]
        rows.append(f"| {h['step']} | {h['minutes']:.1f} | {h['acc']:.2f} | " + " | ".join(by)
                    + f" | {h['tokens_per_round_per_sample']:.2f} |")
    for name, body in (("stats", stats), ("eval", "\n".join(rows))):
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            text = head + start + "\n" + body + "\n" + end + rest.split(end, 1)[1]
    path.write_text(text)
