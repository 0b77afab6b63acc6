"""The oracle study (lopa/study/oracle.py): an exact model of the synthetic family as an executor."""

import random
from types import SimpleNamespace

import pytest
import torch

from lopa.problems import final_answer, make_problem, phrasings, split
from lopa.settings import DecodeSettings, decoder_settings
from lopa.study.oracle import OracleExecutor, decode

MASK, EOS = 1, 0
SPEC = SimpleNamespace(mask_token_id=MASK, eos_token_ids=[EOS])


def test_phrasings_are_every_wording_of_the_same_answer():
    for steps in (1, 2, 3):
        plain, varied = (make_problem(random.Random(steps), steps, phrasing=p) for p in ("plain", "varied"))
        answers = phrasings(plain["answer"])
        assert len(answers) == len(set(answers)) == 2 * 8 ** (steps - 1)   # two wordings a line, four openers after line 1
        assert plain["answer"] in answers and varied["answer"] in answers
        assert set(phrasings(varied["answer"])) == set(answers)
        assert {final_answer(a) for a in answers} == {final_answer(plain["answer"])}


def test_oracle_distribution_is_the_share_of_agreeing_answers_it_can_see():
    answers = [[5, 6, 8, EOS], [7, 6, 9, EOS]]
    settings = DecodeSettings(block_size=2, max_new_tokens=4)
    tokens = torch.tensor([MASK, MASK, 8, MASK])                  # block 1's first token is filled
    causal = OracleExecutor(answers, 10, SPEC, settings).distribution(tokens)
    assert causal[0, 5] == causal[0, 7] == 0.5                   # the first position sees no answer token
    assert causal[1, 6] == 1.0                                    # both answers agree there
    assert causal[3, EOS] == 1.0 and causal[2, 8] == 0.5          # a block's first token cannot see its own block
    full = OracleExecutor(answers, 10, SPEC, settings, attention="full").distribution(tokens)
    assert full[0, 5] == 1.0 and full[1, 6] == 1.0               # full attention: the first token sees block 1
    nothing = OracleExecutor(answers, 10, SPEC, settings).distribution(torch.tensor([MASK, MASK, 3, MASK]))
    assert torch.allclose(nothing[3], torch.full((10,), 0.1))      # no right answer agrees: no preference


@pytest.fixture(scope="module")
def loaded():
    from lopa.models import load
    return load()


def test_oracle_decodes_right_and_plain_answers_leave_nothing_to_order(loaded):
    base = DecodeSettings(max_new_tokens=128, attention="block_causal")
    d2f, lopa = decoder_settings("d2f", base), decoder_settings("lopa", base, k=4)
    for p in split("heldout", 4, seed=3, max_steps=3):
        run = decode(loaded, p, d2f, phrasing="plain")
        assert run.text.strip() == p["answer"]
        assert run.metrics()["forwards"] == 1 + (len(run.useful_tokens) > 32)   # one forward a block: all sure
    varied = split("heldout", 6, seed=3, phrasing="varied")
    runs = {name: [decode(loaded, p, s) for p in varied] for name, s in (("d2f", d2f), ("lopa", lopa))}
    for name, rs in runs.items():
        assert all(r.text.strip() in phrasings(p["answer"]) for r, p in zip(rs, varied)), name
    forwards = {name: sum(r.metrics()["forwards"] for r in rs) for name, rs in runs.items()}
    assert forwards["lopa"] < forwards["d2f"]                     # open wordings: LoPA settles them sooner
