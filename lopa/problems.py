"""Seeded GSM8K-style multi-step arithmetic word problems for the bundled tiny model.

Each problem follows one person's stock of one kind of object through `steps` operations
(buy, give away, scale, split into boxes, sell at a price). Every operation acts on the
previous result, so a later step cannot be written before the earlier one is known: this
dependency is what makes the token filling order matter (LoPA, Sec. 1).

The wording uses a handful of short templates on purpose: a tiny model trained on a CPU
has little capacity, and it should go to copying operands and doing the arithmetic, not to
prose. Answers are written the GSM8K way, one reasoning line per step with a calculator
annotation `<<a+b=c>>c`, then a final `#### c` line.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import random
import re
from pathlib import Path

NAMES = ("Tom", "Anna", "Ben", "Mia", "Sam", "Lily", "Jack", "Emma", "Leo", "Sara")
PRONOUNS = {"Tom": "He", "Ben": "He", "Sam": "He", "Jack": "He", "Leo": "He",
            "Anna": "She", "Mia": "She", "Lily": "She", "Emma": "She", "Sara": "She"}
FRIENDS = ("a friend", "a cousin", "a neighbor", "the teacher", "a classmate")
OBJECTS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "eggs")

# Question sentence / answer line per operation; {a} previous amount, {b} operand, {c} result.
TEMPLATES = {
    "add": ("{P} buys {b} more.", "{N} now has <<{a}+{b}={c}>>{c} {o}."),
    "get": ("{P} gets {b} more from {f}.", "{N} now has <<{a}+{b}={c}>>{c} {o}."),
    "sub": ("{P} gives {b} to {f}.", "{N} has <<{a}-{b}={c}>>{c} {o} left."),
    "mul": ("Then {p} ends up with {b} times as many.", "{N} ends up with <<{a}*{b}={c}>>{c} {o}."),
    "div": ("{P} splits them equally into {b} boxes and keeps one box.",
            "{N} keeps <<{a}/{b}={c}>>{c} {o}."),
}
# The sell step only appears last, because it changes the question (dollars, not objects).
SELL = ("{P} sells each one for {b} dollars.", "{N} earns <<{a}*{b}={c}>>{c} dollars.")

# Answer phrasings. "plain" writes every line with the one template above. "varied"
# opens each line with one of a few openers and writes it in one of two wordings, so that, like a
# real model's answer, a problem has many right answers that agree on every number. With one
# wording an accurate model is sure of every token at once, every decoder fills a block in one
# round, and there is no token filling order to watch; with several, the positions of a line stay
# uncertain until one token says which wording it is, and which token to fill first matters
# (LoPA, Sec. 1). Openers change the length of a line, so they also shift every later line.
# The first line has none: under the logit shift the answer's first token is predicted by the
# prompt's last position, which block-causal attention keeps blind to the answer, so that token
# could never depend on what the decoder fills after it (a run with first-line openers wrote
# "Leoo Leo now has ...": an opener's second piece, then a name where its first piece belongs).
# "openers" keeps every line's plain wording and only opens each later line with one of
# eight openers: the line shifts as a whole, which leaves the model's plain lines as they were.
# "adverbs" (the family of open-gsm-dllm's second training stage) keeps every line's plain
# verb, and after the name comes " now" (one line in four) or nothing ("Tom has ...", "Tom now has
# ..."). That one token moves the rest of its line, and every later line, by 0 or 1 position, so until
# it is committed nothing after it is sure: one committed token decides many others, the regime where
# the filling order sets the speed (LoPA, Sec. 1). The choice is one token, so a parallel fill cannot
# splice the pieces of two choices, and it sits after the name, so the first line has it too (the name
# is what the prompt predicts). "Nothing" is the likelier reading (3/4) on purpose: D2F commits one
# fallback token per block in the same round, and where a line's choice straddles a block boundary,
# two blocks that favour different readings write "Tom has has"; with one reading above 1/2 at every
# position, every block favours the same one (the exact model of the family, lopa.study.oracle,
# wrote 4 such lines in 60 answers with four equally likely adverbs and none with this weighting).
# "ladder", the default model's family (assets/models/open-gsm-dllm), nests the choice (LoPA, Sec. 1: D2F's
# fallback commits the most confident token, not the most telling one). A line splits the phrase " by now in
# total" at d = 0..4: the first d words go after the name, the rest before the full stop ("Tom by now has
# <<3+4=7>>7 apples in total."). The full phrase after the name is the likeliest reading (1/2), d = 0 1/5, d =
# 1, 2, 3 1/10 each. Every split's front is a prefix of the next, so the position after the name reads " by" in
# 4 readings of 5 (0.8, under the commit threshold 0.9), the next " now" in 7 of the 8 left (0.875), then 6/7,
# 5/6: D2F's fallback, which commits the most confident masked token, peels one level a round, and each level
# only rules out one shorter front while the rest of the line, shifted by d, stays unsure. A lookahead branch
# that fills a later position with the full reading's token settles the line in one round. The two parts always
# make the whole phrase, so every line, and every answer, has one length whatever the splits: the end of the
# answer and the later lines never depend on an unsettled line (a family whose lines grew with d had every
# block's tail read EOS in the shorter readings, and D2F cut answers short). The full reading is the likeliest
# at every position, so blocks filling in parallel favour the same reading, as under "adverbs". Its exact model
# (python -m lopa.study.oracle --phrasing ladder --n 30 --problem-seed 20611 --ks 0,1,4,8,14) decodes with D2F
# at TPF 3.82 and LoPA at 1.90x, 3.09x, 3.42x and 3.66x that at k = 1, 4, 8, 14, every answer right and
# grammatical: a choice nested four deep lifts the 1.8x bound of a one-level choice (docs/studies.md, section
# 4).
PHRASINGS = ("plain", "varied", "openers", "adverbs", "ladder")
ADVERBS = ("", "", "", " now")   # drawn uniformly, so "" has probability 3/4
LADDER_WORDS = (" by", " now", " in", " total")
LADDER_WEIGHTS = (2, 1, 1, 1, 5)       # of 10, for d = 0..4 words after the name
LADDER = tuple(("".join(LADDER_WORDS[:d]), "".join(LADDER_WORDS[d:]))
               for d, weight in enumerate(LADDER_WEIGHTS) for _ in range(weight))   # (after the name, before the stop)
ADVERB_LINES = {
    "add": "{N}{v} has <<{a}+{b}={c}>>{c} {o}.",
    "get": "{N}{v} has <<{a}+{b}={c}>>{c} {o}.",
    "sub": "{N}{v} has <<{a}-{b}={c}>>{c} {o} left.",
    "mul": "{N}{v} ends up with <<{a}*{b}={c}>>{c} {o}.",
    "div": "{N}{v} keeps <<{a}/{b}={c}>>{c} {o}.",
    "sell": "{N}{v} earns <<{a}*{b}={c}>>{c} dollars.",
}
OPENERS_FIRST = ("",)
OPENERS = ("", "Then ", "So ", "After that, ")
OPENERS_WIDE = ("", "Then ", "So ", "After that, ", "Next, ", "Now ", "And ", "Later, ")
WORDINGS = {
    "add": "{N} has <<{a}+{b}={c}>>{c} {o} now.",
    "get": "{N} has <<{a}+{b}={c}>>{c} {o} now.",
    "sub": "{N} is left with <<{a}-{b}={c}>>{c} {o}.",
    "mul": "{N} now has <<{a}*{b}={c}>>{c} {o}.",
    "div": "{N} keeps <<{a}/{b}={c}>>{c} {o} in one box.",
    "sell": "{N} makes <<{a}*{b}={c}>>{c} dollars.",
}

# Every amount stays below this. 30 keeps the arithmetic (results up to 29, two digits) within
# what a 1.4M-parameter model learns in an hour on a CPU; the first recipe (200) did not (README).
DEFAULT_MAX_VALUE = 30

HELDOUT_MOD = 5  # one question in five (by hash) belongs to the held-out split

ANSWER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
CALC_RE = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)")  # a line's calculator annotation and its copy


def final_answer(text: str) -> str | None:
    """The number after the last `#### `, commas dropped; None when there is none."""
    found = ANSWER_RE.findall(text)
    if not found:
        return None
    return found[-1].replace(",", "")


WORD_RE = re.compile(r"[A-Za-z]+")


def copied_names(question: str, text: str) -> tuple[int, int]:
    """(right, checked) answer lines: a line with a calculator annotation is checked, and right when
    it names a person or an object of the problem family and every one it names is in the question.
    ("Jack now has <<7+2=9>>9 pencils." for Leo's stickers is wrong twice over.)"""
    asked = set(WORD_RE.findall(question))
    known = set(NAMES) | set(OBJECTS)
    right = checked = 0
    for line in text.splitlines():
        if "<<" not in line:
            continue
        named = [w for w in WORD_RE.findall(line) if w in known]
        checked += 1
        right += bool(named) and all(w in asked for w in named)
    return right, checked


def _operand(rng: random.Random, op: str, a: int, max_value: int) -> int | None:
    """A valid operand for `op` on amount `a`, or None when `op` cannot apply to `a`."""
    if op in ("add", "get"):
        hi = min(max_value // 4, max_value - 1 - a)
        return rng.randint(1, hi) if hi >= 1 else None
    if op == "sub":
        hi = min(max_value // 4, a - 1)
        return rng.randint(1, hi) if hi >= 1 else None
    if op in ("mul", "sell"):
        ks = [k for k in range(2, 6) if a * k < max_value]
        return rng.choice(ks) if ks else None
    if op == "div":
        ks = [k for k in range(2, 6) if a % k == 0 and a // k >= 2]
        return rng.choice(ks) if ks else None
    raise ValueError(f"unknown operation {op!r}")


def _apply(op: str, a: int, b: int) -> int:
    return {"add": a + b, "get": a + b, "sub": a - b, "mul": a * b, "sell": a * b,
            "div": a // b}[op]


def line_choices(op: str, line: int, phrasing: str = "varied") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(openers, wordings) that a "varied", "openers", "adverbs" or "ladder" answer line for `op` takes one of each
    from (repeated entries are likelier);
    line 0 is the first. The first wording is the plain template's."""
    plain = (SELL if op == "sell" else TEMPLATES[op])[1]
    if phrasing == "adverbs":
        return ("",), tuple(ADVERB_LINES[op].replace("{v}", v) for v in ADVERBS)
    if phrasing == "ladder":
        return ("",), tuple(ADVERB_LINES[op][:-1].replace("{v}", front) + back + "." for front, back in LADDER)
    if phrasing == "openers":
        return (OPENERS_WIDE if line else OPENERS_FIRST), (plain,)
    return (OPENERS if line else OPENERS_FIRST), (plain, WORDINGS[op])


def answer_line(op: str, fields: dict, line: int, phrasing: str, rng: random.Random) -> str:
    """The answer line for one operation: the template's wording, or under "varied" an opener and
    either wording, under "openers" an opener and the template's wording, drawn from `rng`."""
    openers, wordings = line_choices(op, line, phrasing)
    if phrasing == "plain":
        return wordings[0].format(**fields)
    opener = rng.choice(openers)
    return opener + rng.choice(wordings).format(**fields)


def make_problem(rng: random.Random, steps: int, max_value: int = DEFAULT_MAX_VALUE,
                 phrasing: str = "plain") -> dict:
    """One problem with `steps` dependent operations; every intermediate stays < max_value.
    The phrasing draws from a generator seeded by the question, never from `rng`, so a problem's
    question is the same under every phrasing and a plain recipe replays the data it always had."""
    if phrasing not in PHRASINGS:
        raise ValueError(f"phrasing must be one of {PHRASINGS}, got {phrasing!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if max_value < 20:
        raise ValueError(f"max_value must be >= 20 so every operation can apply, got {max_value}")
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    pron = PRONOUNS[name]
    a = rng.randint(2, max_value // 4)
    question = [f"{name} has {a} {obj}."]
    lines = []  # (operation, its fields)
    for i in range(steps):
        last = i == steps - 1
        ops = list(TEMPLATES) + (["sell"] if last else [])
        while True:  # some operations do not fit every amount (e.g. 7 split into boxes)
            op = rng.choice(ops)
            b = _operand(rng, op, a, max_value)
            if b is not None:
                break
        c = _apply(op, a, b)
        fields = dict(P=pron, p=pron.lower(), N=name, o=obj, f=rng.choice(FRIENDS), a=a, b=b, c=c)
        question.append((SELL if op == "sell" else TEMPLATES[op])[0].format(**fields))
        lines.append((op, fields))
        a = c
    if op == "sell":
        question.append(f"How many dollars does {name} earn?")
    else:
        question.append(f"How many {obj} does {name} have now?")
    question = " ".join(question)
    words = random.Random(f"phrasing-{question}")
    answer = [answer_line(op, fields, i, phrasing, words) for i, (op, fields) in enumerate(lines)]
    return {"question": question, "answer": "\n".join(answer + [f"#### {a}"])}


def phrasings(answer: str, phrasing: str = "varied") -> list[str]:
    """Every answer that `phrasing` can write for the problem whose answer (in any phrasing) is
    `answer`, each listed as often as its weight (a list entry is one equally likely draw): the
    answers an exact model of the family weighs (lopa.exact). Each line's person, object and numbers
    are read back from the line. A "plain" answer has one wording: itself."""
    if phrasing == "plain":
        return [answer]
    lines = answer.splitlines()
    choices = []
    for i, line in enumerate(lines[:-1]):
        a, sym, b, c, _ = CALC_RE.search(line).groups()
        words = WORD_RE.findall(line)
        op = {"+": "add", "-": "sub", "/": "div"}.get(sym) or ("sell" if "dollars" in words else "mul")
        fields = dict(N=next(w for w in words if w in NAMES), o=next((w for w in words if w in OBJECTS), "dollars"),
                      a=a, b=b, c=c)
        openers, wordings = line_choices(op, i, phrasing)
        choices.append([o + w.format(**fields) for o in openers for w in wordings])
    return ["\n".join(combo + (lines[-1],)) for combo in itertools.product(*choices)]


# ---------------------------------------------------------------- the family's grammar

_FIELDS = {"N": "(?:" + "|".join(NAMES) + ")", "o": "(?:" + "|".join(OBJECTS) + ")",
           "a": r"\d+", "b": r"\d+", "c": r"\d+"}
FINAL_LINE = re.compile(r"#### \d+")


def _template_pattern(template: str) -> str:
    """A template's text escaped, its {N} {o} {a} {b} {c} fields as the words and numbers they stand for."""
    return "".join(_FIELDS[piece[1]] if re.fullmatch(r"\{\w\}", piece) else re.escape(piece)
                   for piece in re.split(r"(\{\w\})", template))


@functools.cache
def line_grammar(phrasing: str, first: bool) -> re.Pattern:
    """Every reasoning line the `phrasing` family can write as the first (or a later) line of an answer,
    as one pattern: each operation's openers and wordings with any name, object and numbers."""
    if phrasing not in PHRASINGS:
        raise ValueError(f"phrasing must be one of {PHRASINGS}, got {phrasing!r}")
    alternatives = []
    for op in (*TEMPLATES, "sell"):
        if phrasing == "plain":
            openers, wordings = ("",), ((SELL if op == "sell" else TEMPLATES[op])[1],)
        else:
            openers, wordings = line_choices(op, 0 if first else 1, phrasing)
        alternatives += [re.escape(o) + _template_pattern(w) for o in openers for w in wordings]
    return re.compile("|".join(dict.fromkeys(alternatives)))


def grammatical_lines(text: str, phrasing: str) -> tuple[int, int]:
    """(well-formed, all) lines of a generated answer: a line is well-formed when the family could
    have written it there, a reasoning line (line_grammar) or, last, the `#### N` line. A parallel
    fill that splices two readings of a line ("Tom has has <<...") fails it, whatever its numbers."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    ok = sum(bool(line_grammar(phrasing, i == 0).fullmatch(line)
                  or (i == len(lines) - 1 and FINAL_LINE.fullmatch(line)))
             for i, line in enumerate(lines))
    return ok, len(lines)


def is_heldout(question: str) -> bool:
    """Split membership by a hash of the question text, so the splits can never share one."""
    digest = hashlib.sha256(question.encode()).digest()
    return digest[0] % HELDOUT_MOD == 0


def sample_steps(rng: random.Random, max_steps: int) -> int:
    return rng.randint(1, max_steps)


def split(name: str, n: int, seed: int = 0, max_steps: int = 3, max_value: int = DEFAULT_MAX_VALUE,
          phrasing: str = "plain") -> list[dict]:
    """`n` distinct problems from split `name` ("train" or "heldout"), 1..max_steps steps; the
    questions do not depend on `phrasing`, only the reference answers' wording does."""
    if name not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {name!r}")
    want_heldout = name == "heldout"
    rng = random.Random(f"{name}-{seed}")
    seen, out = set(), []
    while len(out) < n:
        p = make_problem(rng, sample_steps(rng, max_steps), max_value, phrasing)
        if is_heldout(p["question"]) != want_heldout or p["question"] in seen:
            continue
        seen.add(p["question"])
        out.append(p)
    return out


FAMILY = "synthetic-gsm"   # the name config.lopa.problems gives this module's problems


def family_problems(family: dict, n: int, seed: int) -> list[dict]:
    """`n` fresh held-out problems of the family a model's config names (config.lopa.problems, written by
    lopa.train), reference answers in its phrasing: how anyone checks a bundled model on problems
    nobody has seen (`python -m lopa.bench --problem-seed S`)."""
    if family.get("name") != FAMILY:
        raise ValueError(f"unknown problem family {family.get('name')!r}; this module writes {FAMILY!r}")
    return split("heldout", n, seed, family.get("max_steps", 3), family.get("max_value", DEFAULT_MAX_VALUE),
                 family.get("phrasing", "plain"))


def write_jsonl(path: str | Path, problems: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in problems:
            f.write(json.dumps({"question": p["question"], "answer": p["answer"]}) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="Write a split of synthetic problems as GSM8K-format JSONL.")
    ap.add_argument("--split", default="heldout", choices=("train", "heldout"))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--max-value", type=int, default=DEFAULT_MAX_VALUE)
    ap.add_argument("--phrasing", default="plain", choices=PHRASINGS,
                    help="wording of the reference answers (the bundled model writes 'plain'; the questions are the same)")
    ap.add_argument("--out", default="assets/data/synthetic/heldout.jsonl")
    args = ap.parse_args(argv)
    write_jsonl(args.out, split(args.split, args.n, args.seed, args.max_steps, args.max_value, args.phrasing))
    print(f"wrote {args.n} {args.split} problems to {args.out}")


if __name__ == "__main__":
    main()
