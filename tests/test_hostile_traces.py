"""Trace files from strangers: every malformed or hostile trace is refused at the door with one
error naming the field (never a traceback, never gigabytes), and nothing a trace or a tokenizer
carries reaches the page as markup."""

import copy
import json
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tiny import LIVELY, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, RunResult, schema

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


@pytest.fixture(scope="module")
def run():
    return Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=3, **LIVELY)).run(PROMPT)


@pytest.fixture(scope="module")
def data(run):
    return json.loads(run.to_json())


def load_json(tmp_path, data) -> RunResult:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    return RunResult.load(path)


def set_path(data, path, value):
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


BAD = {   # (where, new value) -> a word the error must contain
    "settings is a list": (("settings",), [1, 2], "settings"),
    "spec is a string": (("spec",), "qwen", "spec"),
    "k is a word": (("settings", "k"), "big", "settings.k"),
    "k as a numeric string": (("settings", "k"), "4", "settings.k"),
    "tau_conf out of range": (("settings", "tau_conf"), 3.0, "tau_conf"),
    "tokens as a string": (("tokens",), "1 2 3", "tokens"),
    "token id past the vocabulary": (("tokens", 0), 10 ** 6, "vocabulary"),
    "negative token id": (("records", 1, "anchor_tokens", 0), -1, "records.1.anchor_tokens.0"),
    "negative position": (("records", 1, "anchor_positions", 0), -5, "records.1.anchor_positions.0"),
    "position past the sequence": (("records", 1, "anchor_positions", 0), 500, "outside the sequence"),
    "mixed str and int": (("records", 1, "branch_positions", 0), [1, "2"], "records.1.branch_positions.0.1"),
    "script in kind": (("records", 1, "kind"), XSS, "records.1.kind"),
    "script in block_states": (("records", 1, "block_states", 0), XSS, "records.1.block_states.0"),
    "huge block size": (("settings", "block_size"), 10 ** 9, "settings.block_size"),
    "huge max_new_tokens": (("settings", "max_new_tokens"), 10 ** 9, "settings.max_new_tokens"),
    "branch lists disagree": (("records", 1, "branch_conf"), [[0.5]], "branch"),
    "winner is no branch": (("records", 1, "winner"), 30, "winner"),
    "probability above 1": (("records", 1, "branch_max_prob", 0, 0), 7.0, "branch_max_prob"),
    "NaN score": (("records", 1, "branch_scores", 0), float("nan"), "branch_scores"),
    "string timing in extra": (("records", 1, "extra"), {"forward_s": "slow"}, "extra.forward_s"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_traces_get_one_error_naming_the_field(tmp_path, data, case):
    where, value, word = BAD[case]
    with pytest.raises(ValueError, match="invalid trace|not a LoPA trace") as err:
        load_json(tmp_path, set_path(copy.deepcopy(data), where, value))
    assert word in str(err.value), str(err.value)


def test_many_blocks_or_rounds_are_bounded_before_any_replay(tmp_path, data):
    many = copy.deepcopy(data)
    many["records"][1]["block_states"] = ["active_full"] * 100_000          # a few hundred KB, millions of cells
    with pytest.raises(ValueError, match="block_states"):
        load_json(tmp_path, many)
    rounds = copy.deepcopy(data)
    rounds["records"] = rounds["records"] * (schema.MAX_ROUNDS // len(rounds["records"]) + 2)
    with pytest.raises(ValueError, match="records|reading this trace would take"):    # the schema or the read cost
        load_json(tmp_path, rounds)


def test_deeply_nested_json_is_refused(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply|not a LoPA trace"):
        RunResult.load(path)


def test_oversized_files_are_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(" " * 4096)
    monkeypatch.setattr("lopa.trace.MAX_TRACE_BYTES", 1024)
    with pytest.raises(ValueError, match="limited to"):
        RunResult.load(path)


def test_pickles_are_never_loaded(tmp_path, run):
    class Boom:
        def __reduce__(self):
            return (open, (str(tmp_path / "PWNED"), "w"))
    for name in ("evil.json", "evil.parquet"):
        (tmp_path / name).write_bytes(pickle.dumps(Boom()))
        with pytest.raises(ValueError):
            RunResult.load(tmp_path / name)
    assert not (tmp_path / "PWNED").exists()


def test_parquet_with_garbage_or_pickled_pandas_metadata_still_only_parses(tmp_path, run):
    good = run.save(tmp_path / "good.parquet")
    table = pq.read_table(good)
    for i, pandas_meta in enumerate((b"{not json", pickle.dumps({"x": 1}))):
        meta = {**(table.schema.metadata or {}), b"pandas": pandas_meta}
        path = tmp_path / f"meta{i}.parquet"
        pq.write_table(table.replace_schema_metadata(meta), path)
        assert RunResult.load(path).tokens == run.tokens
    bad_header = tmp_path / "header.parquet"
    pq.write_table(table.replace_schema_metadata({b"lopa": b"\xff\xfe"}), bad_header)
    with pytest.raises(ValueError, match="not valid JSON"):
        RunResult.load(bad_header)
    pq.write_table(pa.table({"x": [1]}), tmp_path / "foreign.parquet")
    with pytest.raises(ValueError, match="no LoPA run header"):
        RunResult.load(tmp_path / "foreign.parquet")


def test_a_valid_trace_round_trips_through_the_schema(tmp_path, run):
    for suffix in ("json", "parquet"):
        back = RunResult.load(run.save(tmp_path / f"ok.{suffix}"))
        assert back.tokens == run.tokens and back.records == run.records


# -- nothing reaches the page as markup --------------------------------------------------------
def hostile(run) -> RunResult:
    """The run with script in every free-text field a valid trace can carry."""
    data = json.loads(run.to_json())
    data.update(prompt=XSS, text=XSS, run_id=XSS[:200], forked_from={"run_id": XSS[:200], "round": 0})
    data["spec"].update(name=XSS[:200], prompt_template=XSS + "{prompt}", extra={"chat_template": XSS})
    for record in data["records"]:
        record["extra"] = {"note": XSS}
    return RunResult.from_json(json.dumps(data))


def test_every_html_view_escapes_trace_strings_and_token_names(run):
    from visualizations import (
        branches_table,
        comparison_summary,
        counters_html,
        explain_round,
        tfo_diff_html,
        token_canvas,
    )
    evil = hostile(run)
    names = {t: XSS for t in range(64)}                       # a tokenizer whose tokens are markup
    pages = [counters_html(evil, 1.0, XSS, title=XSS), comparison_summary(run, evil, XSS, XSS)]
    for r in range(len(evil.records)):
        pages += [token_canvas(evil, r, names), branches_table(evil, r, names), explain_round(evil, r, names)]
    pages.append(tfo_diff_html(run, evil, XSS, XSS, names))
    for html in pages:
        assert "<img" not in html and "<script" not in html, html[:300]
