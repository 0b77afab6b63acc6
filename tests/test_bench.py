"""The benchmarks run end to end on a tiny model and write what they promise."""

import csv
import json

from tiny import save_commit_filter, save_tiny_model_dir

from lopa.bench import decoders as bench
from lopa.bench import round as bench_round
from lopa.tasks.grading import score_answer
from lopa.trace import pooled


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
    assert "batched forward: lean (lopa.fast)" in out and "fast/eager" in out


def test_bench_fork_prints_resume_and_replay(tmp_path, capsys):
    from lopa.bench import fork as bench_fork
    model = save_tiny_model_dir(tmp_path / "model")
    assert bench_fork.main(["--model", str(model), "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "resume ms" in out and "replay ms" in out and "one token per round" in out


# A fixed problem set with saved completions: right, wrong arithmetic on the last line, right
# number with the wrong person and object, and no answer at all.
SCORED = [
    ({"question": "Leo has 7 stickers. He buys 2 more. How many stickers does Leo have now?",
      "answer": "Leo now has <<7+2=9>>9 stickers.\n#### 9"},
     "Leo now has <<7+2=9>>9 stickers.\n#### 9", dict(correct=1, steps=1, lines=1, names_right=1)),
    ({"question": "Mia has 4 eggs. She gives 1 to a friend. She buys 5 more. How many eggs does Mia have now?",
      "answer": "Mia has <<4-1=3>>3 eggs left.\nMia now has <<3+5=8>>8 eggs.\n#### 8"},
     "Mia has <<4-1=3>>3 eggs left.\nMia now has <<3+5=9>>9 eggs.\n#### 9", dict(correct=0, steps=2, lines=2, names_right=2)),
    ({"question": "Ben has 5 books. He buys 3 more. How many books does Ben have now?",
      "answer": "Ben now has <<5+3=8>>8 books.\n#### 8"},
     "Jack now has <<5+3=8>>8 pencils.\n#### 8", dict(correct=1, steps=1, lines=1, names_right=0)),
    ({"question": "Sara has 6 cards. She gives 2 to a cousin. She buys 1 more. Then she ends up with 2 times as "
                  "many. How many cards does Sara have now?",
      "answer": "Sara has <<6-2=4>>4 cards left.\nSara now has <<4+1=5>>5 cards.\nSara ends up with <<5*2=10>>10 cards.\n"
                "#### 10"},
     "Sara has <<6-2=4>>4 cards left.\nSara now has", dict(correct=0, steps=3, lines=1, names_right=1)),
]


def test_score_answer_on_saved_completions():
    for problem, text, expected in SCORED:
        scored = score_answer(problem, text)
        assert {k: scored[k] for k in expected} == expected, text


def test_summary_breaks_accuracy_down_by_steps_and_counts_names():
    from lopa.settings import DecodeSettings

    metrics = {"tokens_useful": 10, "tokens_paper": 12, "forwards": 4, "latency_s": 0.1, "first_round_s": 0.02,
               "forwards_floor": 2}
    rows = [{"decoder": "d2f", "problem": i, **score_answer(p, t), **metrics} for i, (p, t, _) in enumerate(SCORED)]
    s = bench.summarize_rows("d2f", DecodeSettings(), rows)
    assert s["accuracy"] == 0.5
    assert (s["acc_1step"], s["acc_2step"], s["acc_3step"]) == (1.0, 0.0, 0.0)
    assert s["names_ok"] == 4 / 5  # Ben's line names Jack and pencils
    assert s["tpf_useful"] == 2.5
    assert s["tpf_ceiling"] == 5.0   # 40 tokens in 8 blocks
    pool = pooled(rows)             # every decode metric is lopa.trace.pooled's, not a formula of the bench's own
    assert {key: s[key] for key in ("tpf_useful", "tps", "forwards_mean", "latency_s_mean")} == \
        {key: pool[key] for key in ("tpf_useful", "tps", "forwards_mean", "latency_s_mean")}


def test_step_table_prints_the_landscape_and_tpf_over_d2f(capsys):
    from lopa.settings import DecodeSettings

    def rows(name, forwards, spread):
        metrics = {"tokens_useful": 12, "tokens_paper": 12, "forwards": forwards, "latency_s": 0.1, "first_round_s": 0.0,
                   "forwards_floor": 1, "fill_spread": spread, "first_fill_share": 0.5}
        return [{"decoder": name, "problem": i, **score_answer(p, t), **metrics} for i, (p, t, _) in enumerate(SCORED)]

    details = rows("d2f", 6, 2.0) + rows("lopa-k4", 2, 1.0)
    summary = [bench.summarize_rows(n, DecodeSettings(), [r for r in details if r["decoder"] == n]) for n in ("d2f", "lopa-k4")]
    assert (summary[0]["fill_spread"], summary[1]["fill_spread"], summary[1]["first_fill_share"]) == (2.0, 1.0, 0.5)
    bench.print_step_table(summary, details)
    lines = capsys.readouterr().out.splitlines()
    assert "fill spread" in lines[1] and "TPF / D2F" in lines[1]
    assert lines[2].split()[0] == "d2f" and lines[2].endswith("1.00x") and "2.00" in lines[2].split()
    assert lines[3].split()[0] == "lopa-k4" and lines[3].endswith("3.00x") and "1.00" in lines[3].split()


def test_min_forwards_is_one_forward_per_block():
    from lopa.blocks import min_forwards

    assert [min_forwards(n, 32) for n in (1, 31, 32, 33, 64, 65)] == [1, 1, 1, 2, 2, 3]


def test_no_decoder_beats_the_pipeline_floor():
    """min_forwards is a floor for every decoder and k on real decodes of the bundled model."""
    from lopa.blocks import min_forwards
    from lopa.models import load
    from lopa.problems import read_jsonl
    from lopa.settings import DecodeSettings
    from lopa.tasks.sources import DATA_FILES

    loaded = load()
    problems = read_jsonl(DATA_FILES["heldout"])[:6]
    base = DecodeSettings(max_new_tokens=96, attention=loaded.spec.attention, block_size=16)
    for name in ("d2f", "lopa-k4", "lopa-k14", "lopa-k4-d3"):
        settings = bench.row_settings(name, base)
        rows = bench.run_decoder(loaded, name, settings, problems)
        for r in rows:
            assert r["forwards_floor"] == min_forwards(r["tokens_useful"], 16)
            assert r["forwards"] >= r["forwards_floor"] >= 2, (name, r)


def test_row_names_and_settings_flags_reach_every_row():
    import argparse

    import pytest

    from lopa.resolution import add_settings_arguments, flag_settings
    from lopa.settings import DecodeSettings

    base = DecodeSettings()
    assert bench.row_settings("lopa-k14-floor0.3", base).replace(lookahead_min_prob=0.0) == \
        bench.row_settings("lopa-k14", base)
    assert bench.row_settings("lopa-k4-random-floor0.5", base).lookahead_min_prob == 0.5
    assert bench.row_settings("lopa-k4-random-floor0.5", base).order == "random"
    with pytest.raises(ValueError, match="floor as a number"):
        bench.row_settings("lopa-k4-floorhigh", base)
    assert bench.row_settings("lopa-k14-d2", base) == base.replace(k=14, lookahead_depth=2)
    assert bench.row_settings("lopa-k4-random-d3-floor0.3", base) == \
        base.replace(k=4, order="random", lookahead_depth=3, lookahead_min_prob=0.3)
    with pytest.raises(ValueError, match="lookahead depth must be an integer in 1..8"):
        bench.row_settings("lopa-k4-d9", base)
    # every settings flag the bench accepts is passed on (it once dropped --order, --branch-score, ...)
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, choose_decoder=False)
    args = parser.parse_args(["--branch-score", "loo", "--lookahead-min-prob", "0.3", "--cache-schedule", "authors"])
    assert flag_settings(args) == {"branch_score": "loo", "lookahead_min_prob": 0.3, "cache_schedule": "authors"}


def test_copied_names_needs_a_name_and_only_the_question_s():
    from lopa.problems import copied_names

    q = "Leo has 7 stickers. He buys 2 more. How many stickers does Leo have now?"
    assert copied_names(q, "Leo now has <<7+2=9>>9 stickers.\n#### 9") == (1, 1)
    assert copied_names(q, "Leo now has <<7+2=9>>9 pencils.\n#### 9") == (0, 1)   # wrong object
    assert copied_names(q, "now has <<7+2=9>>9.\n#### 9") == (0, 1)                # names nobody
    assert copied_names(q, "#### 9") == (0, 0)                                       # no annotated line


def test_bench_draws_fresh_problems_of_the_model_s_family(tmp_path, capsys):
    import pytest
    model = save_tiny_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    args = ["--model", str(model), "--n", "3", "--decoders", "d2f", "--block-size", "8", "--max-new-tokens", "8",
            "--out", str(out), "--problem-seed", "7"]
    with pytest.raises(SystemExit):                   # the tiny model names no family
        bench.main(args)
    assert "names no problem family" in capsys.readouterr().err
    config = json.loads((model / "config.json").read_text())
    config["lopa"]["problems"] = {"name": "synthetic-gsm", "phrasing": "adverbs", "max_steps": 3, "max_value": 30}
    (model / "config.json").write_text(json.dumps(config))
    assert bench.main(args) == 0
    assert "synthetic-gsm-adverbs-seed7" in capsys.readouterr().out
    summary = list(csv.DictReader((out / "summary.csv").open()))[0]
    assert 0.0 <= float(summary["grammar_ok"]) <= 1.0     # the tiny model writes noise: mostly not the family's lines
    details = list(csv.DictReader((out / "problems.csv").open()))
    assert len(details) == 3 and all(int(r["grammar_lines"]) >= 0 for r in details)


def test_score_answer_counts_the_family_s_lines():
    problem = {"question": "Tom has 3 apples. He buys 2 more. How many apples does Tom have now?",
               "answer": "Tom has <<3+2=5>>5 apples.\n#### 5"}
    assert score_answer(problem, " Tom now has <<3+2=5>>5 apples.\n#### 5", "adverbs")["grammar_ok"] == 2
    assert score_answer(problem, " Tom has has <<3+2=5>>5 apples.\n#### 5", "adverbs")["grammar_ok"] == 1
    assert score_answer(problem, " Tom has has", None)["grammar_lines"] == 0      # no family: not counted


def tiny_bench(tmp_path, decoders: str, max_new_tokens: int):
    """`python -m lopa.bench` on a tiny model and one problem; returns its output folder. The model holds a commit
    filter (random weights) so that the `learned` rows run."""
    model = save_tiny_model_dir(tmp_path / "model")
    save_commit_filter(model, "neg_entropy")
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"question": "Tom has 3 apples ?", "answer": "#### 3"}))
    out = tmp_path / "out"
    assert bench.main(["--model", str(model), "--data", str(data), "--n", "1", "--decoders", decoders,
                       "--block-size", "8", "--max-new-tokens", str(max_new_tokens), "--out", str(out)]) == 0
    return out


