"""Train the bundled tiny masked diffusion LM, D2F-style, on synthetic GSM8K-style problems.

    python -m lopa.train --out DIR [--export DIR2] [--minutes M] [--steps N] [--seed S] [--resume]
    python -m lopa.train --out runs/tiny --export runs/tiny/model --minutes 100 --threads 1 --ckpt-minutes 10
                                                   # the bundled model (100 min on a 2-core CPU)

The model is a stock transformers Qwen2 trained as a dLLM with the conventions the engine
expects (they are written into config.json as `config.lopa`):
- layout `prompt_ids + answer_ids`; answer blocks of N=32 start right after the prompt and the
  answer is padded with EOS to a whole number of blocks (sometimes one extra all-EOS block);
- block-causal attention: the prompt is bidirectional and never sees the answer; answer block b
  sees the prompt and blocks 0..b (bidirectional inside its own block), as D2F trains;
- logit shift (like Dream): the output at position i-1 predicts the token at position i;
- noise: the prompt is never masked; block b is masked with ratio t_b, non-decreasing along
  the blocks, so a later block learns to be denoised while an earlier one is unfinished (D2F).

Shapes (notation in lopa/__init__.py): S sequences in a batch, L sequence length, V vocabulary, N block
size, M masked positions, E dependency edges (result -> operand positions).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from lopa.problems import DEFAULT_MAX_VALUE, FAMILY, NAMES, OBJECTS, is_heldout, make_problem, split
from lopa.train.checkpoint import export, lopa_spec, save_checkpoint, update_model_card  # noqa: F401 (re-exported)
from lopa.train.counterfactual import counterfactual
from lopa.train.layout import ANSWER_PREFIX, BLOCK_SIZE, PROMPT_TEMPLATE, evaluate, hidden_states
from lopa.train.noise import block_mask_ratios, computed_positions, sample_mask  # noqa: F401 (re-exported)
from lopa.train.policy import policy_loss, policy_rows
from lopa.train.tokenizer import MASK


@dataclass(frozen=True)
class Recipe:
    """The defaults are the shipped model's recipe (assets/models/sure-gsm-dllm/README.md)."""
    layers: int = 4
    hidden: int = 160
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 480
    batch: int = 16
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    min_t: float = 0.05          # lowest mask ratio; 1/t weights are capped at 1/min_t
    inv_t_weight: bool = True    # MDLM ELBO weighting: low-noise samples carry the arithmetic signal
    clean_prefix_prob: float = 0.5  # how often earlier blocks are fully clean (the cached state)
    cut_prob: float = 0.0        # rows whose answer is clean up to a random cut (lopa/train/noise.py)
    computed_prob: float = 0.0   # rows where only the computed numbers are masked (lopa/train/noise.py)
    counterfactual_prob: float = 0.0  # rows whose answer is another problem's (lopa/train/counterfactual.py):
                                 # only the numbers written on a line give its result there
                                 # (0.25 broke even line-1 arithmetic at 30 min: model card)
                                 # (0.25 each learned slower than 0 on every probe: model card)
    extra_eos_block_prob: float = 0.25
    curriculum: float = 0.3      # fraction of training spent ramping from 1-step to 3-step problems
    max_steps: int = 3           # reasoning steps per problem at the end of the curriculum
    hard_bias: float = 1.0       # after the curriculum, draw s steps with weight s**hard_bias
    digit_weight: float = 3.0    # loss weight on digit targets: operands and results carry the answer
    name_weight: float = 5.0     # loss weight on name targets, which must be copied from the question
    newline_names: bool = False  # weight "Leo" (the name a later line starts with) too, not only " Leo"
                                 # (with objects at 10: arithmetic learned far slower, model card)
    object_weight: float = 10.0  # the same for object targets (" apples"): at 5 the previous model never
                                 # learned to copy them (chance after 16k steps), at 10 a run did by step 2,236
    dep_weight: float = 1.0      # loss weight on a number while a number it comes from is masked
                                 # (1 = off; 0.1 failed, see the model card)
    max_value: int = DEFAULT_MAX_VALUE
    phrasing: str = "plain"      # answer wording (lopa.problems.PHRASINGS); "varied" was session 5's
                                 # experiment (model card), not the shipped model's
    policy_states: int = 0       # per step, this many states from one decode by the model itself, trained
                                 # toward the family's exact conditionals (lopa/train/policy.py; 0 = off)
    policy_ks: str = "0,0,4,14"  # what decodes them, drawn uniformly: 0 = D2F, k = LoPA with k branches
    policy_weight: float = 1.0   # the on-policy loss's weight beside the diffusion loss
    policy_numbers: bool = True  # whether positions that may hold a digit get on-policy targets too
                                 # (False, words only, raised D2F's TPF and cut LoPA's lead: lopa/train/policy.py)
    init: str = ""               # start from this model folder's weights instead of a random init
                                 # (a second stage; the optimizer and schedule start afresh)
    bf16: bool = True            # autocast matmuls to bf16 (AMX on recent Xeons)


