"""The bundled model's layout, shared by its trainer (lopa.train) and the studies that probe it
(lopa.study.teacher_forced): the prompt template, answer blocks of N = 32 right after the prompt, and
block-causal attention over them.

Shapes (notation in lopa/__init__.py): S sequences in a batch, L sequence length.
"""

from __future__ import annotations

import torch

BLOCK_SIZE = 32
PROMPT_TEMPLATE = "Question: {prompt}\nAnswer:"
ANSWER_PREFIX = " "  # the answer text follows "Answer:" after one space


def block_causal_mask(block_id: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """4-D boolean mask (True = may attend) from per-position block ids.

    block_id: [S, L] 0 for the prompt, b+1 for answer block b. valid: [S, L] False on padding.
    A query attends to every valid key whose block id is <= its own; padded queries attend
    only to themselves so no softmax row is empty (no NaNs).
    """
    allowed = (block_id[:, None, :] <= block_id[:, :, None]) & valid[:, None, :]  # [S, L, L]
    eye = torch.eye(block_id.shape[1], dtype=torch.bool, device=block_id.device)
    allowed = torch.where(valid[:, :, None], allowed, eye)
    return allowed[:, None]  # [S, 1, L, L]


def hidden_states(model, ids, block_id, valid):
    L = ids.shape[1]
    pos = torch.arange(L, device=ids.device).expand_as(ids)
    out = model.model(input_ids=ids, attention_mask=block_causal_mask(block_id, valid), position_ids=pos)
    return out.last_hidden_state  # [S, L, hidden]
