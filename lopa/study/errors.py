"""Where a model's answers go wrong, line by line, on synthetic problems (the model card's table).

    python -m lopa.study errors --data FILE.jsonl --n 300 [--model DIR] [--k 0] [--lookahead-min-prob 0]

Decodes with the engine (D2F vanilla at k = 0, the default; paper GSM8K settings, every settings flag
applies) and checks each answer line `<<a op b = c>>c2` against the reference: the first operand (read
from the question on line 1, copied from the previous line's result after that), the second operand
(always from the question), the operation, the arithmetic given the line's own operands, the copy
after `>>`, the `####` line, and the person and object named. Each wrong answer is charged to its
first error. It also prints how uneven the confidence landscape is: rounds per answer, the share of
answer tokens filled in the first round, and the spread (standard deviation) of the fill round over
an answer's positions; a model sure of every token would fill everything in one or two rounds. And
it says who wrote each wrong person or object token (the anchor or a lookahead token) and at what max
prob it was committed: under LoPA those are where a lookahead floor (--lookahead-min-prob) acts.
Writes errors.csv / .parquet (one row per problem) and errors.json beside the printed table.
"""

from __future__ import annotations

import collections
import math
import statistics

from lopa.problems import CALC_RE as CALC
from lopa.problems import NAMES, OBJECTS, WORD_RE, final_answer
from lopa.study.common import decode_one, start, write_results
from lopa.study.declaration import Study
from lopa.tasks.grading import exact_match
from lopa.trace import LOOKAHEAD, fill_landscape, fills

STUDY = Study("errors", "Where answers go wrong, line by line", rank=6, n=300, k=0)

APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
         "/": lambda a, b: a // b if b else None}


def line_errors(question: str, reference: str, text: str) -> tuple[list[str], list[str]]:
    """(errors in order of appearance, per-line verdicts: 'ok', or what is wrong: 'person', 'object', 'both')."""
    asked, known = set(WORD_RE.findall(question)), set(NAMES) | set(OBJECTS)
    want = [CALC.search(line) for line in reference.splitlines() if "<<" in line]
    got_lines = [line for line in text.splitlines() if "<<" in line]
    errors, names, previous = [], [], None
    for i, line in enumerate(got_lines):
        named = [w for w in WORD_RE.findall(line) if w in known]
        person = any(w in NAMES for w in named) and all(w in asked for w in named if w in NAMES)
        thing = all(w in asked for w in named if w in OBJECTS)  # a sell line names dollars, no object
        names.append("ok" if person and thing else "person" if thing else "object" if person else "both")
        m = CALC.search(line)
        if m is None:
            errors.append("unreadable line")
            continue
        if i >= len(want):
            errors.append("extra line")
            break
        a, op, b, c, c2 = m.groups()
        _, want_op, want_b, _, _ = want[i].groups()
        if i == 0 and a != want[0].group(1):
            errors.append("line 1: first operand misread from the question")
        if i > 0 and a != previous:
            errors.append("later line: first operand not the previous line's result")
        if op != want_op:
            errors.append("wrong operation")
        elif b != want_b:
            errors.append(f"{'line 1' if i == 0 else 'later line'}: second operand misread from the question")
        if APPLY[op](int(a), int(b)) != int(c):
            errors.append(f"{'line 1' if i == 0 else 'later line'}: arithmetic wrong ({op}) for its own operands")
        if c2 != c:
            errors.append("result after >> not copied")
        previous = c2
    if len(got_lines) < len(want):
        errors.append("missing lines")
    if previous is not None and final_answer(text) != previous:
        errors.append("#### not the last line's result")
    return errors, names


def wrong_name_writers(run, question: str, tokenizer) -> list[tuple[bool, float | None]]:
    """(written by a lookahead token?, the max prob it was committed at) for every person or object
    token of the answer that is not in the question."""
    asked, known = set(WORD_RE.findall(question)), set(NAMES) | set(OBJECTS)
    filled = fills(run.records)
    words = ((p, tokenizer.decode([t]).strip()) for p, t in enumerate(run.useful_tokens))
    return [(filled[p].how == LOOKAHEAD, filled[p].max_prob) if p in filled else (False, None)
            for p, w in words if w in known and w not in asked]


