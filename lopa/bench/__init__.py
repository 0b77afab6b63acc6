"""Benchmarks and evaluation. They print numbers and write files; they assert nothing.

    python -m lopa.bench          decoders on a problem set: accuracy, TPF, tokens/s (decoders.py)
    python -m lopa.bench.round    the cost of one verify forward against the number of branches
    python -m lopa.bench.bp       branch parallelism: traffic and wall time per world size
    python -m lopa.bench.fork     what a fork costs: resumed from a saved state or replayed
HumanEval grading runs generated code in a sandboxed child process (humaneval.py).

Layer: imports the core, lopa.models and lopa.distributed; nothing imports it but the tests.
"""
