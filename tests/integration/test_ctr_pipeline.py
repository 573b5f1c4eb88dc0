"""The CTR steps chained on tiny generated data, in-process: Beam + tf.Transform job,
training with export, evaluation through the serving signature, gate."""
from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from components.ctr import features as F

pytestmark = pytest.mark.integration

# Fixtures home, span_dir, preprocessed, trained: tests/integration/conftest.py.


def test_preprocess_counts_every_row_and_matches_the_evaluators_split(home, span_dir,
                                                                       preprocessed):
    from components.ctr import rawdata
    assert preprocessed["rows_in"] == 2 * 4000
    assert preprocessed["rows_in"] == (preprocessed["rows_train"] + preprocessed["rows_eval"]
                                       + preprocessed["rows_validation"]
                                       + preprocessed["rows_held_out"])
    assert preprocessed["rows_held_out"] > 0     # the older day's eval rows: never trained on
    assert preprocessed["identity_out_of_range"] == {}   # the generator's hours and positions fit
    # The evaluator re-selects eval rows from raw data: it must pick exactly the same ones.
    eval_rows = rawdata.read_eval_rows(span_dir, 25)
    assert eval_rows.num_rows == preprocessed["rows_eval"]
    # The id fields' coverage (exact at this size): the span's eval rows' distinct users.
    users = preprocessed["id_coverage"]["user_id"]
    assert users["exact"] and users["eval_ids"] == len(set(eval_rows.column("user_id").to_pylist()))
    assert users["ids"] > users["eval_ids"] and 0 < users["new_ids_in_eval_share"] < 1
    assert 0 < users["ids_sharing_a_row_share"] < 1
    assert preprocessed["id_coverage_line"].startswith("user_id: ")
    summary = json.loads((home / "pre" / "summary.json").read_text())
    assert summary["window"] == ["2026-11-02", "2026-11-03"]
    assert list((home / "pre" / "train").glob("*.tfrecord.gz"))
    assert (home / "pre" / "transform_fn_output" / "transform_fn" / "saved_model.pb").exists()
    assert not list(home.glob(".pre.tmp-*")), "temp dir left behind"


def test_transformed_shards_hold_the_expected_features(preprocessed):
    import tensorflow as tf
    import tensorflow_transform as tft
    out = tft.TFTransformOutput(f"{preprocessed['output_dir']}/transform_fn_output")
    spec = out.transformed_feature_spec()
    expected = {F.transformed_name(k) for k in F.RAW_FEATURES} | \
        {F.missing_name(k) for k in F.NUMERIC_FEATURES} | {F.LABEL_KEY}
    assert set(spec) == expected
    files = tf.io.gfile.glob(f"{preprocessed['output_dir']}/train/*.tfrecord.gz")
    batch = next(iter(tf.data.TFRecordDataset(files, compression_type="GZIP").batch(512)
                      .map(lambda x: tf.io.parse_example(x, spec))))
    for key in F.CATEGORICAL_FEATURES:
        ids = batch[F.transformed_name(key)].numpy()
        assert ids.min() >= 0 and ids.max() < F.categorical_size(key), key
    for key in F.NUMERIC_FEATURES:
        z = batch[F.transformed_name(key)].numpy()
        assert np.isfinite(z).all() and abs(z.mean()) < 0.5, key
        assert set(np.unique(batch[F.missing_name(key)].numpy())) <= {0.0, 1.0}


def test_missing_preprocess_input_names_the_day(home, tmp_path):
    from components.ctr.preprocess import PreprocessSpec, run
    with pytest.raises(FileNotFoundError, match="2026-10-31"):
        run(PreprocessSpec(raw_root=str(home / "raw" / "ctr"), span="2026-11-01",
                           output_dir=str(tmp_path / "out"), window_days=2))
    assert not (tmp_path / "out").exists()


def test_exported_model_serves_raw_rows(span_dir, trained):
    from components.ctr import rawdata
    rows = rawdata.read_eval_rows(span_dir, 25)
    probs = rawdata.predict(trained["model_dir"], rawdata.to_raw_features(rows))
    assert probs.shape == (rows.num_rows,)
    assert np.all((probs > 0) & (probs < 1))
    assert probs.std() > 1e-4, "model ignores its inputs"


def test_evaluate_against_itself_as_baseline_and_gate(home, span_dir, preprocessed, trained):
    from components.ctr.evaluate import EvaluateSpec, run
    result = run(EvaluateSpec(span_dir=str(span_dir),
                              candidate_model_dir=trained["model_dir"],
                              baseline_model_dir=trained["model_dir"],
                              out_dir=str(home / "eval"), eval_percent=25, min_auc=0.5))
    assert result["candidate"] == result["baseline"]
    assert result["bayes_optimal"]["auc"] > result["candidate"]["auc"] - 0.05
    assert result["blessed"] is True
    report = json.loads((home / "eval" / "eval.json").read_text())
    assert report["decision"]["baseline_present"] is True
    rejected = run(EvaluateSpec(span_dir=str(span_dir),
                                candidate_model_dir=trained["model_dir"],
                                out_dir=str(home / "eval2"), eval_percent=25, min_auc=0.99))
    assert rejected["blessed"] is False
    # One eval row count (issue 46): the preprocess figure a person sees first is the count
    # the gate scores over the window (the span's eval split + the older day's held-out rows).
    day = dt.date.fromisoformat(preprocessed["span"])
    older = span_dir.parent / f"dt={day - dt.timedelta(days=1)}"
    window = run(EvaluateSpec(span_dir=str(span_dir), window_span_dirs=[str(older)],
                              candidate_model_dir=trained["model_dir"],
                              out_dir=str(home / "eval3"), eval_percent=25))
    assert window["rows"] == preprocessed["rows_eval_window"] > preprocessed["rows_eval"]
    assert any("min_auc" in r for r in rejected["reasons"])
    assert any("no published baseline" in r for r in rejected["reasons"])
