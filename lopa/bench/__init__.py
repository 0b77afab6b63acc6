"""Benchmarks and evaluation. They print numbers and write files; they assert nothing.

    python -m lopa.bench          decoders on a problem set: accuracy, TPF, tokens/s (decoders.py)
    python -m lopa.bench.round    the cost of one verify forward against the number of branches
    python -m lopa.bench.bp       branch parallelism: traffic and wall time per world size
    python -m lopa.bench.fork     what a fork costs: resumed from a saved state or replayed
HumanEval grading runs generated code in a sandboxed child process (humaneval.py, over lopa.eval's
sandbox). Problems, prompts, grading, the hardware line and result files are the task layer's
(lopa.tasks).

Layer: imports the core, lopa.models, lopa.distributed, lopa.tasks and lopa.eval's sandbox; the
studies import its measurements (round.forward_times, the decoder rows).
"""
