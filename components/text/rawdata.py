"""Read the user's raw text partitions as the config describes them.

A span is a folder `dt=YYYY-MM-DD/` of `part-*` files: Parquet, JSONL or gzip JSONL (one
object per line; the suffixes are `PART_SUFFIXES`, the family's one list), finished by a
`_SUCCESS` marker (`retrain config suggest` takes the list from here too). Validation,
preprocessing, batch scoring, the loader and the quality command all read through here, so
they see the same parts and rows, and every row becomes the same canonical record:
`example_id`, `text` (the column or the template), and one label name per task (None when
the row has no label for it); `normalize` is what every copy of a text is compared and
trained on.
"""
from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import unicodedata
from pathlib import Path

from retrain.common import paths, rawfiles
from retrain.common.errors import BadData
from retrain.common.record_limits import RecordLimits, mend_surrogates, parquet_bytes
from retrain.common.spans import window
from components.text.task_config import TextConfig

PARQUET_SUFFIXES = (".parquet", ".pq", ".parquet.brotli")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson", ".ndjson.gz")
PART_SUFFIXES = PARQUET_SUFFIXES + JSONL_SUFFIXES   # every part a text span folder may hold
SUCCESS_MARKER = "_SUCCESS"
# Text no encoder meant: control characters, U+FFFD (bytes a decoder could not read), and
# lone surrogates (mended to U+FFFD on read). The encoding rule counts such rows and
# preprocessing drops them.
BAD_CHARS_REGEX = r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]"
_BAD_CHARS = re.compile(BAD_CHARS_REGEX)
# What normalization removes: control characters, zero-width space, byte-order mark.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b\ufeff]")
_SPACE = re.compile(r"\s+")


def badly_encoded(text: str | None) -> bool:
    return bool(text) and _BAD_CHARS.search(text) is not None


def normalize(text: str) -> str:
    """What every copy of a text is compared and trained on (Unicode NFC, control
    characters removed, whitespace collapsed): preprocessing and batch scoring alike."""
    text = unicodedata.normalize("NFC", text)
    text = _CONTROL.sub(" ", text)
    return _SPACE.sub(" ", text).strip()


def span_parts(span_dir: str | Path, require_marker: bool = True,
               limits: RecordLimits = RecordLimits()) -> list[Path]:
    """The span's readable part files; a missing folder, marker or part is an error, and
    so (bad data, `rawfiles.list_parts`) is a part that is not a regular file (a FIFO, a
    folder), one or a day folder linked out of the raw root (the span's parent), an
    empty one, or more parts than `limits.max_parts_per_day`."""
    span_dir = Path(span_dir)
    if not span_dir.is_dir():
        raise FileNotFoundError(f"span directory does not exist: {span_dir}")
    if require_marker and not (span_dir / SUCCESS_MARKER).exists():
        raise FileNotFoundError(f"span {span_dir} has no {SUCCESS_MARKER} marker: refusing to "
                                "read a partial span")
    return rawfiles.list_parts(span_dir, PART_SUFFIXES, span_dir.parent,
                               max_parts=limits.max_parts_per_day)


def window_files(raw_root: Path, span: dt.date, days: int, exclude=(),
                 limits: RecordLimits | None = None) -> list[tuple[str, str]]:
    """(span, part file) for every day of the window; a missing or unfinished day fails,
    and a day `span_parts` refuses (past `limits.max_parts_per_day`, a part that is no
    regular file, a link out of the root) is bad data. What preprocessing and batch
    scoring read."""
    files = []
    for day in window(span, days, exclude):
        day_dir = Path(paths.partition(raw_root, day))
        try:
            parts = span_parts(day_dir, limits=limits or RecordLimits())
        except FileNotFoundError as e:
            raise type(e)(f"span {day} is not complete: {e}") from None
        files += [(day.isoformat(), str(p)) for p in parts]
    return files


def read_rows(part: str | Path, limits: RecordLimits = RecordLimits()) -> list[dict]:
    """Every row of one part file as a dict; an unreadable file is bad data
    (`read_numbered` says how)."""
    return [row for _, row in read_numbered(part, limits)]


