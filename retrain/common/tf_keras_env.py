"""Choose Keras 2 for a process before it imports TensorFlow (tf.Transform and CTR steps).

tf.Transform works with Keras 2 only (`tf_keras`) and sets TF_USE_LEGACY_KERAS=1 itself,
but only once TensorFlow is imported; by then TensorFlow's own import has eagerly loaded
Keras 3 (its optimizers, which pull in matplotlib and scikit-learn): 0.7 s of every
preprocessing and training process that never uses it (measured: importing tf.Transform
and the job 3.6 s -> 2.9 s). Setting the variable first makes TensorFlow load Keras 2 instead,
which is what tf.Transform switches `tf.keras` to anyway. Code that imports `keras` itself
(the text family's Keras 3 models) is not affected by the variable.

Steps that only load a SavedModel (CTR evaluation, serving checks, recommendations and
their quality check, the text serving check) use no Keras at all; choosing Keras 2 there
saves the same eager load (1.2-1.8 s of CPU a process: bench/step_startup.py).
"""
from __future__ import annotations

import os
import sys

VARIABLE = "TF_USE_LEGACY_KERAS"


def use_keras2() -> None:
    """Set TF_USE_LEGACY_KERAS=1 unless TensorFlow is already imported (then it is too late
    to matter) or the environment says otherwise (a user's explicit choice wins)."""
    if "tensorflow" not in sys.modules:
        os.environ.setdefault(VARIABLE, "1")
