"""Evaluation through the harnesses the paper used, and one command per paper table.

    lmeval.py     GSM8K, MATH and MBPP through lm-eval: the engine as an lm-eval model
    tasks.py      the lm-eval task configs, lm-eval's own YAML pointed at local files; MBPP's made
                  generation-only (its metric ran code in-process)
    code_eval.py  unit-test grading as HF code_eval does it, each program in the bubblewrap sandbox
                  (lopa.tasks.sandbox; MBPP 3-shot, Table 1 HumanEval)
    codegen.py    HumanEval+ and MBPP+ through EvalPlus: the authors' prompts, samples.jsonl,
                  EvalPlus's evaluator run inside the bubblewrap sandbox
    paper.py      the paper's numbers (Tables 1 and 2), to print beside ours
    reproduce.py  `python -m lopa reproduce --table N --model ...`

Every evaluation saves its completions so a run can be re-graded. Nothing here downloads: data
comes from assets/ or from paths the user gives.

Problems, prompts and data files come from the task layer (lopa.tasks).

Layer: a harness beside lopa.bench, lopa.study and lopa.train, importing none of them (the core,
lopa.models and lopa.tasks, whose sandbox grades the code); the CLI runs reproduce.
"""
