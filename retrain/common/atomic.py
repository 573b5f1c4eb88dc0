"""Atomic artifact writes: build in a hidden temp sibling, then rename into place.

A retried or killed task never leaves a half-written artifact that a later task could
read: readers only ever see the final name, which appears in one `rename`.

A rerun replaces the folder whole, so only what retrain wrote may be replaced: every folder
written here carries a small hidden marker (MARKER), and a file, a link or a non-empty
folder without it is refused (`--out ~` or `--out /etc/passwd` must never delete anything).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


MARKER = ".retrain-output"
MARKER_TEXT = "Written by retrain; rerunning the step that wrote this folder replaces it whole.\n"


def check_replaceable(target: str | os.PathLike) -> None:
    """Raise FileExistsError unless `target` is absent, an empty folder, or a folder that
    retrain wrote (it holds MARKER): what a rerun may replace whole."""
    target = Path(target)
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a folder: refusing to replace it "
                              "(give the path of a new folder)")
    if (target / MARKER).is_file() or not any(target.iterdir()):
        return
    raise FileExistsError(f"{target} is a folder that retrain did not write (no {MARKER} "
                          "in it): refusing to replace it (give a new folder, or remove "
                          "this one yourself)")


def mark(folder: str | os.PathLike) -> Path:
    """Mark a folder as retrain's output (a rerun may replace it); returns the marker."""
    marker = Path(folder) / MARKER
    marker.write_text(MARKER_TEXT)
    return marker


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temp dir next to `target`; on success it becomes `target`. An existing
    `target` is replaced only when `overwrite` and retrain wrote it (check_replaceable),
    checked before the work starts and again at the rename."""
    target = Path(target)
    if overwrite:
        check_replaceable(target)
    elif os.path.lexists(target):
        raise FileExistsError(f"{target} already exists")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; artifacts are shared reads
    try:
        yield tmp
        mark(tmp)
        if os.path.lexists(target):
            if not overwrite:
                raise FileExistsError(f"{target} already exists")
            check_replaceable(target)       # it may have appeared while the work ran
            trash = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.rename(target, trash)
            os.rename(tmp, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_stale_temps(target: str | os.PathLike) -> list[Path]:
    """Delete temp dirs that a killed writer of `target` left behind (its process is gone),
    so a retried task starts clean; a live writer's temp dir is left alone."""
    target = Path(target)
    removed = []
    for tmp in target.parent.glob(f".{target.name}.tmp-*"):
        pid = tmp.name[len(f".{target.name}.tmp-"):].split("-", 1)[0]
        if tmp.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_json(path: str | os.PathLike, obj) -> Path:
    """Write JSON atomically (temp file in the same dir + os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: str | os.PathLike):
    with open(path) as f:
        return json.load(f)
