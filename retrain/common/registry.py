"""The model registry: versioned, published models on disk, laid out for TF Serving.

The push stage publishes a blessed SavedModel here; evaluation reads the published one as
its baseline; operators list, inspect and roll back from the `retrain registry` CLI
(`retrain.orchestration.registry_cli`).

Layout (TensorFlow Serving's model base path, so a server can point straight at it):

    <root>/<model>/<version>/        1, 2, 3... : SavedModel files + retrain_meta.json
    <root>/<model>/CURRENT           JSON naming the published version (the source of truth)
    <root>/<model>/.lock             flock'ed while a version is allocated or stages change
    <root>/<model>/.tmp-*            a publish in progress (or killed); readers ignore it

A version appears in one `rename` of a fully written temp dir, so a killed publish never
leaves a half model under a numeric name; a retried publish with the same run id returns
(and, if it was interrupted, finishes) the version it already made.

"Current" changes by compare-and-swap (design rule 20): a publish names the version its
evaluation was compared against (`expect_current`: a version, or None for "nothing was
published") and, under the same `.lock` that rollback takes, succeeds only if CURRENT still
names it; otherwise it raises `StaleBaseline` and publishes nothing, so a rollback made while
a run was in flight is never undone by that run's push (nor by a retry of it). Stdlib only.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from retrain.common.atomic import read_json, write_json
from retrain.common.errors import BadData


class RegistryBroken(BadData, ValueError):
    """The registry's own files are damaged: no publish guesses which version is live."""


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
LOCK_FILE = ".lock"
TMP_PREFIX = ".tmp-"
SAVED_MODEL_FILE = "saved_model.pb"
CANDIDATE, PUBLISHED, ARCHIVED = "candidate", "published", "archived"
STAGES = (CANDIDATE, PUBLISHED, ARCHIVED)
STALE_TMP_SECONDS = 3600

# Keys the registry owns; callers' metadata may not set them.
RESERVED_KEYS = frozenset({"model_name", "version", "stage", "created_at", "history"})
# Keys every meta file has (None when the caller did not give them).
STANDARD_KEYS = ("metrics", "data_span", "run_id", "dag_id", "code_version", "gate",
                 "source_model_uri")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_RE = re.compile(r"^[1-9][0-9]*$")


