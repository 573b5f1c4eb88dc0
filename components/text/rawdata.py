"""Read the user's raw text partitions as the config describes them.

A span is a folder `dt=YYYY-MM-DD/` of `part-*` files: Parquet, JSONL or gzip JSONL (one
object per line), finished by a `_SUCCESS` marker. Validation, preprocessing and the quality
command all read through here, so they see the same rows, and every row becomes the same
canonical record: `example_id`, `text` (the column or the template), and one label name per
task (None when the row has no label for it).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from components.common import rawfiles
from components.common.errors import BadData
from components.text.task_config import TextConfig

PARQUET_SUFFIXES = (".parquet", ".pq", ".parquet.brotli")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson", ".ndjson.gz")
SUCCESS_MARKER = "_SUCCESS"


def span_parts(span_dir: str | Path, require_marker: bool = True) -> list[Path]:
    """The span's readable part files; a missing folder, marker or part is an error."""
    span_dir = Path(span_dir)
    if not span_dir.is_dir():
        raise FileNotFoundError(f"span directory does not exist: {span_dir}")
    if require_marker and not (span_dir / SUCCESS_MARKER).exists():
        raise FileNotFoundError(f"span {span_dir} has no {SUCCESS_MARKER} marker: refusing to "
                                "read a partial span")
    parts = sorted(p for p in span_dir.glob("part-*")
                   if p.is_file() and p.name.endswith(PARQUET_SUFFIXES + JSONL_SUFFIXES))
    if not parts:
        raise rawfiles.NoParts(f"span {span_dir} has no part-*.parquet or part-*.jsonl[.gz] "
                                "files")
    rawfiles.snapshot(parts, span_dir.parent)   # UnsafeInput: outside the root, empty
    return parts


def read_rows(part: str | Path) -> list[dict]:
    """Every row of one part file as a dict; an unreadable file is bad data."""
    part = Path(part)
    try:
        if part.name.endswith(PARQUET_SUFFIXES):
            import pyarrow.parquet as pq
            return pq.read_table(part).to_pylist()
        opener = gzip.open if part.name.endswith(".gz") else open
        rows = []
        with opener(part, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"line {n} is not a JSON object")
                rows.append(row)
        return rows
    except (OSError, ValueError, EOFError) as e:
        raise BadData(f"cannot read {part}: {e}") from e
    except Exception as e:  # noqa: BLE001 - pyarrow raises its own types for a broken file
        raise BadData(f"cannot read {part}: {type(e).__name__}: {e}") from e


def columns_of(rows: list[dict]) -> set[str]:
    cols: set[str] = set()
    for r in rows:
        cols.update(r)
    return cols


def canonical(row: dict, cfg: TextConfig) -> dict:
    """One raw row as {example_id, text, <task>: label name or None}. A label the config
    does not declare raises ValueError (validation reports it before preprocessing runs)."""
    raw_id = row.get(cfg.example_id)
    out = {"example_id": None if raw_id is None else str(raw_id), "text": cfg.text_of(row)}
    for task in cfg.tasks:
        out[task.name] = task.label_of(row.get(task.label_column))
    return out
