"""A Parquet trace is read within the read budget (lopa.parquet_trace): each of its three bounds
(footer length, footer counts, Arrow table) holds against the peak RSS of a fresh process reading
hostile files, and a file over the budget is refused before the step it would overrun (the footer
parsed, the pages read, the Python rows built), naming its cost and the limit, with the session
unchanged."""

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from big_trace import trace_json

from app.panels import traces
from app.serving.budget import Ledger
from app.serving.session import Session
from lopa import RunResult
from lopa.read_budget import READ_BYTES

ROOT = Path(__file__).resolve().parent.parent
LIMIT = rf"would take up to \d+ MB of memory; a trace may take {READ_BYTES >> 20} MB to read"


def _trace(rounds: int, blocks: int = 16, per_round: int = 0, block_size: int = 32, **fields) -> dict:
    data = json.loads(trace_json(rounds, blocks, per_round, block_size))
    for record in data["records"]:
        record.update(fields)
    return data


def _save(data: dict, path: Path) -> Path:
    """Written as the app writes a trace (RunResult.save), built without reading it back."""
    return RunResult._from_parts(data, data["records"]).save(path)


def _nested(depth: int, rows: int) -> pa.Array:
    """One number per row inside `depth` lists: [[[...[1000]...]]]."""
    array = pa.array(np.full(rows, 1000, dtype="int64"))
    for _ in range(depth):
        array = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype="int32")), array)
    return array


def _with_header(columns: dict, path: Path, **options) -> Path:
    """A file of `columns` that carries a valid trace's header, so only its columns are hostile."""
    header = json.dumps({k: v for k, v in _trace(1).items() if k != "records"})
    pq.write_table(pa.table(columns).replace_schema_metadata({"lopa": header}), path, **options)
    return path


EMPTY = [[] for _ in range(33)]
SHAPES = {   # what Parquet can unpack to, each a valid trace: every one must stay within its bounds
    "a real-shaped trace": lambda: _trace(400, 16, 200),
    "many rounds": lambda: _trace(8194, 16, 0),
    "long lists of numbers": lambda: _trace(40, 256, anchor_positions=list(range(300, 8100)),
                                            anchor_tokens=list(range(1000, 8800))),
    "empty lists": lambda: _trace(600, branch_tokens=EMPTY, branch_positions=EMPTY, branch_max_prob=EMPTY,
                                  branch_conf=EMPTY, branch_argmax=EMPTY, branch_scores=[0.5] * 33, branch_rank=[0] * 33),
    "short strings": lambda: _trace(30, 8192, 0, block_size=1),
    "a long string on every row": lambda: _trace(100, extra={"pad": "a" * 100_000}),
    "nested lists in extra": lambda: _trace(60, extra={"x": [json.loads("[" * 50 + "]" * 50)] * 200}),
    "forced and extra": lambda: _trace(4, forced=[{"action": "hold", "position": 1}] * 8000,
                                       extra={"x": [[] for _ in range(8000)]}),
    "wide strings": lambda: _trace(100, extra={"x": "\U0001F600" + "a" * 50_000}),
}

PEAK = r"""
import gc, json, sys
import pyarrow as pa
import pyarrow.parquet
from lopa import RunResult
from lopa.parquet_trace import python_cost
python_cost(pa.table({"extra": pa.array(["{}"]).dictionary_encode(), "kind": pa.array(["a"])}))   # first compute calls
def status(field):
    return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith(field + ":"))
gc.collect()
open("/proc/self/clear_refs", "w").write("5")        # VmHWM from here: the read's own peak
before = status("VmRSS")
bounds = []
try:
    RunResult.load(sys.argv[1], reserve=lambda n: bounds.append((n, status("VmHWM") - before)))
    refused = None
except ValueError as err:
    refused = str(err)
print(json.dumps({"bounds": bounds, "peak": status("VmHWM") - before, "refused": refused}))
"""


