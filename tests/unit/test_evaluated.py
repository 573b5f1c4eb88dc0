"""What evaluation judged is what push publishes (retrain.common.evaluated and the
registry's `expect_model_digest`): a candidate or an evaluation record changed in between
is refused by name, as bad data, and nothing is written to the registry.

The "SavedModel" here is a stand-in (a folder with saved_model.pb and a variables file):
the digests are over files; tests/integration/test_push.py swaps real SavedModels."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain.common import evaluated
from retrain.common.errors import BAD_DATA, kind_of
from retrain.common.registry import LOCK_FILE, ChangedAfterEvaluation, Registry


def _model(path: Path, weights: bytes = b"w1") -> Path:
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"graph")
    (path / "variables" / "variables.data-00000-of-00001").write_bytes(weights)
    return path


def _evaluation(tmp_path: Path, model: Path) -> dict:
    """What an evaluate step returns: judged before scoring, sealed after eval.json."""
    digest = evaluated.judged(model)
    record = tmp_path / "eval.json"
    record.write_text(json.dumps({"candidate": {"auc": 0.71}, "decision": {"blessed": True}}))
    return {"eval_uri": str(record), **evaluated.sealed(model, digest, record)}


def _left(registry_root: Path) -> list[str]:
    folder = registry_root / "ctr"
    return sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE) \
        if folder.exists() else []


def test_the_evaluated_model_is_published(tmp_path):
    model = _model(tmp_path / "model")
    ev = _evaluation(tmp_path, model)
    out = Registry(tmp_path / "reg").publish_if_changed(
        model, "ctr", {"run_id": "r1", "dag_id": "d"},
        expect_model_digest=ev[evaluated.MODEL_DIGEST_KEY])
    assert out["outcome"] == "published" and out["model_digest"] == ev["candidate_model_digest"]
    assert evaluated.read_record(ev)["candidate"]["auc"] == 0.71


def test_a_model_changed_after_evaluation_is_refused_and_nothing_is_written(tmp_path):
    model = _model(tmp_path / "model")
    ev = _evaluation(tmp_path, model)
    (model / "variables" / "variables.data-00000-of-00001").write_bytes(b"SECRET-w2")
    registry = Registry(tmp_path / "reg")
    for publish in (registry.publish, registry.publish_if_changed):
        with pytest.raises(ChangedAfterEvaluation) as caught:
            publish(model, "ctr", {"run_id": "r1", "dag_id": "d"},
                    expect_model_digest=ev["candidate_model_digest"])
        message = str(caught.value)
        assert str(model) in message and "model 'ctr'" in message
        assert "SECRET" not in message                    # digests, never content
        assert kind_of(caught.value) == BAD_DATA          # not retried
        assert _left(tmp_path / "reg") == []              # no version, no temporary copy


def test_a_model_swapped_while_it_was_scored_is_refused_by_the_step(tmp_path):
    model = _model(tmp_path / "model")
    digest = evaluated.judged(model)
    (model / "variables" / "extra").write_bytes(b"x")     # a file added during scoring
    record = tmp_path / "eval.json"
    record.write_text("{}")
    with pytest.raises(ChangedAfterEvaluation, match="the candidate model"):
        evaluated.sealed(model, digest, record)


def test_an_evaluation_record_edited_after_the_step_is_refused(tmp_path):
    model = _model(tmp_path / "model")
    ev = _evaluation(tmp_path, model)
    record = Path(ev["eval_uri"])
    record.write_text(record.read_text().replace("0.71", "0.99"))
    with pytest.raises(ChangedAfterEvaluation, match="the evaluation record") as caught:
        evaluated.read_record(ev, "ctr")
    assert str(record) in str(caught.value) and "0.99" not in str(caught.value)
    # A result from before digests were recorded is read as it is.
    legacy = {"eval_uri": str(record)}
    assert evaluated.read_record(legacy)["candidate"]["auc"] == 0.99
