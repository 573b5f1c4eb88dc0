"""Optimizers of the CTR trainers, by name.

"lazy_adam" (the default) is Adam whose update for a sparse gradient (an embedding or
bias table looked up by a batch) touches only the rows the batch looked up: their
moments and weights. tf_keras's Adam decays both moment slots of every row on every
step, so a step costs the whole table (three times: weights and two slots) on its
parameter servers, which is the opposite of what sharding a huge table is for. Rows a
batch did not look up keep their moments as they were (the usual "lazy" trade, as in
TensorFlow Addons' LazyAdam); dense weights get plain Adam.
"""
from __future__ import annotations

NAMES = ("lazy_adam", "adam", "adagrad", "sgd")


def make(name: str, learning_rate):
    """A tf_keras optimizer: "lazy_adam", "adam" (dense slot updates), "adagrad" (one
    slot, sparse updates) or "sgd"."""
    from tensorflow_transform.keras_lib import tf_keras
    if name == "lazy_adam":
        return _lazy_adam_class()(learning_rate)
    if name == "adam":
        return _slots_where_they_live(tf_keras.optimizers.Adam)(learning_rate)
    if name == "adagrad":
        return tf_keras.optimizers.Adagrad(learning_rate)
    if name == "sgd":
        return tf_keras.optimizers.SGD(learning_rate)
    raise ValueError(f"optimizer must be one of {NAMES}, got {name!r}")


_LAZY_ADAM = None


def _slots_where_they_live(base):
    """`base` whose zero-initialised slots are made on their variable's device.

    tf_keras computes a slot's zeros where the optimizer runs, the coordinator, and
    copies them to the parameter server: the coordinator then held a whole shard per
    slot, so its memory grew with the tables. Made on the shard's own device, the zeros
    never leave it (bench/export_memory.py: the chief's peak against table rows)."""
    import tensorflow as tf

    class Placed(base):
        def add_variable_from_reference(self, model_variable, variable_name, shape=None,
                                        initial_value=None):
            with tf.device(model_variable.device):
                return super().add_variable_from_reference(model_variable, variable_name,
                                                           shape, initial_value)

    Placed.__name__ = Placed.__qualname__ = base.__name__
    return Placed


def _lazy_adam_class():
    global _LAZY_ADAM
    if _LAZY_ADAM is not None:
        return _LAZY_ADAM
    import tensorflow as tf
    from tensorflow_transform.keras_lib import tf_keras

    class LazyAdam(_slots_where_they_live(tf_keras.optimizers.Adam)):
        """Adam; a sparse gradient updates only its rows (see the module docstring)."""

        def update_step(self, gradient, variable):
            if not isinstance(gradient, tf.IndexedSlices):
                return super().update_step(gradient, variable)
            dtype = variable.dtype
            step = tf.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
            alpha = (tf.cast(self.learning_rate, dtype) * tf.sqrt(1 - tf.pow(beta_2, step))
                     / (1 - tf.pow(beta_1, step)))
            # Adam's own arithmetic (1 - beta in Python, moments moved towards the
            # gradient), so the looked-up rows get what tf_keras's Adam gives them.
            key = self._var_key(variable)
            m = self._momentums[self._index_dict[key]]
            v = self._velocities[self._index_dict[key]]
            # A row looked up twice in the batch gets one update of its summed gradient.
            rows, position = tf.unique(gradient.indices)
            grad = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(rows)[0])
            m_rows = tf.gather(m, rows)
            m_rows += (grad - m_rows) * (1 - self.beta_1)
            v_rows = tf.gather(v, rows)
            v_rows += (tf.square(grad) - v_rows) * (1 - self.beta_2)
            m.scatter_update(tf.IndexedSlices(m_rows, rows))
            v.scatter_update(tf.IndexedSlices(v_rows, rows))
            variable.scatter_sub(tf.IndexedSlices(
                alpha * m_rows / (tf.sqrt(v_rows) + self.epsilon), rows))

    _LAZY_ADAM = LazyAdam
    return LazyAdam
