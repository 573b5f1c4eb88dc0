"""Typed failures shared by every family's steps, the launcher and the DAG factory.

A step that finds bad data raises a `BadData` subclass; its entry point writes the kind into
the result file, and the launcher raises `BadDataFailed` in the task, which the factory turns
into a failure without retry. A `ValueError` or `TypeError` is taken the same way: that is
what the libraries raise for malformed input (pyarrow's ArrowInvalid, JSONDecodeError,
UnicodeDecodeError) and what the steps' own checks of their parameters and configs raise,
and a retry cannot mend either. Anything else (an OSError, a killed process, MemoryError,
a timeout) is taken as transient and retried. No component ever matches an error's text
to tell them apart. Stdlib only.
"""
from __future__ import annotations

import errno
import shutil

BAD_DATA = "bad_data"
TRANSIENT = "transient"


class BadData(Exception):
    """The input was read and is wrong: retrying cannot help, a person must act."""

    kind = BAD_DATA


class ValidationFailed(BadData):
    """The span was read but broke at least one error rule (the report is written)."""

    def __init__(self, message: str, summary: dict | None = None):
        super().__init__(message)
        self.summary = summary or {}


class ConfigError(BadData, ValueError):
    """A family config file is wrong; the message lists every problem with its place."""


class OneClass(BadData):
    """A training window's labels (of some task) hold one class only: nothing separates
    classes, so training is refused before it starts. A validation override can let such
    days through; a retry cannot mend them, other data can."""


def refuse_one_class(class_counts: dict, where: str) -> None:
    """OneClass naming each task whose labelled rows (`class_counts`: {task: {class name:
    rows}}) are all of one class; a task with no labelled row is not judged here."""
    single = {task: next(name for name, n in counts.items() if n > 0)
              for task, counts in class_counts.items()
              if sum(1 for n in counts.values() if n > 0) == 1}
    if single:
        told = "; ".join(f"{task}: all {sum(class_counts[task].values()):g} labelled rows "
                         f"are {name!r}" for task, name in sorted(single.items()))
        raise OneClass(f"{where}: the training window holds one class only ({told}): "
                       "a model cannot learn to tell classes apart from it; refusing to "
                       "train (widen the window or fix the export; an override of the "
                       "validation gate does not make such data trainable)")


NOT_RETRYABLE = (BadData, ValueError, TypeError)


def kind_of(exc: BaseException) -> str:
    return BAD_DATA if isinstance(exc, NOT_RETRYABLE) else TRANSIENT


# Below this many free bytes on its output's device, a failed step ran out of disk,
# whatever its libraries called the failure (TensorFlow: ResourceExhaustedError).
FULL_DISK_BYTES = 1 << 20


def out_of_space(exc: BaseException) -> OSError | None:
    """The OSError of a full device (or quota) behind `exc`, if any: Beam re-raises a
    worker's OSError as its own RuntimeError, so the chain of causes is followed."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def disk_full_message(exc: OSError, where) -> str:
    """What a full disk failed to write, by path: ENOSPC from write() names no file."""
    place = exc.filename or where or "its output folder"
    return (f"no space left on the device holding {place} ({exc.strerror or 'disk full'}): "
            "free space there or point RETRAIN_HOME at a larger disk; the step's output is "
            "not visible")


def full_disk_error(exc: BaseException, where) -> str | None:
    """The message for a failure caused by a full disk, or None: an ENOSPC anywhere in
    the chain of causes, or a device under FULL_DISK_BYTES free where the output goes."""
    full = out_of_space(exc)
    if full is not None:
        return disk_full_message(full, where)
    low = low_space(where)
    return f"{low}; the step failed with {type(exc).__name__}: {exc}" if low else None


def low_space(where) -> str | None:
    """"no space left ..." naming `where` when its device has under FULL_DISK_BYTES free."""
    free = free_bytes(where) if where else None
    if free is None or free >= FULL_DISK_BYTES:
        return None
    return (f"no space left on the device holding {where} ({free} bytes free): free space "
            "there or point RETRAIN_HOME at a larger disk")


def free_bytes(path) -> int | None:
    """Free bytes on the device holding `path` (or its nearest existing parent)."""
    from pathlib import Path
    for p in (Path(path), *Path(path).parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


# What a launcher raises when the step it ran failed (the step's own error kind decides).
class StepFailed(RuntimeError):
    """The step exited non-zero; `kind` says whether a retry can help."""

    kind = TRANSIENT


class BadDataFailed(StepFailed):
    """The step rejected its input (a `BadData` error in the child): never retried."""

    kind = BAD_DATA
