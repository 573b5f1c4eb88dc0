"""The CTR network: regularised first-order terms + item popularity + a small deep part.

What carries the signal on click logs of this size (~140k rows, ~5k clicks over a
3-day window): a per-id bias for every categorical field, the id's popularity in the
training window and the numeric features. Those first-order terms are shrunk with a
Gaussian prior (an L2 penalty on the *whole* table scaled by 1/num_examples, so the
objective is a proper MAP estimate: rare ids stay near 0, frequent ids get what their
data supports) instead of Keras' per-step whole-table penalty, which either does
nothing or flattens everything. A small MLP over low-dimensional embeddings of the
low-cardinality fields (category, device, hour, position), the numerics and the
popularity features picks up interactions. Factorization-machine dot products between
hashed-id factors are available (`fm_fields`) but off by default: on the demo data they
either collapse under a sane prior or overfit, and add nothing measurable.

Item popularity: a non-trainable table holding how often each id occurred in the
training window (`count_features`), filled by the trainer before fitting
(`set_id_counts`) and exported with the model, so serving sees the same statistic.
Unseen ids get count 0 and an explicit "unseen" indicator.

The fields come from a `FeatureConfig` (components/ctr/feature_config.py; default: the
generated logs): one bias and an optional embedding per categorical output; multi-valued
outputs (multi_categorical, text: fixed-length ids padded with -1) use the masked mean of
the present values' biases / embeddings (zeros when none is present); z-scored numerics and
their missing indicators form the dense part.

Built with tf_keras (Keras 2 API) because tf.Transform's serving layer is a tf_keras
layer and one Keras in one SavedModel keeps export simple.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow_transform.keras_lib import tf_keras

from components.ctr import feature_config as fc
from components.ctr.feature_config import FeatureConfig, missing_name, transformed_name

# Defaults of the generated logs' config (feature_configs/generated.yaml, `model:`).
_DEFAULT_MODEL = fc.default().model
DEFAULT_ID_L2: dict[str, float] = _DEFAULT_MODEL.id_l2_dict()
DEFAULT_DEEP_FIELDS: tuple[str, ...] = _DEFAULT_MODEL.deep_fields
DEFAULT_COUNT_FEATURES: tuple[str, ...] = _DEFAULT_MODEL.count_features


def _prior(strength: float, num_examples: int):
    return tf_keras.regularizers.l2(strength / num_examples) if strength else None


def build_model(hidden_units: Sequence[int] = (32, 16), l2: float = 2.0,
                embedding_dim: int = 4, *, num_examples: int = 100_000,
                id_l2: Mapping[str, float] | None = None, embedding_l2: float = 10.0,
                dropout: float = 0.2,
                deep_fields: Sequence[str] | None = None,
                fm_fields: Sequence[str] = (),
                count_features: Sequence[str] | None = None,
                base_rate: float = 0.04,
                config: FeatureConfig | None = None) -> tf_keras.Model:
    """The CTR model of a feature config (default: the generated logs'); `num_examples`
    (training rows) scales the priors, `base_rate` (training click rate) initialises the
    intercept so early steps fit ids, not the mean. deep_fields, count_features and id_l2
    default to the config's `model:` section."""
    layers = tf_keras.layers
    cfg = fc.default() if config is None else config
    id_l2 = cfg.model.id_l2_dict() if id_l2 is None else dict(id_l2)
    deep_fields = cfg.model.deep_fields if deep_fields is None else tuple(deep_fields)
    count_features = cfg.model.count_features if count_features is None else tuple(count_features)
    cfg.check_fields("deep_fields", deep_fields)
    cfg.check_fields("fm_fields", fm_fields)
    cfg.check_fields("id_l2", list(id_l2))
    cfg.check_fields("count_features", count_features, single_valued=True)
    n = max(int(num_examples), 1)

    inputs, terms, vectors = {}, [], {}
    for key in cfg.categorical_fields():
        name = transformed_name(key)
        width = cfg.max_values(key)
        inputs[name] = tf_keras.Input(shape=(width,) if width else (), dtype=tf.int64, name=name)
        ids, mask = inputs[name], None
        if width:   # padded multi-valued ids: look up max(id, 0), average the present ones
            ids = tf.maximum(inputs[name], 0)
            mask = tf.cast(tf.greater_equal(inputs[name], 0), tf.float32)[:, :, None]
        size = cfg.categorical_size(key)
        bias = layers.Embedding(size, 1, embeddings_initializer="zeros",
                                embeddings_regularizer=_prior(id_l2.get(key, l2), n),
                                name=f"bias_{key}")(ids)         # (b, 1) or (b, L, 1)
        terms.append(bias if mask is None else _masked_mean(bias, mask))
        if embedding_dim and (key in deep_fields or key in fm_fields):
            emb = layers.Embedding(
                size, embedding_dim, name=f"emb_{key}",
                embeddings_initializer=tf_keras.initializers.RandomNormal(stddev=0.05),
                embeddings_regularizer=_prior(embedding_l2, n))(ids)  # (b, d) or (b, L, d)
            vectors[key] = emb if mask is None else _masked_mean(emb, mask)

    dense_parts = []
    for key in cfg.dense_features():
        for name in (transformed_name(key), missing_name(key)):
            inputs[name] = tf_keras.Input(shape=(), dtype=tf.float32, name=name)
            dense_parts.append(layers.Reshape((1,))(inputs[name]))
    for key in count_features:
        count = layers.Embedding(cfg.categorical_size(key), 1, embeddings_initializer="zeros",
                                 trainable=False, name=f"count_{key}")(
                                     inputs[transformed_name(key)])       # (b, 1)
        dense_parts += [tf.math.log1p(count), tf.cast(tf.equal(count, 0.0), tf.float32)]
    if len(dense_parts) > 1:
        numeric = layers.Concatenate(name="numeric")(dense_parts)
    else:   # one dense input, or none: the linear layer then only carries the intercept
        numeric = dense_parts[0] if dense_parts else tf.zeros_like(terms[0])
    terms.append(layers.Dense(1, kernel_initializer="zeros", name="linear",
                              bias_initializer=tf_keras.initializers.Constant(
                                  math.log(base_rate / (1.0 - base_rate))))(numeric))

    fm_vectors = [vectors[k] for k in fm_fields if k in vectors]
    for i, a in enumerate(fm_vectors):
        for b in fm_vectors[i + 1:]:
            terms.append(layers.Dot(axes=1)([a, b]))

    if hidden_units:
        deep_in = [vectors[k] for k in deep_fields if k in vectors] + \
            ([numeric] if dense_parts else [])
        if not deep_in:
            raise ValueError("hidden_units given but the MLP has no inputs: no deep_fields "
                             "and no numeric or count features")
        x = layers.Concatenate(name="deep_in")(deep_in) if len(deep_in) > 1 else deep_in[0]
        for units in hidden_units:
            x = layers.Dense(units, activation="relu")(x)
            if dropout:
                x = layers.Dropout(dropout)(x)
        terms.append(layers.Dense(1, kernel_initializer="zeros", name="deep")(x))

    logit = layers.Add(name="logit")(terms)
    prob = layers.Reshape((), name="p_click")(layers.Activation("sigmoid")(logit))
    return tf_keras.Model(inputs=inputs, outputs=prob, name="ctr_bias_deep")


def _masked_mean(x, mask):
    """Mean over axis 1 of the rows where mask is 1 (zeros if none): (b, L, d) -> (b, d)."""
    return tf.reduce_sum(x * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


def set_id_counts(model: tf_keras.Model, counts: Mapping[str, np.ndarray]) -> None:
    """Load per-id occurrence counts of the training window into the count tables."""
    for key, values in counts.items():
        layer = model.get_layer(f"count_{key}")
        layer.set_weights([np.asarray(values, dtype=np.float32).reshape(-1, 1)])
