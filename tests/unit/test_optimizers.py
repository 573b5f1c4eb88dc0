"""The trainers' lazy Adam: a sparse (table lookup) gradient updates only the rows a batch
looked up, with Adam's arithmetic on those rows; dense weights get plain Adam."""
from __future__ import annotations

import numpy as np
import pytest

from components.ctr import optimizers


def _steps(name: str, batches, dense: bool = False):
    """Weights and slots of a 50 x 3 table after one step per batch of looked-up rows."""
    import tensorflow as tf
    table = tf.Variable(np.arange(150, dtype=np.float32).reshape(50, 3) / 100)
    opt = optimizers.make(name, 0.1)
    opt.build([table])
    for rows in batches:
        with tf.GradientTape() as tape:
            if dense:   # the same rows through a one-hot matmul: a dense gradient
                looked_up = tf.one_hot(rows, 50) @ table
            else:
                looked_up = tf.gather(table, rows)
            loss = tf.reduce_sum(tf.square(looked_up - 1.0))
        grad = tape.gradient(loss, table)
        assert isinstance(grad, tf.IndexedSlices) != dense
        opt.apply_gradients([(grad, table)])
    m, v = opt._momentums[0].numpy(), opt._velocities[0].numpy()
    return table.numpy(), m, v


def test_lazy_adam_touches_only_the_looked_up_rows():
    start = np.arange(150, dtype=np.float32).reshape(50, 3) / 100
    lazy, m, v = _steps("lazy_adam", [[3, 7, 7], [1]])
    dense, *_ = _steps("adam", [[3, 7, 7], [1]])
    untouched = [r for r in range(50) if r not in (1, 3, 7)]
    np.testing.assert_array_equal(lazy[untouched], start[untouched])
    assert not m[untouched].any() and not v[untouched].any()
    # Tf_keras's Adam moved rows 3 and 7 again in step 2 (their decayed moments) although
    # step 2 looked up row 1 only; the lazy one left them where step 1 put them.
    first, *_ = _steps("lazy_adam", [[3, 7, 7]])
    np.testing.assert_allclose(lazy[[3, 7]], first[[3, 7]])
    assert np.abs(dense[[3, 7]] - first[[3, 7]]).min() > 1e-4


def test_lazy_adam_is_adam_on_the_rows_it_updates():
    lazy, m, v = _steps("lazy_adam", [[3, 7, 7]])
    dense, dm, dv = _steps("adam", [[3, 7, 7]])
    # On a first step both start from zero moments: the same update on the looked-up rows
    # (row 7 twice: one update of its summed gradient, as Adam does).
    np.testing.assert_allclose(lazy, dense, rtol=1e-6)
    np.testing.assert_allclose(m[[3, 7]], dm[[3, 7]], rtol=1e-6)
    np.testing.assert_allclose(v[[3, 7]], dv[[3, 7]], rtol=1e-6)


def test_dense_gradients_get_plain_adam_and_unknown_names_fail():
    lazy, *_ = _steps("lazy_adam", [[3, 7], [1, 3]], dense=True)
    dense, *_ = _steps("adam", [[3, 7], [1, 3]], dense=True)
    np.testing.assert_allclose(lazy, dense, rtol=1e-6)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        optimizers.make("adamw", 0.1)
