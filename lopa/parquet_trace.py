"""Reading a Parquet trace within the read budget (lopa.read_budget.READ_BYTES).

Parquet compresses, and a string kept once in a column's dictionary may stand for every row, so a
file of a few hundred bytes can unpack to gigabytes: its size says nothing of its data's. The read
is checked three times, each before the step whose memory it bounds, against a bound on the read's
peak from there on (the footer, the Arrow table, and the Python objects that become the run):

1. the footer's length (the file's last 8 bytes), before the footer is parsed;
2. the footer's counts (values per column chunk, their nesting, the pages' unpacked sizes), before
   any page is read: the Arrow arrays they make;
3. the Arrow table, strings kept as dictionaries (a repeated string is held once), before any Python
   object is built: the rows, lists, values and string bytes the Python rows will hold, and
   lopa.read_budget.read_cost of every JSON text they carry (the header, `extra`, `forced`).

Over READ_BYTES the file is refused with the bound and the limit; `reserve` (lopa.read_budget.check_read)
lets a caller charge each bound to a budget of its own. The weights are measured on hostile files
(tests/test_parquet_budget.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from lopa.read_budget import check_read, read_cost, text_cost
from lopa.schema import Record

# What reading costs, in bytes. FOOTER_COST: a fixed part (the reader's own set-up, and up to
# MAX_FOOTER_ITEMS schema elements, which cost ~2 KB each however deeply nested), then per byte of
# footer (its parsed metadata: many row groups of many columns cost the most).
# ARROW_COST: per value slot of a column chunk (its value, validity and levels, with the builders'
# headroom) and per repetition level of each slot (an offset). PYTHON_COST: per row, per cell (a
# column of a row), per list, per number or null, per string; a string's bytes count once more
# (four times when not ASCII). Each Python object is counted in all its copies (Arrow's rows, the
# validated trace, the run).
FOOTER_COST = (12 << 20, 24)
MAX_FOOTER_ITEMS = 1024       # per list in the footer (schema elements, row groups, ...); a trace: ~70 and 1
ARROW_COST = {"slot": 40, "level": 16}
PYTHON_COST = {"row": 600, "cell": 200, "list": 240, "value": 96, "string": 160}
JSON_COLUMNS = ("extra", "forced")          # text that RunResult._from_table parses as JSON


def read_parquet(path: Path, size: int, reserve=None) -> tuple[str, list[dict]]:
    """(header JSON, one dict per round) of a Parquet trace of `size` bytes, read within READ_BYTES;
    ValueError, naming the cost and the limit or what is unreadable, otherwise."""
    import pyarrow.parquet as pq

    footer = _footer_length(path)
    check_read(footer_cost(footer) + size, reserve)
    try:
        first = pq.ParquetFile(path, thrift_container_size_limit=MAX_FOOTER_ITEMS)
        layout, types = first.metadata, first.schema_arrow
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise ValueError(f"not a readable Parquet file: {err}") from None
    header = (layout.metadata or {}).get(b"lopa")
    if header is None:
        raise ValueError("Parquet file has no LoPA run header")
    try:
        header = header.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"the trace's header is not valid JSON: not UTF-8 text ({err.reason})") from None
    _check_columns(types)
    # the footer, the compressed pages and the header's own parse stay until the end
    fixed = footer_cost(footer) + size + read_cost(header)
    check_read(fixed + arrow_cost(layout), reserve)
    strings = [layout.schema.column(j).path for j in range(layout.num_columns)
               if layout.schema.column(j).physical_type == "BYTE_ARRAY"]
    try:
        table = pq.ParquetFile(path, metadata=layout, read_dictionary=strings).read(use_threads=False)
    except Exception as err:
        raise ValueError(f"not a readable Parquet file: {err}") from None
    check_read(fixed + table.get_total_buffer_size() + python_cost(table), reserve)
    return header, _rows(table)


def _rows(table) -> list[dict]:
    """One dict per row, straight from Arrow: the file's pandas metadata is never read."""
    return table.to_pylist()


def footer_cost(footer_bytes: int) -> int:
    return FOOTER_COST[0] + FOOTER_COST[1] * footer_bytes


