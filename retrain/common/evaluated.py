"""What evaluation judged, so that push publishes exactly that.

An evaluate step takes the candidate's `model_digest` before it scores (`judged`) and
checks it again when it is done (`sealed`), which also records the SHA-256 of the
eval.json it wrote. Both travel in the step's result, which Airflow keeps in its database,
not in the run folder. Push hands the model digest to the registry, which compares it with
the files it copied in (`Registry.publish_if_changed(expect_model_digest=...)`), and reads
eval.json through `read_record`, which checks the bytes it parses. A file changed in
between, by a person, a bug or another run, raises `ChangedAfterEvaluation` naming the file:
bad data, never retried, nothing published. Stdlib only (push runs in Airflow's tasks).
"""
from __future__ import annotations

import hashlib
import json
import os

from retrain.common.registry_integrity import model_digest
from retrain.common.registry_layout import ChangedAfterEvaluation

MODEL_DIGEST_KEY = "candidate_model_digest"
RECORD_DIGEST_KEY = "eval_sha256"


def judged(model_dir: str | os.PathLike) -> str:
    """The digest of the candidate about to be scored."""
    return model_digest(model_dir)


def sealed(model_dir: str | os.PathLike, digest: str, record: str | os.PathLike) -> dict:
    """The keys an evaluate step adds to its result, once the candidate is checked to be
    the one `judged` digested (a model swapped while it was scored is refused here)."""
    now = model_digest(model_dir)
    if now != digest:
        raise ChangedAfterEvaluation("the candidate model", str(model_dir), digest, now)
    with open(record, "rb") as f:
        return {MODEL_DIGEST_KEY: digest,
                RECORD_DIGEST_KEY: hashlib.file_digest(f, "sha256").hexdigest()}


def read_record(evaluation: dict, model: str | None = None) -> dict:
    """eval.json of an evaluate step's result, parsed from the bytes whose SHA-256 is
    checked against the one the step recorded (results without one: read as they are)."""
    path = evaluation["eval_uri"]
    with open(path, "rb") as f:
        data = f.read()
    expected = evaluation.get(RECORD_DIGEST_KEY)
    if expected is not None:
        have = hashlib.sha256(data).hexdigest()
        if have != expected:
            raise ChangedAfterEvaluation("the evaluation record", str(path), expected, have,
                                         model=model)
    return json.loads(data)
