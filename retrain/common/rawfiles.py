"""Raw part files checked before a job reads them, and again after.

Every reader of raw parts (CTR and text validation, preprocessing, evaluation,
recommendations, `retrain config suggest`) lists a day through `list_parts` or checks its
list with `snapshot`, so one set of rules holds everywhere:

- a part must be a non-empty regular file: a FIFO, socket, device or folder named like a
  part is refused from its `stat` (never opened: opening a FIFO waits for a writer
  forever), naming the file and what it is;
- a part and its day folder must resolve inside the raw root: a symlink out of it (a
  producer's mistake, or /etc/passwd fed through the pipeline), whether the part or the
  whole day folder is the link, is refused;
- a day holds at most `max_parts_per_day` parts (`record_limits`, set per dataset in the
  family's config): the count is taken from the folder's names before any part is
  checked or read, and a day past it is refused (`TooManyParts`) naming the day, the
  count and the limit.

An empty or unreadable file is refused too, naming the file. A part must not change while a job reads
it: the job notes each file's size and modification time when it lists them and checks
both after reading, so a file still being written fails the job instead of giving
analysis and transform different rows. Local paths only: a remote filesystem (gs://,
s3://) keeps its own consistency. Stdlib only.
"""
from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

from retrain.common.errors import BadData
from retrain.common.record_limits import DEFAULT_MAX_PARTS_PER_DAY

log = logging.getLogger("retrain.rawfiles")

PART_PREFIX = "part-"
# A listing or check that takes longer than this, or holds more parts, says so in the log.
PROGRESS_SECONDS = 5.0
PROGRESS_PARTS = 200


class UnsafeInput(BadData):
    """A part file cannot be read as data: outside the raw root, empty, not a file."""


class ChangedWhileRead(BadData):
    """A part file changed between the job's listing and the end of its read."""


class CorruptPart(BadData, ValueError):
    """A part file's bytes are not the format its name says (a broken Parquet footer or
    page): no retry mends it."""


class NoParts(BadData, FileNotFoundError):
    """A span marked complete (`_SUCCESS`) holds no part file: waiting cannot help."""


class TooManyParts(BadData, ValueError):
    """A day holds more part files than `max_parts_per_day`: refused before reading."""


# What a non-regular file is, for the refusal (stat's S_IS* tests, in this order).
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe): opening it would wait for a writer"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


Snapshot = dict  # path -> (size in bytes, mtime in ns)


def _is_remote(path: str) -> bool:
    return "://" in path


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a file")


def check_day(day_dir: str | Path, root: str | Path | None = None) -> None:
    """UnsafeInput unless a local day folder is a folder that resolves inside `root`
    (default: its parent, the raw root): a day folder linked out of the root is refused."""
    day = str(day_dir)
    if _is_remote(day):
        return
    root = str(root) if root is not None else os.path.dirname(os.path.abspath(day))
    real_root, target = os.path.realpath(root), os.path.realpath(day)
    if not _inside(target, real_root):
        raise UnsafeInput(f"day folder {day} resolves to {target}, outside the raw root "
                          f"{root}: refusing to read it (link the data into the root, or "
                          "point raw_root at it)")
    try:
        mode = os.stat(day).st_mode
    except OSError as e:
        raise FileNotFoundError(f"span directory does not exist: {day} "
                                f"({e.strerror})") from None
    if not stat.S_ISDIR(mode):
        raise UnsafeInput(f"day folder {day} is {_kind(mode)}, not a folder")


def check_count(day, count: int, max_parts: int) -> None:
    """TooManyParts when a day holds more than `max_parts` part files."""
    if count > max_parts:
        raise TooManyParts(
            f"day {day} holds {count} part files, over the limit of {max_parts} "
            "(max_parts_per_day): refusing it before reading any; a producer writes a few "
            "hundred parts at most, so merge the small parts or raise max_parts_per_day in "
            "the family's config if the day is genuine")


