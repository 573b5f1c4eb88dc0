"""Raw part files checked before a job reads them, and again after.

A part must be a non-empty regular file that stays inside the raw root: a symlink out
of it (a producer's mistake, or /etc/passwd fed through the pipeline) and an empty or
unreadable file are refused, naming the file. A part must not change while a job reads
it: the job notes each file's size and modification time when it lists them and checks
both after reading, so a file still being written fails the job instead of giving
analysis and transform different rows. Local paths only: a remote filesystem (gs://,
s3://) keeps its own consistency. Stdlib only.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from retrain.common.errors import BadData


class UnsafeInput(BadData):
    """A part file cannot be read as data: outside the raw root, empty, not a file."""


class ChangedWhileRead(BadData):
    """A part file changed between the job's listing and the end of its read."""


class CorruptPart(BadData, ValueError):
    """A part file's bytes are not the format its name says (a broken Parquet footer or
    page): no retry mends it."""


class NoParts(BadData, FileNotFoundError):
    """A span marked complete (`_SUCCESS`) holds no part file: waiting cannot help."""


Snapshot = dict  # path -> (size in bytes, mtime in ns)


def _is_remote(path: str) -> bool:
    return "://" in path


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def snapshot(paths, root: str | Path | None = None) -> Snapshot:
    """(size, mtime) of every local part; UnsafeInput for a file no job should read."""
    real_root = os.path.realpath(root) if root is not None and not _is_remote(str(root)) else None
    out: Snapshot = {}
    for p in map(str, paths):
        if _is_remote(p):
            continue
        try:
            link = os.lstat(p)
            if stat.S_ISLNK(link.st_mode) and real_root is not None:
                target = os.path.realpath(p)
                if not _inside(target, real_root):
                    raise UnsafeInput(f"{p} is a symlink to {target}, outside the raw root "
                                      f"{root}: refusing to read it")
            st = os.stat(p)
        except FileNotFoundError as e:
            raise UnsafeInput(f"{p} is a dangling symlink or vanished: {e}") from e
        except PermissionError as e:
            raise UnsafeInput(f"{p} is not readable: {e}") from e
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeInput(f"{p} is not a regular file")
        if st.st_size == 0:
            raise UnsafeInput(f"{p} is empty (0 bytes): a part must hold records "
                              "(remove it, or rewrite the partition)")
        if not os.access(p, os.R_OK):
            raise UnsafeInput(f"{p} is not readable by this user")
        out[p] = (st.st_size, st.st_mtime_ns)
    return out


def verify_unchanged(before: Snapshot) -> None:
    """ChangedWhileRead naming each part whose size or mtime moved since `snapshot`."""
    changed = []
    for p, (size, mtime) in before.items():
        try:
            st = os.stat(p)
            now = (st.st_size, st.st_mtime_ns)
        except OSError:
            now = None
        if now is None:
            changed.append(f"{p} (gone)")
        elif now != (size, mtime):
            changed.append(f"{p} ({size} -> {now[0]} bytes)" if now[0] != size
                           else f"{p} (rewritten, still {size} bytes)")
    if changed:
        raise ChangedWhileRead(
            f"{len(changed)} input file(s) changed while the job read them ({'; '.join(changed)}): "
            "a partition must be complete before its _SUCCESS marker is written; "
            "nothing was written")
