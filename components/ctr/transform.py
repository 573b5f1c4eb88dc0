"""The CTR model's tf.Transform `preprocessing_fn` and the raw input signature.

One pure, module-level function: the Beam job analyses and applies it, the exported
model embeds the same graph, so training and serving can never disagree about a feature.
Numeric features arrive as float with NaN for missing values (Arrow nulls are filled
with NaN on read): they are log1p'd, z-scored with NaN-aware statistics of the analysis
window, and get a 0/1 missing indicator.
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


def _nan_aware_z_score(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    missing = tf.math.is_nan(x)
    present = tf.cast(tf.logical_not(missing), tf.float32)
    logged = tf.math.log1p(tf.maximum(tf.where(missing, 0.0, x), 0.0))
    share_present = tf.maximum(tft.mean(present), 1e-9)
    mean = tft.mean(logged * present) / share_present
    var = tft.mean(tf.square(logged - mean) * present) / share_present
    z = tf.where(missing, 0.0, (logged - mean) * tf.math.rsqrt(var + 1e-12))
    return z, tf.cast(missing, tf.float32)


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
    for key in F.NUMERIC_FEATURES:
        outputs[F.transformed_name(key)], outputs[F.missing_name(key)] = (
            _nan_aware_z_score(tf.cast(inputs[key], tf.float32)))
    if F.LABEL_KEY in inputs:
        outputs[F.LABEL_KEY] = tf.cast(inputs[F.LABEL_KEY], tf.float32)
    return outputs
