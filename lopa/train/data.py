"""The training data: problems of the recipe's family drawn along a curriculum, tokenized in the
layout the engine decodes (prompt, then EOS-padded answer blocks), with the number dependencies the
noise and the loss read.

Shapes (notation in lopa/__init__.py): S sequences in a batch, L sequence length, E dependency edges
(result -> operand positions).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import torch

from lopa.problems import is_heldout, make_problem
from lopa.tasks.layout import ANSWER_PREFIX, BLOCK_SIZE, PROMPT_TEMPLATE
from lopa.train.counterfactual import counterfactual
from lopa.train.recipe import Recipe


@dataclass(frozen=True)
class Batch:
    """Clean sequences of one training step; the noise is drawn later, by the loss."""
    ids: torch.Tensor                   # [S, L] long: prompt + answer blocks, then pad
    block_id: torch.Tensor              # [S, L] long: answer block of each position (1, 2, ...), 0 on prompt and pad
    valid: torch.Tensor                 # [S, L] bool: False on pad
    deps: torch.Tensor | None = None    # [E, 3] long: (row, target position, source position); None = none
    forced: torch.Tensor | None = None  # [S] bool: rows with a counterfactual answer; None = none


def steps_for(rng: random.Random, progress: float, recipe: Recipe) -> int:
    """Curriculum: 1-step problems first, the harder ones phased in over `curriculum`."""
    top = 1 + min(1.0, progress / max(recipe.curriculum, 1e-9)) * (recipe.max_steps - 1)
    top = max(1, min(recipe.max_steps, int(round(top))))
    # Longer problems hold most of the errors (accuracy falls with the step count: the model cards'
    # by-steps columns), so hard_bias draws them more often; a 3-step answer also practises 1 and 2 steps.
    return rng.choices(range(1, top + 1), weights=[s ** recipe.hard_bias for s in range(1, top + 1)])[0]


def encode(tok, problem: dict) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids ending in EOS) of a problem, in the layout of lopa.tasks.layout."""
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


def make_batch(tok, rng: random.Random, recipe: Recipe, progress: float) -> Batch:
    """`recipe.batch` clean sequences of one step count (drawn by the curriculum at `progress`), with
    their number dependencies and which rows carry a counterfactual answer."""
    rows, deps, forced = [], [], []
    steps = steps_for(rng, progress, recipe)  # one step count per batch: rows of similar length, little padding
    while len(rows) < recipe.batch:
        p = training_problem(rng, steps, recipe)
        # The rng is drawn only when the option is on, so every recipe with it off draws the same data.
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
    ids = torch.full((len(rows), L), tok.pad_token_id, dtype=torch.long)   # [S, L]
    block_id = torch.zeros((len(rows), L), dtype=torch.long)               # [S, L]
    valid = torch.zeros((len(rows), L), dtype=torch.bool)                  # [S, L]
    for i, (seq, blk) in enumerate(rows):
        ids[i, : len(seq)] = torch.tensor(seq)
        block_id[i, : len(seq)] = torch.tensor(blk)
        valid[i, : len(seq)] = True
    return Batch(ids, block_id, valid, deps=torch.tensor(deps, dtype=torch.long).reshape(-1, 3),
                 forced=torch.tensor(forced))