def test_bench_numbers_do_not_need_matplotlib(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ModuleNotFoundError
    out = tiny_bench(tmp_path, "d2f", max_new_tokens=8)
    assert (out / "summary.csv").is_file() and not (out / "accuracy_vs_tpf.png").exists()
    assert "the plot needs matplotlib" in capsys.readouterr().out


def test_adaptive_rows_say_when_their_budget_is_not_fitted(tmp_path, capsys):
    model = save_tiny_model_dir(tmp_path / "model")
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"question": "Tom has 3 apples ?", "answer": "#### 3"}))
    args = ["--model", str(model), "--data", str(data), "--n", "1", "--decoders", "d2f,lopa-k2-adaptive",
            "--block-size", "8", "--max-new-tokens", "8", "--out", str(tmp_path / "out")]
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    assert "adaptive rows run with the settings' gain model" in out
    assert "lopa-k2-adaptive: cost curve: measured on cpu" in out                 # timed here, by default
    assert bench.main([*args, "--branch-cost", "0.5", "--adaptive-win", "0.9"]) == 0          # a study's flags
    out = capsys.readouterr().out
    assert "adaptive rows run with" not in out
    assert "lopa-k2-adaptive: cost curve: linear, branch_cost 0.5; a round with b = 0, 1, ... branches costs 1.00, 1.50, 2.00" in out


