"""Chain of custody of raw partitions: what was validated is what trains.

A day's content digest is a SHA-256 over the bytes of its data files (every visible file
but the `_SUCCESS` marker, which is the producer's note, not data), with one digest per
file so a mismatch can name the file. The validate task records the digest it validated
(before and after the step read the files: a change in between is refused); preprocess,
train and evaluate check every window day against the digest its validation recorded. A
mismatch is bad data: the day is quarantined and the run stops, naming the day and the
file. Names, sizes and modification times are never trusted: they can be kept while the
bytes change.

Each file's bytes are hashed once, not at every check: a run checks its window four
times or so, and at the seed's scale (a day of ~900 GB) hashing all of it in the task's
one process each time took hours. A file's digest is kept with its identity (device,
inode, size, mtime and ctime, in ns) under `<home>/cache/custody`; a later check whose
identity matches reuses it. The ctime is the kernel's: every write to a file's bytes or
metadata sets it to now, and no user call can set it back, so keeping size and mtime
(the attack above) still changes it. A file hashed within RACY_NS of its last change is
not kept (a filesystem with coarse timestamps could show a change in the same tick as
unchanged: git's "racily clean" rule). Files to hash are hashed in threads (hashlib
releases the GIL), so a check runs at the machine's disk speed, not one core's.

Stdlib only: the DAG factory's tasks call this; hashing runs at disk speed (about 1 GB/s
on one core here), a small share of validating the same bytes (bench/content_digest.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from retrain.common.errors import BadData
from retrain.common import quarantine
from retrain.common import digests, paths
from retrain.common.atomic import write_json

SUCCESS_MARKER = "_SUCCESS"
CACHE_DIR = "cache/custody"       # under the artifact root
RACY_NS = 2_000_000_000           # a file changed this recently is hashed, never cached
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
    """SHA-256 of one data file: the registry's reader (retrain.common.digests), which
    opens without following a link or blocking on a FIFO that appeared since listing."""
    return digests.file_digest(path)[0]


def _identity(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_file(root: Path, cache_dir: str | os.PathLike | None) -> Path:
    base = Path(cache_dir) if cache_dir else paths.artifact_root() / CACHE_DIR
    return base / (hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32] + ".json")


def _read_cache(path: Path) -> dict:
    try:
        known = json.loads(path.read_text())
        return known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        return {}          # no cache, or a damaged one: hash again


def content(day_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> dict:
    """{"digest": hex, "files": {relative path: hex}} of a partition's data bytes; a file
    whose identity is unchanged since it was hashed is not read again (see the module
    docstring; `cache_dir` default: `<artifact root>/cache/custody`)."""
    from concurrent.futures import ThreadPoolExecutor

    root = Path(day_dir)
    cache = _cache_file(root, cache_dir)
    known = _read_cache(cache)
    names = [str(p.relative_to(root)) for p in data_files(root)]
    ids = {name: _identity(root / name) for name in names}
    files = {name: known[name][1] for name in names
             if isinstance(known.get(name), list) and len(known[name]) == 2
             and known[name][0] == ids[name]}
    todo = [name for name in names if name not in files]
    if todo:
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, len(todo))) as pool:
            files.update(zip(todo, pool.map(lambda n: file_digest(root / n), todo)))
        now = time.time_ns()
        # Kept only if the file did not change while it was hashed, nor just before.
        keep = {n: [ids[n], files[n]] for n in names
                if n not in todo or (_identity(root / n) == ids[n]
                                     and now - ids[n][4] >= RACY_NS)}
        if any(n in keep for n in todo):
            try:
                write_json(cache, keep)
            except OSError:
                pass       # a read-only home: every check hashes, nothing is lost
    files = {name: files[name] for name in names}
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
