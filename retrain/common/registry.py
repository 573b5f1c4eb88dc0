"""The model registry: versioned, published models on disk, laid out for TF Serving.

The push stage publishes a blessed SavedModel here; evaluation reads the published one as
its baseline; operators list, inspect and roll back from the `retrain registry` CLI
(`retrain.orchestration.registry_cli`).

Layout (TensorFlow Serving's model base path, so a server can point straight at it):

    <root>/<model>/<version>/        1, 2, 3... : SavedModel files + retrain_meta.json
    <root>/<model>/CURRENT           JSON naming the published version (the source of truth)
    <root>/<model>/.lock             flock'ed while a version is allocated or stages change
    <root>/<model>/.tmp-*            a publish in progress (or killed); readers ignore it

    <root>/<model>/DAMAGED.json      versions `registry doctor --repair` found damaged

A version appears in one `rename` of a fully written temp dir, so a killed publish never
leaves a half model under a numeric name; a retried publish with the same run id returns
(and, if it was interrupted, finishes) the version it already made.

Published files are verified by digest when read (design rule 25): a publish records the
SHA-256 and size of every file of the version in its meta (`content`); readers that load a
published model (`verified_path`, `verify_model_dir`: evaluation's baseline, the
recommendations and scoring jobs), rollback, `check` and lineage compare the files with it
and refuse a difference with the file named (`ModelTampered`, bad data: never retried).
`doctor` lists damaged versions and a damaged CURRENT; with `repair=True` it points CURRENT
at the newest intact version that was published, keeps the damaged pointer's bytes beside
it and marks damaged versions in DAMAGED.json. Nothing is deleted.

"Current" changes by compare-and-swap (design rule 20): a publish names the version its
evaluation was compared against (`expect_current`: a version, or None for "nothing was
published") and, under the same `.lock` that rollback takes, succeeds only if CURRENT still
names it; otherwise it raises `StaleBaseline` and publishes nothing, so a rollback made while
a run was in flight is never undone by that run's push (nor by a retry of it).

An unchanged model is not published again (`publish_if_changed`, what the push stage
calls): a candidate whose `model_digest` equals the current version's leaves the registry
as it is and is reported as "unchanged" with the version it matches. The comparison is
made under the same `.lock`, after the compare-and-swap's check (a stale decision is
refused even for an identical model), so two pushes of one candidate at once still leave
one version. Stdlib only.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import stat
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from retrain.common import digests
from retrain.common.atomic import read_json, write_json
from retrain.common.errors import BadData

log = logging.getLogger("retrain.registry")


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

        A model identical to the current one is published again as a new version here;
        `publish_if_changed` is the publish that leaves such a registry as it is.
        """
        return self._publish(model_dir, name, metadata, who=who, why=why,
                             expect_current=expect_current, skip_unchanged=False)["meta"]

    def publish_if_changed(self, model_dir: str | os.PathLike, name: str,
                           metadata: dict | None = None, *, who: str | None = None,
                           why: str | None = None,
                           expect_current: int | None | _AnyCurrent = ANY) -> dict:
        """`publish`, unless the candidate is the model already current: same
        `model_digest` as the version CURRENT names. Returns {"outcome": "published" |
        "unchanged", "version", "model_digest", "meta"}; "unchanged" names the current
        version it matches (its meta, untouched) and writes nothing to the registry.

        Only CURRENT counts: a candidate equal to an archived version (one rolled back
        from) is a change from what is served, and is published as a new version. The
        comparison is made under the model's lock, right after the compare-and-swap's
        check and before a number is allocated: one critical section, so two pushes of
        one candidate at once leave one version (the second finds it current: "unchanged"
        if its evaluation named that version, `StaleBaseline` if it named the one before,
        as for any decision made on stale facts). A current version whose files no longer
        match their recorded digests is not "the same model": the candidate is
        published."""
        return self._publish(model_dir, name, metadata, who=who, why=why,
                             expect_current=expect_current, skip_unchanged=True)

    def _publish(self, model_dir: str | os.PathLike, name: str, metadata: dict | None,
                 *, who: str | None, why: str | None,
                 expect_current: int | None | _AnyCurrent, skip_unchanged: bool) -> dict:
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

        def published(meta: dict) -> dict:
            return {"outcome": PUBLISHED_OUTCOME, "version": meta["version"],
                    "model_digest": meta.get(MODEL_DIGEST_KEY), "meta": meta}

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
                return published(self._finish_existing(name, run_id, dag_id, who, why,
                                                        expect_current))
        # Fail fast, before copying a model that would be refused; the check that counts
        # is the one under the lock below.
        self._compare(name, mdir, expect_current)

        tmp: Path | None = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=mdir))
        try:
            _copy_savedmodel(src, tmp)
            # The digests of what was copied: every later read is checked against them.
            content = digests.manifest(tmp, skip=frozenset({META_FILE}))
            digest = _model_digest(content)
            with self._lock(mdir):
                if run_id and self.find_run(name, run_id, dag_id) is not None:
                    return published(self._finish_existing(name, run_id, dag_id, who, why,
                                                            expect_current))
                self._compare(name, mdir, expect_current)   # the compare of the swap
                if skip_unchanged:   # one critical section with the swap
                    same = self._unchanged(name, mdir, digest)
                    if same is not None:
                        return same
                version = self._next_version(mdir)
                now = _now()
                meta = {key: metadata.get(key) for key in STANDARD_KEYS}
                meta.update(metadata)
                meta.update({
                    "model_name": name, "version": version, "stage": CANDIDATE,
                    "created_at": now, CONTENT_KEY: content, MODEL_DIGEST_KEY: digest,
                    "history": [{"at": now, "who": who, "why": why, "action": "publish",
                                 "from": None, "to": CANDIDATE}],
                })
                write_json(tmp / META_FILE, _jsonable(meta))
                os.rename(tmp, mdir / str(version))
                tmp = None
                return published(self._promote(name, version, who=who, why=why,
                                               action="publish"))
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _unchanged(self, name: str, mdir: Path, digest: str) -> dict | None:
        """The "unchanged" outcome if the current version's model digest is `digest` and
        its files still match what was recorded at publish; None otherwise. Call under
        the lock."""
        current = self._read_current(mdir)
        if current is None:
            return None
        vdir = mdir / str(current)
        meta = self._read_meta(vdir)
        if meta is None:
            return None
        have = meta.get(MODEL_DIGEST_KEY)
        if not isinstance(have, str):   # published before model digests were kept
            try:
                have = model_digest(vdir)
            except (OSError, digests.NotRegularFile):
                return None
        if have != digest:
            return None
        found = _integrity(vdir)
        if found["state"] == DAMAGED:
            log.warning("model %r: the candidate has the model digest of current version %s, "
                        "but that version's files no longer match what was recorded when it "
                        "was published (%s): publishing the candidate", name, current,
                        "; ".join(found["problems"][:3]))
            return None
        log.debug("model %r: candidate is identical to current version %s (model digest %s): "
                 "unchanged, nothing published", name, current, digest)
        return {"outcome": UNCHANGED_OUTCOME, "version": current, "model_digest": digest,
                "meta": meta}

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
            except ValueError as e:
                if to_version is None:   # which version is "before" a broken CURRENT?
                    raise RegistryBroken(
                        f"{e}; which version is older than a damaged CURRENT is unknown: "
                        f"pass the version to publish (--to VERSION), or run `retrain "
                        f"registry doctor {name} --repair` to point CURRENT at the newest "
                        f"intact published version") from None
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
            self._require_intact(name, target, versions[target])
            return self._promote(name, target, who=who, why=why, action="rollback")

    # ---------------------------------------------------------------- verifying

    def integrity(self, name: str, version: int, quick: bool = False) -> dict:
        """{"state": "intact" | "unrecorded" | "damaged", "problems": [one line a file],
        "digest", "files"} of one version against the digests recorded at publish.
        `quick`: kinds and sizes only (no file read), for listings."""
        return _integrity(self.model_path(name, version), quick)

    def verified_path(self, name: str, version: int) -> Path:
        """The version's folder, once its files match the digests recorded when it was
        published; ModelTampered (naming the files) otherwise. What a reader that loads a
        published model calls."""
        vdir = self.model_path(name, version)
        self._require_intact(name, version, vdir)
        return vdir

    @staticmethod
    def _require_intact(name: str, version: int, vdir: Path) -> None:
        found = _integrity(vdir)
        if found["state"] == DAMAGED:
            raise ModelTampered(name, version, found["problems"], vdir)

    def damaged_marks(self, name: str) -> dict[int, dict]:
        """Versions `doctor --repair` marked damaged: {version: {"problems", "at", ...}}
        (an unreadable DAMAGED.json counts as no marks; doctor rewrites it)."""
        path = self._model_dir(name) / DAMAGED_FILE
        try:
            data = read_json(path) if _is_regular(path) else {}
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return {}
        marks = data.get("versions") if isinstance(data, dict) else None
        if not isinstance(marks, dict):
            return {}
        return {int(k): v for k, v in marks.items()
                if isinstance(k, str) and _VERSION_RE.match(k) and isinstance(v, dict)}

    def inventory(self, name: str, quick: bool = True) -> list[dict]:
        """Every version folder, oldest first, intact or not: {"version", "meta" (None if
        unreadable), "state", "problems", "marked"}. Unlike list_versions, a version whose
        meta is damaged is listed (as damaged), never hidden."""
        self._require_model(name)
        marks = self.damaged_marks(name)
        out = []
        for v, vdir in sorted(self._version_dirs(name).items()):
            found = _integrity(vdir, quick)
            state, problems = found["state"], found["problems"]
            if v in marks and state != DAMAGED:   # what doctor's full hash found
                state = DAMAGED
                problems = [str(p) for p in marks[v].get("problems") or []] or [
                    "marked damaged by `retrain registry doctor --repair`"]
            out.append({"version": v, "meta": self._read_meta(vdir), "state": state,
                        "problems": problems, "marked": marks.get(v)})
        return out

    def doctor(self, name: str, repair: bool = False, who: str | None = None,
               why: str | None = None) -> dict:
        """Find what is damaged (every version's files against their digests, its meta,
        CURRENT) and, with `repair`, restore a consistent state under the model's lock:

        - CURRENT unreadable, or naming a missing or damaged version: it points at the
          newest intact version whose meta says published, else the newest intact one
          that was ever published (an unpromoted candidate never); the damaged CURRENT's
          bytes are kept beside it as CURRENT.damaged-<time>. No such version: CURRENT is
          left as it is (publishes keep refusing) and the report says so.
        - CURRENT fine but stages disagree (two versions say published): re-promoted.
        - Damaged versions are marked in DAMAGED.json (and unmarked once they verify).

        Nothing is deleted. Returns {"model", "current": {"state", "version", "problem"},
        "versions": [...], "target", "actions": [...], "unresolved": [...]}."""
        mdir = self._require_model(name)
        who = (who or "").strip() or default_who()
        why = (why or "").strip() or "registry doctor --repair"
        with (self._lock(mdir) if repair else contextlib.nullcontext()):
            versions = self._version_dirs(name)
            found = {v: _integrity(vdir) for v, vdir in sorted(versions.items())}
            metas = {v: self._read_meta(vdir) for v, vdir in versions.items()}
            pointer = self._diagnose_current(mdir, versions, found, metas)
            intact = [v for v in sorted(versions) if found[v]["state"] != DAMAGED
                      and metas[v] is not None]
            said_published = [v for v in intact if metas[v].get("stage") == PUBLISHED]
            ever_published = [v for v in intact if metas[v].get("stage") == ARCHIVED
                              or any(isinstance(h, dict) and h.get("to") == PUBLISHED
                                     for h in metas[v].get("history") or [])]
            if pointer["state"] in ("ok", "inconsistent"):   # CURRENT is the truth
                target = pointer["version"]
            else:
                target = max(said_published or ever_published, default=None)
            marks = self.damaged_marks(name)
            report = {"model": name, "current": pointer, "target": target,
                      "versions": [{"version": v, **{k: found[v][k] for k in
                                                      ("state", "problems")},
                                    "stage": (metas[v] or {}).get("stage"),
                                    "marked": v in marks} for v in sorted(versions)],
                      "actions": [], "unresolved": []}
            if not repair:
                return report
            actions, unresolved = report["actions"], report["unresolved"]
            if pointer["state"] == "inconsistent":
                self._promote(name, target, who=who, why=why, action="doctor")
                actions.append(f"stages made to agree with CURRENT: version {target} "
                               f"published, every other version archived")
            elif target is None:
                if pointer["state"] != "none":
                    unresolved.append(
                        f"CURRENT: {pointer['problem']}, and no intact version was ever "
                        f"published to point it at; left as it is (publishes keep "
                        f"refusing): restore a version's files, or move CURRENT away by hand "
                        f"to start over (the next publish then has no baseline)")
            else:
                kept = self._keep_aside(mdir)
                self._promote(name, target, who=who, why=why, action="doctor")
                actions.append(
                    f"CURRENT, which {pointer['problem']}, now names version {target}, the "
                    f"newest intact version that was published" + (
                        f"; its old bytes are kept in {kept.name}" if kept else ""))
            damaged = {v: found[v]["problems"] for v in versions
                       if found[v]["state"] == DAMAGED}
            if damaged or marks:
                now = _now()
                new_marks = {str(v): (marks[v] if v in marks and marks[v].get("problems")
                                      == problems else
                                      {"problems": problems, "at": now, "who": who,
                                       "why": why})
                             for v, problems in sorted(damaged.items())}
                write_json(mdir / DAMAGED_FILE, {"model_name": name, "versions": new_marks})
                actions += [f"marked version {v} damaged" for v in sorted(damaged)
                            if v not in marks]
                actions += [f"unmarked version {v}: it verifies again" for v in sorted(marks)
                            if v not in damaged and v in versions]
            for row in report["versions"]:   # as they are now, after the repair
                row["marked"] = row["state"] == DAMAGED
                row["stage"] = (self._read_meta(versions[row["version"]]) or {}).get("stage")
            report["current"] = self._diagnose_current(
                mdir, versions, found, {v: self._read_meta(d) for v, d in versions.items()})
            return report

    def _diagnose_current(self, mdir: Path, versions: dict[int, Path], found: dict,
                          metas: dict) -> dict:
        """{"state": ok | none | damaged | inconsistent, "version", "problem"}; the
        problem reads after the word CURRENT ("names version 3, which is damaged")."""
        def out(state: str, version: int | None = None, problem: str | None = None) -> dict:
            return {"state": state, "version": version, "problem": problem}
        try:
            current = self._read_current(mdir)
        except ValueError as e:
            return out("damaged", None, str(e).removeprefix(f"{mdir / CURRENT_FILE} "))
        if current is None:
            if any((m or {}).get("stage") == PUBLISHED for m in metas.values()):
                return out("damaged", None, "is missing, but a version says published")
            return out("none")
        if current not in versions:
            return out("damaged", current, f"names version {current}, which does not exist")
        if found[current]["state"] == DAMAGED:
            return out("damaged", current, f"names version {current}, which is damaged")
        others = [v for v, m in metas.items() if v != current
                  and (m or {}).get("stage") == PUBLISHED]
        if (metas[current] or {}).get("stage") != PUBLISHED or others:
            return out("inconsistent", current, f"names version {current}, but the versions' "
                                                f"stages disagree")
        return out("ok", current)

    @staticmethod
    def _keep_aside(mdir: Path) -> Path | None:
        """A hard link to the damaged CURRENT (any file type; its bytes stay as they were)
        before a new one replaces it in one rename: readers never see no CURRENT."""
        src = mdir / CURRENT_FILE
        if not os.path.lexists(src):
            return None
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        dst = mdir / f"{CURRENT_FILE}.damaged-{stamp}"
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            shutil.copy2(src, dst, follow_symlinks=False)
        return dst

    # ---------------------------------------------------------------- checking

    def check_report(self, name: str) -> dict[str, list[str]]:
        """{"errors": [...], "warnings": [...]} for one model. Warnings (stale temp dirs
        of killed publishes, unpromoted candidates, versions with no recorded digests,
        versions `doctor --repair` marked damaged) need no action for serving.

        Every version's files are hashed against the digests recorded at publish."""
        mdir = self._require_model(name)
        errors: list[str] = []
        warnings: list[str] = []
        published: list[int] = []
        complete: set[int] = set()
        versions = self._version_dirs(name)
        marks = self.damaged_marks(name)
        for v, vdir in sorted(versions.items()):
            # A version doctor marked damaged is known and out of use: a warning.
            found: list[str] = errors if v not in marks else warnings
            prefix = f"version {v}" + (" (marked damaged)" if v in marks else "")
            has_pb = (vdir / SAVED_MODEL_FILE).is_file()
            meta = self._read_meta(vdir)
            if not has_pb:
                found.append(f"{prefix}: missing {SAVED_MODEL_FILE}")
            if meta is None:
                found.append(f"{prefix}: missing or unreadable {META_FILE}")
                continue
            if meta.get("version") != v or meta.get("model_name") != name:
                errors.append(f"version {v}: meta says model {meta.get('model_name')!r} "
                              f"version {meta.get('version')!r}")
            stage = meta.get("stage")
            if stage not in STAGES:
                errors.append(f"version {v}: unknown stage {stage!r}")
            if stage == PUBLISHED:
                published.append(v)
            state = _integrity(vdir)
            if state["state"] == UNRECORDED and has_pb:
                warnings.append(f"version {v}: no content digests recorded (published "
                                f"before they were kept): its files cannot be verified")
            found += [f"{prefix}: {p}" for p in state["problems"]
                      if has_pb or not p.startswith(f"{SAVED_MODEL_FILE}:")]
            if v in marks and state["state"] != DAMAGED:
                warnings.append(f"version {v} is marked damaged but verifies now: `retrain "
                                f"registry doctor {name} --repair` unmarks it")
            if has_pb and state["state"] != DAMAGED:
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
                    errors.append(f"CURRENT names version {current}, which is incomplete "
                                  f"or damaged")
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
        if not _is_regular(vdir / META_FILE):   # a FIFO or link is never opened
            return None
        try:
            meta = read_json(vdir / META_FILE)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):   # check says which
            return None
        return meta if isinstance(meta, dict) else None

    def _complete(self, vdir: Path) -> bool:
        return (vdir / SAVED_MODEL_FILE).is_file() and self._read_meta(vdir) is not None

    @staticmethod
    def _read_current(mdir: Path) -> int | None:
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


