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


NOT_RETRYABLE = (BadData, ValueError, TypeError)


def kind_of(exc: BaseException) -> str:
    return BAD_DATA if isinstance(exc, NOT_RETRYABLE) else TRANSIENT
