"""One pass over a window's transformed training shards: rows, click rate and per-id
counts, which both trainers need before training (the priors, the intercept, the item
popularity table) and which the transform graph does not give them.

The same pass sizes the validation slice: a stable hash of each serialized training
record puts `validation_percent` of the window's training rows aside for early stopping
(`in_validation`), so the statistics above describe only the rows the model fits, as they
describe only training rows for the eval split."""
from __future__ import annotations

from typing import NamedTuple

VALIDATION_BUCKETS = 100


class WindowStats(NamedTuple):
    rows: int               # training rows (validation slice excluded)
    click_rate: float
    counts: dict            # {field: occurrences per id}
    validation_rows: int    # rows of the validation slice


def in_validation(serialized, validation_percent: int):
    """Boolean tensor: which serialized records belong to the validation slice."""
    import tensorflow as tf
    bucket = tf.strings.to_hash_bucket_fast(serialized, VALIDATION_BUCKETS)
    return tf.less(bucket, validation_percent)


def window_stats(pattern: str, feature_spec: dict, fcfg, fields=None,
                 validation_percent: int = 0) -> WindowStats:
    """Statistics of the training rows matching `pattern`, for `fields` (default: every
    categorical field of the feature config). Every present value of a multi-valued field
    counts; padding (-1) does not."""
    import numpy as np
    import tensorflow as tf

    from components.ctr.feature_config import transformed_name
    if not 0 <= validation_percent < 50:
        raise ValueError(f"validation_percent must be in [0, 50), got {validation_percent}")
    fields = fcfg.categorical_fields() if fields is None else list(fields)
    wanted = {fcfg.label, *(transformed_name(k) for k in fields)}
    spec = {k: v for k, v in feature_spec.items() if k in wanted}
    files = tf.io.gfile.glob(pattern)
    if not files:
        raise FileNotFoundError(f"no transformed shards match {pattern}")
    ds = (tf.data.TFRecordDataset(files, compression_type="GZIP").batch(65536)
          .map(lambda x: (tf.io.parse_example(x, spec), in_validation(x, validation_percent))))
    rows, clicks, held = 0, 0.0, 0
    counts = {k: np.zeros(fcfg.categorical_size(k), dtype=np.int64) for k in fields}
    for batch, is_val in ds.as_numpy_iterator():
        keep = ~is_val
        held += int(is_val.sum())
        labels = batch[fcfg.label][keep]
        rows += len(labels)
        clicks += float(labels.sum())
        for k in fields:
            ids = batch[transformed_name(k)][keep].reshape(-1)
            counts[k] += np.bincount(ids[ids >= 0], minlength=len(counts[k]))
    if rows == 0:
        raise ValueError(f"no training rows in {pattern}")
    return WindowStats(rows, clicks / rows, counts, held)
