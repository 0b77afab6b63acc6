"""A scripted fake dLLM: the distribution at each generated position is a rule you write.

`script(g, visible) -> (token, p)` gives, for generated position g (0 = first after the prompt)
and the generated tokens the query can see (dict g -> token, masks left out), the token that
gets probability p; the other V - 1 tokens share 1 - p equally. The model honours the 4-D mask
it is given, so attention rules show through, and applies the logit shift when asked: with
shift, the output at position i carries the prediction for position i + 1, as Dream's does.
"""

from dataclasses import dataclass
from types import SimpleNamespace

import torch

MASK, EOS = 0, 1


@dataclass
class FakeConfig:
    vocab_size: int


class FakeDLLM(torch.nn.Module):
    def __init__(self, prompt_len, script, vocab=16, shift=True):
        super().__init__()
        self.prompt_len, self.script, self.vocab, self.shift = prompt_len, script, vocab, shift
        self.config = FakeConfig(vocab)
        self.anchor = torch.nn.Parameter(torch.zeros(1))   # gives the module a device

    def forward(self, input_ids, attention_mask, position_ids, use_cache=False, **kwargs):
        B, L = input_ids.shape
        logits = torch.zeros(B, L, self.vocab, dtype=torch.float64)
        for b in range(B):
            for i in range(L):
                target = int(position_ids[b, i]) + int(self.shift) - self.prompt_len
                sees = attention_mask[b, 0, i, -L:]
                visible = {int(position_ids[b, j]) - self.prompt_len: int(input_ids[b, j]) for j in range(L)
                           if sees[j] and int(input_ids[b, j]) != MASK and int(position_ids[b, j]) >= self.prompt_len}
                token, p = self.script(target, visible) if target >= 0 else (2, 0.5)
                probs = torch.full((self.vocab,), (1 - p) / (self.vocab - 1), dtype=torch.float64)
                probs[token] = p
                logits[b, i] = probs.log()
        return SimpleNamespace(logits=logits)


def table_script(table, default=(EOS, 0.99)):
    """script from {g: (token, p)} or {g: callable(visible) -> (token, p)}."""
    def script(g, visible):
        entry = table.get(g, default)
        return entry(visible) if callable(entry) else entry
    return script
