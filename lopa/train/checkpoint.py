"""Checkpoints and export of the trainer's runs (lopa.train.trainer): the resumable state (saved
atomically, restored only into the same recipe and seed), the weights of an earlier stage (--init),
bf16 safetensors with the decoding contract in config.json (`config.lopa`), and the model card's
generated sections."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from lopa.train.recipe import Recipe, build_model, family, load_or_build_tokenizer, lopa_spec


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


def save_checkpoint(path: Path, model, opt, *, step: int, elapsed: float, rng, gen, recipe: Recipe,
                    history=(), seed: int | None = None):
    """`path`/state.pt: everything a resumed run needs to continue as if never stopped (weights, optimizer,
    both random generators, the step and wall time, the eval history), with the recipe and seed that
    `restore_checkpoint` checks."""
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / "state.pt.tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                "py_rng": rng.getstate(), "gen": gen.get_state(), "recipe": asdict(recipe),
                "history": list(history), "seed": seed}, tmp)
    tmp.replace(path / "state.pt")  # atomic, so a kill mid-save keeps the previous checkpoint


def restore_checkpoint(path: Path, model, opt, rng, gen, *, recipe: Recipe, seed: int) -> tuple[int, float, list]:
    """Load `path`/state.pt into the model, optimizer and generators, in place; returns (step, elapsed
    seconds, eval history). A longer --minutes/--steps may extend a run; another recipe or seed would be
    another run, so those are refused."""
    state = torch.load(path / "state.pt", weights_only=False)
    if state["recipe"] != asdict(recipe) or state.get("seed", seed) != seed:
        raise ValueError(f"{path / 'state.pt'} was written with another recipe or seed "
                         f"({state['recipe']}, seed {state.get('seed')}); resume with the same flags")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    rng.setstate(state["py_rng"])
    gen.set_state(state["gen"])
    return state["step"], state["elapsed"], state.get("history", [])


def load_weights(folder: Path, model) -> dict:
    """The float32 state dict of an exported model folder, refused unless every tensor fits `model`
    (the recipe's shape and the run's vocabulary)."""
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).state_dict()
    mine = model.state_dict()
    wrong = [k for k in mine if k not in state or state[k].shape != mine[k].shape]
    if wrong:
        raise ValueError(f"--init {folder} does not fit this recipe's model (layers, sizes, heads or "
                         f"vocabulary differ): {', '.join(wrong[:3])}{' ...' if len(wrong) > 3 else ''}")
    return state


def export_checkpoint(out: Path, export_dir: Path) -> dict:
    """Export the run's last checkpoint (weights, tokenizer, and the model card's stats and eval
    sections from its history) into `export_dir`, without training or evaluating again: how a
    finished run is copied into assets/ while other files there (custom_generate/) stay."""
    state = torch.load(out / "checkpoint" / "state.pt", weights_only=False)
    recipe = Recipe(**state["recipe"])
    tok = load_or_build_tokenizer(out)
    model = build_model(recipe, tok)
    model.load_state_dict(state["model"])
    export(model, tok, export_dir, family(recipe))
    if state["history"]:
        n_params = sum(p.numel() for p in model.parameters())
        update_model_card(export_dir / "README.md", state["history"], n_params, recipe)
    return state


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
