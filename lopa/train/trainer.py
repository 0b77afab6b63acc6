"""Train the bundled tiny masked diffusion LM, D2F-style, on synthetic GSM8K-style problems.

    python -m lopa.train --out DIR [--export DIR2] [--minutes M] [--steps N] [--seed S] [--resume]
    python -m lopa.train --out runs/tiny --export runs/tiny/model --minutes 100 --threads 1 --ckpt-minutes 10
                                                   # the bundled model (100 min on a 2-core CPU)

This module is the loop and its command line. The parts it runs: lopa.train.recipe (the `Recipe`, the
model it builds, the learning-rate schedule), lopa.train.data (the curriculum and the `Batch`),
lopa.train.losses (the diffusion loss and the on-policy loss), lopa.train.checkpoint (resume, export).

A step sets the learning rate, draws a batch, computes the losses under autocast and takes one AdamW
step with the gradient norm clipped to 1. Every --ckpt-minutes and at the end the run is evaluated on
held-out problems, checkpointed and exported. A run stopped at any step and resumed draws the same
data and noise as one never stopped (both generators are in the checkpoint).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from lopa.problems import NAMES, OBJECTS, split
from lopa.train.checkpoint import (
    export,
    export_checkpoint,
    load_weights,
    restore_checkpoint,
    save_checkpoint,
    update_model_card,
)
from lopa.train.data import make_batch
from lopa.train.evaluator import evaluate
from lopa.train.losses import diffusion_loss, digit_ids, name_ids, on_policy_loss
from lopa.train.recipe import Recipe, build_model, family, load_or_build_tokenizer, lr_at
from lopa.train.tokenizer import MASK


@dataclass
class Run:
    """A run in progress: what it trains, where it writes and how far it is."""
    out: Path
    export_dir: Path
    recipe: Recipe
    seed: int
    steps: int | None                   # the schedule's length in steps and/or minutes: whichever ends first
    minutes: float | None
    tok: object
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    rng: random.Random                  # the data's draws: problems, counterfactuals, on-policy decodes
    gen: torch.Generator                # the noise's draws
    step: int = 0
    elapsed: float = 0.0                # seconds of training, summed over resumed sessions
    history: list = field(default_factory=list)   # the held-out evaluation at each checkpoint

    def progress(self) -> float:
        """The fraction of the schedule done (the LR cosine and the curriculum read it)."""
        parts = []
        if self.steps is not None:
            parts.append(self.step / self.steps)
        if self.minutes is not None:
            parts.append(self.elapsed / (60 * self.minutes))
        return max(parts)


def start_run(out: Path, recipe: Recipe, *, seed: int, steps: int | None, minutes: float | None, resume: bool,
              export_dir: Path, log) -> Run:
    """A fresh run (random weights, or `recipe.init`'s), or with `resume` the one checkpointed in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    tok = load_or_build_tokenizer(out)
    model = build_model(recipe, tok)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=recipe.weight_decay)
    run = Run(out=out, export_dir=export_dir, recipe=recipe, seed=seed, steps=steps, minutes=minutes, tok=tok,
              model=model, opt=opt, rng=random.Random(f"train-{seed}"), gen=torch.Generator().manual_seed(seed))
    ckpt = out / "checkpoint"
    if resume and (ckpt / "state.pt").exists():   # a resumed run's weights come from its checkpoint, not --init
        run.step, run.elapsed, run.history = restore_checkpoint(ckpt, model, opt, run.rng, run.gen,
                                                                recipe=recipe, seed=seed)
        log(f"resumed from step {run.step} ({run.elapsed / 60:.1f} min)")
    elif recipe.init:
        model.load_state_dict(load_weights(Path(recipe.init), model))
    return run


def checkpoint(run: Run, *, heldout: list, n_eval: int, log):
    """Evaluate on `heldout` (when n_eval), save the resumable state, export the model and its card."""
    n_params = sum(p.numel() for p in run.model.parameters())
    if n_eval:
        r = evaluate(run.model, run.tok, heldout, run.recipe.bf16)
        run.history.append({"step": run.step, "minutes": run.elapsed / 60,
                            **{k: r[k] for k in ("acc", "by_steps", "tokens_per_round_per_sample")}})
        log(f"EVAL step {run.step} min {run.elapsed / 60:.1f} acc {r['acc']:.3f} by_steps {r['by_steps']} "
            f"tok/round {r['tokens_per_round_per_sample']:.2f} ({r['eval_s']:.0f}s) ex {r['example']!r}")
    # The run's state first: an export that fails (a full disk, a moved folder) must not cost the steps.
    save_checkpoint(run.out / "checkpoint", run.model, run.opt, step=run.step, elapsed=run.elapsed, rng=run.rng,
                    gen=run.gen, recipe=run.recipe, history=run.history, seed=run.seed)
    export(run.model, run.tok, run.export_dir, family(run.recipe))
    if n_eval:
        update_model_card(run.export_dir / "README.md", run.history, n_params, run.recipe)


def smoothed(average: float | None, value: float) -> float:
    """The logged running average of a loss (exponential, 2% per step); the first value starts it."""
    return value if average is None else 0.98 * average + 0.02 * value


