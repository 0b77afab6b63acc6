import random
import re

import pytest

from lopa.problems import final_answer, make_problem
from lopa.train.counterfactual import counterfactual, person_and_object

CALC = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)")


@pytest.mark.parametrize("seed", range(20))
def test_counterfactual_answer_is_valid_arithmetic_about_the_questions_person_and_object(seed):
    rng = random.Random(seed)
    steps = 1 + seed % 3
    p = make_problem(rng, steps)
    cf = counterfactual(rng, p, steps, 30)
    assert cf["question"] == p["question"] and cf["answer"] != p["answer"]
    name, obj = person_and_object(p["question"])
    lines = cf["answer"].splitlines()
    assert len(lines) == steps + 1
    previous = None
    for line in lines[:-1]:
        assert line.startswith(name)
        assert obj in line or "dollars" in line
        a, op, b, c, c2 = CALC.search(line).groups()
        assert int(c) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b),
                          "/": int(a) // int(b)}[op] and c == c2
        assert previous is None or a == previous  # a later line starts from the previous result
        previous = c2
    assert final_answer(cf["answer"]) == previous
    # the other people and objects of the family never leak in
    others = {"Tom", "Anna", "Ben", "Mia", "Sam", "Lily", "Jack", "Emma", "Leo", "Sara"} - {name}
    assert not others & set(re.findall(r"[A-Za-z]+", cf["answer"]))


def test_person_and_object_rejects_other_text():
    with pytest.raises(ValueError):
        person_and_object("Janet's ducks lay 16 eggs per day.")


def test_counterfactual_rows_are_drawn_only_when_on(tmp_path):
    """Off (the default) flags no row; on, about its probability of the rows."""
    from lopa.train.data import make_batch
    from lopa.train.recipe import Recipe
    from lopa.train.tokenizer import build_tokenizer, save_tokenizer, training_texts

    tok = save_tokenizer(build_tokenizer(training_texts(None, n_synthetic=300), vocab_size=400), tmp_path / "tok")
    off = make_batch(tok, random.Random(0), Recipe(batch=8), progress=1.0)
    assert not off.forced.any()
    on = make_batch(tok, random.Random(0), Recipe(batch=64, counterfactual_prob=0.5), progress=1.0)
    assert 10 < int(on.forced.sum()) < 54
