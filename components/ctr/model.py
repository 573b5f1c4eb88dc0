"""The CTR network: first-order terms + factorization-machine interactions + an MLP.

Dot products between field embeddings learn user x item / user x category affinity
with far less data per ID than an MLP would need; the MLP picks up the rest.
Built with tf_keras (Keras 2 API) because tf.Transform's serving layer is a tf_keras
layer and one Keras in one SavedModel keeps export simple.
"""
from __future__ import annotations

import tensorflow as tf
from tensorflow_transform.keras_lib import tf_keras

from components.ctr import features as F


def build_model(hidden_units: tuple[int, ...] = (128, 64), l2: float = 1e-6,
                embedding_dim: int = F.EMBEDDING_DIM) -> tf_keras.Model:
    layers = tf_keras.layers
    reg = tf_keras.regularizers.l2(l2) if l2 else None
    inputs, field_vectors, first_order = {}, [], []
    for key in F.CATEGORICAL_FEATURES:
        name = F.transformed_name(key)
        inputs[name] = tf_keras.Input(shape=(), dtype=tf.int64, name=name)
        size = F.categorical_size(key)
        ids = layers.Reshape((1,))(inputs[name])
        vec = layers.Embedding(size, embedding_dim, embeddings_regularizer=reg,
                               name=f"emb_{key}")(ids)                 # (b, 1, d)
        field_vectors.append(vec)
        bias = layers.Embedding(size, 1, embeddings_regularizer=reg,
                                embeddings_initializer="zeros", name=f"bias_{key}")(ids)
        first_order.append(layers.Flatten()(bias))
    dense_parts = []
    for key in F.NUMERIC_FEATURES:
        for name in (F.transformed_name(key), F.missing_name(key)):
            inputs[name] = tf_keras.Input(shape=(), dtype=tf.float32, name=name)
            dense_parts.append(layers.Reshape((1,))(inputs[name]))
    numeric = layers.Concatenate(name="numeric")(dense_parts)
    fields = layers.Concatenate(axis=1, name="fields")(field_vectors)   # (b, f, d)

    # FM trick: sum of all pairwise dot products = 0.5 * ((sum v)^2 - sum v^2).
    square_of_sum = tf.square(tf.reduce_sum(fields, axis=1))
    sum_of_square = tf.reduce_sum(tf.square(fields), axis=1)
    fm = 0.5 * tf.reduce_sum(square_of_sum - sum_of_square, axis=1, keepdims=True)

    x = layers.Concatenate()([layers.Flatten()(fields), numeric])
    for units in hidden_units:
        x = layers.Dense(units, activation="relu", kernel_regularizer=reg)(x)
    deep = layers.Dense(1)(x)
    linear = layers.Dense(1, use_bias=True)(numeric)
    logit = layers.Add(name="logit")([deep, linear, fm, *first_order])
    prob = layers.Reshape((), name="p_click")(layers.Activation("sigmoid")(logit))
    return tf_keras.Model(inputs=inputs, outputs=prob, name="ctr_fm_mlp")