def family(recipe: Recipe) -> dict:
    """The problem family a recipe trains on, as config.lopa.problems names it (lopa.problems.family_problems)."""
    return {"name": FAMILY, "phrasing": recipe.phrasing, "max_steps": recipe.max_steps, "max_value": recipe.max_value}


# ---------------------------------------------------------------- tokenizer and model

def load_or_build_tokenizer(out: Path):
    from transformers import AutoTokenizer

    tok_dir = out / "tokenizer"
    if not (tok_dir / "tokenizer.json").exists():
        from lopa.train.tokenizer import build_tokenizer, save_tokenizer, training_texts
        save_tokenizer(build_tokenizer(training_texts()), tok_dir)
    return AutoTokenizer.from_pretrained(str(tok_dir))


def build_model(recipe: Recipe, tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = lopa_spec(tok, family(recipe))
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=recipe.hidden, intermediate_size=recipe.ffn,
        num_hidden_layers=recipe.layers, num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads, max_position_embeddings=512,
        rope_theta=10000.0, tie_word_embeddings=True,
        eos_token_id=spec["eos_token_ids"][0], pad_token_id=spec["pad_token_id"], bos_token_id=None,
        attn_implementation="sdpa",
    )
    config.lopa = spec
    return Qwen2ForCausalLM(config)


# ---------------------------------------------------------------- data and noise

def steps_for(rng: random.Random, progress: float, recipe: Recipe) -> int:
    """Curriculum: 1-step problems first, the harder ones phased in over `curriculum`."""
    top = 1 + min(1.0, progress / max(recipe.curriculum, 1e-9)) * (recipe.max_steps - 1)
    top = max(1, min(recipe.max_steps, int(round(top))))
    # Longer problems hold the errors (the first model: 84% on 1 step, 18% on 3), so they may
    # be drawn more often; every 3-step answer also contains 1- and 2-step prefixes.
    return rng.choices(range(1, top + 1), weights=[s ** recipe.hard_bias for s in range(1, top + 1)])[0]


def encode(tok, problem: dict) -> tuple[list[int], list[int]]:
    prompt = tok(PROMPT_TEMPLATE.format(prompt=problem["question"]))["input_ids"]
    answer = tok(ANSWER_PREFIX + problem["answer"])["input_ids"] + [tok.eos_token_id]
    return prompt, answer


CALC = re.compile(r"<<(\d+)[-+*/](\d+)=(\d+)>>(\d+)")
FINAL = re.compile(r"#### (\d+)")


def number_dependencies(tok, answer: str) -> list[tuple[int, int]]:
    """(target, source) answer-token pairs: a number that is computed or copied from numbers
    earlier in the answer. In `<<a+b=c>>c2`, c comes from a and b, c2 from c; a line's a from
    the previous line's c2; the `####` number from the last c2. Token indices count from the
    answer's first token (as `encode` tokenizes it)."""
    text = ANSWER_PREFIX + answer
    offsets = tok(text, return_offsets_mapping=True)["offset_mapping"]

    def tokens(span):
        return [i for i, (s, e) in enumerate(offsets) if s < span[1] and e > span[0]]

    pairs, previous = [], []
    for m in CALC.finditer(text):
        a, b, c, c2 = (tokens(m.span(g)) for g in (1, 2, 3, 4))
        pairs += [(t, s) for t in c for s in a + b] + [(t, s) for t in c2 for s in c]
        pairs += [(t, s) for t in a for s in previous]
        previous = c2
    final = FINAL.search(text)
    if final:
        pairs += [(t, s) for t in tokens(final.span(1)) for s in previous]
    return pairs