INTACT, UNRECORDED, DAMAGED = "intact", "unrecorded", "damaged"


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _integrity(vdir: Path, quick: bool = False) -> dict:
    """A version folder against the digests its meta recorded at publish (see
    Registry.integrity). A version published before digests were kept is "unrecorded"."""
    def out(state: str, problems: list[str], content: dict | None = None) -> dict:
        return {"state": state, "problems": problems,
                "digest": (content or {}).get("digest"),
                "files": len((content or {}).get("files") or {})}
    meta = Registry._read_meta(vdir)
    if meta is None:
        return out(DAMAGED, [f"{META_FILE}: missing, unreadable or not a JSON object"])
    content = meta.get(CONTENT_KEY)
    if content is None:
        if not (vdir / SAVED_MODEL_FILE).is_file():
            return out(DAMAGED, [f"{SAVED_MODEL_FILE}: missing"])
        return out(UNRECORDED, [])
    files = content.get("files") if isinstance(content, dict) else None
    if not (isinstance(files, dict) and files
            and all(isinstance(f, dict) for f in files.values())):
        return out(DAMAGED, [f"{META_FILE}: its {CONTENT_KEY!r} record is malformed"])
    problems = digests.compare(vdir, files, skip=frozenset({META_FILE}), quick=quick)
    return out(DAMAGED if problems else INTACT, problems, content)


