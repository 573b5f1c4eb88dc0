"""The CTR model's tf.Transform `preprocessing_fn` and the raw input signature.

One pure, module-level function: the Beam job analyses and applies it, the exported
model embeds the same graph, so training and serving can never disagree about a feature.
Numeric features arrive as float with NaN for missing values (Arrow nulls are filled
with NaN on read): they are log1p'd, z-scored with NaN-aware statistics of the analysis
window (one analyzer, one pass for all of them), and get a 0/1 missing indicator.
"""
from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from components.ctr import features as F


def raw_feature_spec() -> dict[str, tf.io.FixedLenFeature]:
    """Raw (untransformed) inputs, as the serving signature accepts them."""
    spec = {k: tf.io.FixedLenFeature([], tf.string)
            for k in [*F.HASHED_ID_FEATURES, *F.VOCAB_FEATURES]}
    spec.update({k: tf.io.FixedLenFeature([], tf.int64) for k in F.IDENTITY_FEATURES})
    spec.update({k: tf.io.FixedLenFeature([], tf.float32) for k in F.NUMERIC_FEATURES})
    return spec


def raw_training_spec() -> dict[str, tf.io.FixedLenFeature]:
    """Raw inputs of the training data: the model inputs plus the label."""
    return {**raw_feature_spec(), F.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)}


def _nan_aware_z_scores(xs: list[tf.Tensor]) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """(z-score of log1p(x), missing indicator) for each numeric feature.

    All features' statistics come from ONE `tft.mean` over a [batch, 3k] matrix (share
    present, E[log1p x], E[log1p(x)^2] per feature), so analysis needs a single pass over
    the data and a single analyzer: the var = E[x^2] - E[x]^2 form is safe for log1p'd
    values (order 1-10). The first version took E[(x - mean)^2] after the mean, which
    costs a second analysis phase (another full pass) and three analyzers per feature.
    """
    k = len(xs)
    x = tf.stack([tf.cast(v, tf.float32) for v in xs], axis=1)
    missing = tf.math.is_nan(x)
    present = tf.cast(tf.logical_not(missing), tf.float32)
    logged = tf.math.log1p(tf.maximum(tf.where(missing, 0.0, x), 0.0))
    # float64 sums: E[x^2] - E[x]^2 cancels digits, and float32 batch sums merged in a
    # different order (other batching, other runner) would show in the 5th digit.
    logged64, present64 = tf.cast(logged, tf.float64), tf.cast(present, tf.float64)
    stats = tft.mean(tf.concat([present64, logged64 * present64,
                                tf.square(logged64) * present64], 1),
                     reduce_instance_dims=False, output_dtype=tf.float64)
    share_present = tf.maximum(stats[:k], 1e-9)
    mean64 = stats[k:2 * k] / share_present
    var = tf.cast(tf.maximum(stats[2 * k:] / share_present - tf.square(mean64), 0.0), tf.float32)
    mean = tf.cast(mean64, tf.float32)
    z = tf.where(missing, 0.0, (logged - mean) * tf.math.rsqrt(var + 1e-12))
    missing = tf.cast(missing, tf.float32)
    return [(z[:, i], missing[:, i]) for i in range(k)]


def preprocessing_fn(inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    outputs: dict[str, tf.Tensor] = {}
    for key, buckets in F.HASHED_ID_FEATURES.items():
        outputs[F.transformed_name(key)] = tf.strings.to_hash_bucket_fast(inputs[key], buckets)
    for key, cfg in F.VOCAB_FEATURES.items():
        outputs[F.transformed_name(key)] = tft.compute_and_apply_vocabulary(
            inputs[key], top_k=cfg["top_k"], num_oov_buckets=cfg["oov_buckets"],
            vocab_filename=key)
    for key, size in F.IDENTITY_FEATURES.items():
        outputs[F.transformed_name(key)] = tf.clip_by_value(inputs[key], 0, size - 1)
    scaled = _nan_aware_z_scores([inputs[key] for key in F.NUMERIC_FEATURES])
    for key, (z, missing) in zip(F.NUMERIC_FEATURES, scaled):
        outputs[F.transformed_name(key)], outputs[F.missing_name(key)] = z, missing
    if F.LABEL_KEY in inputs:
        outputs[F.LABEL_KEY] = tf.cast(inputs[F.LABEL_KEY], tf.float32)
    return outputs