def training_problem(rng: random.Random, steps: int, recipe: Recipe) -> dict:
    """A `steps`-step problem of the recipe's family whose question is not held out."""
    while is_heldout((p := make_problem(rng, steps, recipe.max_value, recipe.phrasing))["question"]):
        pass
    return p


def make_batch(tok, rng: random.Random, recipe: Recipe, progress: float):
    """Clean sequences: ids [S, L], answer-block id per position (0 = prompt), valid mask, the
    number dependencies [E, 3] as (row, target position, source position), and which rows [S]
    carry a counterfactual answer (masked with the computed pattern only)."""
    rows, deps, forced = [], [], []
    steps = steps_for(rng, progress, recipe)  # one step count per batch: rows of similar length, little padding
    while len(rows) < recipe.batch:
        p = training_problem(rng, steps, recipe)
        # drawn only when on, so a recipe without it replays the same data as before it existed
        swap = recipe.counterfactual_prob > 0 and rng.random() < recipe.counterfactual_prob
        if swap:
            p = counterfactual(rng, p, steps, recipe.max_value)
        forced.append(swap)
        prompt, answer = encode(tok, p)
        n_blocks = math.ceil(len(answer) / BLOCK_SIZE) + (rng.random() < recipe.extra_eos_block_prob)
        answer = answer + [tok.eos_token_id] * (n_blocks * BLOCK_SIZE - len(answer))
        blocks = [0] * len(prompt) + [1 + i // BLOCK_SIZE for i in range(len(answer))]
        deps += [(len(rows), len(prompt) + t, len(prompt) + s) for t, s in number_dependencies(tok, p["answer"])]
        rows.append((prompt + answer, blocks))
    L = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), L), tok.pad_token_id, dtype=torch.long)
    block_id = torch.zeros((len(rows), L), dtype=torch.long)
    valid = torch.zeros((len(rows), L), dtype=torch.bool)
    for i, (seq, blk) in enumerate(rows):
        ids[i, : len(seq)] = torch.tensor(seq)
        block_id[i, : len(seq)] = torch.tensor(blk)
        valid[i, : len(seq)] = True
    return ids, block_id, valid, torch.tensor(deps, dtype=torch.long).reshape(-1, 3), torch.tensor(forced)


def digit_ids(tok) -> torch.Tensor:
    """Bool [V]: True for tokens that are one digit (the tokenizer splits numbers into digits)."""
    vocab = tok.get_vocab()
    is_digit = torch.zeros(max(vocab.values()) + 1, dtype=torch.bool)
    for i in vocab.values():
        is_digit[i] = tok.decode([i]).strip().isdigit()
    return is_digit


def name_ids(tok, words=NAMES + OBJECTS, bare: bool = False) -> torch.Tensor:
    """Bool [V]: True for the one-token `words` (the problem family's names and objects) after a
    space, and with `bare` also without it: a later answer line starts with "Leo" after a newline,
    another token than the question's " Leo" (weighted with the space only, the shipped model copies
    the name on line 1 in 60 of 60 slots and on later lines in 8 of 55)."""
    is_name = torch.zeros(len(tok), dtype=torch.bool)
    for word in words:
        for spelling in (" " + word, word) if bare else (" " + word,):
            ids = tok(spelling)["input_ids"]
            if len(ids) == 1:
                is_name[ids[0]] = True
    return is_name


def blocked_by_mask(masked: torch.Tensor, deps: torch.Tensor) -> torch.Tensor:
    """Bool [S, L]: positions with at least one masked source in `deps` [E, 3] (row, target, source)."""
    blocked = torch.zeros(masked.shape, dtype=torch.long)
    if len(deps):
        row, target, source = deps.unbind(1)
        blocked.index_put_((row, target), masked[row, source].long(), accumulate=True)
    return blocked > 0