def model_digest(model_dir: str | os.PathLike) -> str:
    """What "the same model" means when a candidate is compared with the published one:
    one digest (`digests.tree_digest`) over the SHA-256 of every file of the SavedModel,
    as the registry records them at publish (`digests.manifest`: variables data and index,
    saved_model.pb, assets, assets.extra), except `fingerprint.pb` and the registry's meta.

    Why fingerprint.pb is left out: TensorFlow writes a random UUID into it on every save,
    so one model exported twice never has the same bytes there; the rest of it is hashes
    of saved_model.pb and the variables, which are in the digest themselves. Why
    saved_model.pb counts byte for byte: TensorFlow's regularized hashes in fingerprint.pb
    (graph_def_program_hash, signature_def_hash) leave the traced functions' bodies out
    (checked with TF 2.21: a sigmoid changed to tanh keeps both), so they cannot tell two
    models apart; and no stdlib parser of the graph can. The cost is on the safe side:
    the same model re-exported with other graph bytes (a second save in one process renames
    its traced functions) gets another digest and is published again, as before; a
    different model never gets the same one. What this catches is the same export handed
    to push again (a reused training artifact) and an export whose program and weights
    came out byte-identical (one save per fresh process, as the trainer does)."""
    root = Path(model_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist or is not a directory")
    return _model_digest(digests.manifest(root, skip=frozenset({META_FILE})))


def _model_digest(content: dict) -> str:
    """model_digest of a folder whose manifest (digests.manifest) is `content`."""
    return digests.tree_digest({rel: entry for rel, entry in content["files"].items()
                                if rel != FINGERPRINT_FILE})


def verify_model_dir(model_dir: str | os.PathLike) -> None:
    """Refuse (ModelTampered) a published version's folder whose files differ from the
    digests recorded when it was published. For loaders handed a path: a folder with no
    registry meta, outside a registry, is a plain export and passes."""
    vdir = Path(model_dir)
    in_registry = bool(_VERSION_RE.match(vdir.name)) and any(
        os.path.lexists(vdir.parent / f) for f in (CURRENT_FILE, LOCK_FILE))
    if not (in_registry or os.path.lexists(vdir / META_FILE)):
        return
    found = _integrity(vdir)
    if found["state"] == DAMAGED:
        raise ModelTampered(vdir.parent.name, vdir.name, found["problems"], vdir)


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