def list_parts(day_dir: str | Path, suffixes: tuple[str, ...], root: str | Path | None = None,
               *, max_parts: int = DEFAULT_MAX_PARTS_PER_DAY) -> list[Path]:
    """The part files (`part-*` ending in one of `suffixes`) of a local day folder, in
    name order, each checked (`snapshot`): a day that links out of `root` (default: the
    day's parent), holds more than `max_parts` parts, no part, or a part no job should
    read is refused. Names come from one `scandir` (nothing is opened or stat'ed) and
    are counted before any part is checked, so a day of a million parts is refused in
    about a second."""
    day = Path(day_dir)
    root = day.parent if root is None else root
    check_day(day, root)
    t0 = time.perf_counter()
    names, others = [], []
    with os.scandir(day) as entries:
        for entry in entries:
            if entry.name.startswith(PART_PREFIX) and entry.name.endswith(suffixes):
                names.append(entry.name)
            elif len(others) < 10:
                others.append(entry.name)
    check_count(day, len(names), max_parts)
    if not names:
        raise NoParts(f"span {day} has no part-*.parquet or part-*.jsonl[.gz] files "
                      f"(found: {sorted(others) or 'nothing'})")
    parts = [day / name for name in sorted(names)]
    found = snapshot(parts, root)
    seconds = time.perf_counter() - t0
    if seconds > PROGRESS_SECONDS or len(parts) > PROGRESS_PARTS:
        log.info("day %s: %d part files, %.1f MB, listed and checked in %.1f s", day.name,
                 len(parts), sum(size for size, _ in found.values()) / 1e6, seconds)
    return parts


def regular_file(path: str, root: str | Path | None = None,
                 real_root: str | None = None) -> os.stat_result:
    """The stat of a local file a job may open: UnsafeInput (from lstat/stat and the real
    path: nothing is opened) when it is no regular file (a FIFO, socket, device, folder),
    a dangling link, or resolves outside `root` (a link out of it, its own or its day
    folder's). `real_root`: `root` already resolved (a caller checking many files)."""
    if root is not None and real_root is None:
        real_root = os.path.realpath(root)
    try:
        link = os.lstat(path)
        if real_root is not None:
            target = os.path.realpath(path)
            if stat.S_ISLNK(link.st_mode) and not _inside(target, real_root):
                raise UnsafeInput(f"{path} is a symlink to {target}, outside the raw root "
                                  f"{root}: refusing to read it")
            if not _inside(target, real_root):
                raise UnsafeInput(f"{path} resolves to {target}, outside the raw root "
                                  f"{root} (its day folder is a link out of the root): "
                                  "refusing to read it")
        st = os.stat(path)
    except FileNotFoundError as e:
        raise UnsafeInput(f"{path} is a dangling symlink or vanished: {e}") from e
    except PermissionError as e:
        raise UnsafeInput(f"{path} is not readable: {e}") from e
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeInput(f"{path} is not a regular file: it is {_kind(st.st_mode)}; "
                          "refusing it without opening it")
    return st


def check_files(paths, root: str | Path) -> None:
    """`regular_file` for every local path (any file of a day a step hashes or reads,
    not only its parts): UnsafeInput at the first one no job may open."""
    real_root = None if _is_remote(str(root)) else os.path.realpath(root)
    for p in map(str, paths):
        if not _is_remote(p):
            regular_file(p, root, real_root)


def snapshot(paths, root: str | Path | None = None) -> Snapshot:
    """(size, mtime) of every local part; UnsafeInput for a file no job should read: not
    a regular file (from its stat: nothing is opened), empty, unreadable, or resolving
    outside `root` (a link out of it, the part's or its day folder's)."""
    real_root = os.path.realpath(root) if root is not None and not _is_remote(str(root)) else None
    out: Snapshot = {}
    t0 = last = time.perf_counter()
    paths = list(map(str, paths))
    for n, p in enumerate(paths, 1):
        if _is_remote(p):
            continue
        st = regular_file(p, root, real_root)
        if st.st_size == 0:
            raise UnsafeInput(f"{p} is empty (0 bytes): a part must hold records "
                              "(remove it, or rewrite the partition)")
        if not os.access(p, os.R_OK):
            raise UnsafeInput(f"{p} is not readable by this user")
        out[p] = (st.st_size, st.st_mtime_ns)
        now = time.perf_counter()
        if now - last > PROGRESS_SECONDS:
            log.info("checked %d of %d raw files in %.0f s", n, len(paths), now - t0)
            last = now
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
