"""Content digests of files and folders: what a published model is verified against.

The registry records, when a version is published, the SHA-256 and size of every file of
it (`manifest`), and every reader of a published model checks the files against that
record (`compare`) before it loads them (design rule 25): a file replaced after
publishing, with the same name and other bytes, is refused with its name.

Only regular files are read. A file is opened without following a symbolic link and
without blocking (a FIFO named like a model file would otherwise hang the reader), and
anything that is not a regular file is reported as such, never read. Stdlib only.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISDIR, "a directory"))


class NotRegularFile(ValueError):
    """A path that should be a plain file is a link, FIFO, socket, device or folder."""


def kind_of(mode: int) -> str:
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def file_digest(path: str | os.PathLike) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a regular file; NotRegularFile for anything else
    (checked on the open descriptor, so a swap between check and read is caught too)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if os.path.islink(path):
            raise NotRegularFile(f"{path} is a symbolic link") from None
        raise e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path} is {kind_of(st.st_mode)}")
        return hashlib.file_digest(f, "sha256").hexdigest(), st.st_size


def manifest(root: str | os.PathLike, skip: frozenset[str] = frozenset()) -> dict:
    """{"digest": hex, "files": {relative path: {"sha256", "size"}}} of every file under
    `root` but the top-level names in `skip`. A link, FIFO, socket or device anywhere
    under it raises NotRegularFile naming it: such a tree is not published."""
    root = Path(root)
    files: dict[str, dict] = {}
    for rel, mode in _walk(root, skip):
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{root / rel} is {kind_of(mode)}")
        sha, size = file_digest(root / rel)
        files[rel] = {"sha256": sha, "size": size}
    return {"digest": tree_digest(files), "files": files}


def tree_digest(files: dict) -> str:
    """One digest over the (path, sha256) pairs: what lineage shows for a version."""
    blob = json.dumps(sorted((k, v["sha256"]) for k, v in files.items()),
                      separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def compare(root: str | os.PathLike, recorded: dict, skip: frozenset[str] = frozenset(),
            quick: bool = False) -> list[str]:
    """What differs between the files under `root` and a recorded manifest's "files",
    one line per file, naming it and the rule ([] = the same). `quick` compares kinds
    and sizes only (no file is read): for listings; the readers hash."""
    root = Path(root)
    problems: list[str] = []
    seen: set[str] = set()
    for rel, mode in _walk(root, skip):
        seen.add(rel)
        want = recorded.get(rel)
        if want is None:
            what = "" if stat.S_ISREG(mode) else f"is {kind_of(mode)}, "
            problems.append(f"{rel}: {what}not among the files recorded when it was "
                            f"published (added since)")
            continue
        if not stat.S_ISREG(mode):
            problems.append(f"{rel}: is {kind_of(mode)}, not the regular file published")
            continue
        if quick:
            size = (root / rel).lstat().st_size
            if size != want.get("size"):
                problems.append(f"{rel}: {size} bytes, {want.get('size')} when published")
            continue
        try:
            sha, size = file_digest(root / rel)
        except (OSError, NotRegularFile) as e:
            problems.append(f"{rel}: cannot be read ({type(e).__name__})")
            continue
        if sha != want.get("sha256"):
            problems.append(f"{rel}: content differs from the sha256 recorded when it was "
                            f"published ({size} bytes now, {want.get('size')} then)")
    problems += [f"{rel}: missing (recorded when it was published)"
                 for rel in sorted(set(recorded) - seen)]
    return problems


def _walk(root: Path, skip: frozenset[str]):
    """(relative path, lstat mode) of every non-directory entry under root, sorted; links
    are reported, never followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        top = base == root
        for name in list(dirnames):
            if (base / name).is_symlink():   # os.walk lists a link to a dir as a dir
                dirnames.remove(name)
                filenames.append(name)
        dirnames.sort()
        for name in sorted(filenames):
            if top and name in skip:
                continue
            path = base / name
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue
            out.append((path.relative_to(root).as_posix(), mode))
    return sorted(out)
