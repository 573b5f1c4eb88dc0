"""The keys of preprocessing's tf.Transform analysis cache: one cacheable dataset per day
(its training rows), keyed by everything its statistics depend on (the day's input files,
the eval share, the parser and the transform code), and the commit of freshly written
entries into the shared cache, one rename each. `beam_jobs.preprocess_ctr` reads and
writes the cache; a key only ever names identical input and code.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
from pathlib import Path

from apache_beam.io.filesystems import FileSystems

# A day's training rows (all but its held-out rows, which are the eval split while the
# day is the newest span and never training rows): what analysis reads of every day, so
# a day's cached statistics are the same whichever window it is part of. The name is
# part of the analysis cache keys.
REST = "rest"


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
