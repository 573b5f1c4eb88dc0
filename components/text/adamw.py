"""Keras AdamW with the same arithmetic, built from far fewer graph ops.

Why: the first training step waits for TensorFlow to trace the train step and optimize
its graph, and both cost time in proportion to the graph's ops; the step's full-size
temporaries cost time too (on a VM, fresh memory is page faults). Keras builds AdamW's
update from ~25 ops per variable and evaluates the learning-rate schedule again for each
variable's weight decay: for MiniLM + heads (105 variables) that was ~60% of the train
step's ops (profiled: 6.4k of 10.8k with a constant rate, more with the cosine schedule).
Here the step's scalars (schedule, bias corrections, clip constants) are made once per
step, and each variable costs 5 ops, none of which makes a full-size temporary except the
clipped gradient: its squared norm (`L2Loss`; all the clip scales are then computed at
once on one small vector), the clipped gradient, the weight decay as one in-place kernel
(`ResourceApplyGradientDescent`, var -= var · (wd · lr)) and TensorFlow's fused Adam
kernel (`ResourceApplyAdam`: m += (g - m)(1 - b1), v += (g² - v)(1 - b2),
var -= lr √(1 - b2ᵗ) / (1 - b1ᵗ) · m / (√v + ε), Keras's formula). Per variable, decay
comes just before its Adam update, as in Keras's order. The variables (names,
checkpoints) are Keras's; results match Keras's AdamW to float rounding
(tests/unit/test_text_adamw.py).
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
        """Done per variable in `update_step`, just before its Adam update: the same
        order for each variable as Keras's pass over all of them first."""

    def _clip_gradients(self, grads):
        """Each gradient clipped to norm c as Keras's clipnorm does, g · c / max(‖g‖, c),
        in 2 ops per gradient: ½‖g‖² from one fused `L2Loss`, then all the scales at once
        on one small vector, and one multiply; the only full-size tensor made is the
        result (Keras makes three: g², g · c and the quotient). As Keras: an IndexedSlices
        gradient is clipped by the norm of its rows."""
        if not (self.clipnorm and self.clipnorm > 0):
            return super()._clip_gradients(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        values = [_rows(grads[i]) for i in present]
        c = self._step_scalars
        half_squares = tf.stack([tf.cast(tf.raw_ops.L2Loss(t=v), tf.float32) for v in values])
        scales = tf.unstack(c["clip"] / tf.sqrt(tf.maximum(half_squares * c["two"],
                                                           c["clip_squared"])))
        clipped = list(grads)
        for i, v, scale in zip(present, values, scales):
            g = grads[i]
            v = v * _as(scale, v)
            clipped[i] = (tf.IndexedSlices(v, g.indices, g.dense_shape)
                          if isinstance(g, tf.IndexedSlices) else v)
        return clipped

    def apply(self, grads, trainable_variables=None):
        # The step's scalars, shared by every variable's clipping, decay and update (a
        # constant or a schedule's value made once per step, not once per variable).
        step = tf.cast(self.iterations + 1, tf.float32)
        lr = tf.convert_to_tensor(self._get_current_learning_rate(), tf.float32)
        self._step_scalars = {
            "lr": lr, "decay": lr * tf.constant(self.weight_decay or 0.0, tf.float32),
            "beta1_power": tf.pow(tf.constant(self.beta_1, tf.float32), step),
            "beta2_power": tf.pow(tf.constant(self.beta_2, tf.float32), step),
            "beta1": tf.constant(self.beta_1, tf.float32),
            "beta2": tf.constant(self.beta_2, tf.float32),
            "epsilon": tf.constant(self.epsilon, tf.float32),
            "clip": tf.constant(self.clipnorm or 0.0, tf.float32),
            "clip_squared": tf.constant((self.clipnorm or 0.0) ** 2, tf.float32),
            "two": tf.constant(2.0, tf.float32)}
        try:
            return super().apply(grads, trainable_variables)
        finally:
            del self._step_scalars

    def update_step(self, gradient, variable, learning_rate):
        i = self._get_variable_index(variable)
        var = variable.value if isinstance(variable, keras.Variable) else variable
        c = self._step_scalars
        if self.weight_decay is not None and self._use_weight_decay(variable):
            # var -= var · (wd · lr): one in-place kernel, no full-size temporaries
            tf.raw_ops.ResourceApplyGradientDescent(
                var=var.handle, alpha=_as(c["decay"], var),
                delta=tf.raw_ops.ReadVariableOp(resource=var.handle, dtype=var.dtype))
        adam = {k: _as(c[k], var) for k in ("lr", "beta1_power", "beta2_power", "beta1",
                                             "beta2", "epsilon")}
        tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=self._momentums[i].value.handle,
            v=self._velocities[i].value.handle,
            grad=tf.convert_to_tensor(gradient, var.dtype),   # dense, as Keras's update
            **adam)


def _rows(g):
    """The values of a gradient: an IndexedSlices' rows, or the dense tensor itself."""
    return g.values if isinstance(g, tf.IndexedSlices) else g


def _as(x: tf.Tensor, var) -> tf.Tensor:
    """`x` in the variable's dtype (no op for float32 variables)."""
    return x if x.dtype == var.dtype else tf.cast(x, var.dtype)
