"""Teacher-forced probes of a model's answers: what it predicts when only some slots are masked.

    python scripts/teacher_forced.py --data runs/data/dev_5077.jsonl --n 100 [--model DIR]

Three probes per problem, each one forward over the reference answer with some slots masked:
- results: every computed number masked (the result and its copy after `>>`, the `####`
  number), the operands visible; a line's result is right when all its digits are. Line 1 can
  be recomputed from the question; a later line's result needs the operands written on it.
- objects / names: one object (name) at a time masked, everything else visible, so a later line
  could copy it from the line before.
Argmax predictions, logit shift as the engine decodes (the output at i-1 predicts token i).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lopa.problems import NAMES, OBJECTS, read_jsonl  # noqa: E402
from lopa.train.layout import ANSWER_PREFIX, BLOCK_SIZE, PROMPT_TEMPLATE, hidden_states  # noqa: E402

CALC = re.compile(r"<<(\d+)[-+*/](\d+)=(\d+)>>(\d+)")
FINAL = re.compile(r"#### (\d+)")
WORD = re.compile(r"\b(" + "|".join(NAMES + OBJECTS) + r")\b")


def probe(model, tok, problem: dict, counts: dict):
    mask_id = model.config.lopa["mask_token_id"]
    prompt = tok(PROMPT_TEMPLATE.format(prompt=problem["question"]))["input_ids"]
    text = ANSWER_PREFIX + problem["answer"]
    enc = tok(text, return_offsets_mapping=True)
    answer = enc["input_ids"] + [tok.eos_token_id]
    answer += [tok.eos_token_id] * (-len(answer) % BLOCK_SIZE)
    P, ids = len(prompt), prompt + answer

    def tokens(span):  # answer-token indices covering a character span, shifted past the prompt
        return [P + i for i, (s, e) in enumerate(enc["offset_mapping"]) if s < span[1] and e > span[0]]

    results = [("result line 1" if i == 0 else "result later line", tokens(m.span(3)) + tokens(m.span(4)))
               for i, m in enumerate(CALC.finditer(text))]
    results.append(("result ####", tokens(FINAL.search(text).span(1))))
    words = [("object" if m.group(1) in OBJECTS else "name", tokens(m.span(1))) for m in WORD.finditer(text)]
    block_id = torch.tensor([[0] * P + [1 + i // BLOCK_SIZE for i in range(len(answer))]])
    masks = [results] + [[w] for w in words]  # all results at once; one name or object at a time
    for slots in masks:
        x = torch.tensor([ids])
        x[0, [i for _, group in slots for i in group]] = mask_id
        with torch.no_grad():
            pred = model.lm_head(hidden_states(model, x, block_id, torch.ones_like(x, dtype=torch.bool)))[0].argmax(-1)
        for kind, group in slots:
            hit = all(int(pred[i - 1]) == ids[i] for i in group)
            right, total = counts.get(kind, (0, 0))
            counts[kind] = (right + hit, total + 1)


def main(argv=None) -> int:
    from lopa.models import load

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load(args.model)
    model, tok = loaded.model.float().eval(), loaded.tokenizer
    counts: dict = {}
    for p in read_jsonl(args.data)[: args.n]:
        probe(model, tok, p, counts)
    print(f"{loaded.describe()}; {Path(args.data).name}, n={args.n}, teacher-forced")
    for kind, (right, total) in sorted(counts.items()):
        print(f"  {kind}: {right}/{total} ({100 * right / total:.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
