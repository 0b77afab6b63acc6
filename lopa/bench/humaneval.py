"""The bench's HumanEval grading: a reply becomes a program (lopa.tasks.humaneval: the problems,
prompts and program text live in the task layer) that runs in the code sandbox of lopa.eval.sandbox
(bubblewrap; the module says what it guarantees), the candidate and HumanEval's tests each in a
process of its own. Without bubblewrap it refuses unless the fallback is opted in to
(`--unsafe-fallback-sandbox`, or LOPA_UNSAFE_FALLBACK_SANDBOX=1). pass@1 with greedy decoding is the paper's HumanEval column (Table 1).
"""

from __future__ import annotations

# bubblewrap_available and network_isolation: the bench's command line reports which sandbox ran
from lopa.eval.sandbox import Program, bubblewrap_available, network_isolation, run_program  # noqa: F401
from lopa.tasks.humaneval import program_parts


def build_program(problem: dict, generated: str, chat: bool) -> Program:
    """The program the sandbox runs for one reply (lopa.tasks.humaneval.program_parts)."""
    return Program(*program_parts(problem, generated, chat))


def grade(problem: dict, generated: str, chat: bool = False, timeout: float = 10.0,
          allow_fallback: bool = False) -> dict:
    """Bench row fields for one problem: correct (0/1), predicted (the sandbox status), expected.
    `allow_fallback`: grade in the sandbox's fallback where bubblewrap cannot run (run_program)."""
    result = run_program(build_program(problem, generated, chat), timeout=timeout, allow_fallback=allow_fallback)
    return {"correct": int(result.passed), "predicted": result.status, "expected": "passed"}
