"""Hand-built SavedModels for evaluation and scoring tests: a `tf.Module` whose serving
signature maps raw feature columns to {"p_click": ...} (CTR), or raw strings to per-task
probabilities (text). They stand in for trained candidates with a known behaviour and
depend on nothing the trainer does."""
from __future__ import annotations

from components.ctr import feature_config


def raw_dtypes(cfg) -> dict:
    """The serving signature's inputs for a feature config: every raw column but the id
    and the label, typed as `components.ctr.rawdata.to_raw_features` feeds them."""
    import tensorflow as tf
    kinds = {"str": ([None], tf.string), "int": ([None], tf.int64),
             "float": ([None], tf.float32), "str_list": ([None, None], tf.string)}
    return {k: kinds[kind] for k, kind in cfg.raw_columns().items()
            if k not in (cfg.example_id, cfg.label)}


def save_model(path, score_fn, inputs: dict, signature: str = "serving_default",
               config=None) -> str:
    """A SavedModel at `path` scoring `score_fn(features)`; `inputs` maps each input to a
    dtype or (shape, dtype); `config` (a FeatureConfig) is stored as the model's own."""
    import tensorflow as tf

    specs = {k: tf.TensorSpec(*(v if isinstance(v, tuple) else ([None], v)), name=k)
             for k, v in inputs.items()}

    class Model(tf.Module):
        @tf.function(input_signature=[specs])
        def serve(self, features):
            return {"p_click": score_fn(features)}

    model = Model()
    tf.saved_model.save(model, str(path),
                        signatures={signature: model.serve.get_concrete_function()})
    if config is not None:
        feature_config.write_model_config(path, config)
    return str(path)


def save_text_model(path, tasks: dict[str, list[str]], text_config: dict | None = None) -> str:
    """A text-model export as `components.text.model.export` lays it out, without BERT: its
    `serving_default` maps a batch of raw strings (`text`) to per-task probabilities, a
    fixed function of each string alone (its length and a hash of it), so a row's scores
    do not depend on the batch it came in; `assets.extra/labels.json` names the labels."""
    import json
    from pathlib import Path

    import tensorflow as tf
    from components.text import model as M

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=M.INPUT_KEY)])
        def serve(self, text):
            length = tf.cast(tf.strings.length(text, unit="UTF8_CHAR"), tf.float32)
            bucket = tf.cast(tf.strings.to_hash_bucket_fast(text, 101), tf.float32)
            return {task: tf.nn.softmax(tf.stack(
                        [tf.sin(length / (7.0 + i) + bucket * (i + 1))
                         for i in range(len(labels))], axis=1))
                    for task, labels in tasks.items()}

    model = Model()
    tf.saved_model.save(model, str(path),
                        signatures={M.SIGNATURE: model.serve.get_concrete_function()})
    labels = Path(path) / M.LABELS_FILE
    labels.parent.mkdir(parents=True, exist_ok=True)
    meta = {"tasks": tasks, **({"text_config": text_config} if text_config else {})}
    labels.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return str(path)
