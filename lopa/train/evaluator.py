"""The bundled model's built-in evaluator during training: a fast batched greedy decoder over its layout
(lopa.tasks.layout) that scores held-out problems (lopa.train).

The engine (lopa.engine) is the real decoder; this one exists because it decodes a whole batch
of problems at once, one block at a time, which keeps an evaluation every few minutes cheap.

Shapes (notation in lopa/__init__.py): S sequences in a batch, L sequence length, V vocabulary.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from lopa.problems import final_answer
from lopa.tasks.layout import BLOCK_SIZE, PROMPT_TEMPLATE, hidden_states


@torch.no_grad()
def greedy_decode(model, tok, questions: list[str], max_blocks: int = 3, threshold: float = 0.9,
                  bf16: bool = False):
    """One block at a time: commit every masked position with max_prob > threshold, at least the
    most confident one per round (Fast-dLLM style). Returns (texts, rounds, committed tokens)."""
    spec = model.config.lopa
    mask_id, eos_id = spec["mask_token_id"], spec["eos_token_ids"][0]
    prompts = [tok(PROMPT_TEMPLATE.format(prompt=q))["input_ids"] for q in questions]
    S, P = len(prompts), max(len(p) for p in prompts)
    L = P + max_blocks * BLOCK_SIZE
    ids = torch.full((S, L), tok.pad_token_id, dtype=torch.long)
    block_id = torch.zeros((S, L), dtype=torch.long)
    valid = torch.zeros((S, L), dtype=torch.bool)
    starts = torch.tensor([len(p) for p in prompts])
    for i, p in enumerate(prompts):
        n = len(p) + max_blocks * BLOCK_SIZE
        ids[i, : len(p)] = torch.tensor(p)
        ids[i, len(p): n] = mask_id
        block_id[i, len(p): n] = 1 + torch.arange(max_blocks * BLOCK_SIZE) // BLOCK_SIZE
        valid[i, :n] = True
    done = torch.zeros(S, dtype=torch.bool)
    rounds = committed = 0
    cols = torch.arange(L)
    for b in range(max_blocks):
        lo = starts + b * BLOCK_SIZE  # [S]
        in_block = (cols[None] >= lo[:, None]) & (cols[None] < lo[:, None] + BLOCK_SIZE)  # [S, L]
        width = P + (b + 1) * BLOCK_SIZE  # later blocks are invisible under block-causal attention
        while True:
            todo = in_block & (ids == mask_id) & ~done[:, None]
            if not todo.any():
                break
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                h = hidden_states(model, ids[:, :width], block_id[:, :width], valid[:, :width])
                logits = model.lm_head(h).float()  # [S, width, V]
            # never "commit" the mask or pad token, or a position could stay masked forever
            logits[..., [mask_id, tok.pad_token_id]] = float("-inf")
            probs = logits.softmax(-1)
            conf, tokens = probs.max(-1)  # [S, width]
            # shift: position j is predicted by the output at j-1
            conf, tokens = F.pad(conf[:, :-1], (1, 0)), F.pad(tokens[:, :-1], (1, 0))
            cand = todo[:, :width]
            conf = torch.where(cand, conf, torch.full_like(conf, -1.0))
            commit = conf > threshold
            best = conf.argmax(-1)  # [S]
            has = cand.any(-1)
            commit[torch.arange(S)[has], best[has]] = True
            commit &= cand
            ids[:, :width] = torch.where(commit, tokens, ids[:, :width])
            rounds += 1
            committed += int(commit.sum())
        done |= ((ids == eos_id) & in_block).any(-1)
        if done.all():
            break
    texts = []
    for i in range(S):
        ans = ids[i, starts[i]:].tolist()
        ans = ans[: ans.index(eos_id)] if eos_id in ans else ans
        texts.append(tok.decode([a for a in ans if a != mask_id]))
    return texts, rounds, committed


def evaluate(model, tok, problems: list[dict], bf16: bool = True) -> dict:
    model.eval()
    t0 = time.time()
    texts, rounds, committed = greedy_decode(model, tok, [p["question"] for p in problems], bf16=bf16)
    model.train()
    hits = [final_answer(t) == final_answer(p["answer"]) for t, p in zip(texts, problems)]
    by_steps = {}
    for p, hit in zip(problems, hits):
        k = p["answer"].count("<<")
        by_steps.setdefault(k, []).append(hit)
    return {
        "acc": sum(hits) / len(hits),
        "by_steps": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_steps.items())},
        "tokens_per_round_per_sample": committed / max(rounds, 1) / len(problems),
        "eval_s": time.time() - t0,
        "example": texts[0],
    }