def diffusion_loss(model, ids, block_id, valid, mask_id: int, recipe: Recipe, gen: torch.Generator,
                   is_digit: torch.Tensor, is_name: torch.Tensor | None = None, deps: torch.Tensor | None = None,
                   is_object: torch.Tensor | None = None, forced: torch.Tensor | None = None):
    masked, t = sample_mask(block_id, valid, computed_positions(deps, ids.shape), recipe, gen, forced)  # [S, L] each
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    h = hidden_states(model, noisy, block_id, valid)  # [S, L, hidden]
    # Logit shift: the output at i-1 predicts token i, so select outputs one step left of masks.
    sel = masked[:, 1:]  # [S, L-1]
    logits = model.lm_head(h[:, :-1][sel]).float()  # [M, V]
    target = ids[:, 1:][sel]  # [M]
    ce = F.cross_entropy(logits, target, reduction="none")  # [M]
    # Weighting digit targets moves capacity to operands and results. The weight depends on the
    # target's class, so where a digit and a non-digit are both possible (does a number have one
    # digit or two?) the optimum's odds lean digit_weight:1 toward the digit; among digits, and
    # wherever the class is certain, it is still the true conditional that LoPA's confidence reads.
    # Where the class itself is open (open-gsm-dllm's family: after an uncommitted " now" every later
    # position is one word or the next), the lean makes both readings sure and D2F commits both
    # ("eggs eggs"): that model trains with every weight at 1 (its model card).
    w = torch.where(is_digit[target], recipe.digit_weight, 1.0)  # [M]
    if is_name is not None:  # the same for names and objects, which the model must copy from the question
        w = torch.where(is_name[target], recipe.name_weight, w)
    if is_object is not None:
        w = torch.where(is_object[target], recipe.object_weight, w)
    if deps is not None:
        # A result whose operands are masked can only be recomputed from the question, and a model
        # that learns that path uses it on later lines too, where it fails (model card). Weighting it
        # down leaves most of the signal to the path that reads the operands written in the answer.
        blocked = blocked_by_mask(masked, deps)[:, 1:][sel]  # [M]
        w = torch.where(blocked, recipe.dep_weight * w, w)
    ce_w = ce * w
    if recipe.inv_t_weight:
        n_answer = ((block_id > 0) & valid).sum().clamp(min=1)
        loss = (ce_w / t[:, 1:][sel]).sum() / n_answer
    else:
        loss = ce_w.mean()
    return loss, ce.mean().detach(), int(sel.sum())


def on_policy_loss(model, tok, rng: random.Random, recipe: Recipe, progress: float,
                   is_digit: torch.Tensor) -> torch.Tensor:
    """The loss of lopa/train/policy.py on one fresh training problem decoded by the model itself
    (zero when no state of the decode has a position some right answer explains)."""
    p = training_problem(rng, steps_for(rng, progress, recipe), recipe)
    k = rng.choice([int(x) for x in recipe.policy_ks.split(",")])
    rows = policy_rows(model, tok, p, recipe.phrasing, k, recipe.policy_states, rng,
                       None if recipe.policy_numbers else is_digit)
    return policy_loss(model, rows, tok.pad_token_id) if rows else torch.zeros(())


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


def smoothed(average: float | None, value: float) -> float:
    """The logged running average of a loss (exponential, 2% per step); the first value starts it."""
    return value if average is None else 0.98 * average + 0.02 * value


