"""Finding and repairing a damaged model registry: `doctor` (every version's files, its
meta and CURRENT; with `repair`, CURRENT pointed at the newest intact published version,
damaged versions marked in DAMAGED.json, nothing deleted) and `check` (consistency
errors and warnings of one model). Part of `retrain.common.registry.Registry`. Stdlib
only.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import time
from pathlib import Path
from typing import ContextManager

from retrain.common.atomic import write_json
from retrain.common.registry_integrity import DAMAGED, UNRECORDED, _integrity
from retrain.common.registry_layout import (ARCHIVED, CANDIDATE, CURRENT_FILE, DAMAGED_FILE,
                                            META_FILE, PUBLISHED, SAVED_MODEL_FILE, STAGES,
                                            STALE_TMP_SECONDS, TMP_PREFIX, _now, default_who)
from retrain.common.registry_read import RegistryReader


class RegistryDoctor(RegistryReader):
    """doctor and check; the model's lock and promotion come from `Registry`."""

    def _lock(self, mdir: Path) -> ContextManager[None]:
        raise NotImplementedError   # Registry._lock

    def _promote(self, name: str, version: int, *, who: str, why: str,
                 action: str) -> dict:
        raise NotImplementedError   # Registry._promote

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
