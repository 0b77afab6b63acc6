"""Block bookkeeping of one branch: D2F's add / activate / cache rules (design note, D2F steps 1-6).

A branch is the generated tokens (all appended blocks, mask id where still masked) plus how many
leading blocks live in the prefix cache. Every block state is derived from those two facts, so
a branch is cheap to copy and impossible to get out of sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lopa.settings import DecodeSettings, ModelSpec

CACHED, COMPLETE, ACTIVE_FULL, ACTIVE_SEMI = "cached", "complete", "active_full", "active_semi"


def min_forwards(n_tokens: int, block_size: int) -> int:
    """The fewest forwards in which any decoder of this pipeline can write `n_tokens` tokens (EOS
    included): a round appends at most one block (step 2), and a token is written by the forward
    after its block exists, so block b's tokens need at least b + 1 forwards. Dividing an answer's
    tokens by this gives the highest TPF any k can reach on it, however sure the model is."""
    return -(-n_tokens // block_size)


@dataclass(frozen=True)
class Branch:
    tokens: torch.Tensor     # [n_blocks * N] generated tokens, mask id where masked
    n_cached: int            # leading blocks whose K/V is in the prefix cache
    block_size: int
    mask_id: int

    @classmethod
    def start(cls, settings: DecodeSettings, spec: ModelSpec) -> Branch:
        """One all-mask block after the prompt (D2F step 1)."""
        tokens = torch.full((settings.block_size,), spec.mask_token_id, dtype=torch.long)  # [N]
        return cls(tokens, 0, settings.block_size, spec.mask_token_id)

    @property
    def n_blocks(self) -> int:
        return self.tokens.numel() // self.block_size

    @property
    def window_start(self) -> int:
        return self.n_cached * self.block_size

    def window(self) -> torch.Tensor:
        """Tokens the next forward recomputes: every uncached block. [W]"""
        return self.tokens[self.window_start:]

    def masked(self) -> torch.Tensor:
        return self.tokens == self.mask_id  # [n_blocks * N]

    def n_filled(self) -> int:
        """Positions holding a token (not the mask id)."""
        return int((~self.masked()).sum())

    def decoded_fraction(self) -> torch.Tensor:
        return (~self.masked()).view(self.n_blocks, self.block_size).float().mean(-1)  # [n_blocks]

    def fully_activated(self, settings: DecodeSettings) -> list[bool]:
        """Block 0 from the start; block i+1 once block i's decoded fraction >= tau_act (step 3)."""
        frac = self.decoded_fraction().tolist()
        return [True] + [f >= settings.tau_act for f in frac[:-1]]

    def states(self, settings: DecodeSettings) -> list[str]:
        full = self.fully_activated(settings)
        complete = (self.decoded_fraction() == 1.0).tolist()
        return [CACHED if b < self.n_cached else COMPLETE if complete[b] else ACTIVE_FULL if full[b] else ACTIVE_SEMI
                for b in range(self.n_blocks)]

    def eos_committed(self, spec: ModelSpec) -> bool:
        return bool(torch.isin(self.tokens, torch.tensor(spec.eos_token_ids)).any())

    def with_tokens(self, positions: torch.Tensor, tokens: torch.Tensor) -> Branch:
        """A copy with `tokens` written at generated `positions`."""
        new = self.tokens.clone()
        new[positions] = tokens
        return Branch(new, self.n_cached, self.block_size, self.mask_id)

    def with_block_added(self, settings: DecodeSettings, spec: ModelSpec) -> Branch:
        """D2F step 2: append one all-mask block when the last block's decoded fraction >= tau_add,
        fewer than max_new_tokens / N blocks exist and no EOS has been committed."""
        if (self.n_blocks >= settings.max_blocks or self.eos_committed(spec)
                or float(self.decoded_fraction()[-1]) < settings.tau_add):
            return self
        pad = torch.full((self.block_size,), self.mask_id, dtype=torch.long)  # [N]
        return Branch(torch.cat([self.tokens, pad]), self.n_cached, self.block_size, self.mask_id)

    def cacheable_blocks(self) -> int:
        """How many uncached blocks, from the front, are complete with complete predecessors (step 5)."""
        complete = (self.decoded_fraction() == 1.0).tolist()
        n = 0
        for b in range(self.n_cached, self.n_blocks):
            if not complete[b]:
                break
            n += 1
        return n

    def with_cached(self, n_blocks: int) -> Branch:
        return Branch(self.tokens, self.n_cached + n_blocks, self.block_size, self.mask_id)

    def finished(self, settings: DecodeSettings, spec: ModelSpec) -> bool:
        """Step 6: every appended block is committed and no block will be added."""
        if bool(self.masked().any()):
            return False
        return self.n_blocks >= settings.max_blocks or self.eos_committed(spec)


# Which branch's complete leading blocks join the prefix cache after a round (DecodeSettings.cache_schedule;
# docs/method.md, departure 2): the winner's at once ("eager"), or only those the anchor completed, as
# the authors' loop does, so a block a lookahead token completed is cached one forward later ("authors").
CACHE_SCHEDULES = {
    "eager": lambda branches, winner: branches[winner].cacheable_blocks(),
    "authors": lambda branches, winner: branches[0].cacheable_blocks(),
}

