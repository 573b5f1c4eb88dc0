"""The raw parts of a window of CTR days, listed through Beam's FileSystems (so gs://,
s3://, hdfs:// roots work as local folders do): every day complete (`_SUCCESS`), within
the raw root, with at least one and at most `max_parts` parts. What preprocessing reads.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from apache_beam.io.filesystems import FileSystems

from retrain.common import paths, rawfiles
from retrain.common.record_limits import RecordLimits
from retrain.common.spans import window
from components.ctr.rawformat import PART_SUFFIXES


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
                       if m.path.endswith(PART_SUFFIXES))
        rawfiles.check_count(day_dir, len(parts), max_parts)
        if not parts:
            raise rawfiles.NoParts(f"span {day} has no part-*.parquet or part-*.jsonl[.gz] "
                                    f"files in {day_dir}")
        files[day] = parts
    return files
