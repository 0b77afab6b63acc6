import random
import re

import pytest

from lopa.problems import final_answer, is_heldout, make_problem, read_jsonl, split, write_jsonl

ANNOTATION = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)")


def test_make_problem_is_deterministic_per_seed():
    a = [make_problem(random.Random(7), s) for s in (1, 2, 3)]
    b = [make_problem(random.Random(7), s) for s in (1, 2, 3)]
    assert a == b


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_annotations_are_correct_and_chained(steps):
    rng = random.Random(steps)
    for _ in range(200):
        p = make_problem(rng, steps, max_value=200)
        found = ANNOTATION.findall(p["answer"])
        assert len(found) == steps
        prev = None
        for a, op, b, c, shown in found:
            a, b, c = int(a), int(b), int(c)
            expected = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
            assert c == expected and shown == str(c)
            if op == "/":
                assert a % b == 0
            assert 0 <= c < 200
            if prev is not None:  # each step acts on the previous result
                assert a == prev
            prev = c
        assert final_answer(p["answer"]) == str(prev)
        assert p["answer"].splitlines()[-1] == f"#### {prev}"


def test_final_answer_parsing():
    assert final_answer("so 3+4=<<3+4=7>>7\n#### 7") == "7"
    assert final_answer("#### 1,234") == "1234"
    assert final_answer("#### -5") == "-5"
    assert final_answer("#### 2.5") == "2.5"
    assert final_answer("a #### 3 then #### 4") == "4"
    assert final_answer("no answer here") is None


def test_splits_are_disjoint_and_deterministic():
    train = split("train", 2000, seed=0)
    held = split("heldout", 300, seed=0)
    assert split("heldout", 300, seed=0) == held
    tq, hq = {p["question"] for p in train}, {p["question"] for p in held}
    assert len(hq) == 300 and not tq & hq
    assert all(is_heldout(q) for q in hq) and not any(is_heldout(q) for q in tq)
    assert split("heldout", 50, seed=0) == held[:50]  # the in-training eval set is a prefix


def test_bundled_heldout_file_matches_generator(tmp_path):
    from pathlib import Path

    bundled = Path(__file__).resolve().parents[1] / "assets" / "data" / "synthetic" / "heldout.jsonl"
    rows = read_jsonl(bundled)
    assert len(rows) == 500 and rows[:20] == split("heldout", 20, seed=0)
    write_jsonl(tmp_path / "x.jsonl", rows[:3])
    assert read_jsonl(tmp_path / "x.jsonl") == rows[:3]


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        make_problem(random.Random(0), 0)
    with pytest.raises(ValueError):
        split("test", 3)


def test_varied_phrasing_keeps_questions_numbers_and_names():
    from lopa.problems import CALC_RE, OPENERS, OPENERS_FIRST, copied_names

    plain, varied = split("heldout", 200, seed=11), split("heldout", 200, seed=11, phrasing="varied")
    assert [p["question"] for p in plain] == [p["question"] for p in varied]   # only the wording differs
    assert varied == split("heldout", 200, seed=11, phrasing="varied")          # and it is seeded
    openers = set()
    for p, v in zip(plain, varied):
        assert final_answer(v["answer"]) == final_answer(p["answer"])
        assert CALC_RE.findall(v["answer"]) == CALC_RE.findall(p["answer"])     # same arithmetic, same order
        right, lines = copied_names(v["question"], v["answer"])
        assert right == lines == p["answer"].count("<<")
        for i, line in enumerate(v["answer"].splitlines()[:-1]):
            openers.add((i > 0, next(o for o in sorted(OPENERS + OPENERS_FIRST, key=len, reverse=True)
                                     if line.startswith(o))))
    assert openers == {(False, o) for o in OPENERS_FIRST} | {(True, o) for o in OPENERS}
    assert sum(p["answer"] != v["answer"] for p, v in zip(plain, varied)) > 150