def main(argv=None) -> int:
    args = STUDY.parse(argv)
    import pandas as pd
    started = start(args)
    loaded, problems, settings = started.loaded, started.problems, started.base
    first, every, by_steps, verdicts = collections.Counter(), collections.Counter(), collections.Counter(), []
    rounds, first_round, spread, wrong_names, rows = [], [], [], [], []
    for p in problems:
        if not p.get("answer"):
            raise ValueError("the errors study needs reference answers: use a GSM8K-format .jsonl or synthetic")
        run, _ = decode_one(loaded, settings, p, data=args.data, shots=args.shots)
        text = run.text
        landscape = fill_landscape(run.records, len(run.useful_tokens))
        rounds.append(len(run.records) - 1)                     # rounds after the prefill
        first_round.append(landscape["first_fill_share"])
        spread.append(landscape["fill_spread"])
        steps = p["answer"].count("<<")
        right = bool(exact_match(text, p["answer"])[0])
        by_steps[(steps, right)] += 1
        errors, names = line_errors(p["question"], p["answer"], text)
        verdicts += names
        wrong_names += wrong_name_writers(run, p["question"], loaded.tokenizer)
        every.update(set(errors))
        if not right:
            first[errors[0] if errors else "other"] += 1
        rows.append({"problem": p["id"], "steps": steps, "right": int(right),
                     "first_error": "" if right else (errors[0] if errors else "other"), "errors": "; ".join(errors)})
    n_wrong = sum(first.values())
    print(f"{loaded.describe()}; {started.where}, n={len(problems)}, k={settings.k}")
    for s in sorted({s for s, _ in by_steps}):
        ok, total = by_steps[(s, True)], by_steps[(s, True)] + by_steps[(s, False)]
        print(f"  {s}-step: {ok}/{total} right ({100 * ok / total:.1f}%)")
    lines, count = max(len(verdicts), 1), collections.Counter(verdicts)
    print(f"  right: {len(problems) - n_wrong}/{len(problems)}; answer lines naming the question's person and "
          f"object: {count['ok']}/{len(verdicts)} ({100 * count['ok'] / lines:.1f}%); wrong person only "
          f"{count['person']}, wrong object only {count['object']}, both wrong {count['both']}")
    writers = {}
    for by_lookahead, who in ((False, "anchor"), (True, "lookahead")):
        probs = [q for la, q in wrong_names if la == by_lookahead and q is not None and not math.isnan(q)]
        writers[who] = {"tokens": sum(la == by_lookahead for la, _ in wrong_names),
                        "mean_max_prob": statistics.mean(probs) if probs else None}
        print(f"  wrong person/object tokens written by {'the anchor' if who == 'anchor' else 'a lookahead token'}: "
              f"{writers[who]['tokens']}" + (f", committed at a mean max prob of {statistics.mean(probs):.3f}"
                                              if probs else ""))
    print(f"  landscape: {statistics.mean(rounds):.1f} rounds per answer, "
          f"{100 * statistics.mean(first_round):.0f}% of answer tokens filled in the first round, "
          f"fill-round spread over positions {statistics.mean(spread):.2f} rounds")
    print("\n| first error in a wrong answer | answers | answers with this error anywhere |\n|---|---:|---:|")
    for error, n in first.most_common():
        print(f"| {error} | {n} | {every[error]} |")
    summary = {"right": len(problems) - n_wrong, "problems": len(problems), "first_errors": dict(first),
               "errors_anywhere": dict(every), "line_verdicts": dict(count), "wrong_name_writers": writers}
    files = write_results(args.out, STUDY.name, {"": pd.DataFrame(rows)}, started.meta(argv, args, summary))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
