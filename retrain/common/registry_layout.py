"""What a model registry is on disk: its file names, stages and reserved keys, the rules
for model names and version folders, the errors it raises, and the two reads every part
of it makes (a version's meta, the version CURRENT names). `retrain.common.registry`
describes the layout and the rules a publish follows. Stdlib only.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
from pathlib import Path

from retrain.common import digests
from retrain.common.atomic import read_json
from retrain.common.errors import BadData


class RegistryBroken(BadData, ValueError):
    """The registry's own files are damaged: no publish guesses which version is live."""


class ModelTampered(BadData, ValueError):
    """A published version's files differ from the digests recorded when it was published
    (replaced, truncated, added, removed), or its meta cannot be read: it is not loaded,
    rolled back to or served. Not retried: a person restores or republishes it."""

    def __init__(self, model: str, version: int | str, problems: list[str],
                 vdir: Path | None = None) -> None:
        self.model, self.version, self.problems = model, version, list(problems)
        where = f" ({vdir})" if vdir else ""
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                            if len(problems) > 5 else "")
        super().__init__(
            f"model {model!r} version {version}{where} fails verification against what was "
            f"recorded when it was published: {shown}. Refusing to use it; "
            f"`retrain registry doctor {model}` lists damaged versions (`--repair` points "
            f"CURRENT at an intact one)")


class StaleBaseline(BadData):
    """The candidate was evaluated against a model that is no longer current (a rollback or
    another publish changed CURRENT since): the publish is refused, never applied. Not
    retried: only a fresh evaluation against the current model can decide."""

    def __init__(self, model: str, expected: int | None, current: int | None) -> None:
        self.model, self.expected, self.current = model, expected, current
        super().__init__(
            f"refusing to publish model {model!r}: the candidate was evaluated against a "
            f"model that is no longer current (expected current: {_version_words(expected)}; "
            f"actual current: {_version_words(current)}; a rollback or another publish "
            f"changed it since). Nothing was published; evaluate the candidate again "
            f"against the current model (clear the run's evaluate task) for a fresh verdict")



class ChangedAfterEvaluation(BadData):
    """What push was handed is not what evaluation judged: the candidate's files or the
    evaluation's record changed in between (a person, a bug, another run). Nothing is
    published; not retried: only a fresh evaluation can judge what is there now. The
    message names the file and the two digests, never its content."""

    def __init__(self, what: str, where: str, evaluated: str, now: str,
                 model: str | None = None) -> None:
        self.what, self.where, self.evaluated, self.now = what, where, evaluated, now
        subject = f"model {model!r}" if model else "the candidate"
        super().__init__(
            f"refusing to publish {subject}: {what} {where} changed after evaluation "
            f"(digest {evaluated[:16]}... when evaluated, {now[:16]}... now). Nothing was "
            f"published; evaluate the candidate again (clear the run's evaluate task) for a "
            f"verdict on what is there now")

def _version_words(version: int | None) -> str:
    return "no published version" if version is None else f"version {version}"


class _AnyCurrent:
    """Type of `ANY`: publish with no compare-and-swap check."""

    def __repr__(self) -> str:
        return "registry.ANY"


# expect_current=ANY: publish whatever is current (no check). Callers that decided against
# a published model pass its version instead (design rule 20).
ANY = _AnyCurrent()

META_FILE = "retrain_meta.json"
CURRENT_FILE = "CURRENT"
DAMAGED_FILE = "DAMAGED.json"
CONTENT_KEY = "content"      # {"digest", "files": {path: {"sha256", "size"}}} at publish
MODEL_DIGEST_KEY = "model_digest"   # what "the same model" is compared by (model_digest)
LOCK_FILE = ".lock"
TMP_PREFIX = ".tmp-"
SAVED_MODEL_FILE = "saved_model.pb"
# TensorFlow's own fingerprint of a SavedModel (every save since TF 2.12): a random UUID
# plus hashes of the other files; not part of model_digest.
FINGERPRINT_FILE = "fingerprint.pb"
PUBLISHED_OUTCOME, UNCHANGED_OUTCOME = "published", "unchanged"
CANDIDATE, PUBLISHED, ARCHIVED = "candidate", "published", "archived"
STAGES = (CANDIDATE, PUBLISHED, ARCHIVED)
STALE_TMP_SECONDS = 3600

# Keys the registry owns; callers' metadata may not set them.
RESERVED_KEYS = frozenset({"model_name", "version", "stage", "created_at", "history",
                           CONTENT_KEY, MODEL_DIGEST_KEY})
# Keys every meta file has (None when the caller did not give them).
STANDARD_KEYS = ("metrics", "data_span", "run_id", "dag_id", "code_version", "gate",
                 "source_model_uri")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_RE = re.compile(r"^[1-9][0-9]*$")


class NotFound(KeyError):
    """Unknown model or version. A KeyError whose str() is the plain message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def default_who() -> str:
    return os.environ.get("USER") or "unknown"


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False



def read_meta(vdir: Path) -> dict | None:
    """A version folder's meta; None when it is missing, unreadable, not a regular file
    or not a JSON object (`check` says which)."""
    if not _is_regular(vdir / META_FILE):   # a FIFO or link is never opened
        return None
    try:
        meta = read_json(vdir / META_FILE)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):   # check says which
        return None
    return meta if isinstance(meta, dict) else None


def read_current(mdir: Path) -> int | None:
    """The version CURRENT names; None when there is no CURRENT; ValueError (naming the
    file) when it cannot be trusted."""
    path = mdir / CURRENT_FILE
    if os.path.lexists(path) and not _is_regular(path):   # never opened: may block
        raise ValueError(f"{path} is {digests.kind_of(os.lstat(path).st_mode)}, not a "
                         f"regular file")
    try:
        data = read_json(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{mdir / CURRENT_FILE} is not valid JSON: {e}") from None
    except OSError as e:
        raise ValueError(f"{mdir / CURRENT_FILE} cannot be read: {e}") from None
    version = data.get("version") if isinstance(data, dict) else None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{mdir / CURRENT_FILE} has no valid 'version' (a whole "
                         f"number >= 1)")
    return version
