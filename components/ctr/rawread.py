"""Read CTR raw part files (Parquet, JSONL, gzip JSONL) into Arrow record batches.

The one reader of the family's raw rows: preprocessing (`beam_jobs.preprocess_ctr`), the
span statistics validation judges (`beam_jobs.span_stats`) and evaluation's raw rows
(`components.ctr.rawdata`) all parse a part here, so they accept and refuse the same
records. A record that cannot be a row (bad JSON, wrong type, null in a required field,
non-UTF-8 bytes, truncated or oversize line, over a record bound) comes back as a
rejected-record dict with its reason, file, line and byte offset; a truncated or corrupt
gzip stream, or a Parquet column of the wrong type, fails the read naming the file. What
is accepted (suffixes, layout, record check, bounds) is `components.ctr.rawformat`.

Files are opened through Beam's FileSystems (gs://, s3:// as well as folders), imported
when a part is first opened.
"""
from __future__ import annotations

import gzip
import io
import json
import math
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrain.common import rawfiles
from retrain.common.record_limits import invalid_text, parquet_bytes
from components.ctr import features as F
from components.ctr.rawformat import (DEFAULT_MAX_LINE_BYTES, ID_KIND, JSONL_SUFFIXES, KIND_TEXT,
                                      PARQUET_SUFFIXES, SAMPLE_CHARS, RawLayout, check_record,
                                      default_layout)

# A batch is cut at this many bytes of input as well as at `batch_size` lines, so long
# (but legal) lines cannot make one batch hold gigabytes.
MAX_BATCH_BYTES = 64 << 20


def id_as_text(arr: pa.Array) -> pa.Array:
    """An id column as text: integers as their decimal digits, anything else as it is
    (the type checks refuse a float there, naming the column)."""
    return arr.cast(pa.large_string()) if pa.types.is_integer(arr.type) else arr


_ARROW_OF_KIND = {"str": pa.large_string(), "int": pa.int64(), "float": pa.float32(),
                  "str_list": pa.large_list(pa.large_string()), ID_KIND: pa.large_string()}


def raw_schema(layout: RawLayout | None = None) -> pa.Schema:
    """Flat schema of parsed raw rows (before the split and the list wrapping)."""
    layout = layout or default_layout()
    return pa.schema([(k, _ARROW_OF_KIND[kind]) for k, kind in layout.columns])


def _reject(reason: str, detail: str, source: str, line: int, offset: int | None,
            record: bytes | str) -> dict:
    if isinstance(record, bytes):
        record = record.decode("utf-8", errors="backslashreplace")
    return {"reason": reason, "detail": detail, "source": source, "line": line,
            "offset": offset, "record": record[:SAMPLE_CHARS]}


def _column(values: list, arrow_type: pa.DataType) -> pa.Array:
    """A parsed column as Arrow. Arrow refuses a JSON integer above 2**24 for a float32
    column ("not exactly representable"), which failed a whole span of epoch-second
    timestamps: such a column's integers become the nearest float (the model reads
    float32 anyway)."""
    try:
        return pa.array(values, type=arrow_type)
    except pa.ArrowInvalid:
        if not pa.types.is_floating(arrow_type):
            raise
        return pa.array([float(v) if type(v) is int else v for v in values], arrow_type)


