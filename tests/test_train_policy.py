"""On-policy rows (lopa/train/policy.py): the states a decode visits, their exact targets, the loss."""

import dataclasses
import random

import torch
import torch.nn.functional as F
from test_train import TINY, _train

from lopa.models import load
from lopa.problems import LADDER_WEIGHTS, make_problem
from lopa.tasks.layout import hidden_states
from lopa.train import policy as P
from lopa.train import trainer as T
from lopa.train.losses import digit_ids
from lopa.train.recipe import Recipe


def _bundled():
    loaded = load(device="cpu")                    # the bundled default: open-gsm-dllm
    return loaded.model.float(), loaded.tokenizer


def test_visited_states_are_the_verified_windows_behind_the_final_prefix():
    model, tok = _bundled()
    problem = make_problem(random.Random(11), 2, phrasing="ladder")
    spec = P.spec_from_pretrained(model.config, tok, "t")
    run = P.Decoder(model, spec, P.rollout_settings(4), tok).run(problem["question"])
    states = P.visited_states(run)
    assert len(states) == sum(len(r.branch_tokens) for r in run.records)      # anchor and every branch, each round
    final = torch.tensor(run.tokens)
    mask = spec.mask_token_id
    it = iter(states)
    for r in run.records:
        anchor = None
        for j in range(len(r.branch_tokens)):
            state = next(it)
            filled = state != mask
            if j == r.winner:                                                   # the winner's commits stay
                assert torch.equal(state[filled], final[: len(state)][filled])
            if j == 0:
                anchor = state
            else:                                                               # a branch: the anchor + one token
                assert int((state != anchor).sum()) == 1
    # the first state (the prefill's anchor) has nothing filled; later ones more and more
    assert (states[0] == mask).all() and (states[-1] != mask).sum() > 0


def test_targets_are_the_familys_weights_where_the_line_is_open():
    model, tok = _bundled()
    problem = {"question": "Leo has 7 stickers. He buys 2 more. How many stickers does Leo have now?",
               "answer": "Leo has <<7+2=9>>9 stickers by now in total.\n#### 9"}
    eos, mask = 0, tok.mask_token_id
    texts = P.Counter(P.phrasings(problem["answer"], "ladder"))
    answers = [tok(" " + a)["input_ids"] + [eos] for a in texts]
    cands, weights = P.reading_table(answers, 40, eos, list(texts.values()))
    name = tok(" Leo")["input_ids"]
    state = torch.full((40,), mask)
    state[0] = name[0]                                         # the name written, the rest of the line open
    pos, probs = P.targets(state, cands, weights, mask, model.config.vocab_size)
    assert pos.tolist() == list(range(1, 40))
    after_name = probs[0]
    by, has = tok(" by")["input_ids"][0], tok(" has")["input_ids"][0]
    # d >= 1 words of " by now in total" after the name: weights 1 + 1 + 1 + 5 of 10
    assert abs(after_name[by] - sum(LADDER_WEIGHTS[1:]) / 10) < 1e-6
    assert abs(after_name[has] - LADDER_WEIGHTS[0] / 10) < 1e-6
    assert torch.allclose(probs.sum(1), torch.ones(len(pos)))
    # a token no reading has there leaves every later position of its block without a target
    state[1] = tok(" stickers")["input_ids"][0]
    pos2, _ = P.targets(state, cands, weights, mask, model.config.vocab_size)
    assert pos2.numel() == 0


def test_policy_loss_is_the_cross_entropy_at_the_shifted_outputs():
    model, tok = _bundled()
    problem = make_problem(random.Random(4), 3, phrasing="ladder")
    rows = P.policy_rows(model, tok, problem, "ladder", 0, 3, random.Random(0))
    assert rows and all(len(pos) == len(probs) for _, _, pos, probs in rows)
    # one-hot targets at each row's positions: the loss is plain cross-entropy, computed here row by row
    onehot = [(p, s, pos, F.one_hot(probs.argmax(1), probs.shape[1]).float()) for p, s, pos, probs in rows]
    loss = P.policy_loss(model, onehot, tok.pad_token_id)
    ces = []
    for prompt, state, pos, target in onehot:
        ids = torch.cat([prompt, state])[None]
        block = torch.cat([torch.zeros(len(prompt), dtype=torch.long), 1 + torch.arange(len(state)) // 32])[None]
        h = hidden_states(model, ids, block, torch.ones_like(ids, dtype=torch.bool))
        logits = model.lm_head(h[0, len(prompt) + pos - 1])
        ces.append(F.cross_entropy(logits, target.argmax(1), reduction="none"))
    assert torch.allclose(loss, torch.cat(ces).mean(), atol=1e-5)


def test_on_policy_rows_change_training_only_when_on(tmp_path):
    import shutil

    off, _ = _train(tmp_path / "off", steps=2)
    again, _ = _train(tmp_path / "again", steps=2)       # the same run twice: the same weights
    same = all(torch.equal(a, b) for a, b in zip(off.state_dict().values(), again.state_dict().values()))
    shutil.copytree(tmp_path / "off" / "tokenizer", tmp_path / "on" / "tokenizer")
    on = dataclasses.replace(TINY, policy_states=4, policy_ks="0,2")     # plain phrasing: one right answer
    model, _ = T.train(tmp_path / "on", on, minutes=None, steps=2, seed=0, resume=False,
                       export_dir=tmp_path / "on" / "model", ckpt_minutes=100, n_eval=0, log=lambda *_: None,
                       threads=1)
    differs = any(not torch.equal(a, b) for a, b in zip(off.state_dict().values(), model.state_dict().values()))
    assert same and differs
    state = torch.load(tmp_path / "on" / "checkpoint" / "state.pt", weights_only=False)
    assert state["recipe"]["policy_states"] == 4 and state["step"] == 2


def test_digits_can_be_left_without_targets():
    model, tok = _bundled()
    problem = {"question": "Leo has 7 stickers. He buys 2 more. How many stickers does Leo have now?",
               "answer": "Leo has <<7+2=9>>9 stickers by now in total.\n#### 9"}
    texts = P.Counter(P.phrasings(problem["answer"], "ladder"))
    answers = [tok(" " + a)["input_ids"] + [0] for a in texts]
    cands, weights = P.reading_table(answers, 40, 0, list(texts.values()))
    state = torch.full((40,), tok.mask_token_id)
    every, _ = P.targets(state, cands, weights, tok.mask_token_id, model.config.vocab_size)
    words, _ = P.targets(state, cands, weights, tok.mask_token_id, model.config.vocab_size, digit_ids(tok))
    digit_spots = {g for g in range(40) if digit_ids(tok)[cands[:, g]].any()}
    assert digit_spots and set(words.tolist()) == set(every.tolist()) - digit_spots
    assert Recipe().policy_numbers            # the shipped recipe keeps them (lopa/train/policy.py)
