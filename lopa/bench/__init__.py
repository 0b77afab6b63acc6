"""Benchmarks and evaluation. They print numbers and write files; they assert nothing.

    python -m lopa.bench          decoders on a problem set: accuracy, TPF, tokens/s (decoders.py)
    python -m lopa.bench.round    the cost of one verify forward against the number of branches
    python -m lopa.bench.bp       branch parallelism: traffic and wall time per world size
    python -m lopa.bench.fork     what a fork costs: resumed from a saved state or replayed
Each run decodes a task's problems (lopa.tasks.task_for: synthetic, GSM8K, HumanEval, whose grading runs
generated code in the task layer's sandbox). Problems, prompts, grading, the verify-forward timing, the
hardware line and result files are the task layer's (lopa.tasks).

Layer: a harness beside lopa.eval, lopa.study and lopa.train, importing none of them (the core,
lopa.models, lopa.distributed and lopa.tasks).
"""