def test_openers_phrasing_shifts_plain_lines_by_an_opener():
    from lopa.problems import OPENERS_WIDE, phrasings

    plain, opened = split("heldout", 200, seed=12), split("heldout", 200, seed=12, phrasing="openers")
    assert [p["question"] for p in plain] == [p["question"] for p in opened]
    seen = set()
    for p, o in zip(plain, opened):
        want, got = p["answer"].splitlines(), o["answer"].splitlines()
        assert got[0] == want[0] and got[-1] == want[-1]                        # no first-line opener
        for w, g in zip(want[1:-1], got[1:-1]):
            assert g.endswith(w) and g[: len(g) - len(w)] in OPENERS_WIDE       # the plain line, opened
            seen.add(g[: len(g) - len(w)])
        every = phrasings(o["answer"], "openers")
        assert o["answer"] in every and p["answer"] in every
        assert len(every) == len(OPENERS_WIDE) ** (len(want) - 2)
    assert seen == set(OPENERS_WIDE)


def test_unknown_phrasing_is_refused():
    with pytest.raises(ValueError, match="phrasing"):
        make_problem(random.Random(0), 2, phrasing="poetic")


# ---------------------------------------------------------------- the family's grammar

@pytest.mark.parametrize("phrasing", ["plain", "varied", "openers", "adverbs", "ladder"])
def test_grammar_accepts_every_answer_the_family_writes(phrasing):
    from lopa.problems import PHRASINGS, grammatical_lines, phrasings
    assert phrasing in PHRASINGS
    for p in split("heldout", 60, seed=3, phrasing=phrasing):
        lines = p["answer"].count("\n") + 1
        assert grammatical_lines(p["answer"], phrasing) == (lines, lines)
        if phrasing != "plain":                       # and every other wording the oracle weighs
            assert all(grammatical_lines(a, phrasing) == (lines, lines) for a in phrasings(p["answer"], phrasing)[:20])


ADVERB_ANSWER = " Tom now has <<3+2=5>>5 apples.\nTom has <<5-1=4>>4 apples left.\nTom earns <<4*2=8>>8 dollars.\n#### 8"


@pytest.mark.parametrize("text, expected", [
    (ADVERB_ANSWER, (4, 4)),
    ("Tom has has <<3+2=5>>5 apples.\n#### 5", (1, 2)),                 # two readings of the line spliced
    ("Tom now now has <<3+2=5>>5 apples.\n#### 5", (1, 2)),
    ("Tom has <<3+2=5>>5 apples\n#### 5", (1, 2)),                      # no full stop
    ("Nd Tom now has <<3+2=5>>5 apples.\n#### 5", (1, 2)),              # a garbled opener
    ("Bob has <<3+2=5>>5 apples.\n#### 5", (1, 2)),                     # not a name of the family
    ("Tom has <<3+2=5>>5 dollars.\n#### 5", (1, 2)),                    # dollars only from a sale
    ("#### 5\nTom has <<3+2=5>>5 apples.", (1, 2)),                     # the answer line comes last
    ("Then Tom has <<3+2=5>>5 apples.\n#### 5", (1, 2)),                # another family's opener
    ("", (0, 0)),
])
def test_grammar_on_hand_made_lines(text, expected):
    from lopa.problems import grammatical_lines
    assert grammatical_lines(text, "adverbs") == expected


def test_grammar_is_per_family():
    from lopa.problems import grammatical_lines
    assert grammatical_lines("Tom then has <<3+2=5>>5 apples.\n#### 5", "adverbs") == (1, 2)
    assert grammatical_lines("Tom has <<3+2=5>>5 apples.\nThen Tom now has <<5+1=6>>6 apples.\n#### 6", "openers") == (2, 3)
    assert grammatical_lines("Tom has <<3+2=5>>5 apples.\nThen Tom now has <<5+1=6>>6 apples.\n#### 6", "plain") == (1, 3)
    with pytest.raises(ValueError, match="phrasing"):
        grammatical_lines("Tom has", "poetry")


