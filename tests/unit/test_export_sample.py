"""The export's sample metrics on a quiet span (issue 44.4's MovieLens bench found it): an
eval sample of one class has no AUC, and that must not fail a training the evaluation step
judges on every row. Real gzip TFRecord shards, the trainer's own dataset function."""
from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from components.ctr.train_export import sample_metrics  # noqa: E402


def _shard(path, labels):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as w:
        for i, y in enumerate(labels):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
                "clicked": tf.train.Feature(int64_list=tf.train.Int64List(value=[y]))}))
            w.write(ex.SerializeToString())


SPEC = {"x": tf.io.FixedLenFeature([], tf.float32),
        "clicked": tf.io.FixedLenFeature([], tf.int64)}


def net(feats):
    return tf.sigmoid(feats["x"] / 10.0 - 1.0)


def test_a_one_class_sample_has_no_auc_and_still_its_log_loss(tmp_path):
    _shard(tmp_path / "part-0.tfrecord.gz", [0] * 30)
    val = sample_metrics(net, str(tmp_path / "part-*"), SPEC, "clicked", base_rate=0.1)
    assert val["val_auc"] is None and val["eval_rows"] == 30
    assert val["val_log_loss"] > 0 and val["initial_val_log_loss"] > 0


def test_a_two_class_sample_has_its_auc(tmp_path):
    _shard(tmp_path / "part-0.tfrecord.gz", [0] * 20 + [1] * 10)   # higher x, clicked
    val = sample_metrics(net, str(tmp_path / "part-*"), SPEC, "clicked", base_rate=0.3)
    assert val["val_auc"] == 1.0 and val["eval_rows"] == 30