class NotFound(KeyError):
    """Unknown model or version. A KeyError whose str() is the plain message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _copy_savedmodel(src: Path, dst: Path) -> None:
    """Copy a SavedModel dir's contents into the (existing, empty) dir `dst`.

    Module-level so tests can simulate a publish that dies halfway through the copy.
    """
    shutil.copytree(src, dst, dirs_exist_ok=True)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def default_who() -> str:
    return os.environ.get("USER") or "unknown"


def _jsonable(obj: Any) -> Any:
    """What the meta file will hold, so the dict we return equals the dict on disk."""
    return json.loads(json.dumps(obj, default=str))


class Registry:
    """Versioned models under one root. Safe for concurrent publishers on one filesystem
    with working `flock` (local disk; not most NFS mounts)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    # ---------------------------------------------------------------- reading

    def models(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and _NAME_RE.match(p.name))

    def model_path(self, name: str, version: int) -> Path:
        vdir = self._version_dir(name, version)
        if not vdir.is_dir():
            raise NotFound(self._no_version_msg(name, version))
        return vdir

    def get(self, name: str, version: int) -> dict:
        vdir = self.model_path(name, version)
        meta = self._read_meta(vdir)
        if meta is None:
            raise ValueError(f"model {name!r} version {version} is incomplete: no readable "
                             f"{META_FILE} in {vdir} (run `retrain registry check {name}`)")
        return meta

    def list_versions(self, name: str) -> list[dict]:
        """Metas of all versions with a readable meta file, oldest first."""
        self._require_model(name)
        out = []
        for _, vdir in sorted(self._version_dirs(name).items()):
            meta = self._read_meta(vdir)
            if meta is not None:
                out.append(meta)
        return out

    def current_version(self, name: str) -> int | None:
        """The version CURRENT names, or None (unknown model or nothing published)."""
        mdir = self._model_dir(name)
        return self._read_current(mdir)

    def current(self, name: str) -> dict | None:
        """Meta of the published version; None if the model has never been published.

        Raises (rather than returning None) when CURRENT names a missing version: a
        broken registry must not make the gate believe there is no baseline.
        """
        version = self.current_version(name)
        if version is None:
            return None
        vdir = self._version_dir(name, version)
        meta = self._read_meta(vdir)
        if meta is None or not (vdir / SAVED_MODEL_FILE).is_file():
            raise ValueError(f"CURRENT of model {name!r} names version {version}, which is "
                             f"missing or incomplete (run `retrain registry check {name}`)")
        return meta

    def find_run(self, name: str, run_id: str, dag_id: str | None = None) -> dict | None:
        """The complete version published by this (dag_id, run_id), if any."""
        mdir = self._model_dir(name)
        if not mdir.is_dir():
            return None
        for _, vdir in sorted(self._version_dirs(name).items()):
            meta = self._read_meta(vdir)
            if (meta is not None and (vdir / SAVED_MODEL_FILE).is_file()
                    and meta.get("run_id") == run_id and meta.get("dag_id") == dag_id):
                return meta
        return None

    # ---------------------------------------------------------------- writing

    def publish(self, model_dir: str | os.PathLike, name: str,
                metadata: dict | None = None, *, who: str | None = None,
                why: str | None = None,
                expect_current: int | None | _AnyCurrent = ANY) -> dict:
        """Copy a SavedModel in as a new version and make it the published one.

        `metadata` keys: metrics, data_span, run_id, dag_id, code_version, gate (a
        Decision dict; a gate that did not bless is refused), source_model_uri, plus any
        extra JSON-able keys. Returns the new version's meta. If this (dag_id, run_id)
        already made a complete version, that version is returned instead (and an
        interrupted promotion of it is finished), so a retried push task is harmless.

        `expect_current`: the version the caller's decision was based on (None: there was
        no published version). Checked under the model's lock, right before a number is
        allocated (or a retried publish is promoted): if CURRENT names another version,
        `StaleBaseline` is raised and nothing is published. `ANY` (the default): no check.
        """
        expect_current = _check_expectation(expect_current)
        src = Path(model_dir)
        if not src.is_dir():
            raise FileNotFoundError(f"model_dir {src} does not exist or is not a directory")
        if not (src / SAVED_MODEL_FILE).is_file():
            raise ValueError(f"model_dir {src} is not a SavedModel export: it has no "
                             f"{SAVED_MODEL_FILE}")
        metadata = dict(metadata or {})
        reserved = sorted(RESERVED_KEYS & set(metadata))
        if reserved:
            raise ValueError(f"metadata may not set registry-owned key(s) {reserved}")
        gate = metadata.get("gate")
        if gate is not None and not (isinstance(gate, dict) and gate.get("blessed")):
            raise ValueError(f"refusing to publish model {name!r}: the gate decision does "
                             f"not bless it ({gate.get('reasons') if isinstance(gate, dict) else gate!r})")
        run_id, dag_id = metadata.get("run_id"), metadata.get("dag_id")
        who = who or (f"{dag_id}/{run_id}" if dag_id and run_id else default_who())
        why = why or _publish_reason(gate)

        mdir = self._model_dir(name)
        mdir.mkdir(parents=True, exist_ok=True)
        try:
            live = self._read_current(mdir)
            if live is not None and self._read_meta(mdir / str(live)) is None:
                raise ValueError(f"{mdir / CURRENT_FILE} names version {live}, which is "
                                 f"missing or has no readable {META_FILE}")
        except ValueError as e:
            raise RegistryBroken(
                f"refusing to publish model {name!r} over a broken registry: {e}. "
                f"`retrain registry check {name}` lists what is wrong; `retrain registry "
                f"rollback {name} --to VERSION --why ...` rewrites CURRENT") from None
        if run_id and self.find_run(name, run_id, dag_id) is not None:
            with self._lock(mdir):
                return self._finish_existing(name, run_id, dag_id, who, why, expect_current)
        # Fail fast, before copying a model that would be refused; the check that counts
        # is the one under the lock below.
        self._compare(name, mdir, expect_current)

        tmp: Path | None = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=mdir))
        try:
            _copy_savedmodel(src, tmp)
            with self._lock(mdir):
                if run_id and self.find_run(name, run_id, dag_id) is not None:
                    return self._finish_existing(name, run_id, dag_id, who, why,
                                                 expect_current)
                self._compare(name, mdir, expect_current)   # the compare of the swap
                version = self._next_version(mdir)
                now = _now()
                meta = {key: metadata.get(key) for key in STANDARD_KEYS}
                meta.update(metadata)
                meta.update({
                    "model_name": name, "version": version, "stage": CANDIDATE,
                    "created_at": now,
                    "history": [{"at": now, "who": who, "why": why, "action": "publish",
                                 "from": None, "to": CANDIDATE}],
                })
                write_json(tmp / META_FILE, _jsonable(meta))
                os.rename(tmp, mdir / str(version))
                tmp = None
                return self._promote(name, version, who=who, why=why, action="publish")
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def rollback(self, name: str, to_version: int | None = None, who: str | None = None,
                 why: str | None = None) -> dict:
        """Re-publish an earlier version (default: the newest archived one before CURRENT).
        With a version named, it also repairs a CURRENT file that cannot be read.

        The replaced version is archived; who/why go into both versions' histories and
        CURRENT. Returns the meta of the version now published.
        """
        if not isinstance(why, str) or not why.strip():
            raise ValueError("rollback needs a reason: pass why (--why TEXT)")
        why = why.strip()
        who = (who or "").strip() or default_who()
        mdir = self._require_model(name)
        with self._lock(mdir):
            try:
                current = self._read_current(mdir)
            except ValueError:
                if to_version is None:   # which version is "before" a broken CURRENT?
                    raise
                current = None           # a named version repairs a broken CURRENT
            if current is None and to_version is None:
                raise ValueError(f"model {name!r} has no published version to roll back from")
            versions = self._version_dirs(name)
            if to_version is None:
                older = [v for v in sorted(versions) if v < current
                         and self._complete(versions[v])
                         and (self._read_meta(versions[v]) or {}).get("stage") == ARCHIVED]
                if not older:
                    raise ValueError(f"model {name!r}: no archived version older than the "
                                     f"current version {current} to roll back to; pass a "
                                     f"version (--to)")
                target = older[-1]
            else:
                target = int(to_version)
                if target not in versions:
                    raise NotFound(self._no_version_msg(name, target))
                if target == current:
                    raise ValueError(f"model {name!r}: version {target} is already current")
                if not self._complete(versions[target]):
                    raise ValueError(f"model {name!r}: version {target} is incomplete and "
                                     f"cannot be published (run `retrain registry check`)")
            return self._promote(name, target, who=who, why=why, action="rollback")

    # ---------------------------------------------------------------- checking

    def check_report(self, name: str) -> dict[str, list[str]]:
        """{"errors": [...], "warnings": [...]} for one model. Warnings (stale temp dirs
        of killed publishes, unpromoted candidates) need no action for serving."""
        mdir = self._require_model(name)
        errors: list[str] = []
        warnings: list[str] = []
        published: list[int] = []
        complete: set[int] = set()
        versions = self._version_dirs(name)
        for v, vdir in sorted(versions.items()):
            has_pb = (vdir / SAVED_MODEL_FILE).is_file()
            meta = self._read_meta(vdir)
            if not has_pb:
                errors.append(f"version {v}: missing {SAVED_MODEL_FILE}")
            if meta is None:
                errors.append(f"version {v}: missing or unreadable {META_FILE}")
                continue
            if meta.get("version") != v or meta.get("model_name") != name:
                errors.append(f"version {v}: meta says model {meta.get('model_name')!r} "
                              f"version {meta.get('version')!r}")
            stage = meta.get("stage")
            if stage not in STAGES:
                errors.append(f"version {v}: unknown stage {stage!r}")
            if stage == PUBLISHED:
                published.append(v)
            if has_pb:
                complete.add(v)

        current = None
        cfile = mdir / CURRENT_FILE
        if cfile.exists():
            try:
                current = self._read_current(mdir)
            except ValueError as e:
                errors.append(str(e))
                current = None
            else:
                if current not in versions:
                    errors.append(f"CURRENT names version {current}, which does not exist")
                elif current not in complete:
                    errors.append(f"CURRENT names version {current}, which is incomplete")
                else:
                    stage = (self._read_meta(versions[current]) or {}).get("stage")
                    if stage != PUBLISHED:
                        errors.append(f"CURRENT names version {current}, whose stage is "
                                      f"{stage!r}, not {PUBLISHED!r}")
        elif published:
            errors.append(f"no CURRENT file, but version(s) {published} are published")
        if len(published) > 1:
            errors.append(f"more than one published version: {published}")
        for v in published:
            if current is not None and v != current and len(published) == 1:
                errors.append(f"version {v} is published but CURRENT names {current}")

        for v, vdir in sorted(versions.items()):
            meta = self._read_meta(vdir) or {}
            if meta.get("stage") == CANDIDATE:
                warnings.append(f"version {v} is an unpromoted candidate (interrupted "
                                f"publish of run {meta.get('run_id')!r}?)")
        now = time.time()
        for p in sorted(mdir.iterdir()):
            if p.name.startswith(TMP_PREFIX):
                try:
                    age = now - p.stat().st_mtime
                except FileNotFoundError:  # a publish just finished or cleaned up
                    continue
                if age > STALE_TMP_SECONDS:
                    warnings.append(f"leftover temp dir {p} ({age / 3600:.1f} h old; a "
                                    f"killed publish, safe to delete)")
        return {"errors": errors, "warnings": warnings}

    def check(self, name: str) -> list[str]:
        """Consistency errors of one model ([] = consistent). See check_report for the
        warnings (stale temp dirs) as well."""
        return self.check_report(name)["errors"]

    # ---------------------------------------------------------------- internals

    def _model_dir(self, name: str) -> Path:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"invalid model name {name!r}: use letters, digits, '.', '_', "
                             f"'-', not starting with '.' or '-'")
        return self.root / name

    def _require_model(self, name: str) -> Path:
        mdir = self._model_dir(name)
        if not mdir.is_dir():
            known = ", ".join(self.models()) or "none"
            raise NotFound(f"unknown model {name!r} in registry {self.root} "
                           f"(models: {known})")
        return mdir

    def _version_dir(self, name: str, version: int) -> Path:
        try:
            v = int(version)
        except (TypeError, ValueError):
            raise ValueError(f"version must be an integer, got {version!r}") from None
        mdir = self._require_model(name)
        return mdir / str(v)

    def _no_version_msg(self, name: str, version: int) -> str:
        have = ", ".join(str(v) for v in sorted(self._version_dirs(name))) or "none"
        return f"model {name!r} has no version {version} (versions: {have})"

    def _version_dirs(self, name: str) -> dict[int, Path]:
        mdir = self._model_dir(name)
        if not mdir.is_dir():
            return {}
        return {int(p.name): p for p in mdir.iterdir()
                if _VERSION_RE.match(p.name) and p.is_dir()}

    @staticmethod
    def _read_meta(vdir: Path) -> dict | None:
        try:
            meta = read_json(vdir / META_FILE)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):   # check says which
            return None
        return meta if isinstance(meta, dict) else None

    def _complete(self, vdir: Path) -> bool:
        return (vdir / SAVED_MODEL_FILE).is_file() and self._read_meta(vdir) is not None

    @staticmethod
    def _read_current(mdir: Path) -> int | None:
        try:
            data = read_json(mdir / CURRENT_FILE)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{mdir / CURRENT_FILE} is not valid JSON: {e}") from None
        except OSError as e:
            raise ValueError(f"{mdir / CURRENT_FILE} cannot be read: {e}") from None
        version = data.get("version") if isinstance(data, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"{mdir / CURRENT_FILE} has no valid 'version': {data!r}")
        return version

    def _next_version(self, mdir: Path) -> int:
        # Never reuse a number, even of a broken dir or one CURRENT still names.
        used = [int(p.name) for p in mdir.iterdir() if _VERSION_RE.match(p.name)]
        with contextlib.suppress(ValueError):
            cur = self._read_current(mdir)
            if cur is not None:
                used.append(cur)
        return max(used, default=0) + 1

    @contextlib.contextmanager
    def _lock(self, mdir: Path) -> Iterator[None]:
        fd = os.open(mdir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _finish_existing(self, name: str, run_id: str, dag_id: str | None, who: str,
                         why: str, expect_current: int | None | _AnyCurrent = ANY) -> dict:
        """A retried publish: return this run's version, finishing an interrupted
        promotion if it is still the newest thing to publish. Call under the lock.

        Already current: returned as it is (idempotent, whatever the caller expected).
        Otherwise the promotion is a compare-and-swap like a fresh publish: a retry after
        a rollback raises StaleBaseline instead of undoing the rollback."""
        meta = self.find_run(name, run_id, dag_id)
        assert meta is not None
        version = meta["version"]
        mdir = self._model_dir(name)
        current = self._read_current(mdir)
        if version == current:
            if meta.get("stage") != PUBLISHED:   # CURRENT written, meta not: repair
                return self._promote(name, version, who=who, why=why, action="publish")
            return meta
        needs_finish = (meta.get("stage") in (CANDIDATE, PUBLISHED)
                        and (current is None or version > current))
        if needs_finish:
            self._compare(name, mdir, expect_current)
            return self._promote(name, version, who=who, why=why, action="publish")
        return meta

    def _compare(self, name: str, mdir: Path, expect_current: int | None | _AnyCurrent
                 ) -> None:
        """Raise StaleBaseline unless CURRENT names `expect_current` (ANY: no check)."""
        if expect_current is ANY:
            return
        current = self._read_current(mdir)
        if current != expect_current:
            raise StaleBaseline(name, expect_current, current)

    def _promote(self, name: str, version: int, *, who: str, why: str,
                 action: str) -> dict:
        """Mark `version` published, archive every other published version, then point
        CURRENT at it (CURRENT last: it is what readers trust). Call under the lock."""
        mdir = self._model_dir(name)
        previous = None
        with contextlib.suppress(ValueError):
            previous = self._read_current(mdir)
        now = _now()
        vdir = mdir / str(version)
        meta = self._read_meta(vdir)
        if meta is None:
            raise ValueError(f"model {name!r} version {version} has no readable meta")
        if meta.get("stage") != PUBLISHED:
            meta["history"] = list(meta.get("history") or []) + [{
                "at": now, "who": who, "why": why, "action": action,
                "from": meta.get("stage"), "to": PUBLISHED, "replaces": previous}]
            meta["stage"] = PUBLISHED
            write_json(vdir / META_FILE, meta)
        for v, other in sorted(self._version_dirs(name).items()):
            if v == version:
                continue
            ometa = self._read_meta(other)
            if ometa is not None and ometa.get("stage") == PUBLISHED:
                ometa["history"] = list(ometa.get("history") or []) + [{
                    "at": now, "who": who, "why": why, "action": action,
                    "from": PUBLISHED, "to": ARCHIVED, "superseded_by": version}]
                ometa["stage"] = ARCHIVED
                write_json(other / META_FILE, ometa)
        write_json(mdir / CURRENT_FILE, {
            "model_name": name, "version": version, "updated_at": now, "action": action,
            "who": who, "why": why, "previous_version": previous})
        return meta


def _check_expectation(expect: Any) -> int | None | _AnyCurrent:
    if expect is ANY or expect is None:
        return expect
    if isinstance(expect, bool) or not isinstance(expect, int) or expect < 1:
        raise ValueError(f"expect_current must be a version number (>= 1), None (no "
                         f"published version) or registry.ANY, got {expect!r}")
    return expect


def _publish_reason(gate: dict | None) -> str:
    if not gate:
        return "published (no gate decision recorded)"
    if gate.get("forced"):
        return f"forced past the gate: {gate.get('force_reason')}"
    return "blessed by the gate"
