"""Reading a model registry: its models, versions, metas and CURRENT, and each version's
files against the digests recorded at publish (what loaders and listings call). The
`Registry` of `retrain.common.registry` adds publishing, rollback, doctor and check to
this. Stdlib only.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from retrain.common.atomic import read_json
from retrain.common.registry_integrity import DAMAGED, _integrity
from retrain.common.registry_layout import (DAMAGED_FILE, META_FILE, SAVED_MODEL_FILE,
                                            _NAME_RE, _VERSION_RE, ModelTampered, NotFound,
                                            _is_regular, read_current, read_meta)


class RegistryReader:
    """The read side of `Registry` (one root, any number of models)."""

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


    _read_meta = staticmethod(read_meta)

    def _complete(self, vdir: Path) -> bool:
        return (vdir / SAVED_MODEL_FILE).is_file() and self._read_meta(vdir) is not None
    _read_current = staticmethod(read_current)
