"""What a training run builds and how fast it learns: the `Recipe` (model shape, optimizer, noise, loss
weights, curriculum), the model and tokenizer it makes, and the learning-rate schedule.

The model is a stock transformers Qwen2 trained as a dLLM with the conventions the engine expects
(they are written into config.json as `config.lopa`: lopa_spec):
- layout `prompt_ids + answer_ids`; answer blocks of N=32 start right after the prompt and the
  answer is padded with EOS to a whole number of blocks (sometimes one extra all-EOS block);
- block-causal attention: the prompt is bidirectional and never sees the answer; answer block b
  sees the prompt and blocks 0..b (bidirectional inside its own block), as D2F trains;
- logit shift (like Dream): the output at position i-1 predicts the token at position i;
- noise: the prompt is never masked; block b is masked with ratio t_b, non-decreasing along
  the blocks, so a later block learns to be denoised while an earlier one is unfinished (D2F).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lopa.problems import DEFAULT_MAX_VALUE, FAMILY
from lopa.tasks.layout import BLOCK_SIZE, PROMPT_TEMPLATE
from lopa.train.tokenizer import EOS, MASK, PAD


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
                                 # only the numbers written on a line give its result there; off by default
                                 # because at 0.25 every probe learned slower (model card)
    wrong_prob: float = 0.0      # share of the noisy blocks' visible positions shown with a wrong token, the loss
                                 # then on every visible position there too: what token editing needs (lopa/train/noise.py)
    extra_eos_block_prob: float = 0.25
    curriculum: float = 0.3      # fraction of training spent ramping from 1-step to 3-step problems
    max_steps: int = 3           # reasoning steps per problem at the end of the curriculum
    hard_bias: float = 1.0       # after the curriculum, draw s steps with weight s**hard_bias
    digit_weight: float = 3.0    # loss weight on digit targets: operands and results carry the answer
    name_weight: float = 5.0     # loss weight on name targets, which must be copied from the question
    newline_names: bool = False  # weight "Leo" (the name a later line starts with) too, not only " Leo";
                                 # off by default: with objects at 10 it slowed the arithmetic (model card)
    object_weight: float = 10.0  # the same for object targets (" apples"), which must be copied too; at 5
                                 # the model did not learn to copy them (model card)
    dep_weight: float = 1.0      # loss weight on a number while a number it comes from is masked
                                 # (1 = off; what 0.1 did is in the model card)
    max_value: int = DEFAULT_MAX_VALUE
    phrasing: str = "plain"      # answer wording (lopa.problems.PHRASINGS)
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


def lr_at(step: int, progress: float, recipe: Recipe) -> float:
    """Linear warmup over `recipe.warmup` steps, then a cosine from lr down to lr / 10 at progress 1."""
    warm = min(1.0, (step + 1) / recipe.warmup)
    return recipe.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def load_or_build_tokenizer(out: Path):
    """The run's tokenizer in `out`/tokenizer, built there from the training texts the first time."""
    from transformers import AutoTokenizer

    tok_dir = out / "tokenizer"
    if not (tok_dir / "tokenizer.json").exists():
        from lopa.train.tokenizer import build_tokenizer, save_tokenizer, training_texts
        save_tokenizer(build_tokenizer(training_texts()), tok_dir)
    return AutoTokenizer.from_pretrained(str(tok_dir))


def build_model(recipe: Recipe, tok):
    """A randomly initialised Qwen2 of the recipe's shape (draws from torch's global generator)."""
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
