"""The prefix K/V cache and the packed row of branch windows, which the cached executors
(lopa.forward, lopa.distributed) build their forwards on.

- PrefixKV: the prompt's and the cached blocks' K/V, stored once with batch 1 whatever k is, plus
  the window K/V a forward pre-writes for every branch until the winner's slice is committed.
- Packing: where each branch's window positions sit when all branches go as one row under
  block_causal attention (a branch shares the anchor's blocks before its extra token).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class PrefixKV:
    """K/V of the prompt and cached blocks, per layer, stored once with batch 1 whatever k is.

    Two phases per round (design note, "Two-phase cache"): during the forward every layer
    *pre-writes* the window K/V of all branches into `pending`; after selection, `commit` copies
    the winner's newly cached slice into the preallocated prefix. Memory grows with k only by
    the pending window, never by the prefix.
    """

    def __init__(self, capacity: int):
        self.capacity, self.length = capacity, 0
        self.kernel = "sdpa"             # the window attention kernel of the last forward (lopa.attention)
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def prefix(self, layer: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer not in self.keys:
            _, Hkv, _, D = like.shape
            self.keys[layer] = like.new_zeros(1, Hkv, self.capacity, D)    # [1, Hkv, capacity, D]
            self.values[layer] = like.new_zeros(1, Hkv, self.capacity, D)
        return self.keys[layer][:, :, :self.length], self.values[layer][:, :, :self.length]

    def prewrite(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        self.pending[layer] = (key, value)                                   # [B, Hkv, L, D] each

    def pending_slice(self, branch: int, n: int) -> torch.Tensor:
        """Branch `branch`'s pre-written K/V, first n input positions. -> [layers, 2, Hkv, n, D]"""
        return torch.stack([torch.stack([k[branch, :, :n], v[branch, :, :n]]) for _, (k, v) in sorted(self.pending.items())])

    def empty_slice(self, n: int) -> torch.Tensor:
        """A buffer shaped like pending_slice(., n), for receiving one. -> [layers, 2, Hkv, n, D]"""
        key = next(iter(self.pending.values()))[0]                            # [B, Hkv, L, D]
        return key.new_empty(len(self.pending), 2, key.shape[1], n, key.shape[3])

    def append(self, kv: torch.Tensor) -> None:
        """Phase 2: write a slice [layers, 2, Hkv, n, D] behind the prefix; the round's pending K/V is done."""
        n = kv.shape[3]
        assert self.length + n <= self.capacity, "prefix cache overflow"
        for i, layer in enumerate(sorted(self.pending)):
            self.keys[layer][0, :, self.length:self.length + n] = kv[i, 0]
            self.values[layer][0, :, self.length:self.length + n] = kv[i, 1]
        self.length += n
        self.pending.clear()

    def commit(self, branch: int, n: int) -> None:
        self.append(self.pending_slice(branch, n))

    def gathered_slice(self, index: torch.Tensor) -> torch.Tensor:
        """The pending K/V of a packed forward (one row) at input positions `index` [n]. -> [layers, 2, Hkv, n, D]"""
        return torch.stack([torch.stack([k[0, :, index], v[0, :, index]]) for _, (k, v) in sorted(self.pending.items())])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [*self.keys.values(), *self.values.values()])


@dataclass
class Packing:
    """Where each branch's window positions sit in one packed row (BatchedExecutor, block_causal).

    Under block_causal attention a block's outputs depend only on the prefix, the blocks before it and
    itself. A lookahead branch is the anchor plus one token, so every window block before the one that
    token lies in is the anchor's, token for token, and so are its outputs and K/V: branch j feeds only
    its window from `skip[j]` (a block boundary) on, and reads the anchor's K/V for the blocks before.
    All branches go as one row of `length` tokens, so no row is padded to the longest window either."""
    skip: list[int]          # per branch: leading window positions taken from the anchor (0 for the anchor)
    index: torch.Tensor      # [B, Lmax] packed position of each window position (0 beyond a window's end)
    owner: torch.Tensor      # [T] the branch each packed token belongs to
    local: torch.Tensor      # [T] its window position
    length: int              # T

    @classmethod
    def plan(cls, windows: list[torch.Tensor], block_size: int) -> Packing:
        anchor = windows[0]
        skip = [0]
        for w in windows[1:]:
            n = min(w.numel(), anchor.numel())
            differ = (w[:n] != anchor[:n]).nonzero()
            first = int(differ[0]) if differ.numel() else n          # first position unlike the anchor's
            skip.append(first // block_size * block_size)
        owner = torch.cat([torch.full((w.numel() - s,), j) for j, (w, s) in enumerate(zip(windows, skip))])
        local = torch.cat([torch.arange(s, w.numel()) for w, s in zip(windows, skip)])
        offsets = [0]
        for w, s in zip(windows, skip):
            offsets.append(offsets[-1] + w.numel() - s)
        index = torch.zeros(len(windows), max(w.numel() for w in windows), dtype=torch.long)
        for j, (w, s) in enumerate(zip(windows, skip)):
            index[j, :s] = torch.arange(s)                           # the anchor's own positions
            index[j, s:w.numel()] = offsets[j] + torch.arange(w.numel() - s)
        return cls(skip, index, owner, local, offsets[-1])

    def pays(self, windows: list[torch.Tensor]) -> bool:
        """Pack when it feeds fewer tokens than the padded batch and its one [T, T] attention stays
        within 4x the batch's B x [L, L] (always up to B = 4; many branches in one row would spend
        more on attention scores than packing saves in the projections)."""
        B, L = len(windows), max(w.numel() for w in windows)
        return self.length < B * L and self.length ** 2 <= 4 * B * L * L

    def mask(self, block_size: int) -> torch.Tensor:
        """[1, 1, T, T] bool: a token sees the tokens of its own branch in its block and earlier ones,
        and the anchor's tokens in the blocks its branch took from the anchor."""
        block = self.local // block_size                                            # [T]
        skip = torch.tensor(self.skip)[self.owner]                                  # [T]
        q_owner, k_owner = self.owner[:, None], self.owner[None, :]
        earlier = block[None, :] <= block[:, None]                                  # [T, T]
        shared = (k_owner == 0) & (self.local[None, :] < skip[:, None])
        return (earlier & ((k_owner == q_owner) | shared))[None, None]
