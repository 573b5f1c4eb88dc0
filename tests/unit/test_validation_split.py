"""The PS trainer's input split: every record of the window goes to exactly one of the
training rows and the validation slice, the slice is what `in_validation` (which
`window_stats` counts with too) picks record by record, and the split does not depend on
how the records fall into blocks or files."""
from __future__ import annotations

import numpy as np
import pytest


def _write(path, ids) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path), options="GZIP") as w:
        for i in ids:
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "row": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(i)])),
                "click": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(i) % 2])),
            })).SerializeToString())


def _rows(pattern: str, split: str, percent: int = 10) -> list[int]:
    import tensorflow as tf

    from components.ctr.ps_train import _make_dataset_fn

    spec = {"row": tf.io.FixedLenFeature([], tf.int64),
            "click": tf.io.FixedLenFeature([], tf.int64)}
    ds = _make_dataset_fn(pattern, spec, 1000, {}, None, repeat=False, label="click",
                          validation_percent=percent, split=split)()
    return sorted(int(r) for feats, _ in ds for r in feats["row"].numpy())


@pytest.mark.parametrize("files", [1, 3])
def test_every_record_trains_or_validates_never_both(tmp_path, files):
    import tensorflow as tf

    from components.ctr.window_stats import in_validation

    # 5,003 records: blocks of 4,096 end mid-file and the last block is short.
    parts = np.array_split(np.arange(5_003), files)
    for k, ids in enumerate(parts):
        _write(tmp_path / f"part-{k}.tfrecord.gz", ids)
    pattern = str(tmp_path / "*.tfrecord.gz")

    train, held = _rows(pattern, "train"), _rows(pattern, "validation")
    assert not set(train) & set(held)
    assert sorted(train + held) == list(range(5_003)) == _rows(pattern, "all")
    # the slice is the records `in_validation` picks, one record at a time
    records = list(tf.data.TFRecordDataset(sorted(map(str, tmp_path.glob("*.gz"))),
                                           compression_type="GZIP"))
    picked = [int(tf.io.parse_single_example(r, {"row": tf.io.FixedLenFeature([], tf.int64)})
                  ["row"]) for r in records if bool(in_validation(r, 10))]
    assert held == sorted(picked)
    assert 0.07 < len(held) / 5_003 < 0.13


def test_no_slice_when_validation_is_off(tmp_path):
    _write(tmp_path / "part-0.tfrecord.gz", range(500))
    assert _rows(str(tmp_path / "*.gz"), "train", percent=0) == list(range(500))
