"""Evaluation through the harnesses the paper used, and one command per paper table. Every task run here
is a declared lopa.tasks Task (lopa.tasks.TASKS: its problems, prompt and grade), and what runs it is read
from the declaration: `lm_eval` (lm-eval from local files), `evalplus` (EvalPlus's evaluator), or neither
(decoded here and graded by its own tests, Table 1 HumanEval).

    lmeval.py     the tasks lm-eval runs (GSM8K, MATH, MBPP): the engine as an lm-eval model
    tasks.py      the lm-eval task configs, lm-eval's own YAML pointed at a task's local files; a code
                  task's (MBPP) made generation-only (its metric ran code in-process)
    code_eval.py  unit-test grading as HF code_eval does it, each program in the bubblewrap sandbox
                  (lopa.tasks.sandbox; MBPP 3-shot, Table 1 HumanEval)
    codegen.py    HumanEval(+) and MBPP+ decoded with the authors' prompts into samples.jsonl, which
                  the task grades (lopa.tasks.evalplus: EvalPlus's evaluator inside bubblewrap)
    paper.py      the paper's numbers (Tables 1 and 2), to print beside ours
    reproduce.py  `python -m lopa reproduce --table N --model ...`

Every evaluation saves its completions so a run can be re-graded. Nothing here downloads: data
comes from assets/ or from paths the user gives.

Problems, data files and their readers come from the task layer (lopa.tasks).

Layer: a harness beside lopa.bench, lopa.study and lopa.train, importing none of them (the core,
lopa.models and lopa.tasks, whose sandbox grades the code); the CLI runs reproduce.
"""
