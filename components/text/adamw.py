"""Keras AdamW with the same arithmetic, built from far fewer graph ops.

Why: the first training step waits for TensorFlow to trace the train step and optimize
its graph, and both cost time in proportion to the graph's ops. Keras builds AdamW's
update from ~25 ops per variable and evaluates the learning-rate schedule again for each
variable's weight decay: for MiniLM + heads (105 variables) that was ~60% of the train
step's ops (profiled: 6.4k of 10.8k with a constant rate, more with the cosine schedule).
Here the schedule and Adam's bias corrections are computed once per step, and each variable
is updated by TensorFlow's fused Adam kernel (`ResourceApplyAdam`: m += (g - m)(1 - b1),
v += (g² - v)(1 - b2), var -= lr √(1 - b2ᵗ) / (1 - b1ᵗ) · m / (√v + ε), Keras's formula)
in one op, and each gradient's norm clipping in 6 ops instead of 13. Weight decay
(var -= var · wd · lr) and the variables (names, checkpoints) are Keras's.
"""
from __future__ import annotations

import keras
import tensorflow as tf


class AdamW(keras.optimizers.AdamW):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.amsgrad:
            raise ValueError("amsgrad is not supported by the fused update")

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        lr = tf.convert_to_tensor(self.learning_rate, tf.float32)
        wd = tf.constant(self.weight_decay, tf.float32)

        def decay(distribution, variables):
            for var in variables:
                if self._use_weight_decay(var):
                    distribution.extended.update(
                        var.value, lambda v: v.assign_sub(v * _as(wd, v) * _as(lr, v)),
                        group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(
            decay, self._distribution_strategy, variables)

    def _clip_by_norm(self, values, axes=None):
        """tf.clip_by_norm's value, g · c / max(‖g‖, c), in 6 ops instead of 13 (its
        guards keep the gradient *of* the clipping finite, which is never taken here).
        As Keras: an IndexedSlices gradient is clipped by the norm of its rows."""
        if isinstance(values, tf.IndexedSlices):
            return tf.IndexedSlices(self._clip_by_norm(values.values, axes), values.indices,
                                    values.dense_shape)
        clip = tf.constant(self.clipnorm, values.dtype)
        norm = tf.sqrt(tf.reduce_sum(values * values, axes, keepdims=axes is not None))
        return values * clip / tf.maximum(norm, clip)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        step = tf.cast(self.iterations + 1, tf.float32)
        self._step_scalars = {
            "lr": tf.convert_to_tensor(learning_rate, tf.float32),
            "beta1_power": tf.pow(tf.constant(self.beta_1, tf.float32), step),
            "beta2_power": tf.pow(tf.constant(self.beta_2, tf.float32), step),
            "beta1": tf.constant(self.beta_1, tf.float32),
            "beta2": tf.constant(self.beta_2, tf.float32),
            "epsilon": tf.constant(self.epsilon, tf.float32)}
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            del self._step_scalars

    def update_step(self, gradient, variable, learning_rate):
        i = self._get_variable_index(variable)
        var = variable.value if isinstance(variable, keras.Variable) else variable
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=self._momentums[i].value.handle,
            v=self._velocities[i].value.handle,
            grad=tf.convert_to_tensor(gradient, var.dtype),   # dense, as Keras's update
            **{k: _as(x, var) for k, x in self._step_scalars.items()})


def _as(x: tf.Tensor, var) -> tf.Tensor:
    """`x` in the variable's dtype (no op for float32 variables)."""
    return x if x.dtype == var.dtype else tf.cast(x, var.dtype)
