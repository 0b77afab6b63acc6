"""Which answer positions the diffusion loss masks, and with what ratio t (lopa.train.losses).

Any mask distribution trains valid conditionals (the loss is on the masked positions given the
visible ones); the distribution only decides which conditionals get practice. Each row of a batch
draws one of three patterns:
- blocks (D2F, the default): block b is masked with ratio t_b, non-decreasing along the blocks;
- cut: the answer is clean up to a random position and noisy after it, the state of a decoder
  that has written a prefix. A cut may fall anywhere inside a line, so "read the operands just
  written" is practised at every position, not only at block boundaries (model card: without it,
  later lines recomputed from the question instead);
- computed: only the numbers the answer computes or copies are masked (results, the copy after
  `>>`, a later line's first operand, the `####` number) while operands and words stay visible,
  the state in which a result can be read off its own line.

On top of any pattern, `Recipe.wrong_prob` replaces a share of the noisy blocks' visible positions
(the tokens a decoder has committed in the blocks it is still filling) by a wrong token, and the loss
then reads every visible position of those blocks too (lopa.train.losses): the model learns to predict
the true token at a committed position, whether the token shown there is right or wrong, which is what
token-to-token editing asks of it (LLaDA2.1, arXiv 2602.08676: besides mask-to-token, the model learns
to recover the original token from randomly replaced ones; random vocabulary tokens in its released recipe,
arXiv 2606.17175). The wrong token is a plausible one: another
digit for a digit, another name for a name, another object for an object, else another token of the
batch's answers (`replacement_pools`).

Shapes (notation in lopa/__init__.py): S sequences in a batch, L sequence length, E dependency edges.
"""

from __future__ import annotations

import torch


def _ramp(block_id: torch.Tensor, first: torch.Tensor, t0: torch.Tensor, slope: torch.Tensor):
    """Ratios t0 + slope * (b - first) per position, capped at 1, and b - first ([S, L] each)."""
    rel = (block_id - first[:, None]).float()  # [S, L]
    return (t0[:, None] + slope[:, None] * rel).clamp(max=1.0), rel


def block_mask_ratios(block_id, valid, recipe, gen: torch.Generator) -> torch.Tensor:
    """Per-position mask ratio t [S, L]: 0 on the prompt, non-decreasing over answer blocks.

    Block ratios t_b = min(1, t_first + d * (b - first)) from a first noisy block `first`;
    with probability clean_prefix_prob the blocks before it are clean (what the decoder sees
    once earlier blocks are finished), otherwise first = 0.
    """
    S = block_id.shape[0]
    n_blocks = (block_id * valid).amax(dim=1)  # [S]
    t0 = recipe.min_t + (1 - recipe.min_t) * torch.rand(S, generator=gen)
    slope = 0.5 * torch.rand(S, generator=gen)
    first = (torch.rand(S, generator=gen) * n_blocks).floor().long() + 1  # 1-based block id
    first = torch.where(torch.rand(S, generator=gen) < recipe.clean_prefix_prob, first, torch.ones_like(first))
    t, rel = _ramp(block_id, first, t0, slope)
    return torch.where((rel >= 0) & (block_id > 0) & valid, t, torch.zeros_like(t))


def computed_positions(deps: torch.Tensor | None, shape) -> torch.Tensor:
    """Bool [S, L]: the targets of the number dependencies `deps` [E, 3] (row, target, source)."""
    computed = torch.zeros(shape, dtype=torch.bool)
    if deps is not None and len(deps):
        computed[deps[:, 0], deps[:, 1]] = True
    return computed


