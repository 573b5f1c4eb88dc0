"""Chain of custody of raw partitions: what was validated is what trains.

A day's content digest is a SHA-256 over the bytes of its data files (every visible file
but the `_SUCCESS` marker, which is the producer's note, not data), with one digest per
file so a mismatch can name the file. The validate task records the digest it validated
(before and after the step read the files: a change in between is refused); preprocess,
train and evaluate check every window day against the digest its validation recorded. A
mismatch is bad data: the day is quarantined and the run stops, naming the day and the
file. Names, sizes and modification times are never trusted: they can be kept while the
bytes change.

Stdlib only: the DAG factory's tasks call this; hashing runs at disk speed (about 1 GB/s),
a small share of validating the same bytes (bench/validate_span.py measures it).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from retrain.common.errors import BadData
from retrain.common import quarantine
from retrain.common import paths

SUCCESS_MARKER = "_SUCCESS"
VALIDATION_RECORD = "lineage/validate.json"
_CHUNK = 1 << 20


class ContentChanged(BadData):
    """A partition's bytes differ from the bytes its validation read."""


def data_files(day_dir: str | os.PathLike) -> list[Path]:
    """The visible data files under a partition, sorted (hidden temp entries and the
    `_SUCCESS` marker are not data)."""
    root = Path(day_dir)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if not name.startswith(".") and not (dirpath == str(root) and name == SUCCESS_MARKER):
                out.append(Path(dirpath) / name)
    return sorted(out)


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def content(day_dir: str | os.PathLike) -> dict:
    """{"digest": hex, "files": {relative path: hex}} of a partition's data bytes."""
    root = Path(day_dir)
    files = {str(p.relative_to(root)): file_digest(p) for p in data_files(root)}
    blob = json.dumps(sorted(files.items()), separators=(",", ":")).encode()
    return {"digest": hashlib.sha256(blob).hexdigest()[:32], "files": files}


def differences(expected: dict, actual: dict) -> list[str]:
    """Human lines naming each file that changed, appeared or disappeared."""
    want, have = expected.get("files") or {}, actual.get("files") or {}
    lines = [f"{name} changed" for name in sorted(want) if name in have and want[name] != have[name]]
    lines += [f"{name} removed" for name in sorted(set(want) - set(have))]
    lines += [f"{name} added" for name in sorted(set(have) - set(want))]
    return lines or ["the content digest differs"]


def validated(history_root: str | os.PathLike, day: str,
              run_dir: str | os.PathLike | None = None) -> dict | None:
    """The content ({"digest", "files"}) the newest validation of `day` recorded, or the
    one of this run's own record when `run_dir` is given (None: no record has one)."""
    if run_dir is not None:
        records = [Path(run_dir) / VALIDATION_RECORD]
    else:
        records = list(Path(paths.partition(history_root, day)).glob(f"*/{VALIDATION_RECORD}"))
    found = []
    for path in records:
        try:
            rec = json.loads(path.read_text())
            got = rec["figures"].get("content")
            if isinstance(got, dict) and got.get("digest"):
                found.append((path.stat().st_mtime_ns, got))
        except (OSError, ValueError, KeyError, AttributeError):
            continue
    return max(found, key=lambda x: x[0])[1] if found else None


def verify(day: str, day_dir: str | os.PathLike, expected: dict | None, *, stage: str,
           quarantine_dir: str | None = None, run_id: str | None = None,
           actual: dict | None = None) -> dict:
    """Raise ContentChanged (and quarantine the day) unless the partition's bytes are the
    ones its validation recorded; returns the content checked."""
    actual = actual or content(day_dir)
    if expected is None:
        problem = "no validation recorded a content digest for it"
        lines = [problem]
    elif expected["digest"] == actual["digest"]:
        return actual
    else:
        lines = differences(expected, actual)
        problem = "its bytes differ from the bytes its validation read: " + "; ".join(lines)
    quarantine.settle(quarantine_dir, span=paths.partition_name(day), span_dir=str(day_dir), gate="failed",
                      run_id=run_id, failed=[f"content_changed: {line}" for line in lines],
                      report=None)
    raise ContentChanged(
        f"{stage}: refusing day {day} ({day_dir}): {problem}. The day is quarantined; "
        "validate it again (run the DAG with span set to that day) to use the new data.")
