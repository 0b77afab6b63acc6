"""The training losses: the weighted masked-diffusion loss on a `Batch`, and the on-policy loss
(lopa/train/policy.py) on one decode by the model itself; the token classes the weights read.

Shapes (notation in lopa/__init__.py): S sequences in a batch, L sequence length, V vocabulary,
M target positions, E dependency edges.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import torch
import torch.nn.functional as F

from lopa.problems import NAMES, OBJECTS
from lopa.tasks.layout import hidden_states
from lopa.train.data import Batch, steps_for, training_problem
from lopa.train.noise import computed_positions, replacement_pools, sample_mask, sample_wrong
from lopa.train.policy import policy_loss, policy_rows
from lopa.train.recipe import Recipe


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
    another token than the question's " Leo" (weighted with the space only, sure-gsm-dllm copies
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


class DiffusionLoss(NamedTuple):
    loss: torch.Tensor      # the weighted loss to back-propagate
    ce: torch.Tensor        # the unweighted mean cross-entropy over the masked targets (detached), for the log
    masked: int             # how many masked targets `ce` averaged over


def diffusion_loss(model, batch: Batch, *, mask_id: int, recipe: Recipe, gen: torch.Generator,
                   is_digit: torch.Tensor, is_name: torch.Tensor | None = None,
                   is_object: torch.Tensor | None = None) -> DiffusionLoss:
    """The masked-diffusion loss of `batch` under noise drawn from `gen`: cross-entropy on the masked
    positions (with `recipe.wrong_prob` on every visible position of the noisy blocks too, some shown with
    a wrong token: lopa/train/noise.py), weighted per target class (`is_digit`, `is_name`, `is_object`: bool [V]; a class left
    None keeps weight 1) and, with `recipe.inv_t_weight`, by 1/t (MDLM ELBO)."""
    ids, block_id, valid, deps = batch.ids, batch.block_id, batch.valid, batch.deps
    masked, t = sample_mask(block_id, valid, computed_positions(deps, ids.shape), recipe, gen, batch.forced)  # [S, L] each
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    targets = masked  # [S, L]
    if recipe.wrong_prob:
        # Token editing (lopa/train/noise.py): some visible positions of the noisy blocks show a wrong
        # token, and every visible position there is a target (its true token), so the model learns
        # both to replace a wrong committed token and to keep a right one.
        classes = [c for c in (is_digit, is_name, is_object) if c is not None]
        _, noisy = sample_wrong(noisy, t, masked, replacement_pools(ids, (block_id > 0) & valid, classes), recipe, gen)
        targets = t > 0
    h = hidden_states(model, noisy, block_id, valid)  # [S, L, hidden]
    # Logit shift: the output at i-1 predicts token i, so select outputs one step left of the targets.
    sel = targets[:, 1:]  # [S, L-1]
    was_masked = masked[:, 1:][sel]  # [M] (all True without wrong_prob)
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
        # 1/t on a masked target (MDLM ELBO); a visible one (wrong_prob) is one sample of its position: weight 1
        n_answer = ((block_id > 0) & valid).sum().clamp(min=1)
        loss = (ce_w / torch.where(was_masked, t[:, 1:][sel], 1.0)).sum() / n_answer
    else:
        loss = ce_w.mean()
    return DiffusionLoss(loss, ce[was_masked].mean().detach(), int(was_masked.sum()))


def on_policy_loss(model, tok, *, rng: random.Random, recipe: Recipe, progress: float,
                   is_digit: torch.Tensor) -> torch.Tensor:
    """The loss of lopa/train/policy.py on one fresh training problem decoded by the model itself
    (zero when no state of the decode has a position some right answer explains)."""
    p = training_problem(rng, steps_for(rng, progress, recipe), recipe)
    k = rng.choice([int(x) for x in recipe.policy_ks.split(",")])
    rows = policy_rows(model, tok, p, recipe.phrasing, k, recipe.policy_states, rng,
                       None if recipe.policy_numbers else is_digit)
    return policy_loss(model, rows, tok.pad_token_id) if rows else torch.zeros(())
