"""Whether a published version's files are still what was published (design rule 25):
the check of a version folder against the SHA-256 and sizes its meta recorded at publish,
the model digest that says whether a candidate is "the same model" as a published one,
and the check loaders run on a folder they were handed. Stdlib only.
"""
from __future__ import annotations

import os
from pathlib import Path

from retrain.common import digests
from retrain.common.errors import BadData
from retrain.common.registry_layout import (CONTENT_KEY, CURRENT_FILE, FINGERPRINT_FILE,
                                            LOCK_FILE, META_FILE, SAVED_MODEL_FILE,
                                            _VERSION_RE, ModelTampered, read_meta)

INTACT, UNRECORDED, DAMAGED = "intact", "unrecorded", "damaged"


def _integrity(vdir: Path, quick: bool = False) -> dict:
    """A version folder against the digests its meta recorded at publish (see
    Registry.integrity). A version published before digests were kept is "unrecorded"."""
    def out(state: str, problems: list[str], content: dict | None = None) -> dict:
        return {"state": state, "problems": problems,
                "digest": (content or {}).get("digest"),
                "files": len((content or {}).get("files") or {})}
    meta = read_meta(vdir)
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


def require_saved_model(model_dir: str | os.PathLike, flag: str = "--model-dir") -> None:
    """Refuse (BadData, naming `flag` and the folder) a path handed in as an exported model
    that holds none, before a job starts workers that would each fail loading it."""
    d = Path(model_dir)
    if (d / SAVED_MODEL_FILE).is_file():
        return
    if not d.is_dir():
        raise BadData(f"{flag} {d}: no such folder")
    hint = (f" (a model artifact folder: give {d / 'serving_model'})"
            if (d / "serving_model" / SAVED_MODEL_FILE).is_file() else "")
    raise BadData(f"{flag} {d}: not an exported model, no {SAVED_MODEL_FILE} in it{hint}")