def train(out: Path, recipe: Recipe, *, minutes: float | None, steps: int | None, seed: int, resume: bool = False,
          export_dir: Path | None = None, ckpt_minutes: float = 5.0, n_eval: int = 50, log=print, threads: int = 2,
          stop_after: int | None = None, log_every: int = 50):
    """Train for `minutes` and/or `steps` (the LR schedule and curriculum run over whichever ends
    first); returns (model, tokenizer). `stop_after` ends the run at that step with a checkpoint but
    leaves the schedule as it is, as an interruption would; `resume` then continues it from the
    checkpoint. The model is exported to `export_dir` (default `out`) at every checkpoint."""
    from tqdm import tqdm

    if minutes is None and steps is None:
        raise ValueError("give --minutes or --steps (or both) so the LR schedule knows its length")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    run = start_run(out, recipe, seed=seed, steps=steps, minutes=minutes, resume=resume,
                    export_dir=export_dir or out, log=log)
    model, tok, opt = run.model, run.tok, run.opt
    log(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M recipe {asdict(recipe)}")
    if recipe.bf16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        # Without native bf16 (AVX512-BF16 or AMX) autocast emulates it: about 20x slower per step on the
        # 2-core AVX2 EPYC this project trains on (3.1 s against 0.35 s per step at 1 thread).
        log("warning: this CPU has no native bf16, so --bf16 true runs emulated and far slower; "
            "pass --bf16 false (fp32) here")
    heldout = split("heldout", n_eval, seed=0, max_steps=recipe.max_steps, max_value=recipe.max_value,
                    phrasing=recipe.phrasing)
    mask_id = tok.convert_tokens_to_ids(MASK)
    is_digit, is_name, is_object = digit_ids(tok), name_ids(tok, NAMES, recipe.newline_names), name_ids(tok, OBJECTS)

    model.train()
    bar = tqdm(total=steps, initial=run.step, mininterval=10, dynamic_ncols=False)
    last_ckpt, t_start, ce_average, policy_average = run.elapsed, time.time() - run.elapsed, None, None
    while run.progress() < 1.0 and (stop_after is None or run.step < stop_after):
        for g in opt.param_groups:
            g["lr"] = lr_at(run.step, run.progress(), recipe)
        batch = make_batch(tok, run.rng, recipe, run.progress())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.bf16):
            loss, ce, _ = diffusion_loss(model, batch, mask_id=mask_id, recipe=recipe, gen=run.gen,
                                         is_digit=is_digit, is_name=is_name, is_object=is_object)
            if recipe.policy_states:
                policy = on_policy_loss(model, tok, rng=run.rng, recipe=recipe, progress=run.progress(),
                                        is_digit=is_digit)
                loss = loss + recipe.policy_weight * policy
                policy_average = smoothed(policy_average, float(policy.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run.step += 1
        run.elapsed = time.time() - t_start
        ce_average = smoothed(ce_average, float(ce))
        bar.update(1)
        bar.set_postfix(ce=f"{ce_average:.3f}", min=f"{run.elapsed / 60:.1f}", refresh=False)
        if run.step % log_every == 0:
            tokens_per_s = run.step * recipe.batch * batch.ids.shape[1] / max(run.elapsed, 1)
            log(f"step {run.step} min {run.elapsed / 60:.1f} ce {ce_average:.4f} loss {loss.item():.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} "
                f"{'' if policy_average is None else f'on-policy ce {policy_average:.4f} '}tok/s {tokens_per_s:.0f}")
        if run.elapsed - last_ckpt >= 60 * ckpt_minutes:
            checkpoint(run, heldout=heldout, n_eval=n_eval, log=log)
            last_ckpt = run.elapsed = time.time() - t_start
    bar.close()
    checkpoint(run, heldout=heldout, n_eval=n_eval, log=log)
    log(f"{'done' if run.progress() >= 1.0 else 'stopped'}: step {run.step}, {run.elapsed / 60:.1f} min")
    return model, tok


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lopa.train", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="run dir: tokenizer/ and checkpoint/")
    ap.add_argument("--export", type=Path, default=None, help="where to save the model (default: --out)")
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--n-eval", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stop-after", type=int, default=None, help="stop at this step (the schedule is unchanged)")
    ap.add_argument("--export-only", action="store_true", help="export the last checkpoint of --out to --export and stop")
    for f, v in asdict(Recipe()).items():
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(v, bool) else type(v)
        ap.add_argument("--" + f.replace("_", "-"), type=kind, default=v)
    args = ap.parse_args(argv)
    recipe = Recipe(**{f: getattr(args, f) for f in asdict(Recipe())})

    def log(msg):
        print(msg, flush=True)

    if args.export_only:
        state = export_checkpoint(args.out, args.export or args.out)
        log(f"exported step {state['step']} ({state['elapsed'] / 60:.1f} min) to {args.export or args.out}")
        return

    train(args.out, recipe, minutes=args.minutes, steps=args.steps, seed=args.seed, resume=args.resume,
          export_dir=args.export or args.out, ckpt_minutes=args.ckpt_minutes, n_eval=args.n_eval, log=log,
          threads=args.threads, stop_after=args.stop_after)


if __name__ == "__main__":
    main()