def _open(path: str):
    """A binary stream of the file's bytes via Beam's FileSystems (local, gs://, ...);
    gzip is decoded here so a truncated member raises instead of ending quietly."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    if path.endswith(".gz"):
        return io.BufferedReader(gzip.GzipFile(fileobj=raw, mode="rb"), buffer_size=1 << 20)
    return raw


def read_jsonl_batches(path: str, batch_size: int, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                       layout: RawLayout | None = None, keep_unknown: bool = False):
    """Yield (raw RecordBatch, [rejected record dicts]) per `batch_size` lines of a JSONL file.

    Line numbers are 1-based, offsets are byte offsets in the (uncompressed) stream.
    Blank lines are not records and are skipped. A truncated or corrupt gzip stream
    raises IOError naming the file: a partial read is never passed off as the whole file.
    `keep_unknown`: fields the layout does not name come along as JSON-text columns after
    the layout's (validation must see every column; preprocessing ignores them).
    """
    layout = layout or default_layout()
    columns = {k: [] for k, _ in layout.columns}
    unknown = _Unknown(layout) if keep_unknown else None
    rejects: list[dict] = []
    n_lines = 0
    offset = lineno = 0
    decode = json.JSONDecoder().decode
    schema = raw_schema(layout)
    nan = float("nan")

    def flush():
        nonlocal columns, rejects, n_lines, batch_bytes
        batch = pa.RecordBatch.from_arrays(
            [_column(columns[k], f.type) for k, f in zip(columns, schema)], schema=schema)
        if unknown is not None:
            batch = unknown.attach(batch)
        out = (batch, rejects)
        columns, rejects, n_lines = {k: [] for k, _ in layout.columns}, [], 0
        batch_bytes = 0
        return out

    limits = layout.limits
    batch_bytes = 0
    try:
        with _open(path) as stream:
            while True:
                line = stream.readline(max_line_bytes + 1)
                if not line:
                    break
                lineno += 1
                start, offset = offset, offset + len(line)
                if len(line) > max_line_bytes and not line.endswith(b"\n"):
                    head = line[:SAMPLE_CHARS]
                    while True:   # skip the rest of the oversize line, never holding it
                        more = stream.readline(1 << 20)
                        offset += len(more)
                        limits.check_part_bytes(path, offset, lineno)
                        if not more or more.endswith(b"\n"):
                            break
                    rejects.append(_reject("oversize_line",
                                           f"{offset - start} bytes > --max-line-bytes "
                                           f"{max_line_bytes}", path, lineno, start, head))
                    n_lines += 1
                else:
                    limits.check_part_bytes(path, offset, lineno)
                    n_lines += _parse_line(line, path, lineno, start, decode, layout, columns,
                                           rejects, nan, unknown)
                batch_bytes += len(line)
                if n_lines >= batch_size or (n_lines and batch_bytes >= MAX_BATCH_BYTES):
                    yield flush()
    except (EOFError, OSError, zlib.error) as e:
        raise IOError(f"{path}: truncated or corrupt input after line {lineno} "
                      f"({type(e).__name__}: {e}); refusing to use a partial read") from e
    if n_lines:
        yield flush()


class _Unknown:
    """Fields of accepted records that the layout does not name, as JSON text, one column
    per field (null where a record lacks it)."""

    def __init__(self, layout: RawLayout):
        self.known = {k for k, _ in layout.columns}
        self.first = layout.columns[0][0]
        self.values: dict[str, list] = {}

    def add(self, obj: dict, columns: dict) -> None:
        row = len(columns[self.first])   # called before the row is appended
        for key in obj.keys() - self.known:
            col = self.values.setdefault(key, [])
            col.extend([None] * (row - len(col)))
            col.append(json.dumps(obj[key]))

    def attach(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays, names = list(batch.columns), list(batch.schema.names)
        for key in sorted(self.values):
            col = self.values[key]
            col.extend([None] * (batch.num_rows - len(col)))
            arrays.append(pa.array(col, pa.large_string()))
            names.append(key)
        self.values = {}
        return pa.RecordBatch.from_arrays(arrays, names=names)


def _parse_line(line: bytes, path, lineno, start, decode, layout, columns, rejects, nan,
                unknown: _Unknown | None = None) -> int:
    """Parse one line into `columns` or `rejects`; return 1 if it was a record, 0 if blank."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        rejects.append(_reject("non_utf8", str(e), path, lineno, start, line))
        return 1
    stripped = text.strip()
    if not stripped:
        return 0
    try:
        obj = decode(stripped)
    except RecursionError:
        rejects.append(_reject("too_deep", "nested deeper than the JSON parser can follow "
                               f"(limit max_depth {layout.limits.max_depth})", path, lineno,
                               start, text))
        return 1
    except json.JSONDecodeError as e:
        # Input that ends mid-value (no closing brace, cut string) is a truncated record,
        # whether it is the file's last line without newline or a line cut upstream.
        truncated = (e.pos >= len(stripped) or e.msg.startswith("Unterminated string")
                     or (not line.endswith(b"\n") and not stripped.endswith("}")))
        rejects.append(_reject("truncated_record" if truncated else "bad_json", str(e),
                               path, lineno, start, text))
        return 1
    problem = check_record(obj, layout)
    if problem is None and isinstance(obj, dict):
        problem = layout.limits.record_problem(obj, len(line))
        if problem is None and "\\u" in stripped:   # only a \u escape makes invalid text
            problem = _invalid_text(obj, layout)
    if problem:
        rejects.append(_reject(*problem, path, lineno, start, text))
        return 1
    if unknown is not None:
        unknown.add(obj, columns)
    for key, kind in layout.columns:
        value = obj.get(key)
        if value is None:
            value = nan if kind == "float" else []
        elif kind == ID_KIND and type(value) is int:
            value = str(value)        # as id_as_text writes a Parquet integer id
        columns[key].append(value)
    return 1


