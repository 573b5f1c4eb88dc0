"""Committing a job's output folder, on a filesystem or on an object store.

On a filesystem the output is built in a hidden sibling and renamed into place
(`atomic_dir`): readers see all of it or nothing. Object stores (gs://, s3://) have no
atomic rename of a folder: a "rename" is a copy and a delete per object, so a reader (or a
retry) could see half of it. There the output is committed by a marker instead, the way
Hadoop/Spark output committers and Dataflow pipelines do it:

- every attempt writes into its own folder `<target>/attempt-<time>-<id>/`;
- when it has finished, the attempt's file list goes to `<attempt>/_MANIFEST.json`, then
  `<target>/_SUCCESS` (one small object written in one PUT: the commit point) names the
  attempt;
- readers resolve `<target>` through `_SUCCESS` (`committed`), so a running, failed or
  killed attempt is never read, and a retry never mixes files of two attempts;
- after the commit, the other attempts are deleted (best effort: a leftover is garbage,
  never read).

Paths go through Beam's FileSystems, so the same code writes a local folder, gs:// or s3://.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from typing import Iterator

SUCCESS = "_SUCCESS"
MANIFEST = "_MANIFEST.json"
ATTEMPT_PREFIX = "attempt-"
MODES = ("auto", "rename", "marker")


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def mode_for(uri: str, mode: str = "auto") -> str:
    """`rename` for a local folder, `marker` for an object store (`auto`), or as asked."""
    if mode not in MODES:
        raise ValueError(f"output commit must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        return "rename" if is_local(uri) else "marker"
    if mode == "rename" and not is_local(uri):
        raise ValueError(f"{uri}: an object store has no atomic rename; use the marker commit")
    return mode


@contextlib.contextmanager
def output_commit(target: str, mode: str = "auto") -> Iterator[str]:
    """Yield the folder to write into; on success it is `target`'s committed content.
    After the block, `committed(target)` (marker) or `target` (rename) is the result."""
    if mode_for(target, mode) == "rename":
        from retrain.common.atomic import atomic_dir
        with atomic_dir(target) as tmp:
            yield str(tmp)
    else:
        with marker_commit(target) as attempt:
            yield attempt


@contextlib.contextmanager
def marker_commit(target: str) -> Iterator[str]:
    from apache_beam.io.filesystems import FileSystems

    target = target.rstrip("/")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    name = f"{ATTEMPT_PREFIX}{stamp}-{uuid.uuid4().hex[:8]}"
    attempt = FileSystems.join(target, name)
    if is_local(attempt):
        FileSystems.mkdirs(attempt)          # object stores have no folders to make
    try:
        yield attempt
        files = {m.path[len(attempt) + 1:]: m.size_in_bytes
                 for m in FileSystems.match([FileSystems.join(attempt, "**")])[0].metadata_list}
        write_json(FileSystems.join(attempt, MANIFEST), {"attempt": name, "files": files})
        # The commit point: one small object, written whole or not at all.
        write_json(FileSystems.join(target, SUCCESS), {
            "attempt": name, "files": len(files), "bytes": sum(files.values()),
            "committed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    except BaseException:
        _delete_quietly(attempt)
        raise
    for other in _attempts(target):
        if other != attempt:
            _delete_quietly(other)


def committed(target: str) -> str | None:
    """The committed folder of a marker-committed `target` (None: nothing committed yet),
    checked against its manifest: a listed file that is missing is an error, not a read of
    half an output."""
    from apache_beam.io.filesystems import FileSystems

    target = target.rstrip("/")
    marker = FileSystems.join(target, SUCCESS)
    if not FileSystems.exists(marker):
        return None
    attempt = FileSystems.join(target, read_json(marker)["attempt"])
    listed = read_json(FileSystems.join(attempt, MANIFEST))["files"]
    missing = [f for f in listed if not FileSystems.exists(FileSystems.join(attempt, f))]
    if missing:
        raise FileNotFoundError(f"{attempt} is committed but {len(missing)} of its files are "
                                f"missing (e.g. {missing[0]}); rerun the job")
    return attempt


def write_json(uri: str, obj) -> None:
    from apache_beam.io.filesystems import FileSystems

    if is_local(uri):                  # temp file + rename: atomic on a filesystem
        from retrain.common.atomic import write_json as local_write
        local_write(uri.removeprefix("file://"), obj)
        return
    with FileSystems.create(uri, mime_type="application/json") as f:
        f.write((json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(uri: str):
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(uri) as f:
        return json.loads(f.read().decode())


def delete_tree(uri: str) -> None:
    """Delete a folder (a prefix on an object store) if it exists."""
    from apache_beam.io.filesystems import FileSystems

    if FileSystems.exists(uri):
        FileSystems.delete([uri])


def _attempts(target: str) -> list[str]:
    """The attempt folders under `target` (local: the folders; object store: the prefixes
    of their objects)."""
    from apache_beam.io.filesystems import FileSystems

    pattern = FileSystems.join(target, f"{ATTEMPT_PREFIX}*")
    found = set()
    for result in FileSystems.match([pattern, FileSystems.join(pattern, "**")]):
        for m in result.metadata_list:
            found.add(FileSystems.join(target, m.path[len(target) + 1:].split("/", 1)[0]))
    return sorted(found)


def _delete_quietly(uri: str) -> None:
    try:
        delete_tree(uri)
    except Exception:  # noqa: BLE001 - garbage left behind is never read (no _SUCCESS names it)
        pass