def _peak(path: Path, budget_mb: int) -> dict:
    """The bounds RunResult.load checked (each with the peak RSS so far) and the read's peak RSS, in a
    fresh process: imports and Arrow's first compute calls are the process's, once, not the read's."""
    env = {**os.environ, "LOPA_SESSION_MEMORY_MB": str(budget_mb), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


needs_peak_rss = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's peak-RSS counter")


@needs_peak_rss
@pytest.mark.parametrize("shape", SHAPES)
def test_reading_a_parquet_trace_never_takes_more_than_its_bounds(tmp_path, shape):
    """Each bound covers the read from its check on: the peak before the next check, and the whole
    read's peak after the last, stay within it (measured as the kernel sees it)."""
    result = _peak(_save(SHAPES[shape](), tmp_path / "t.parquet"), budget_mb=8192)
    assert result["refused"] is None, result["refused"]
    bounds = [n for n, _ in result["bounds"]]
    peaks = [peak for _, peak in result["bounds"][1:]] + [result["peak"]]
    assert len(bounds) == 3 and result["peak"] > 0
    print(f"{shape}: bounds {' / '.join(f'{b / 2**20:.1f}' for b in bounds)} MB, "
          f"peaks {' / '.join(f'{p / 2**20:.1f}' for p in peaks)} MB")           # shown with -rP
    for step, (bound, peak) in enumerate(zip(bounds, peaks), 1):
        assert peak <= bound, f"{shape}: step {step} bounded the read to {bound} bytes, it took {peak}"


# -- hostile files are refused before the step they would overrun --------------------------------
def _footer_of_many_columns(path: Path) -> Path:
    """4,000 one-byte columns in 30 row groups: a 7 MB footer, whose parse alone takes ~120 MB."""
    columns = {f"c{i}": pa.array(np.zeros(30, dtype="int8")) for i in range(4000)}
    return _with_header(columns, path, row_group_size=1, compression="none", write_statistics=False)


def _a_huge_row_group(path: Path) -> Path:
    """4 million zero rounds: 32 MB of data in a file of a few KB."""
    return _with_header({"round": pa.array(np.zeros(4_000_000, dtype="int64"))}, path, compression="zstd",
                        use_dictionary=False)


NOT_A_TRACE = r"not a LoPA trace: (unknown column 'c0'|column 'round' holds struct)"
HOSTILE = {   # name: (build, the step it is refused before, what the refusal says)
    "a footer of many columns": (_footer_of_many_columns, "footer", LIMIT),
    "more columns than a footer may list": (lambda p: _with_header({f"c{i}": [1] for i in range(3000)}, p),
                                            "pages", "not a readable Parquet file: .*limit"),
    "many columns": (lambda p: _with_header({f"c{i}": [1] for i in range(1000)}, p), "pages", NOT_A_TRACE),
    "a column that is no number, string or list": (lambda p: _with_header({"round": pa.array([{"a": 1}])}, p),
                                                   "pages", NOT_A_TRACE),
    "a huge row group that compresses well": (_a_huge_row_group, "pages", LIMIT),
    "deeply nested lists": (lambda p: _with_header({"anchor_positions": _nested(40, 200_000)}, p), "pages", LIMIT),
    "fewer deeply nested lists": (lambda p: _with_header({"anchor_positions": _nested(40, 20_000)}, p), "rows", LIMIT),
    "one long string on every row": (lambda p: _with_header({"extra": ["a" * (1 << 20)] * 300}, p, compression="zstd"),
                                     "rows", LIMIT),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_parquet_file_is_refused_before_it_is_read(tmp_path, monkeypatch, name):
    build, step, says = HOSTILE[name]
    path = build(tmp_path / "hostile.parquet")
    assert path.stat().st_size < 16 << 20
    if step == "footer":
        monkeypatch.setattr(pq, "ParquetFile", lambda *a, **k: pytest.fail("parsed the footer of a file over budget"))
    elif step == "pages":
        monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("read the pages of a file over budget"))
    else:
        monkeypatch.setattr("lopa.parquet_trace._rows", lambda table: pytest.fail("built rows of a file over budget"))
    ledger = Ledger(1 << 40)
    monkeypatch.setattr("app.panels.traces.LEDGER", ledger)
    monkeypatch.setattr("app.serving.runs.LEDGER", ledger)
    session = Session()
    session.replay(RunResult.from_json(trace_json(3, blocks=16, per_round=4)), {})
    before = (dict(session.runs.entries), session.current, session.run, session.runs.held)
    status = html.unescape(traces.load_trace(session, str(path))[0])
    assert "could not read hostile.parquet: " in status and re.search(says, status), status
    assert (dict(session.runs.entries), session.current, session.run, session.runs.held) == before
    assert ledger.reading == 0 and ledger.held == session.runs.held


@needs_peak_rss
def test_one_long_string_on_every_row_is_refused_without_unpacking_it(tmp_path):
    """A string kept once in a column's dictionary is read as such: 300 MB of rows in a file of a few
    KB are refused with the Arrow table alone in memory."""
    path = HOSTILE["one long string on every row"][0](tmp_path / "bomb.parquet")
    result = _peak(path, budget_mb=192)
    assert result["refused"] and "would take up to" in result["refused"]
    assert result["peak"] < 32 << 20, f"refusing it took {result['peak'] >> 20} MB"


def test_a_large_parquet_trace_saved_by_the_app_reads_back(tmp_path):
    """The bounds refuse what is too big, not what a visitor exports: a 1,000-round trace of 100
    predictions a round reads back whole within the default budget."""
    run = RunResult.from_json(trace_json(1000, blocks=16, per_round=100))
    back = RunResult.load(run.save(tmp_path / "t.parquet"))
    assert back.records == run.records and back.tokens == run.tokens