def test_rows_are_interleaved_in_williams_orders(monkeypatch):
    """Every problem runs every row before the next problem, in the Williams order of lopa.tasks.turns
    (three rows: three rotations, then their mirrors, so every row follows every other)."""
    calls = []

    def fake_decode(loaded, name, settings, problem, index, *rest):
        calls.append((index, name))
        return {"decoder": name, "problem": index}
    monkeypatch.setattr(bench, "decode_problem", fake_decode)
    rows = {"d2f": None, "lopa-k1": None, "lopa-k4": None}
    out = bench.run_interleaved(None, rows, [{}] * 4)
    assert calls == [(0, "d2f"), (0, "lopa-k1"), (0, "lopa-k4"), (1, "lopa-k1"), (1, "lopa-k4"), (1, "d2f"),
                     (2, "lopa-k4"), (2, "d2f"), (2, "lopa-k1"), (3, "lopa-k4"), (3, "lopa-k1"), (3, "d2f")]
    assert {name: [r["problem"] for r in rs] for name, rs in out.items()} == {name: [0, 1, 2, 3] for name in rows}


def test_the_bench_commands_decode_with_what_the_model_asks_for(tmp_path, capsys):
    """No flag given: the model's own attention and block size (config.json "lopa"); a flag wins."""
    model = save_tiny_model_dir(tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    config["lopa"].update(attention="full", block_size=4)
    (model / "config.json").write_text(json.dumps(config))
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"question": "Tom has 3 apples ?", "answer": "#### 3"}))
    args = ["--model", str(model), "--data", str(data), "--n", "1", "--decoders", "d2f", "--max-new-tokens", "8",
            "--out", str(tmp_path / "out")]
    assert bench.main(args) == 0
    base = capsys.readouterr().out.split("base settings: ")[1].split("\n")[0]
    assert "'attention': 'full'" in base and "'block_size': 4" in base
    assert bench.main([*args, "--attention", "block_causal"]) == 0
    base = capsys.readouterr().out.split("base settings: ")[1].split("\n")[0]
    assert "'attention': 'block_causal'" in base and "'block_size': 4" in base
    assert bench_round.main(["--model", str(model), "--repeats", "1", "--prompts", "1"]) == 0
    assert "2 blocks x 4 tokens" in capsys.readouterr().out


