"""One pass over a window's transformed training shards: rows, click rate and per-id
counts, which both trainers need before training (the priors, the intercept, the item
popularity table) and which the transform graph does not give them."""
from __future__ import annotations


def window_stats(pattern: str, feature_spec: dict, fcfg, fields=None) -> tuple[int, float, dict]:
    """(rows, click rate, {field: counts per id}) over the shards matching `pattern`, for
    `fields` (default: every categorical field of the feature config). Every present value
    of a multi-valued field counts; padding (-1) does not."""
    import numpy as np
    import tensorflow as tf

    from components.ctr.feature_config import transformed_name
    fields = fcfg.categorical_fields() if fields is None else list(fields)
    wanted = {fcfg.label, *(transformed_name(k) for k in fields)}
    spec = {k: v for k, v in feature_spec.items() if k in wanted}
    files = tf.io.gfile.glob(pattern)
    if not files:
        raise FileNotFoundError(f"no transformed shards match {pattern}")
    ds = (tf.data.TFRecordDataset(files, compression_type="GZIP")
          .batch(65536).map(lambda x: tf.io.parse_example(x, spec)))
    rows, clicks = 0, 0.0
    counts = {k: np.zeros(fcfg.categorical_size(k), dtype=np.int64) for k in fields}
    for batch in ds.as_numpy_iterator():
        labels = batch[fcfg.label]
        rows += len(labels)
        clicks += float(labels.sum())
        for k in fields:
            ids = batch[transformed_name(k)].reshape(-1)
            counts[k] += np.bincount(ids[ids >= 0], minlength=len(counts[k]))
    if rows == 0:
        raise ValueError(f"no training rows in {pattern}")
    return rows, clicks / rows, counts