def _invalid_text(obj: dict, layout: RawLayout) -> tuple[str, str] | None:
    """("invalid_text", detail) for a string field holding a lone surrogate or NUL."""
    for key, kind in layout.columns:
        value = obj.get(key)
        for v in (value if kind == "str_list" and value else
                  [value] if kind == "str" or (kind == ID_KIND and isinstance(value, str)) else []):
            what = invalid_text(v)
            if what:
                return "invalid_text", f"{key} holds {what}"
    return None


def _or(a, b):
    return b if a is None else a if b is None else pc.or_(a, b)


def _parquet_type_fits(kind: str, t: pa.DataType) -> bool:
    """Whether a Parquet column of type `t` holds values of `kind` as they are: widening
    only (int32 -> int64, int -> float); text is never parsed into numbers."""
    if pa.types.is_null(t):
        return True
    if kind == ID_KIND:
        return _parquet_type_fits("str", t) or pa.types.is_integer(t)
    if kind == "str":
        return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
    if kind == "int":
        return pa.types.is_integer(t)
    if kind == "float":
        return pa.types.is_integer(t) or pa.types.is_floating(t)
    return ((pa.types.is_list(t) or pa.types.is_large_list(t))
            and _parquet_type_fits("str", t.value_type))


def read_parquet_batches(path: str, batch_size: int, layout: RawLayout | None = None):
    """Yield (raw RecordBatch, [rejected record dicts]) per Parquet batch.

    A row with a null in a required column is rejected (its 1-based row number in the
    file is its `line`); a column of the wrong type makes the whole file unusable, so
    the job fails naming the file and column; so does a corrupt file.
    """
    try:
        yield from _parquet_batches(path, batch_size, layout)
    except (pa.ArrowException, OSError) as e:   # Arrow's messages name no file; a corrupt
        # page is an OSError there ("Corrupt snappy compressed data"): bad data, not I/O
        raise rawfiles.CorruptPart(f"{path}: corrupt or unreadable Parquet "
                                   f"({type(e).__name__}: {e})") from e


