"""The task layer: what a benchmark, an evaluation and a study do around a decode, written once.

    problems.py   where problems come from: the data-file map, fresh problems of a model's family,
                  GSM8K-format files, EvalPlus (HumanEval+, MBPP+) and MBPP files, the study's loader
    humaneval.py  HumanEval: its problems, its prompts, and the program text a reply becomes
    prompts.py    the GSM8K template, the few-shot prefix, a question's prompt ids
    grading.py    exact match on the `#### N` answer and the answer-line counts of a graded row
    hardware.py   the one line that says what the numbers ran on, and the software beside it
    results.py    rows and tables to CSV, Parquet and JSON, plots where matplotlib is installed
    turns.py      the Williams order in which configurations take their turns on each problem

Code is graded in lopa.eval's sandbox, above this layer: here a reply only becomes program text.

Layer: imports the core and lopa.models; lopa.eval, lopa.bench and lopa.study import it.
"""
