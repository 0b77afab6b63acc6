"""The benchmarks run end to end on a tiny model and write what they promise."""

import csv
import json

from tiny import save_tiny_model_dir

from lopa.bench import decoders as bench
from lopa.bench import round as bench_round


def test_bench_writes_summary_details_and_plot(tmp_path, capsys):
    model = save_tiny_model_dir(tmp_path / "model")
    data = tmp_path / "p.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answer": f"he buys = 3\n#### {a}"})
                              for q, a in [("Tom has 3 apples ?", 3), ("how many apples ?", 4)]))
    data.write_text(data.read_text().replace("he buys = 3", "he buys <<1+2=3>>3", 1))  # one 1-step answer
    out = tmp_path / "out"
    code = bench.main(["--model", str(model), "--data", str(data), "--n", "2", "--decoders", "one_token,d2f,lopa-k2,lopa-k2-random",
                       "--block-size", "8", "--max-new-tokens", "16", "--out", str(out)])
    assert code == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["decoder"] for r in rows] == ["one_token", "d2f", "lopa-k2", "lopa-k2-random"]
    assert float(rows[0]["tpf_useful"]) <= 1.0 + 1e-9          # one token per forward, at most
    details = list(csv.DictReader((out / "problems.csv").open()))
    assert len(details) == 8 and [r["steps"] for r in details[:2]] == ["1", "0"]
    assert (out / "accuracy_vs_tpf.png").stat().st_size > 1000
    assert "acc" in capsys.readouterr().out


def test_bench_round_prints_the_table(tmp_path, capsys):
    model = save_tiny_model_dir(tmp_path / "model")
    assert bench_round.main(["--model", str(model), "--repeats", "1", "--prompts", "1"]) == 0
    out = capsys.readouterr().out
    assert "ms/forward" in out and "bookkeeping at k = 8" in out


def test_bench_fork_prints_resume_and_replay(tmp_path, capsys):
    from lopa.bench import fork as bench_fork
    model = save_tiny_model_dir(tmp_path / "model")
    assert bench_fork.main(["--model", str(model), "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "resume ms" in out and "replay ms" in out and "one token per round" in out
