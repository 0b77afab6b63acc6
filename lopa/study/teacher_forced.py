"""Teacher-forced probes of a model's answers: what it predicts when only some slots are masked.

    python -m lopa.study teacher-forced --data FILE.jsonl --n 100 [--model DIR]

Three probes per problem, each one forward over the reference answer with some slots masked:
- results: every computed number masked (the result and its copy after `>>`, the `####`
  number), the operands visible; a line's result is right when all its digits are. Line 1 can
  be recomputed from the question; a later line's result needs the operands written on it.
- objects / names: one object (name) at a time masked, everything else visible, so a later line
  could copy it from the line before.
Argmax predictions, logit shift as the engine decodes (the output at i-1 predicts token i). For
models in the bundled model's training layout (lopa.tasks.layout). Writes teacher-forced.csv /
.parquet (one row per probe kind) and teacher-forced.json beside the printed table.
"""

from __future__ import annotations

import re

import torch

from lopa.problems import NAMES, OBJECTS
from lopa.study.common import DEFAULT_SEED, hardware, load_problems, write_results
from lopa.study.declaration import Study
from lopa.tasks.layout import ANSWER_PREFIX, BLOCK_SIZE, PROMPT_TEMPLATE, hidden_states

CALC = re.compile(r"<<(\d+)[-+*/](\d+)=(\d+)>>(\d+)")
FINAL = re.compile(r"#### (\d+)")
WORD = re.compile(r"\b(" + "|".join(NAMES + OBJECTS) + r")\b")
STUDY = Study("teacher-forced", "Teacher-forced probes of the answers", rank=7)


def probe(model, tok, problem: dict, counts: dict) -> None:
    """Add this problem's probes to counts {kind: (right, total)}."""
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
    final = FINAL.search(text)
    if final is not None:
        results.append(("result ####", tokens(final.span(1))))
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
    from lopa.models import add_model_arguments, load_from_args
    from lopa.models.loading import DEFAULT_MODEL
    parser = STUDY.parser()         # its own frame: one forward per probe, no decode settings
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="model directory (the bundled model's layout)")
    parser.add_argument("--data", default="synthetic", help="synthetic (fresh, --problem-seed), heldout, or a .jsonl")
    parser.add_argument("--problem-seed", type=int, default=DEFAULT_SEED, help=f"default {DEFAULT_SEED}")
    parser.add_argument("--n", type=int, default=100, help="problems (default 100)")
    parser.add_argument("--out", default="study-out", help="output folder")
    parser.add_argument("--device")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the checkpoint's own modeling code")
    add_model_arguments(parser)
    args = parser.parse_args(argv)
    import pandas as pd
    torch.set_num_threads(args.threads)
    loaded = load_from_args(args)
    model, tok = loaded.model.float().eval(), loaded.tokenizer
    problems, where = load_problems(args.data, args.n, args.problem_seed)
    counts: dict = {}
    for p in problems:
        probe(model, tok, p, counts)
    print(f"{loaded.describe()}; {where}, n={len(problems)}, teacher-forced")
    for kind, (right, total) in sorted(counts.items()):
        print(f"  {kind}: {right}/{total} ({100 * right / total:.0f}%)")
    table = pd.DataFrame([{"probe": kind, "right": right, "total": total} for kind, (right, total) in sorted(counts.items())])
    meta = {"command": argv, "model": loaded.describe(), "hardware": hardware(loaded), "data": where,
            "seed": args.problem_seed, "summary": {kind: list(v) for kind, v in counts.items()}}
    files = write_results(args.out, STUDY.name, {"": table}, meta)
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
