"""The attention a dependency-aware commit rule reads (commit=dawn, lopa.peers.dawn_sets), from the
forward the round already ran: no extra forward.

DAWN (arXiv 2602.06953; lizhuo-luo/DAWN, llada/model/modeling_llada.py `attn_avg` and lines 1534-1577)
averages each layer's softmax attention over the heads, then over the model's last four layers
(LLaDA-8B's layers 28-31, Dream-7B's 24-27), and reads the [L, L] result as a proxy of which position
depends on which. `AttentionProbe` collects the same average inside lopa.attention's shared-prefix
attention: the executor hangs one on its prefix cache only when the rule asks (`wants_attention`), so
a round under any other rule runs exactly the code it ran before (nothing recorded, nothing copied).

What differs from the published forward: our rows are the window's only (the prefix is cached, so its
rows are not recomputed), and each row's keys are [cached prefix ; the branch's own window]; the rule
reads the prefix as decoded context (docs/method.md, "Peers", dawn).
"""

from __future__ import annotations

import torch

LAST_LAYERS = 4      # DAWN averages its model's last four layers (LLaDA: layer_id >= 28 of 32; Dream: >= 24 of 28)


def wants_attention(settings) -> bool:
    """Whether a decode under `settings` reads its forwards' attention (commit=dawn)."""
    return settings.commit == "dawn"


class AttentionProbe:
    """Sums the head-mean attention probabilities of the last LAST_LAYERS layers of one forward.

    reset() before a forward; the attention function calls add() per layer; rows() after it gives each
    branch's window rows. The sum lives on the model's device until rows() copies the means to the host."""

    def __init__(self, n_layers: int):
        self.layers = set(range(max(n_layers - LAST_LAYERS, 0), n_layers))
        self.reset()

    def reset(self) -> None:
        self.total, self.count = None, 0

    def add(self, layer: int, probs: torch.Tensor, B: int, Hkv: int, G: int, L: int) -> None:
        """probs: [B, Hkv, G*L, P + L] softmax attention of one layer (query heads folded as lopa.attention
        folds them: head h = kv head h // G, group member h % G)."""
        if layer not in self.layers:
            return
        mean = probs.reshape(B, Hkv, G, L, -1).float().mean(dim=(1, 2))        # [B, L, P + L]
        self.total = mean if self.total is None else self.total + mean
        self.count += 1

    def rows(self, q0: int, lengths: list[int]) -> list[torch.Tensor]:
        """Branch j's window rows of the layer mean, on the host: [n_j, C_j] with C_j = P + q0 + n_j keys,
        the cached prefix and the input positions before the window first, the window's own n_j last.
        q0: the input index of window position 0 (the prompt's length while the prompt is in the input)."""
        if self.total is None:
            raise RuntimeError("no attention was recorded: the forward did not run lopa's shared-prefix attention")
        mean = (self.total / self.count).cpu()                                 # [B, L, P + L]
        P = mean.shape[-1] - mean.shape[1]
        return [mean[j, q0:q0 + n, :P + q0 + n] for j, n in enumerate(lengths)]
