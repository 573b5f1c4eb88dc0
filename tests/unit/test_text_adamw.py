"""The text family's AdamW (components.text.adamw) updates variables exactly as Keras's
AdamW does (same clipping, weight decay, schedule and bias corrections), in eager steps
and inside a tf.function, with a weight-decay exclusion and an embedding (sparse) gradient,
with and without clipping and decay."""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _run(opt_cls, graph: bool, clipnorm=1.0, weight_decay=0.1):
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(0)
    init = [rng.normal(size=s).astype("float32") for s in ((4, 3), (3,), (10, 2))]
    grads = [[rng.normal(size=w.shape).astype("float32") * 3 for w in init] for _ in range(4)]
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(init)]
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=3, warmup_target=0.05, warmup_steps=2)
    opt = opt_cls(schedule, weight_decay=weight_decay, clipnorm=clipnorm)
    opt.exclude_from_weight_decay(var_list=[variables[1]])
    opt.build(variables)

    def step(gs):
        gs = list(gs)
        # the embedding's gradient as IndexedSlices (rows 1 and 7), as from a lookup
        gs[2] = tf.IndexedSlices(tf.gather(gs[2], [1, 7]), tf.constant([1, 7]),
                                 tf.constant([10, 2]))
        opt.apply(gs, variables)

    if graph:
        step = tf.function(step)
    for gs in grads:
        step([tf.constant(g) for g in gs])
    return [np.asarray(v) for v in variables] + [np.asarray(v) for v in opt.variables]


@pytest.mark.parametrize("clipnorm,weight_decay", [(1.0, 0.1), (None, 0.004), (0.5, 0.0)])
@pytest.mark.parametrize("graph", [False, True])
def test_fused_adamw_matches_keras(graph, clipnorm, weight_decay):
    import keras

    from components.text.adamw import AdamW

    ours = _run(AdamW, graph, clipnorm, weight_decay)
    theirs = _run(keras.optimizers.AdamW, graph, clipnorm, weight_decay)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # float rounding only
