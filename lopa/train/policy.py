"""On-policy rows: the states the model's own decodes reach, with the family's exact conditionals as targets.

The random masks of lopa/train/noise.py train every conditional, but not in the proportions a decoder
meets them. On the masks it trains on, open-gsm-dllm is calibrated (the NLL-optimal softmax temperature
is 1.0-1.05); at the partial states D2F's own commits create it is not: it commits a line's back part
(" in total.") at ~0.9 while the front is open, where the family allows it about 1 time in 7, and the
line comes out spliced (model card). These rows practise exactly those states. Each step decodes one
training problem with the engine, under the paper's settings (D2F vanilla, or LoPA with k branches,
`Recipe.policy_ks`), collects every state a forward of that decode verified (the anchor's and each
lookahead branch's), and trains the model's prediction at each masked position toward the family's
true distribution there (lopa/exact.py: the weighted share of the problem's right answers that agree
with what the position sees). This is D2F's recipe of distilling a teacher's conditionals into the
student (D2F, asymmetric distillation) with the exact conditionals as the teacher, on the student's own
states (as DAgger does), so nothing but the model's calibration at those states changes: the targets
are what any decoder would be right to believe there, never the decoder's own choices. Positions no
right answer agrees with (a state after a splice or a wrong number) get no target.

Shapes (notation in lopa/__init__.py): S states, L sequence length, V vocabulary, M target positions.
"""

from __future__ import annotations

import random
from collections import Counter

import torch

from lopa.engine import Decoder
from lopa.exact import exact_distribution, reading_table
from lopa.models.loading import spec_from_pretrained
from lopa.problems import phrasings
from lopa.settings import DecodeSettings, decoder_settings
from lopa.tasks.layout import ANSWER_PREFIX, BLOCK_SIZE, hidden_states


def rollout_settings(k: int, max_new_tokens: int = 128) -> DecodeSettings:
    """The paper's GSM8K settings: D2F vanilla for k = 0, else LoPA with k lookahead branches."""
    base = DecodeSettings(max_new_tokens=max_new_tokens)
    return decoder_settings("lopa", base, k=k) if k else decoder_settings("d2f", base)


def visited_states(run) -> list[torch.Tensor]:
    """Every generated-token state [n] (mask id where masked) a forward of `run` verified: before a
    round's window the final tokens (cached blocks never change), in it the branch's tokens as verified."""
    final = torch.tensor(run.tokens, dtype=torch.long)
    states = []
    for r in run.records:
        for window in r.branch_tokens:
            states.append(torch.cat([final[: r.window_start], torch.tensor(window, dtype=torch.long)]))
    return states


def targets(state: torch.Tensor, cands: torch.Tensor, weights: torch.Tensor, mask_id: int, vocab: int,
            skip: torch.Tensor | None = None):
    """(positions [M], probs [M, V]) of `state`'s masked positions that some right answer explains,
    less those where a token of `skip` [V] bool is possible (the digits: see policy_rows)."""
    masked = (state == mask_id).nonzero().flatten().tolist()
    probs, defined = exact_distribution(state, cands[:, : state.numel()], weights, mask_id, vocab, BLOCK_SIZE,
                                        "block_causal", masked)
    if skip is not None:
        defined &= ~(probs[:, skip] > 0).any(1)
    keep = torch.tensor([g for g in masked if defined[g]], dtype=torch.long)
    return keep, probs[keep]


def policy_rows(model, tok, problem: dict, phrasing: str, k: int, n_states: int, rng: random.Random,
                skip: torch.Tensor | None = None):
    """Up to `n_states` states drawn from one decode of `problem` by the model itself, as training rows:
    a list of (prompt ids [P], state [n], target positions [M], target probs [M, V]).

    `skip` [V] bool: positions where one of these tokens is possible get no target (the trainer's
    `policy_numbers=False` passes the digits). Open-gsm-dllm's stage 6 keeps them (model card): given the
    question alone a number's exact conditional is certain, which this model cannot compute for a 3-step
    answer, and its 3-step accuracy dipped for the first 20 minutes (96.9 -> 87.5%, D2F, dev
    seed 60013) before it came back (93.8% at the end); without them (words only) D2F's TPF rose instead
    (4.08 -> 4.84 after 10 minutes) and LoPA's lead fell to 2.7x, so that run was not used."""
    spec = spec_from_pretrained(model.config, tok, "training")
    was_training = model.training
    model.eval()
    try:
        run = Decoder(model, spec, rollout_settings(k), tok).run(problem["question"])
    finally:
        model.train(was_training)
    eos, mask_id, vocab = spec.eos_token_ids[0], spec.mask_token_id, model.config.vocab_size
    texts = Counter(phrasings(problem["answer"], phrasing))            # a likelier reading is listed more often
    answers = [tok(ANSWER_PREFIX + a)["input_ids"] + [eos] for a in texts]
    states = visited_states(run)
    cands, weights = reading_table(answers, max(s.numel() for s in states), eos, list(texts.values()))
    rows = []
    for state in rng.sample(states, min(n_states, len(states))):
        pos, probs = targets(state, cands, weights, mask_id, vocab, skip)
        if len(pos):
            rows.append((torch.tensor(run.prompt_ids, dtype=torch.long), state, pos, probs))
    return rows


def policy_loss(model, rows, pad_id: int) -> torch.Tensor:
    """Mean cross-entropy of the model's predictions against the exact distributions (KL up to a constant)."""
    L = max(len(p) + len(s) for p, s, _, _ in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)                     # [S, L]
    block_id = torch.zeros((len(rows), L), dtype=torch.long)
    valid = torch.zeros((len(rows), L), dtype=torch.bool)
    sel_rows, sel_cols, target = [], [], []
    for i, (prompt, state, pos, probs) in enumerate(rows):
        P, n = len(prompt), len(state)
        ids[i, :P], ids[i, P: P + n] = prompt, state
        block_id[i, P: P + n] = 1 + torch.arange(n) // BLOCK_SIZE
        valid[i, : P + n] = True
        sel_rows.append(torch.full((len(pos),), i))
        sel_cols.append(P + pos - 1)                # logit shift: the output at P+g-1 predicts position g
        target.append(probs)
    h = hidden_states(model, ids, block_id, valid)                                   # [S, L, hidden]
    logits = model.lm_head(h[torch.cat(sel_rows), torch.cat(sel_cols)]).float()       # [M, V]
    return -(torch.cat(target) * logits.log_softmax(-1)).sum(-1).mean()
