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
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import logging
import tempfile
from pathlib import Path
from typing import Any, Iterator

from retrain.common import digests
from retrain.common.atomic import write_json
# The registry's parts, importable from here as before: its layout and errors, the
# verification of published files, reading, doctor and check.
from retrain.common.registry_doctor import RegistryDoctor
from retrain.common.registry_integrity import (DAMAGED, INTACT, UNRECORDED,  # noqa: F401
                                               _integrity, _model_digest, model_digest,
                                               require_saved_model, verify_model_dir)
from retrain.common.registry_layout import (ANY, ARCHIVED, CANDIDATE,  # noqa: F401
                                            CONTENT_KEY, CURRENT_FILE, DAMAGED_FILE,
                                            FINGERPRINT_FILE, LOCK_FILE, META_FILE,
                                            MODEL_DIGEST_KEY, PUBLISHED, PUBLISHED_OUTCOME,
                                            RESERVED_KEYS, SAVED_MODEL_FILE, STAGES,
                                            STALE_TMP_SECONDS, STANDARD_KEYS, TMP_PREFIX,
                                            UNCHANGED_OUTCOME, _VERSION_RE, _AnyCurrent,
                                            ChangedAfterEvaluation, ModelTampered,
                                            NotFound, RegistryBroken, StaleBaseline, _now,
                                            default_who)

log = logging.getLogger("retrain.registry")


def _copy_savedmodel(src: Path, dst: Path) -> None:
    """Copy a SavedModel dir's contents into the (existing, empty) dir `dst`.

    Module-level so tests can simulate a publish that dies halfway through the copy.
    """
    shutil.copytree(src, dst, dirs_exist_ok=True)


def _jsonable(obj: Any) -> Any:
    """What the meta file will hold, so the dict we return equals the dict on disk."""
    return json.loads(json.dumps(obj, default=str))


class Registry(RegistryDoctor):
    """Versioned models under one root. Safe for concurrent publishers on one filesystem
    with working `flock` (local disk; not most NFS mounts).

    Reading and verifying: `RegistryReader` (retrain.common.registry_read); doctor and
    check: `RegistryDoctor` (retrain.common.registry_doctor); publishing, rollback and the
    lock they share: here."""

    # ---------------------------------------------------------------- writing

    def publish(self, model_dir: str | os.PathLike, name: str,
                metadata: dict | None = None, *, who: str | None = None,
                why: str | None = None,
                expect_current: int | None | _AnyCurrent = ANY,
                expect_model_digest: str | None = None) -> dict:
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

        `expect_model_digest`: the `model_digest` of the model the decision judged (the
        evaluate step records it). Compared with the files as copied in, before anything
        is written: other files raise `ChangedAfterEvaluation` and nothing is published.
        """
        return self._publish(model_dir, name, metadata, who=who, why=why,
                             expect_current=expect_current, skip_unchanged=False,
                             expect_model_digest=expect_model_digest)["meta"]

    def publish_if_changed(self, model_dir: str | os.PathLike, name: str,
                           metadata: dict | None = None, *, who: str | None = None,
                           why: str | None = None,
                           expect_current: int | None | _AnyCurrent = ANY,
                           expect_model_digest: str | None = None) -> dict:
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
                             expect_current=expect_current, skip_unchanged=True,
                             expect_model_digest=expect_model_digest)

    def _publish(self, model_dir: str | os.PathLike, name: str, metadata: dict | None,
                 *, who: str | None, why: str | None,
                 expect_current: int | None | _AnyCurrent, skip_unchanged: bool,
                 expect_model_digest: str | None = None) -> dict:
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
            if expect_model_digest is not None and digest != expect_model_digest:
                raise ChangedAfterEvaluation("the candidate model", str(src),
                                             expect_model_digest, digest, model=name)
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