def read_numbered(part: str | Path,
                  limits: RecordLimits = RecordLimits()) -> list[tuple[int, dict]]:
    """Every row of one part file with its place: (line number of a JSONL file, or row
    number of a Parquet file, from 1; row). An unreadable file is bad data, named with
    its line, never its content (rule 22).

    The part and record limits hold while the file streams: past `max_part_bytes`
    decompressed, or at a line holding a value over `max_value_bytes` or nested deeper
    than `max_depth`, the part is refused naming file and line (the text family reads a
    day whole, so a record it cannot hold refuses the part rather than being skipped).
    Bytes that are not UTF-8 (a record of the feed written in Latin-1) and lone
    surrogates become U+FFFD: the encoding rule counts such rows within the dataset's
    tolerance (`validation.max_bad_encoding_rate`) and preprocessing drops them, so a
    few mis-encoded records never refuse a whole day."""
    part = Path(part)
    try:
        if part.name.endswith(PARQUET_SUFFIXES):
            return _read_parquet(part, limits)
        return _read_jsonl(part, limits)
    except BadData:
        raise
    except (OSError, ValueError, EOFError) as e:
        raise BadData(f"cannot read {part}: {type(e).__name__}: {e}") from e
    except Exception as e:  # noqa: BLE001 - pyarrow raises its own types for a broken file
        raise BadData(f"cannot read {part}: {type(e).__name__}: {e}") from e


def _read_parquet(part: Path, limits: RecordLimits) -> list[tuple[int, dict]]:
    import pyarrow.parquet as pq
    pf = pq.ParquetFile(part)
    limits.check_part_bytes(part, parquet_bytes(pf.metadata))
    rows = pf.read().to_pylist()
    for n, row in enumerate(rows, 1):
        _check_row(row, part, n, 0, limits)
    return list(enumerate(rows, 1))


def _read_jsonl(part: Path, limits: RecordLimits) -> list[tuple[int, dict]]:
    # Room for the other fields of a record beside one value at its limit.
    max_line = 2 * limits.max_value_bytes + (64 << 10)
    opener = gzip.open if part.name.endswith(".gz") else open
    rows, read = [], 0
    with opener(part, "rb") as f:
        for n, line in enumerate(iter(lambda: f.readline(max_line + 1), b""), 1):
            read += len(line)
            limits.check_part_bytes(part, read, n)
            if len(line) > max_line:
                raise BadData(f"{part} line {n}: longer than {max_line} bytes, so it holds a "
                              f"value over {limits.max_value_bytes} bytes (limit "
                              "max_value_bytes): refusing the part")
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8", errors="replace"))
            except RecursionError:
                raise BadData(f"{part} line {n}: nested deeper than the JSON parser can "
                              f"follow (limit max_depth {limits.max_depth}): refusing the "
                              "part") from None
            except json.JSONDecodeError as e:   # its position only: the line is not shown
                raise BadData(f"{part} line {n}: not a JSON record ({e.msg} at column "
                              f"{e.colno}): refusing the part") from None
            if not isinstance(row, dict):
                raise BadData(f"{part} line {n}: a JSON {type(row).__name__}, not an object "
                              "(one record per line): refusing the part")
            _check_row(row, part, n, len(line), limits)
            rows.append((n, row))
    return rows


def _check_row(row: dict, part: Path, n: int, line_bytes: int, limits: RecordLimits) -> None:
    """Refuse a row over the value or depth limit; lone surrogates become U+FFFD."""
    problem = limits.record_problem(row, line_bytes or limits.max_value_bytes + 1)
    if problem:
        raise BadData(f"{part} line {n}: {problem[1]}: refusing the part")
    for key, value in row.items():
        if isinstance(value, str) and not value.isascii():
            row[key] = mend_surrogates(value)


def columns_of(rows: list[dict]) -> set[str]:
    cols: set[str] = set()
    for r in rows:
        cols.update(r)
    return cols


def canonical(row: dict, cfg: TextConfig) -> dict:
    """One raw row as {example_id, text, <task>: label name or None}. A label the config
    does not declare raises ValueError (validation reports it before preprocessing runs)."""
    out = {"example_id": cfg.id_of(row), "text": cfg.text_of(row)}
    for task in cfg.tasks:
        out[task.name] = task.label_of(row.get(task.label_column))
    return out
