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

Built with tf_keras (Keras 2 API) because tf.Transform's serving layer is a tf_keras
layer and one Keras in one SavedModel keeps export simple.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow_transform.keras_lib import tf_keras

from components.ctr import features as F

# Prior strength (L2 on the summed loss; divided by the number of training rows in the
# model) of each field's first-order bias; fields not listed use `l2`. User biases are
# small and users sparse, so they are shrunk hardest.
DEFAULT_ID_L2: dict[str, float] = {"user_id": 10.0, "item_id": 5.0}
DEFAULT_DEEP_FIELDS: tuple[str, ...] = ("category_id", "device", "hour", "position")
DEFAULT_COUNT_FEATURES: tuple[str, ...] = ("item_id",)


def _prior(strength: float, num_examples: int):
    return tf_keras.regularizers.l2(strength / num_examples) if strength else None


def build_model(hidden_units: Sequence[int] = (32, 16), l2: float = 2.0,
                embedding_dim: int = 4, *, num_examples: int = 100_000,
                id_l2: Mapping[str, float] | None = None, embedding_l2: float = 10.0,
                dropout: float = 0.2,
                deep_fields: Sequence[str] = DEFAULT_DEEP_FIELDS,
                fm_fields: Sequence[str] = (),
                count_features: Sequence[str] = DEFAULT_COUNT_FEATURES,
                base_rate: float = 0.04) -> tf_keras.Model:
    """The CTR model; `num_examples` (training rows) scales the priors, `base_rate`
    (training click rate) initialises the intercept so early steps fit ids, not the mean."""
    layers = tf_keras.layers
    id_l2 = DEFAULT_ID_L2 if id_l2 is None else dict(id_l2)
    unknown = set(deep_fields) | set(fm_fields) | set(count_features) | set(id_l2)
    unknown -= set(F.CATEGORICAL_FEATURES)
    if unknown:
        raise ValueError(f"not categorical features: {sorted(unknown)}")
    n = max(int(num_examples), 1)

    inputs, terms, vectors = {}, [], {}
    for key in F.CATEGORICAL_FEATURES:
        name = F.transformed_name(key)
        inputs[name] = tf_keras.Input(shape=(), dtype=tf.int64, name=name)
        size = F.categorical_size(key)
        bias = layers.Embedding(size, 1, embeddings_initializer="zeros",
                                embeddings_regularizer=_prior(id_l2.get(key, l2), n),
                                name=f"bias_{key}")(inputs[name])         # (b, 1)
        terms.append(bias)
        if embedding_dim and (key in deep_fields or key in fm_fields):
            vectors[key] = layers.Embedding(
                size, embedding_dim, name=f"emb_{key}",
                embeddings_initializer=tf_keras.initializers.RandomNormal(stddev=0.05),
                embeddings_regularizer=_prior(embedding_l2, n))(inputs[name])  # (b, d)

    dense_parts = []
    for key in F.NUMERIC_FEATURES:
        for name in (F.transformed_name(key), F.missing_name(key)):
            inputs[name] = tf_keras.Input(shape=(), dtype=tf.float32, name=name)
            dense_parts.append(layers.Reshape((1,))(inputs[name]))
    for key in count_features:
        count = layers.Embedding(F.categorical_size(key), 1, embeddings_initializer="zeros",
                                 trainable=False, name=f"count_{key}")(
                                     inputs[F.transformed_name(key)])     # (b, 1)
        dense_parts += [tf.math.log1p(count), tf.cast(tf.equal(count, 0.0), tf.float32)]
    numeric = layers.Concatenate(name="numeric")(dense_parts)
    terms.append(layers.Dense(1, kernel_initializer="zeros", name="linear",
                              bias_initializer=tf_keras.initializers.Constant(
                                  math.log(base_rate / (1.0 - base_rate))))(numeric))

    fm_vectors = [vectors[k] for k in fm_fields if k in vectors]
    for i, a in enumerate(fm_vectors):
        for b in fm_vectors[i + 1:]:
            terms.append(layers.Dot(axes=1)([a, b]))

    if hidden_units:
        x = layers.Concatenate(name="deep_in")(
            [vectors[k] for k in deep_fields if k in vectors] + [numeric])
        for units in hidden_units:
            x = layers.Dense(units, activation="relu")(x)
            if dropout:
                x = layers.Dropout(dropout)(x)
        terms.append(layers.Dense(1, kernel_initializer="zeros", name="deep")(x))

    logit = layers.Add(name="logit")(terms)
    prob = layers.Reshape((), name="p_click")(layers.Activation("sigmoid")(logit))
    return tf_keras.Model(inputs=inputs, outputs=prob, name="ctr_bias_deep")


def set_id_counts(model: tf_keras.Model, counts: Mapping[str, np.ndarray]) -> None:
    """Load per-id occurrence counts of the training window into the count tables."""
    for key, values in counts.items():
        layer = model.get_layer(f"count_{key}")
        layer.set_weights([np.asarray(values, dtype=np.float32).reshape(-1, 1)])
