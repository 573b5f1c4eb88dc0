"""Hand-built CTR SavedModels for evaluation tests: a `tf.Module` whose serving signature
maps raw feature columns to {"p_click": ...}. They stand in for trained candidates with a
known behaviour and depend on nothing the trainer does."""
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