def arrow_cost(layout) -> int:
    """What the pages of the file whose footer is `layout` (pyarrow FileMetaData) take once read into
    Arrow, from the footer's counts: value slots, their nesting and the pages' unpacked bytes."""
    depth = [layout.schema.column(j).max_repetition_level for j in range(layout.num_columns)]
    total = 0
    for i in range(layout.num_row_groups):
        group = layout.row_group(i)
        for j in range(group.num_columns):
            chunk = group.column(j)
            slots = max(chunk.num_values, group.num_rows)
            total += slots * (ARROW_COST["slot"] + ARROW_COST["level"] * depth[j]) + chunk.total_uncompressed_size
    return total


def python_cost(table) -> int:
    """What the Python rows built from `table` (a pyarrow Table) take in all their copies, counted on
    the Arrow arrays themselves (no Python object per value is made)."""
    counts = Counter()
    for name, column in zip(table.column_names, table.columns):
        for chunk in column.chunks:
            _count(chunk, counts, json_text=name in JSON_COLUMNS)
    counts["row"], counts["cell"] = table.num_rows, table.num_rows * table.num_columns
    return counts.pop("bytes", 0) + sum(PYTHON_COST[unit] * n for unit, n in counts.items())


def _count(array, counts: Counter, json_text: bool = False) -> None:
    """Add the lists, values, strings and string bytes of `array` (a pyarrow Array) to `counts`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    counts["value"] += array.null_count                   # a None in its list or row
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        counts["list"] += len(array) - array.null_count
        _count(array.flatten(), counts)
    elif pa.types.is_dictionary(kind):
        counts["string"] += len(array) - array.null_count
        per_entry = pa.array(_string_costs(array.dictionary.fill_null(""), json_text))
        counts["bytes"] += pc.sum(per_entry.take(array.indices)).as_py() or 0
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        counts["string"] += len(array) - array.null_count
        counts["bytes"] += int(_string_costs(array.fill_null(""), json_text).sum())
    elif not pa.types.is_null(kind):
        counts["value"] += len(array) - array.null_count


def _string_costs(strings, json_text: bool):
    """Per string of `strings` (a pyarrow string Array without nulls), as a numpy array: its bytes as
    a Python str, and what parsing it as JSON takes (read_cost) where it is JSON text."""
    import pyarrow.compute as pc

    nbytes = pc.binary_length(strings).to_numpy(zero_copy_only=False).astype("int64")
    ascii_ = pc.string_is_ascii(strings).to_numpy(zero_copy_only=False)
    python = nbytes * (1 + 3 * ~ascii_)
    if not json_text:
        return python
    wide = ~ascii_ | pc.match_substring(strings, "\\u").to_numpy(zero_copy_only=False)
    length = pc.utf8_length(strings).to_numpy(zero_copy_only=False).astype("int64")
    return python + text_cost(length, wide, lambda char: pc.count_substring(strings, char).to_numpy(zero_copy_only=False))


def _check_columns(schema) -> None:
    """A trace's columns are a round's fields (lopa.schema.Record) and hold numbers, strings and lists
    of them; anything else is refused unread."""
    import pyarrow as pa

    def allowed(kind) -> bool:
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return allowed(kind.value_type)
        if pa.types.is_dictionary(kind):                # strings kept once (read_dictionary)
            return pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)
        return (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
                or pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind))

    for field in schema:
        if field.name not in Record.model_fields:
            raise ValueError(f"not a LoPA trace: unknown column {field.name[:256]!r}")
        if not allowed(field.type):
            raise ValueError(f"not a LoPA trace: column {field.name[:256]!r} holds {field.type}; a trace's columns hold "
                             "numbers, strings and lists of them")


def _footer_length(path: Path) -> int:
    """The length of the footer, from the file's last 8 bytes (4 of length, then the magic PAR1)."""
    try:
        with open(path, "rb") as file:
            file.seek(-8, 2)
            tail = file.read(8)
    except OSError:
        raise ValueError("not a readable Parquet file: too short to hold a footer") from None
    if tail[4:] != b"PAR1":
        raise ValueError("not a readable Parquet file: no Parquet footer at its end")
    return int.from_bytes(tail[:4], "little")
