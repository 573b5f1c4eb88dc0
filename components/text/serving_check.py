"""Serving check for text models: the export serves raw strings, in a fresh process.

Launched by the push task (`python -m components.text.serving_check`) before anything is
published: loads the SavedModel with plain TensorFlow (plus `import tensorflow_text` to
register the tokenizer ops its graph uses; no Keras, no keras-hub), sends the raw texts
evaluation scored (`scores_sample.json`) one at a time and as one batch, and checks that
every task returns one probability row per text, finite, summing to 1, and equal to the
probabilities evaluation computed (max |diff| <= max_abs_diff). Any failure raises and
nothing is published. Same spec fields as `components.ctr.serving_check`, so the shared push
code launches either.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path

from retrain.common import tf_keras_env
from retrain.common.step import main

log = logging.getLogger(__name__)

RESULT_FILE = "serving_check.json"


class ServingCheckFailed(RuntimeError):
    """The text model must not be published: it cannot serve raw strings correctly."""


@dataclasses.dataclass
class TextServingCheckSpec:
    model_dir: str
    eval_dir: str                 # holds scores_sample.json
    out_dir: str | None = None
    max_abs_diff: float = 1e-4


def run(spec: TextServingCheckSpec) -> dict:
    """Load the export in this (fresh) process, send raw strings, compare; raise on failure."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  op registration for the in-graph tokenizer

    from retrain.common.atomic import read_json, write_json
    from components.text.evaluate import SCORES_SAMPLE_FILE

    sample_path = Path(spec.eval_dir) / SCORES_SAMPLE_FILE
    if not sample_path.is_file():
        raise FileNotFoundError(f"no {SCORES_SAMPLE_FILE} in {spec.eval_dir}: run evaluation first")
    sample = read_json(sample_path)
    texts = sample["texts"]
    if not texts:
        raise ValueError(f"{sample_path} holds no texts")
    loaded = tf.saved_model.load(spec.model_dir)
    sig = loaded.signatures["serving_default"]
    failures: list[str] = []
    inputs = list(sig.structured_input_signature[1])
    if inputs != ["text"]:
        failures.append(f"signature inputs are {inputs}, expected ['text'] (raw strings)")
    t0 = time.perf_counter()
    batch = {k: v.numpy() for k, v in sig(text=tf.constant(texts)).items()}
    batch_ms = (time.perf_counter() - t0) * 1000
    singles: dict[str, list] = {}
    t1 = time.perf_counter()
    for t in texts:
        for k, v in sig(text=tf.constant([t])).items():
            singles.setdefault(k, []).append(v.numpy()[0])
    single_ms = (time.perf_counter() - t1) * 1000 / len(texts)
    max_diff = 0.0
    for task, expected in sample["probs"].items():
        if task not in batch:
            failures.append(f"no output {task!r} (outputs: {sorted(batch)})")
            continue
        exp = np.asarray(expected)
        for how, got in (("batch", batch[task]), ("single", np.asarray(singles[task]))):
            if got.shape != exp.shape:
                failures.append(f"{task} ({how}): shape {got.shape}, expected {exp.shape}")
                continue
            if not np.isfinite(got).all():
                failures.append(f"{task} ({how}): non-finite probabilities")
                continue
            if np.abs(got.sum(axis=1) - 1).max() > 1e-3:
                failures.append(f"{task} ({how}): probabilities do not sum to 1")
            diff = float(np.abs(got - exp).max())
            max_diff = max(max_diff, diff)
            if diff > spec.max_abs_diff:
                failures.append(f"{task} ({how}): max |serving - evaluation| = {diff:.2e} "
                                f"> {spec.max_abs_diff:.0e}")
    result = {"passed": not failures, "failures": failures, "texts": len(texts),
              "max_abs_diff": max_diff,
              "latency": {"batch_ms": round(batch_ms, 2), "single_mean_ms": round(single_ms, 2)},
              "model_dir": spec.model_dir}
    if spec.out_dir:
        result["result_uri"] = str(write_json(Path(spec.out_dir) / RESULT_FILE, result))
    if failures:
        raise ServingCheckFailed("; ".join(failures))
    log.info("text serving check passed: %d texts, max diff %.2e", len(texts), max_diff)
    return result


if __name__ == "__main__":
    tf_keras_env.use_keras2()   # plain TensorFlow serves the SavedModel: it skips Keras 3
    sys.exit(main(TextServingCheckSpec, run))