def _parquet_batches(path: str, batch_size: int, layout: RawLayout | None):
    layout = layout or default_layout()
    kinds = layout.kinds
    schema = raw_schema(layout)
    row0 = 0
    with _open(path) as stream:
        pf = pq.ParquetFile(stream)
        names = set(pf.schema_arrow.names)
        missing = [k for k in kinds if k not in names]
        if missing:
            raise ValueError(f"{path}: required column(s) {missing} not in the file")
        wrong = {k: pf.schema_arrow.field(k).type for k in kinds
                 if not _parquet_type_fits(kinds[k], pf.schema_arrow.field(k).type)}
        if wrong:
            raise ValueError(f"{path}: column(s) of the wrong type, not cast: " + "; ".join(
                f"{k!r} is {t}, the feature config reads {KIND_TEXT.get(kinds[k], kinds[k])}"
                for k, t in wrong.items()))
        layout.limits.check_part_bytes(path, parquet_bytes(pf.metadata))
        for batch in pf.iter_batches(batch_size=batch_size, columns=list(kinds)):
            arrays = []
            for field in schema:
                try:
                    col = batch.column(field.name)
                    arrays.append((id_as_text(col) if kinds[field.name] == ID_KIND else col)
                                  .cast(field.type))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise ValueError(f"{path}: column {field.name!r} of type "
                                     f"{batch.column(field.name).type} is not {field.type}: {e}") from e
            missing = bad_value = oversize = None
            for field, arr in zip(schema, arrays):
                if kinds[field.name] not in ("float", "str_list") and arr.null_count:
                    missing = _or(missing, arr.is_null())
                if kinds[field.name] == "float":
                    bad_value = _or(bad_value, pc.fill_null(pc.is_inf(arr), False))
                if kinds[field.name] in ("str", "str_list", ID_KIND):
                    oversize = _or(oversize, _oversize_rows(arr, layout.limits.max_value_bytes))
            rejects = []
            table = pa.RecordBatch.from_arrays(arrays, schema=schema)
            bad = _or(_or(missing, bad_value), oversize)
            if bad is not None and bad.true_count:   # filtering costs, even to keep every row
                bad_rows = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
                too_long = (oversize.to_numpy(zero_copy_only=False) if oversize is not None
                            else np.zeros(batch.num_rows, dtype=bool))
                for i, row in zip(bad_rows, table.take(pa.array(bad_rows)).to_pylist()):
                    nulls = [k for k, v in row.items()
                             if v is None and kinds[k] not in ("float", "str_list")]
                    if too_long[i]:
                        reason, detail = "oversize_value", (
                            f"a value over {layout.limits.max_value_bytes} bytes "
                            "(limit max_value_bytes)")
                        row = {k: (v[:SAMPLE_CHARS] if isinstance(v, str) else v)
                               for k, v in row.items() if not isinstance(v, list)}
                    elif nulls:
                        reason, detail = "missing_field", f"{', '.join(nulls)} null"
                    else:
                        reason, detail = "bad_value", ", ".join(
                            f"{k}: {v!r} is not a finite number" for k, v in row.items()
                            if kinds[k] == "float" and v is not None and not math.isfinite(v))
                    rejects.append(_reject(reason, detail, path, row0 + int(i) + 1, None,
                                           json.dumps(row, default=str)))
                table = table.filter(pc.invert(bad))
            row0 += batch.num_rows
            yield table, rejects


def _oversize_rows(arr: pa.Array, max_bytes: int) -> pa.Array:
    """Per row: whether a string (or any string of a list) is longer than `max_bytes`."""
    if pa.types.is_large_list(arr.type) or pa.types.is_list(arr.type):
        flat = pc.list_flatten(arr)
        long = np.flatnonzero(pc.fill_null(pc.greater(pc.binary_length(flat), max_bytes),
                                           False).to_numpy(zero_copy_only=False))
        rows = np.zeros(len(arr), dtype=bool)
        rows[pc.list_parent_indices(arr).to_numpy()[long]] = True
        return pa.array(rows)
    return pc.fill_null(pc.greater(pc.binary_length(arr), max_bytes), False)


def read_batches(path: str, batch_size: int, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 layout: RawLayout | None = None):
    """(raw RecordBatch, [rejected record dicts]) per batch of one input file, by format;
    with a derived id (logs without an id column), the id column first."""
    if path.endswith(PARQUET_SUFFIXES):
        batches = read_parquet_batches(path, batch_size, layout)
    elif path.endswith(JSONL_SUFFIXES):
        batches = read_jsonl_batches(path, batch_size, max_line_bytes, layout)
    else:
        raise ValueError(f"{path}: unknown input format (expected "
                         f"{PARQUET_SUFFIXES + JSONL_SUFFIXES})")
    if layout is None or not layout.derived_id:
        return batches
    columns = [k for k, _ in layout.columns]
    return ((with_derived_id(batch, columns, layout.example_id), rejects)
            for batch, rejects in batches)


def with_derived_id(batch: pa.RecordBatch, columns, name: str) -> pa.RecordBatch:
    """`batch` with an id column `name` first, derived from those of `columns` it has."""
    present = [c for c in columns if c in batch.schema.names]
    return pa.RecordBatch.from_arrays([F.derived_ids(batch, present), *batch.columns],
                                      names=[name, *batch.schema.names])


def batch_schema(layout: RawLayout | None = None) -> pa.Schema:
    """The schema of what `read_batches` yields: the parsed columns, after the derived id
    when there is one."""
    layout = layout or default_layout()
    schema = raw_schema(layout)
    return (schema.insert(0, pa.field(layout.example_id, pa.large_string()))
            if layout.derived_id else schema)


def held_out_mask(batch: pa.RecordBatch, eval_percent: int, layout: RawLayout) -> np.ndarray:
    """Rows whose stable example-id hash puts them in a day's held-out (eval) part."""
    return F.eval_mask(batch.column(layout.example_id), eval_percent)