def test_the_peers_are_rows_and_each_row_prints_its_cost_beside_tpf(tmp_path, capsys):
    """`d2f-<rule>` is a peer's rule alone, `lopa-k<k>-<rule>` lookahead over it; the table gives forwards,
    token-forwards and wall-clock per answer beside TPF, and the summary keeps them with the device."""
    from lopa.settings import DecodeSettings
    base = DecodeSettings(confidence="max_prob")
    assert bench.row_settings("d2f-factor", base) == base.replace(k=0, commit="factor")
    assert bench.row_settings("lopa-k4-eb", base) == base.replace(k=4, commit="eb", confidence="neg_entropy")
    assert bench.row_settings("lopa-k4-random-stable", base).order == "random"
    out = tiny_bench(tmp_path, "d2f,peers", max_new_tokens=16)
    rows = {r["decoder"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert list(rows) == ["d2f", *bench.PEER_ROWS]
    for r in rows.values():
        assert float(r["token_forwards_mean"]) >= 8 * float(r["forwards_mean"]) > 0 and r["device"] == "cpu"
    assert float(rows["lopa-k4-joint"]["token_forwards_mean"]) > float(rows["d2f-joint"]["token_forwards_mean"]) / \
        float(rows["d2f-joint"]["forwards_mean"]) * float(rows["lopa-k4-joint"]["forwards_mean"])   # branches cost
    printed = capsys.readouterr().out
    assert "token-forwards" in printed and "wall-clock" in printed and "d2f-stable" in printed