def test_adverbs_choose_one_token_after_the_name_and_leave_the_numbers():
    from lopa.problems import ADVERBS, phrasings
    p = split("heldout", 1, seed=9, phrasing="adverbs")[0]
    plain = split("heldout", 1, seed=9)[0]
    assert p["question"] == plain["question"] and final_answer(p["answer"]) == final_answer(plain["answer"])
    steps = plain["answer"].count("<<")
    assert len(phrasings(p["answer"], "adverbs")) == len(ADVERBS) ** steps
    counts = {"": 0, " now": 0}          # "" is the likelier reading (3 of 4): see the comment on ADVERBS
    for q in split("train", 400, seed=1, phrasing="adverbs"):
        for line in q["answer"].splitlines()[:-1]:
            counts[" now" if line.split()[1] == "now" else ""] += 1
    assert 0.65 < counts[""] / sum(counts.values()) < 0.85


@pytest.mark.parametrize("text, expected", [
    (" Tom by now in total has <<3+2=5>>5 apples.\nTom by has <<5-1=4>>4 apples left now in total.\n"
     "Tom earns <<4*2=8>>8 dollars by now in total.\n#### 8", (4, 4)),          # splits 4, 1 and 0
    ("Tom by now has <<3+2=5>>5 apples in total.\nTom by now in has <<5+1=6>>6 apples total.\n#### 6", (3, 3)),
    ("Tom by now in total has <<3+2=5>>5 apples total.\n#### 5", (1, 2)),      # two splits spliced: a word twice
    ("Tom by now has <<3+2=5>>5 apples.\n#### 5", (1, 2)),                    # the phrase's end lost
    ("Tom by now in total <<3+2=5>>5 apples.\n#### 5", (1, 2)),               # the verb lost
    ("Tom now in total has <<3+2=5>>5 apples by.\n#### 5", (1, 2)),           # not a prefix after the name
    ("Tom now has <<3+2=5>>5 apples.\n#### 5", (1, 2)),                       # the adverbs family's line
])
def test_ladder_grammar_on_hand_made_lines(text, expected):
    from lopa.problems import grammatical_lines
    assert grammatical_lines(text, "ladder") == expected


def test_ladder_splits_one_phrase_the_full_front_likeliest_and_every_line_one_length():
    """Each line puts the first d words of the phrase after the name and the rest before the full stop;
    the full front is the likeliest reading (1/2) and the first word is there in 4 readings of 5, under
    the commit threshold 0.9; every reading of a line, and so of an answer, has the same length."""
    from lopa.models import load
    from lopa.problems import LADDER, LADDER_WORDS, phrasings
    full = "".join(LADDER_WORDS)
    assert all(front + back == full for front, back in LADDER)
    assert sum(front == full for front, _ in LADDER) / len(LADDER) == 0.5
    assert sum(front.startswith(LADDER_WORDS[0]) for front, _ in LADDER) / len(LADDER) < 0.9
    p = split("heldout", 1, seed=9, phrasing="ladder")[0]
    plain = split("heldout", 1, seed=9)[0]
    assert p["question"] == plain["question"] and final_answer(p["answer"]) == final_answer(plain["answer"])
    readings = phrasings(p["answer"], "ladder")
    assert len(readings) == len(LADDER) ** plain["answer"].count("<<")
    tok = load().tokenizer
    assert len({len(tok(" " + r, add_special_tokens=False)["input_ids"]) for r in readings}) == 1
    fronts = [line.split(" has")[0].split(" ends")[0].split(" keeps")[0].split(" earns")[0]
              for q in split("train", 300, seed=1, phrasing="ladder") for line in q["answer"].splitlines()[:-1]]
    assert 0.4 < sum(f.endswith(" total") for f in fronts) / len(fronts) < 0.6


def test_family_problems_follow_the_config():
    from lopa.problems import family_problems
    family = {"name": "synthetic-gsm", "phrasing": "adverbs", "max_steps": 2, "max_value": 30}
    drawn = family_problems(family, 30, seed=5)
    assert drawn == split("heldout", 30, 5, max_steps=2, phrasing="adverbs")
    assert max(p["answer"].count("<<") for p in drawn) == 2
    assert family_problems({**family, "phrasing": "plain"}, 30, 5) != drawn
    with pytest.raises(ValueError, match="unknown problem family"):
        family_problems({"name": "poems"}, 3, 0)
