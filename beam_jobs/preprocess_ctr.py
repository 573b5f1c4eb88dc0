"""Preprocess CTR click logs with Beam + tf.Transform.

Reads the daily partitions of a window of spans (`part-*.parquet` and/or
`part-*.jsonl[.gz]`, format chosen by file extension), analyses the training rows
(vocabularies, NaN-aware means/variances), transforms a train split and an eval split,
and writes gzip TFRecord shards (with each split's per-file row counts, so trainer
workers split the rows, not the files), the transform graph and a run summary.

Every day's held-out rows (a stable hash of the example id, `--eval-percent` of them)
are never training rows: the newest span's are the eval split, the older days' are
left out (counted as `rows_held_out`). So a model is never scored on rows it or the
published model trained on, whichever day a backfill evaluates.

Nothing is lost silently: a malformed record (bad JSON, wrong type, null in a required
field, non-UTF-8 bytes, truncated or oversize line) goes to `rejected/` as one JSON line
with its reason, source file, line and byte offset, and is counted in the summary and in
Beam counters; the job checks rows in = train + eval + rejected. A truncated or corrupt
gzip file fails the job with its name: a partial read is never taken for the whole file.
A non-finite number (inf) is a `bad_value` record; a Parquet column whose type is not the
feature config's (text where a number belongs) fails the job: values are never parsed or
truncated into another type. Parts are checked first (`retrain.common.rawfiles`: no
symlink out of the raw root, no empty file) and after the read (a part that changed while
it was read fails the job). One widening: an integer example id is read as its decimal
text (`ID_KIND`), so 42 and "42" are one id everywhere.

Rows travel as Arrow RecordBatches end to end (tf.Transform's TFXIO input), which is
what makes the DirectRunner usable; the same code runs on Flink/Spark/Dataflow by
pipeline options alone:

    python -m beam_jobs.preprocess_ctr --raw-root var/raw/ctr --span 2026-11-07 \
        --window-days 3 --output-dir /tmp/out --runner=DirectRunner
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import gzip
import hashlib
import io
import json
import logging
import math
import os
import shutil
import time
import zlib
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters
from beam_jobs import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from beam_jobs import output_commit
from beam_jobs.tfrecord_shards import WRITERS, WriteTransformedShards
from beam_jobs.tfrecord_writer import DEFAULT_GZIP_LEVEL, ISAL_MAX_LEVEL
from retrain.common import rawfiles, tf_keras_env
from retrain.common.read_ahead import read_ahead
from retrain.common.record_limits import RecordLimits, invalid_text, parquet_bytes
from retrain.common.spans import span_list, window
from retrain.common.step import drop_known_lines
from retrain.common import paths
from components.ctr import features as F
from components.ctr.formats import (EVAL_DIR, REJECTED_DIR, SHARD_ROWS_FILE, SPLIT_STATS_FILE,
                                   SUMMARY_FILE, TRAIN_DIR, TRANSFORM_DIR, VALIDATION_DIR)

log = logging.getLogger(__name__)

NAMESPACE = "retrain.preprocess_ctr"
# Measured (bench/preprocess_window.py): each tf.Transform dataset costs about 50 MB of
# peak memory on the local runner; a 7-day window cached per day part (13 datasets) peaked
# at 1.65 GB where the same rows as one dataset took 1.02 GB, 21 days at 2.4 GB, and past
# about 28 datasets Beam's metrics code hits RecursionError. Beyond this many (a 6-day
# window: one dataset per day), one dataset: memory flat in the window, the cache's
# saving given up.
MAX_CACHED_DATASETS = 6
# Rows per RecordBatch: tf.Transform and the encoder pay a fixed cost per batch; 65,536
# ran 2M rows 1.4x faster than 4,096 (bench/preprocess_ctr.py) for ~0.2 GB more peak.
DEFAULT_BATCH_SIZE = 65536
# The eval split is a small share of the newest day, and the validation slice a small share
# of the window: one shard writer process is enough for each (each holds about 100 MB).
EVAL_WRITERS = 1
SPLITS = (TRAIN_DIR, EVAL_DIR, VALIDATION_DIR)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD partitions")
    p.add_argument("--span", required=True, type=dt.date.fromisoformat,
                   help="newest day of the window (YYYY-MM-DD); its eval rows form the eval split")
    p.add_argument("--window-days", type=int, default=3, help="days analysed and trained on")
    p.add_argument("--exclude-spans", type=span_list, default=[],
                   help="days of the window to leave out, comma-separated (the DAG passes the "
                        "days whose validation did not let them through)")
    p.add_argument("--eval-percent", type=int, default=20,
                   help="share of the newest span held out for evaluation (stable hash of example_id)")
    p.add_argument("--validation-percent", type=int, default=F.VALIDATION_PERCENT,
                   help="share of the window's training rows set aside as the validation "
                        "slice for early stopping (a second stable hash of example_id; its "
                        "own shards); 0: none")
    p.add_argument("--output-dir", required=True,
                   help="where shards, transform graph and summary go: a folder, or gs:// / "
                        "s3:// (Beam's FileSystems)")
    p.add_argument("--output-commit", choices=output_commit.MODES, default="auto",
                   help="how the output becomes visible: rename (a hidden sibling renamed into "
                        "place; filesystems), marker (an attempt folder named by "
                        "<output-dir>/_SUCCESS, no rename; object stores), auto (default: "
                        "rename for a folder, marker for gs:// / s3://)")
    p.add_argument("--num-shards", type=int, default=0,
                   help="TFRecord shards per split; 0 (default): a file per writer thread "
                        "per bundle, written batch-wise (fastest); N: exactly N files via "
                        "Beam's per-record sink")
    p.add_argument("--gzip-level", type=int, default=DEFAULT_GZIP_LEVEL,
                   help="gzip level of the TFRecord shards: 1 fastest .. 9 smallest "
                        f"(default {DEFAULT_GZIP_LEVEL}; 1-{ISAL_MAX_LEVEL} with ISA-L's "
                        "deflate, above with zlib's); readers need no change")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help="rows per Arrow RecordBatch handed to tf.Transform")
    p.add_argument("--feature-config", default="",
                   help="YAML/JSON feature config (columns, types, transforms, label); "
                        "default: the generated demo logs' config")
    p.add_argument("--analysis-cache-dir", default="",
                   help="reuse tf.Transform analysis of days whose input and code did not "
                        "change (fingerprint-keyed); empty: analyse the whole window every run")
    p.add_argument("--max-cached-datasets", type=int, default=MAX_CACHED_DATASETS,
                   help="the cache analyses one tf.Transform dataset per day, and memory "
                        "and pipeline size grow with each; a window needing more than this "
                        f"many is analysed as one dataset instead (default {MAX_CACHED_DATASETS})")
    p.add_argument("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE_BYTES,
                   help="a JSONL line longer than this is rejected as oversize (never held whole)")
    return p.parse_known_args(argv)


# The kind of the example id column in a layout: text, or an integer read as its decimal
# text (42 -> "42"). Producers write ids either way; read as one text form, the row gets
# the same eval bucket, sample value and duplicate count whichever they chose. A float is
# never an id (1.0 and 1 would be one id, 1.5 something made up).
ID_KIND = "id"


def id_as_text(arr: pa.Array) -> pa.Array:
    """An id column as text: integers as their decimal digits, anything else as it is
    (the type checks refuse a float there, naming the column)."""
    return arr.cast(pa.large_string()) if pa.types.is_integer(arr.type) else arr


@dataclasses.dataclass(frozen=True)
class RawLayout:
    """The raw columns the job reads, from the feature config (any other field of a
    record is ignored): kind "str", "int", "float" (null allowed: becomes NaN) or
    "str_list" (a JSON array of strings; null or missing: no values); the example id
    column is kind `ID_KIND` however the layout was built."""
    columns: tuple[tuple[str, str], ...]
    label: str
    example_id: str
    limits: RecordLimits = RecordLimits()
    # The logs have no id column: `columns` leaves it out and `read_batches` adds it,
    # derived from the row (features.derived_ids).
    derived_id: bool = False

    def __post_init__(self):
        object.__setattr__(self, "columns", tuple(
            (k, ID_KIND if k == self.example_id else kind) for k, kind in self.columns))

    @classmethod
    def of(cls, cfg) -> "RawLayout":
        return cls(tuple(cfg.input_columns().items()), cfg.label, cfg.example_id,
                   cfg.validation.record_limits(), cfg.derived_id)

    @property
    def kinds(self) -> dict[str, str]:
        return dict(self.columns)


def default_layout() -> RawLayout:
    from components.ctr import feature_config
    return RawLayout.of(feature_config.default())

# Input formats, chosen by file extension.
PARQUET_SUFFIXES = (".parquet",)
JSONL_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl", ".json")
# Why a record was routed to the dead-letter output (the summary counts each).
REJECT_REASONS = ("bad_json", "non_utf8", "truncated_record", "oversize_line", "not_an_object",
                  "missing_field", "wrong_type", "bad_value", "oversize_value", "too_deep",
                  "invalid_text")
DEFAULT_MAX_LINE_BYTES = 1 << 20
# A batch is cut at this many bytes of input as well as at `batch_size` lines, so long
# (but legal) lines cannot make one batch hold gigabytes.
MAX_BATCH_BYTES = 64 << 20
_SAMPLE_CHARS = 2048   # a rejected record's text is kept up to this length


def window_files(raw_root: str | Path, span: dt.date, days: int, exclude=(),
                 max_parts: int = RecordLimits().max_parts_per_day) -> dict[dt.date, list[str]]:
    """Input parts (Parquet or JSONL, by extension) per day of the window; a missing or
    unfinished day is an error, so is a day of more than `max_parts` parts. Goes through
    Beam's FileSystems, so gs://, s3://, hdfs:// roots work the same as local folders (a
    local day folder linked out of the root is refused before it is listed)."""
    files: dict[dt.date, list[str]] = {}
    for day in window(span, days, exclude):
        day_dir = paths.partition(raw_root, day)
        if not FileSystems.exists(f"{day_dir}/_SUCCESS"):
            raise FileNotFoundError(f"span {day} is not complete: no {day_dir}/_SUCCESS")
        rawfiles.check_day(day_dir, raw_root)
        matched = FileSystems.match([f"{day_dir}/part-*"])[0].metadata_list
        parts = sorted(m.path for m in matched
                       if m.path.endswith(PARQUET_SUFFIXES + JSONL_SUFFIXES))
        rawfiles.check_count(day_dir, len(parts), max_parts)
        if not parts:
            raise rawfiles.NoParts(f"span {day} has no part-*.parquet or part-*.jsonl[.gz] "
                                    f"files in {day_dir}")
        files[day] = parts
    return files


_MODEL_VALUE_TYPE = {"str": pa.large_binary(), "int": pa.int64(), "float": pa.float32(),
                     "str_list": pa.large_binary()}


def arrow_schema(layout: RawLayout | None = None) -> pa.Schema:
    """The model's raw columns (all but the example id) as lists: scalars as one-element
    lists (TFXIO's dense adapter), multi-valued columns as variable-length lists."""
    layout = layout or default_layout()
    return pa.schema([(k, pa.large_list(_MODEL_VALUE_TYPE[kind])) for k, kind in layout.columns
                      if k != layout.example_id])


_ARROW_OF_KIND = {"str": pa.large_string(), "int": pa.int64(), "float": pa.float32(),
                  "str_list": pa.large_list(pa.large_string()), ID_KIND: pa.large_string()}
_KIND_TEXT = {ID_KIND: "str or int (the example id)"}


def raw_schema(layout: RawLayout | None = None) -> pa.Schema:
    """Flat schema of parsed raw rows (before the split and the list wrapping)."""
    layout = layout or default_layout()
    return pa.schema([(k, _ARROW_OF_KIND[kind]) for k, kind in layout.columns])


def _reject(reason: str, detail: str, source: str, line: int, offset: int | None,
            record: bytes | str) -> dict:
    if isinstance(record, bytes):
        record = record.decode("utf-8", errors="backslashreplace")
    return {"reason": reason, "detail": detail, "source": source, "line": line,
            "offset": offset, "record": record[:_SAMPLE_CHARS]}


def check_record(obj, layout: RawLayout | None = None) -> tuple[str, str] | None:
    """(reason, detail) if a decoded JSON record cannot be a training row, else None.

    Strict on purpose: a string where a number belongs (or the reverse) is a producer bug
    that should be seen in the dead-letter output, not silently coerced.
    """
    layout = layout or default_layout()
    if not isinstance(obj, dict):
        return "not_an_object", f"a JSON {type(obj).__name__}, not an object"
    for key, kind in layout.columns:
        value = obj.get(key)
        if value is None:
            if kind in ("float", "str_list"):
                continue
            return "missing_field", f"{key} is missing or null"
        if kind == "str":
            ok = isinstance(value, str)
        elif kind == ID_KIND:
            ok = isinstance(value, str) or type(value) is int
        elif kind == "int":
            ok = type(value) is int and -2**63 <= value < 2**63
        elif kind == "str_list":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        else:
            ok = type(value) in (int, float)
            if ok and not math.isfinite(value):
                return "bad_value", f"{key}: {value!r} is not a finite number"
        if not ok:
            return "wrong_type", (f"{key}: expected {_KIND_TEXT.get(kind, kind)}, got "
                                  f"{type(value).__name__} {value!r:.40}")
    if obj[layout.label] not in (0, 1):
        return "bad_value", f"{layout.label} must be 0 or 1, got {obj[layout.label]!r:.40}"
    return None


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
                    head = line[:_SAMPLE_CHARS]
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
                f"{k!r} is {t}, the feature config reads {_KIND_TEXT.get(kinds[k], kinds[k])}"
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
                        row = {k: (v[:_SAMPLE_CHARS] if isinstance(v, str) else v)
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


class ReadSplitBatches(beam.DoFn):
    """Read one input file (format by extension) in batches: good rows split into
    train/eval RecordBatches, malformed records to the `rejected` output as JSON lines."""

    def __init__(self, eval_span: str, eval_percent: int, batch_size: int,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, layout: RawLayout | None = None,
                 validation_percent: int = 0):
        self._eval_span = eval_span
        self._eval_percent = eval_percent
        self._validation_percent = validation_percent
        self._batch_size = batch_size
        self._max_line_bytes = max_line_bytes
        self._layout = layout or default_layout()
        self._rows_in = Metrics.counter(NAMESPACE, "rows_in")
        self._rows = {s: Metrics.counter(NAMESPACE, f"rows_{s}") for s in SPLITS}
        self._rows_rejected = Metrics.counter(NAMESPACE, "rows_rejected")
        self._rows_held_out = Metrics.counter(NAMESPACE, "rows_held_out")
        self._by_reason = {r: Metrics.counter(NAMESPACE, f"rejected_{r}") for r in REJECT_REASONS}
        self._read_us = Metrics.counter(NAMESPACE, "read_us")

    def setup(self):
        self._schema = arrow_schema(self._layout)

    def process(self, path: str):
        is_span = paths.partition_name(self._eval_span) in path
        for rows, rejects, held_out, splits in _timed(
                read_ahead(self._split(path, is_span)), self._read_us):
            self._rows_in.inc(rows)
            if rejects:
                self._rows_rejected.inc(len(rejects))
                for r in rejects:
                    self._by_reason[r["reason"]].inc()
                    yield beam.pvalue.TaggedOutput(REJECTED_DIR, json.dumps(r, sort_keys=True))
            self._rows_held_out.inc(held_out)
            for split, model_batch in splits.items():
                self._rows[split].inc(model_batch.num_rows)
                yield beam.pvalue.TaggedOutput(split, model_batch)

    def _split(self, path: str, is_span: bool):
        """Per batch of the file: (records read, rejected records, older-day held-out
        rows, {split: model batch}). Runs read ahead, in a thread: Beam's counters and
        outputs stay in `process`."""
        for batch, rejects in read_batches(path, self._batch_size, self._max_line_bytes,
                                           self._layout):
            splits, held_out_rows = {}, 0
            if batch.num_rows:
                h = F.id_hash64(batch.column(self._layout.example_id))
                held_out = F.held_out_of_hash(h, self._eval_percent)
                if not is_span:   # an older day's eval rows: no model of any day trains on them
                    held_out_rows = int(held_out.sum())
                eval_mask = held_out if is_span else np.zeros(batch.num_rows, dtype=bool)
                validation = ~held_out & F.validation_of_hash(h, self._validation_percent)
                for split, mask in ((TRAIN_DIR, ~held_out & ~validation), (EVAL_DIR, eval_mask),
                                    (VALIDATION_DIR, validation)):
                    n = int(mask.sum())
                    if n:
                        splits[split] = to_model_batch(_select(batch, mask, n, self._schema),
                                                     self._schema)
            yield batch.num_rows + len(rejects), rejects, held_out_rows, splits


def _timed(items, counter_us):
    """Yield from `items`, adding to `counter_us` the microseconds spent waiting for them
    (not what the consumers of each yielded item spend: fused stages run inside yield;
    with `items` read ahead, only what the reader thread did not hide)."""
    it = iter(items)
    while True:
        t = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        finally:
            counter_us.inc(round((time.perf_counter() - t) * 1e6))
        yield item


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


def _select(batch: pa.RecordBatch, mask: np.ndarray, n: int,
            schema: pa.Schema) -> pa.RecordBatch:
    """The rows of `mask` (`n` of them), of the columns the model batch (`schema`) takes:
    the id and timestamp are never copied. Applied to the flat parsed columns, before they
    become one-element lists: filtering the list columns took twice as long."""
    batch = batch.select(schema.names)
    return batch if n == batch.num_rows else batch.filter(pa.array(mask))


def to_model_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Raw rows -> the list columns tf.Transform's TFXIO adapter reads (scalars wrapped in
    one-element lists; multi-valued columns as they are, a null as an empty list)."""
    offsets = pa.array(np.arange(batch.num_rows + 1, dtype=np.int64))
    arrays = []
    for field in schema:
        col = batch.column(field.name)
        value_type = field.type.value_type
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = col.cast(pa.large_list(pa.large_string()))
            if col.null_count:
                col = pc.if_else(col.is_null(), pa.scalar([], col.type), col)
            arrays.append(col.cast(field.type))
            continue
        if pa.types.is_floating(value_type):
            col = col.cast(value_type).fill_null(float("nan"))
        else:
            col = col.cast(value_type)
        arrays.append(pa.LargeListArray.from_arrays(offsets, col))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# A day's training rows (all but its held-out rows, which are the eval split while the
# day is the newest span and never training rows): what analysis reads of every day, so
# a day's cached statistics are the same whichever window it is part of. The name is
# part of the analysis cache keys.
REST = "rest"


class ReadTrainingRows(beam.DoFn):
    """Read one input file for analysis: its good rows that are not held out (the rows
    every model trains on). Malformed records are skipped here; the transform read
    reports and counts them."""

    def __init__(self, eval_percent: int, batch_size: int,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, layout: RawLayout | None = None):
        self._eval_percent = eval_percent
        self._batch_size = batch_size
        self._max_line_bytes = max_line_bytes
        self._layout = layout or default_layout()
        self._rows = Metrics.counter(NAMESPACE, "rows_analysed")
        self._read_us = Metrics.counter(NAMESPACE, "analysis_read_us")

    def setup(self):
        self._schema = arrow_schema(self._layout)

    def process(self, path: str):
        for model_batch in _timed(read_ahead(self._training_rows(path)), self._read_us):
            self._rows.inc(model_batch.num_rows)
            yield model_batch

    def _training_rows(self, path: str):
        """The file's training rows as model batches (runs read ahead, in a thread)."""
        for batch, _ in read_batches(path, self._batch_size, self._max_line_bytes,
                                     self._layout):
            if not batch.num_rows:
                continue
            train = ~held_out_mask(batch, self._eval_percent, self._layout)
            n = int(train.sum())
            if n:
                yield to_model_batch(_select(batch, train, n, self._schema), self._schema)


@dataclasses.dataclass(frozen=True)
class AnalysisSet:
    """One cacheable unit of analysis: a day's training rows, keyed by what they depend on."""
    day: dt.date
    key: str         # tf.Transform DatasetKey: day, eval share and a fingerprint


# Bump when parsing/cleaning or the held-out split changes which rows a part yields (it
# invalidates cached analyses). 2: the split's hash became FNV-1a (components.ctr.features).
# 3: integer example ids are read (as text), where their rows were refused.
PARSER_VERSION = 3


def analysis_sets(files: dict[dt.date, list[str]], span: dt.date, eval_percent: int,
                  salt: str = "") -> list[AnalysisSet]:
    """The datasets the window's analysis is made of: each day's training rows (held-out
    rows are never training rows, `span` or not).

    A key changes when anything its statistics depend on changes: the day's input files
    (name, size, modification time), the eval share, the parser and the transform code
    (`salt`); so a cached entry is only ever reused for identical input and code.
    """
    sets = []
    for day, day_files in files.items():
        meta = [m for r in FileSystems.match(day_files) for m in r.metadata_list]
        inputs = sorted((Path(m.path).name, m.size_in_bytes, m.last_updated_in_seconds)
                        for m in meta)
        digest = hashlib.sha256(json.dumps(
            [PARSER_VERSION, salt, eval_percent, REST, inputs]).encode()).hexdigest()[:16]
        sets.append(AnalysisSet(day, f"{day.isoformat()}_{REST}{eval_percent}_{digest}"))
    return sets


def transform_code_salt() -> str:
    """Hash of the transform module's source: part of every analysis cache key."""
    from components.ctr import transform
    return hashlib.sha256(Path(transform.__file__).read_bytes()).hexdigest()[:16]


def commit_analysis_cache(new_cache: Path, cache_dir: str) -> list[str]:
    """Move freshly written per-dataset cache folders into the shared cache, each with one
    rename; an existing entry (same key = same inputs and code) is kept. Returns the keys
    added. Readers never see a half-written entry, and a failed run adds nothing."""
    added = []
    if not new_cache.is_dir():
        return added
    target = Path(cache_dir)
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(new_cache.iterdir()):
        final = target / entry.name
        if final.exists():
            continue
        staging = target / f".tmp-{os.getpid()}-{entry.name}"
        shutil.move(str(entry), staging)
        try:
            os.rename(staging, final)
            added.append(entry.name)
        except OSError:          # another run committed the same key first: identical
            shutil.rmtree(staging, ignore_errors=True)
    return added


def tensor_adapter_config(layout: RawLayout | None = None):
    """Scalar columns as dense tensors, multi-valued ones as SparseTensors (VarLen)."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.public import tfxio
    layout = layout or default_layout()
    kinds = layout.kinds
    schema = arrow_schema(layout)
    reps = {}
    for field in schema:
        rep = schema_pb2.TensorRepresentation()
        if kinds[field.name] == "str_list":
            rep.varlen_sparse_tensor.column_name = field.name
        else:
            rep.dense_tensor.column_name = field.name
            rep.dense_tensor.shape.CopyFrom(schema_pb2.FixedShape())
        reps[field.name] = rep
    return tfxio.TensorAdapterConfig(schema, reps)


_NEW_CACHE = "analysis_cache.new"


def _read_for_analysis(pipeline, name, paths: list[str], args, layout: RawLayout):
    """The files' training rows, for analysis."""
    return (pipeline
            | f"AnalysisFiles[{name}]" >> beam.Create(paths)
            | f"AnalysisReshuffle[{name}]" >> beam.Reshuffle()
            | f"AnalysisRead[{name}]" >> beam.ParDo(ReadTrainingRows(
                args.eval_percent, args.batch_size, args.max_line_bytes, layout)
            ).with_output_types(pa.RecordBatch))


def _analyze_whole(pipeline, args, files, preprocessing_fn, analysis: dict,
                   layout: RawLayout):
    """tf.Transform analysis of the window as one dataset (no cache): the pipeline and its
    memory stay the same size however many days the window has."""
    import tensorflow_transform.beam as tft_beam

    # One read of every day's training rows, on purpose: on the local runner a Flatten of
    # separate reads is a stage boundary whose buffer held every row of the window
    # (4.7 GB at 5M rows).
    data = _read_for_analysis(pipeline, "window", [p for ps in files.values() for p in ps],
                              args, layout)
    analysis.update({"cache_dir": None, "datasets": {"window": "computed"}})
    log.info("analysis: the %d-day window as one dataset", len(files))
    return ((data, tensor_adapter_config(layout))
            | "Analyze" >> tft_beam.AnalyzeDataset(preprocessing_fn)), None


def _analyze(pipeline, args, files, sets: list[AnalysisSet], preprocessing_fn, tmp: str,
             analysis: dict, layout: RawLayout):
    """tf.Transform analysis of the window as one dataset per day, reading only the
    days the cache does not already hold; fills `analysis` with what came from where.
    Without a cache, or past `--max-cached-datasets`, the window is one dataset."""
    if not args.analysis_cache_dir or len(sets) > args.max_cached_datasets:
        if args.analysis_cache_dir:
            log.warning("analysis: the window needs %d cached datasets (> "
                        "--max-cached-datasets %d): analysing it as one, without the cache",
                        len(sets), args.max_cached_datasets)
        return _analyze_whole(pipeline, args, files, preprocessing_fn, analysis, layout)
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.beam import analysis_graph_builder, analyzer_cache
    from tfx_bsl.tfxio.tensor_adapter import TensorAdapter

    config = tensor_adapter_config(layout)
    keys = {s.key: analyzer_cache.DatasetKey(s.key) for s in sets}
    input_cache = {}
    needed = set(keys.values())
    if args.analysis_cache_dir and FileSystems.exists(args.analysis_cache_dir):
        specs = TensorAdapter(config).OriginalTypeSpecs()
        entry_keys = analysis_graph_builder.get_analysis_cache_entry_keys(
            preprocessing_fn, specs, list(keys.values()), False)
        input_cache = pipeline | "ReadAnalysisCache" >> analyzer_cache.ReadAnalysisCacheFromFS(
            args.analysis_cache_dir, list(keys.values()), cache_entry_keys=entry_keys)
        needed = set(analysis_graph_builder.get_analysis_dataset_keys(
            preprocessing_fn, specs, list(keys.values()), input_cache, False))
    data = {k: None for k in keys.values()}
    for s in sets:
        if keys[s.key] in needed:
            data[keys[s.key]] = _read_for_analysis(pipeline, s.day, files[s.day], args, layout)
    analysis.update({
        "cache_dir": args.analysis_cache_dir or None,
        "datasets": {s.key: ("computed" if keys[s.key] in needed else "cache") for s in sets}})
    log.info("analysis: %d day(s) computed, %d reused from the cache",
             sum(v == "computed" for v in analysis["datasets"].values()),
             sum(v == "cache" for v in analysis["datasets"].values()))
    transform_fn, output_cache = ((data, input_cache, config)
                                  | "Analyze" >> tft_beam.AnalyzeDatasetWithCache(preprocessing_fn,
                                                                          pipeline=pipeline))
    if args.analysis_cache_dir:
        _ = output_cache | "WriteAnalysisCache" >> analyzer_cache.WriteAnalysisCacheToFS(
            pipeline, FileSystems.join(tmp, _NEW_CACHE), list(keys.values()))
    return transform_fn, output_cache


class SplitStatsFn(beam.CombineFn):
    """Transformed batches of a split -> `components.ctr.split_stats.SplitStats` (rows,
    clicks, occurrences per id of every categorical field): what the trainer needs before
    its first step, counted in the transform pass instead of a pass of its own."""

    def __init__(self, cfg):
        from components.ctr.feature_config import transformed_name
        fields = cfg.categorical_fields()
        self._label = cfg.label
        self._columns = {k: transformed_name(k) for k in fields}
        self._sizes = {k: cfg.categorical_size(k) for k in fields}

    def create_accumulator(self):
        from components.ctr import split_stats
        return split_stats.empty(self._sizes)

    def add_input(self, acc, element):
        from components.ctr import split_stats
        batch = element[0] if isinstance(element, tuple) else element   # drop passthrough
        return split_stats.fold(acc, batch, self._label, self._columns)

    def merge_accumulators(self, accumulators):
        from components.ctr import split_stats
        accumulators = iter(accumulators)
        out = next(accumulators)
        for acc in accumulators:
            split_stats.merge(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def deal(element, writers: int):
    """A transformed batch as `writers` slices of (almost) equal rows, in order: the shard
    writers take batches in turn, so each of a bundle's files gets one slice of every batch
    and the files hold equal rows (up to one per batch) whatever the days' sizes, instead of
    whole batches of up to --batch-size rows (2 files of one bundle held 141k and 75k rows).
    With the files' row counts (SHARD_ROWS_FILE) the trainer's workers then read equal
    shares. Passthrough features (a tuple element) are not kept: the writer drops them."""
    batch = element[0] if isinstance(element, tuple) else element
    n = batch.num_rows
    for i in range(writers):
        start, stop = n * i // writers, n * (i + 1) // writers
        if stop > start:
            yield batch.slice(start, stop - start)


def _write_split_stats(by_split: dict, path: str) -> None:
    """One file for all splits, through Beam's FileSystems (a folder or an object store)."""
    import io

    from components.ctr import split_stats
    buf = io.BytesIO()
    split_stats.write(buf, by_split)
    with FileSystems.create(path) as f:
        f.write(buf.getvalue())


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Build and run the pipeline; return (and write) the run summary."""
    tf_keras_env.use_keras2()   # before TensorFlow's first import
    import tensorflow_transform.beam as tft_beam
    from components.ctr import feature_config
    from components.ctr.transform import make_preprocessing_fn

    args, beam_args = parse_args(argv)
    # tf.Transform's graph analysis (tensorflow_transform.graph_tools) logs "Tables
    # initialized inside a tf.function will be re-initialized on every invocation" for
    # every table initializer of the traced preprocessing_fn, the ones its own
    # apply_vocabulary creates included: those tables are tf.Transform's to place, not ours.
    drop_known_lines("absl", "Tables initialized inside a tf.function")
    if not 0 < args.eval_percent < 100:   # 0: no eval split; 100: nothing to train on
        raise ValueError(f"eval_percent (--eval-percent) must be in 1..99, got {args.eval_percent}")
    if not 0 <= args.validation_percent < 50:
        raise ValueError(f"validation_percent (--validation-percent) must be in 0..49, got "
                         f"{args.validation_percent}")
    if not 1 <= args.gzip_level <= 9:
        raise ValueError(f"gzip_level (--gzip-level) must be in 1..9, got {args.gzip_level}")
    for name in ("window_days", "batch_size", "max_line_bytes", "max_cached_datasets"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name} (--{name.replace('_', '-')}) must be at least 1, "
                             f"got {getattr(args, name)}")
    cfg = feature_config.load_for(args.feature_config)
    layout = RawLayout.of(cfg)
    preprocessing_fn = make_preprocessing_fn(cfg)
    files = window_files(args.raw_root, args.span, args.window_days, args.exclude_spans,
                         cfg.validation.record_limits().max_parts_per_day)
    # Refuses symlinks out of the root and empty parts; checked again after the read.
    inputs = rawfiles.snapshot([f for parts in files.values() for f in parts], args.raw_root)
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    commit = output_commit.mode_for(args.output_dir, args.output_commit)
    if args.analysis_cache_dir and not output_commit.is_local(args.output_dir):
        raise ValueError("--analysis-cache-dir commits its entries with a local rename: use it "
                         "with a folder --output-dir, not an object store")
    sets = analysis_sets(files, args.span, args.eval_percent,
                         transform_code_salt() + cfg.fingerprint())
    analysis: dict = {}
    join = FileSystems.join
    with output_commit.output_commit(args.output_dir, commit) as tmp:
        with runner.pipeline(options) as pipeline:
            with tft_beam.Context(temp_dir=join(tmp, "tft_tmp"), desired_batch_size=args.batch_size):
                # Analysis reads the window once more instead of keeping the parsed
                # rows until the statistics are known: the DirectRunner holds a PCollection
                # that waits for a side input in memory, so that would make memory grow
                # with the input; re-reading keeps it flat (and a cluster runner needs no
                # shuffle of the whole window).
                transform_fn, output_cache = _analyze(
                    pipeline, args, files, sets, preprocessing_fn, tmp, analysis, layout)
                splits = (
                    pipeline
                    | "ListFiles" >> beam.Create([f for parts in files.values() for f in parts])
                    | "Reshuffle" >> beam.Reshuffle()
                    | "ReadSplit" >> beam.ParDo(
                        ReadSplitBatches(args.span.isoformat(), args.eval_percent,
                                         args.batch_size, args.max_line_bytes, layout,
                                         args.validation_percent)
                    ).with_output_types(pa.RecordBatch, **{s: pa.RecordBatch for s in SPLITS},
                                        **{REJECTED_DIR: str}
                    ).with_outputs(*SPLITS, REJECTED_DIR))
                # Dead letters: one JSON object per rejected record (reason, detail,
                # source file, line, byte offset, the record's text up to 2 KiB).
                _ = splits[REJECTED_DIR] | "WriteRejected" >> beam.io.WriteToText(
                    join(tmp, REJECTED_DIR, "part"), file_name_suffix=".jsonl", num_shards=1)
                config = tensor_adapter_config(layout)
                _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
                    join(tmp, TRANSFORM_DIR))
                stats = []
                for split in SPLITS:
                    transformed, metadata = (
                        ((splits[split], config), transform_fn)
                        | f"Transform{split}" >> tft_beam.TransformDataset(output_record_batches=True))
                    if split != EVAL_DIR:   # what the trainer needs before its first step
                        stats.append(transformed | f"Stats{split}" >> beam.CombineGlobally(
                            SplitStatsFn(cfg)) | f"Name{split}" >> beam.Map(
                                lambda s, name=split: (name, s)))
                    if args.num_shards:   # an exact shard count: Beam's per-record sink
                        _ = ((transformed, metadata)
                             | f"Encode{split}" >> tft_beam.EncodeTransformedDataset()
                             | f"Write{split}" >> beam.io.WriteToTFRecord(
                                 join(tmp, split, "part"), file_name_suffix=".tfrecord.gz",
                                 num_shards=args.num_shards))
                    else:   # default: batch-wise C++ encoding, files per bundle in threads
                        writers = WRITERS if split == TRAIN_DIR else EVAL_WRITERS
                        _ = ((transformed
                              | f"Deal{split}" >> beam.FlatMap(deal, writers).with_output_types(
                                  pa.RecordBatch),
                              metadata)
                             | f"Write{split}" >> WriteTransformedShards(
                                 join(tmp, split), args.gzip_level, NAMESPACE,
                                 writers=writers, rows_file=SHARD_ROWS_FILE))
                _ = (stats | "AllStats" >> beam.Flatten() | "StatsDict" >> beam.combiners.ToDict()
                     | "WriteStats" >> beam.Map(_write_split_stats, join(tmp, SPLIT_STATS_FILE)))
        result = pipeline.result
        rawfiles.verify_unchanged(inputs)   # analysis and transform read the same bytes
        # Committed values where the runner has them (DirectRunner, Dataflow, Flink).
        counters = beam_counters(result, NAMESPACE)
        summary = {
            "span": args.span.isoformat(),
            "window": [d.isoformat() for d in files],
            "excluded_spans": [d.isoformat() for d in args.exclude_spans],
            "input_files": sum(len(v) for v in files.values()),
            "rows_in": counters.get("rows_in", 0),
            "rows_train": counters.get(f"rows_{TRAIN_DIR}", 0),
            "rows_eval": counters.get(f"rows_{EVAL_DIR}", 0),
            "rows_validation": counters.get(f"rows_{VALIDATION_DIR}", 0),
            "rows_rejected": counters.get("rows_rejected", 0),
            # Older days' held-out rows: in neither split (no model trains on them).
            "rows_held_out": counters.get("rows_held_out", 0),
            "rejected_by_reason": {r: counters[f"rejected_{r}"] for r in REJECT_REASONS
                                   if counters.get(f"rejected_{r}")},
            "rejected_dir": REJECTED_DIR,
            "eval_percent": args.eval_percent,
            "validation_percent": args.validation_percent,
            "validation_hash": F.VALIDATION_HASH,
            "feature_config": {"name": cfg.name, "fingerprint": cfg.fingerprint()[:16],
                               "source": args.feature_config or "default"},
            "seconds": round(time.time() - started, 1),
            # Time inside the job's own steps, summed over workers (so it can exceed the
            # wall time with several); the rest is tf.Transform (analysis, transform),
            # the runner and start-up. Reads: seconds the runner waited for the reader
            # thread (it reads ahead); encoding and writing: CPU seconds of the shard
            # writer processes. Not measured with --num-shards (Beam's sink).
            "stage_seconds": {
                "read_for_analysis": round(counters.get("analysis_read_us", 0) / 1e6, 3),
                "read_for_transform": round(counters.get("read_us", 0) / 1e6, 3),
                "encode_and_write": round(counters.get("write_us", 0) / 1e6, 3)},
            "runner": runner.name(options),
        }
        summary["rows_per_second"] = round(summary["rows_in"] / max(summary["seconds"], 1e-9))
        accounted = (summary["rows_train"] + summary["rows_eval"] + summary["rows_validation"]
                     + summary["rows_held_out"] + summary["rows_rejected"])
        if accounted != summary["rows_in"]:
            raise RuntimeError(f"rows do not add up: {summary['rows_in']} read != "
                               f"{summary['rows_train']} train + {summary['rows_eval']} eval + "
                               f"{summary['rows_validation']} validation + "
                               f"{summary['rows_held_out']} held out + "
                               f"{summary['rows_rejected']} rejected ({counters})")
        if analysis["cache_dir"]:
            analysis["cache_added"] = commit_analysis_cache(Path(tmp) / _NEW_CACHE,
                                                             args.analysis_cache_dir)
            output_commit.delete_tree(join(tmp, _NEW_CACHE))
        summary["analysis"] = {"rows_analysed": counters.get("rows_analysed", 0), **analysis}
        if summary["rows_rejected"]:
            log.warning("%d malformed record(s) rejected %s; see %s", summary["rows_rejected"],
                        summary["rejected_by_reason"],
                        join(args.output_dir if commit == "rename" else tmp, REJECTED_DIR))
        output_commit.delete_tree(join(tmp, "tft_tmp"))
        # Training and serving read the features from here, never from a config path
        # that may have changed since.
        summary["output_commit"] = commit
        output_commit.write_json(join(tmp, feature_config.FEATURE_CONFIG_FILE), cfg.to_dict())
        output_commit.write_json(join(tmp, SUMMARY_FILE), summary)
    # What readers open: the folder itself, or the attempt the _SUCCESS marker now names.
    summary["output_dir"] = args.output_dir if commit == "rename" else tmp
    log.info("preprocess summary: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