def sample_mask(block_id, valid, computed, recipe, gen: torch.Generator, forced: torch.Tensor | None = None):
    """(masked [S, L] bool, t [S, L]): the noise of one batch. t is each position's mask ratio
    (0 where it is never masked); the loss weights a masked position by 1/t (MDLM ELBO).
    Rows where `forced` [S] is True always take the computed pattern (counterfactual answers,
    lopa/train/counterfactual.py: only their computed numbers may be targets).

    With cut_prob = computed_prob = 0 this draws exactly what the blocks pattern alone draws: the
    other patterns' draws happen only when one of them is on, so they never shift the blocks' noise."""
    t = block_mask_ratios(block_id, valid, recipe, gen)  # [S, L]
    forced = torch.zeros(block_id.shape[0], dtype=torch.bool) if forced is None else forced  # [S]
    if recipe.cut_prob or recipe.computed_prob or forced.any():
        S, L = block_id.shape
        answer = (block_id > 0) & valid  # [S, L]
        pos = torch.arange(L).expand(S, L)
        pick = torch.rand(S, generator=gen)
        use_cut = pick < recipe.cut_prob
        use_cut = use_cut & ~forced
        use_computed = forced | (~use_cut & (pick < recipe.cut_prob + recipe.computed_prob))
        # cut: uniform between the answer's start and its last computed number (the `####` one),
        # so cuts do not land in the EOS padding; after it, the blocks ramp starts at the cut's block.
        start = torch.where(answer, pos, L).amin(1)  # [S]
        end = torch.where(computed, pos, -1).amax(1).clamp(min=start) + 1  # [S] exclusive
        cut = start + (torch.rand(S, generator=gen) * (end - start)).floor().long()
        t0 = recipe.min_t + (1 - recipe.min_t) * torch.rand(S, generator=gen)
        slope = 0.5 * torch.rand(S, generator=gen)
        cut_block = block_id.gather(1, cut.clamp(max=L - 1)[:, None])[:, 0]
        t_cut, _ = _ramp(block_id, cut_block, t0, slope)
        t_cut = torch.where(answer & (pos >= cut[:, None]), t_cut, torch.zeros_like(t_cut))
        # computed: one ratio per row, on the computed numbers only
        t_computed = torch.where(computed, t0[:, None].expand(S, L), torch.zeros_like(t))
        t = torch.where(use_cut[:, None], t_cut, torch.where(use_computed[:, None], t_computed, t))
    masked = (torch.rand(block_id.shape, generator=gen) < t) & (t > 0)  # [S, L]
    return masked, t


def replacement_pools(ids: torch.Tensor, answer: torch.Tensor, classes: list[torch.Tensor]) -> list[torch.Tensor]:
    """The pools a wrong token is drawn from, each a sorted 1-D tensor of token ids: one per class of
    `classes` (bool [V] each: digits, names, objects), and last the other tokens at the batch's `answer`
    positions ([S, L] bool). A token of the answers is in exactly one pool when the classes are disjoint."""
    pools = [c.nonzero().flatten() for c in classes]
    seen = torch.unique(ids[answer])  # sorted
    in_class = torch.zeros_like(seen, dtype=torch.bool)
    for pool in pools:
        in_class |= torch.isin(seen, pool)
    return pools + [seen[~in_class]]


def sample_wrong(ids: torch.Tensor, t: torch.Tensor, masked: torch.Tensor, pools: list[torch.Tensor],
                 recipe, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(wrong [S, L] bool, ids with the wrong tokens written in [S, L]): each visible position of a
    noisy block (t > 0, not masked) is replaced with probability `recipe.wrong_prob` by another token
    of its pool (`replacement_pools`), drawn uniformly, never itself. A token in no pool, or alone in
    its pool, stays as it is. Draws two [S, L] uniforms from `gen`, after the masks."""
    pick = torch.rand(ids.shape, generator=gen)  # [S, L]
    u = torch.rand(ids.shape, generator=gen)     # [S, L]
    candidate = (pick < recipe.wrong_prob) & (t > 0) & ~masked
    wrong = torch.zeros_like(candidate)
    out = ids.clone()
    for pool in pools:
        n = pool.numel()
        here = candidate & torch.isin(ids, pool)
        if n < 2 or not here.any():
            continue
        rank = torch.searchsorted(pool, ids[here])
        shift = 1 + (u[here] * (n - 1)).floor().long().clamp(max=n - 2)  # 1..n-1: never the token itself
        out[here] = pool[(rank + shift) % n]
        wrong |= here
    return wrong, out