def lr_at(step: int, progress: float, recipe: Recipe) -> float:
    warm = min(1.0, (step + 1) / recipe.warmup)
    return recipe.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def train(out: Path, recipe: Recipe, minutes: float | None, steps: int | None, seed: int,
          resume: bool, export_dir: Path, ckpt_minutes: float, n_eval: int, log=print, threads: int = 2,
          stop_after: int | None = None, log_every: int = 50):
    """Train for `minutes` and/or `steps` (the LR schedule and curriculum run over whichever ends
    first). `stop_after` ends the run at that step with a checkpoint but leaves the schedule as it
    is, as an interruption would; `resume` then continues it from the checkpoint."""
    from tqdm import tqdm

    if minutes is None and steps is None:
        raise ValueError("give --minutes or --steps (or both) so the LR schedule knows its length")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_or_build_tokenizer(out)
    model = build_model(recipe, tok)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98),
                            weight_decay=recipe.weight_decay)
    rng, gen = random.Random(f"train-{seed}"), torch.Generator().manual_seed(seed)
    step, elapsed, history = 0, 0.0, []
    ckpt = out / "checkpoint"
    resuming = resume and (ckpt / "state.pt").exists()
    if recipe.init and not resuming:  # a resumed run's weights come from its checkpoint, not the init folder
        model.load_state_dict(load_weights(Path(recipe.init), model))
    if resuming:
        state = torch.load(ckpt / "state.pt", weights_only=False)
        # A longer --minutes/--steps may extend a run; another recipe or seed would be another run.
        if state["recipe"] != asdict(recipe) or state.get("seed", seed) != seed:
            raise ValueError(f"{ckpt / 'state.pt'} was written with another recipe or seed "
                             f"({state['recipe']}, seed {state.get('seed')}); resume with the same flags")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, elapsed, history = state["step"], state["elapsed"], state.get("history", [])
        rng.setstate(state["py_rng"])
        gen.set_state(state["gen"])
        log(f"resumed from step {step} ({elapsed / 60:.1f} min)")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"params {n_params / 1e6:.2f}M recipe {asdict(recipe)}")
    if recipe.bf16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        # Without native bf16 (AVX512-BF16 or AMX) autocast emulates it: about 20x slower per step on the
        # 2-core AVX2 EPYC this project trains on (3.1 s against 0.35 s per step at 1 thread).
        log("warning: this CPU has no native bf16, so --bf16 true runs emulated and far slower; "
            "pass --bf16 false (fp32) here")
    heldout = split("heldout", n_eval, seed=0, max_steps=recipe.max_steps, max_value=recipe.max_value,
                    phrasing=recipe.phrasing)
    mask_id = tok.convert_tokens_to_ids(MASK)
    is_digit, is_name, is_object = digit_ids(tok), name_ids(tok, NAMES, recipe.newline_names), name_ids(tok, OBJECTS)

    def progress():
        parts = []
        if steps is not None:
            parts.append(step / steps)
        if minutes is not None:
            parts.append(elapsed / (60 * minutes))
        return max(parts)

    def checkpoint():
        if n_eval:
            r = evaluate(model, tok, heldout, recipe.bf16)
            history.append({"step": step, "minutes": elapsed / 60, **{k: r[k] for k in
                            ("acc", "by_steps", "tokens_per_round_per_sample")}})
            log(f"EVAL step {step} min {elapsed / 60:.1f} acc {r['acc']:.3f} by_steps {r['by_steps']} "
                f"tok/round {r['tokens_per_round_per_sample']:.2f} ({r['eval_s']:.0f}s) ex {r['example']!r}")
        # The run's state first: an export that fails (a full disk, a moved folder) must not cost the steps.
        save_checkpoint(ckpt, model, opt, step, elapsed, rng, gen, recipe, history, seed)
        export(model, tok, export_dir, family(recipe))
        if n_eval:
            update_model_card(export_dir / "README.md", history, n_params, recipe)

    model.train()
    bar = tqdm(total=steps, initial=step, mininterval=10, dynamic_ncols=False)
    last_ckpt, t_start, ema, policy_ema = elapsed, time.time() - elapsed, None, None
    while progress() < 1.0 and (stop_after is None or step < stop_after):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, progress(), recipe)
        ids, block_id, valid, deps, forced = make_batch(tok, rng, recipe, progress())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.bf16):
            loss, ce, m = diffusion_loss(model, ids, block_id, valid, mask_id, recipe, gen, is_digit, is_name, deps,
                                          is_object, forced)
            if recipe.policy_states:
                policy = on_policy_loss(model, tok, rng, recipe, progress(), is_digit)
                loss = loss + recipe.policy_weight * policy
                policy_ema = smoothed(policy_ema, float(policy.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        elapsed = time.time() - t_start
        ema = smoothed(ema, float(ce))
        bar.update(1)
        bar.set_postfix(ce=f"{ema:.3f}", min=f"{elapsed / 60:.1f}", refresh=False)
        if step % log_every == 0:
            log(f"step {step} min {elapsed / 60:.1f} ce {ema:.4f} loss {loss.item():.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} "
                f"{'' if policy_ema is None else f'on-policy ce {policy_ema:.4f} '}tok/s {step * recipe.batch * ids.shape[1] / max(elapsed, 1):.0f}")
        if elapsed - last_ckpt >= 60 * ckpt_minutes:
            checkpoint()
            last_ckpt = elapsed = time.time() - t_start
    bar.close()
    checkpoint()
    log(f"{'done' if progress() >= 1.0 else 'stopped'}: step {step}, {elapsed / 60:.1f} min")
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

    train(args.out, recipe, args.minutes, args.steps, args.seed, args.resume,
          args.export or args.out, args.ckpt_minutes, args.n_eval, log, args.threads, args.stop_after)


if __name__ == "__main__":
    main()
