"""Train the CTR model on the transformed shards and export a serving SavedModel.

Reads `train/*.tfrecord.gz`, the tf.Transform output and the feature config
(`feature_config.json`; the generated logs' default when absent) written by the preprocess job;
writes `<out_dir>/serving_model` (SavedModel whose `serving_default` takes *raw*
features and applies the transform graph itself, so clients never re-implement
preprocessing) and `<out_dir>/train_summary.json`. The write is atomic.

Single process for now; the parameter-server trainer replaces it.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path

from components.common.step import main

log = logging.getLogger(__name__)

SERVING_DIR = "serving_model"
SUMMARY_FILE = "train_summary.json"


@dataclasses.dataclass
class TrainSpec:
    """Defaults tuned on the synthetic demo logs (3-day windows of ~140k rows): eval AUC
    0.020-0.028 below Bayes-optimal over five windows and two seeds; see model.py."""
    preprocess_dir: str          # output of beam_jobs.preprocess_ctr
    out_dir: str                 # model artifact directory (created atomically)
    epochs: int = 3
    batch_size: int = 1024
    learning_rate: float = 0.01  # Adam; cosine-decayed to 10% over the run (lr_decay)
    l2: float = 2.0              # prior strength of first-order terms (summed-loss units)
    hidden_units: tuple[int, ...] | list[int] = (32, 16)
    seed: int = 1
    # Per-field options; None: the feature config's `model:` section (for the generated
    # logs: id_l2 {user_id: 10, item_id: 5}, deep_fields [category_id, device, hour,
    # position], count_features [item_id]). Names must be categorical fields of the config.
    id_l2: dict[str, float] | None = None  # per-field override of l2
    embedding_dim: int = 4       # embeddings of the deep (and FM) fields
    embedding_l2: float = 10.0
    dropout: float = 0.2
    deep_fields: list[str] | None = None
    fm_fields: list[str] | None = None  # None: the config's model.fm_fields, as in ps_train
    count_features: list[str] | None = None
    lr_decay: str = "cosine"     # "cosine" or "none"


def _dataset(pattern: str, feature_spec: dict, batch_size: int, shuffle: bool, seed: int,
             label: str):
    import tensorflow as tf
    files = tf.io.gfile.glob(pattern)
    if not files:
        raise FileNotFoundError(f"no transformed shards match {pattern}")
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE)
    if shuffle:
        ds = ds.shuffle(100_000, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size).map(lambda x: tf.io.parse_example(x, feature_spec),
                                  num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(lambda f: (f, f.pop(label)))
    return ds.prefetch(tf.data.AUTOTUNE)


def run(spec: TrainSpec) -> dict:
    """Train, export the serving model with its transform graph, check the export."""
    import tensorflow as tf
    import tensorflow_transform as tft
    from tensorflow_transform.keras_lib import tf_keras

    from components.common.atomic import atomic_dir, write_json
    from components.ctr import feature_config as fc
    from components.ctr.model import build_model, set_id_counts
    from components.ctr.transform import serving_signature, serving_to_transform_inputs
    from components.ctr.preprocess import EVAL_DIR, TRAIN_DIR, TRANSFORM_DIR
    from components.ctr.window_stats import window_stats

    tf_keras.utils.set_random_seed(spec.seed)  # python, numpy and TensorFlow seeds
    pre = Path(spec.preprocess_dir)
    cfg = fc.for_preprocess_dir(pre)
    id_l2 = cfg.model.id_l2_dict() if spec.id_l2 is None else dict(spec.id_l2)
    deep_fields = list(cfg.model.deep_fields if spec.deep_fields is None else spec.deep_fields)
    count_features = list(cfg.model.count_features if spec.count_features is None
                          else spec.count_features)
    cfg.check_fields("TrainSpec.count_features", count_features, single_valued=True)
    tft_output = tft.TFTransformOutput(str(pre / TRANSFORM_DIR))
    feature_spec = tft_output.transformed_feature_spec()
    train_ds = _dataset(str(pre / TRAIN_DIR / "*.tfrecord.gz"), dict(feature_spec),
                        spec.batch_size, shuffle=True, seed=spec.seed, label=cfg.label)
    eval_ds = _dataset(str(pre / EVAL_DIR / "*.tfrecord.gz"), dict(feature_spec),
                       4 * spec.batch_size, shuffle=False, seed=spec.seed, label=cfg.label)

    started = time.time()  # the statistics pass counts as training time
    rows, click_rate, counts, _ = window_stats(str(pre / TRAIN_DIR / "*.tfrecord.gz"),
                                               dict(feature_spec), cfg, fields=count_features)
    model = build_model(tuple(spec.hidden_units), spec.l2, spec.embedding_dim,
                        num_examples=rows, id_l2=id_l2, embedding_l2=spec.embedding_l2,
                        dropout=spec.dropout, deep_fields=deep_fields,
                        fm_fields=list(cfg.model.fm_fields if spec.fm_fields is None
                                       else spec.fm_fields),
                        count_features=count_features,
                        base_rate=min(max(click_rate, 1e-4), 1 - 1e-4), config=cfg)
    set_id_counts(model, counts)
    learning_rate = spec.learning_rate
    if spec.lr_decay == "cosine":
        steps = spec.epochs * -(-rows // spec.batch_size)
        learning_rate = tf_keras.optimizers.schedules.CosineDecay(spec.learning_rate, steps,
                                                                  alpha=0.1)
    elif spec.lr_decay != "none":
        raise ValueError(f"lr_decay must be 'cosine' or 'none', got {spec.lr_decay!r}")
    model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate),
                  loss=tf_keras.losses.BinaryCrossentropy(),
                  metrics=[tf_keras.metrics.AUC(name="auc", num_thresholds=2000),
                           tf_keras.metrics.BinaryCrossentropy(name="log_loss")])
    history = model.fit(train_ds, epochs=spec.epochs, validation_data=eval_ds, verbose=2)
    train_seconds = time.time() - started

    raw_spec = serving_signature(cfg)
    model.tft_layer = tft_output.transform_features_layer()

    @tf.function(input_signature=[raw_spec])
    def serve(raw_features):
        transformed = model.tft_layer(serving_to_transform_inputs(cfg, raw_features))
        transformed.pop(cfg.label, None)
        return {"p_click": model(transformed, training=False)}

    out = Path(spec.out_dir)
    with atomic_dir(out) as tmp:
        tf.saved_model.save(model, str(tmp / SERVING_DIR),
                            signatures={"serving_default": serve.get_concrete_function()})
        if not (tmp / SERVING_DIR / "saved_model.pb").exists():
            raise RuntimeError("export wrote no saved_model.pb")
        fc.write_model_config(tmp / SERVING_DIR, cfg)
        summary = {
            "epochs": spec.epochs,
            "train_rows": rows,
            "train_click_rate": round(click_rate, 6),
            "spec": dataclasses.asdict(spec),
            "train_seconds": round(train_seconds, 1),
            "history": {k: [round(float(x), 5) for x in v] for k, v in history.history.items()},
            "params": int(model.count_params()),
            "serving_inputs": sorted(raw_spec),
            "feature_config": {"name": cfg.name, "fingerprint": cfg.fingerprint()},
            "fields": {"deep_fields": deep_fields, "count_features": count_features,
                       "id_l2": id_l2},
        }
        write_json(tmp / SUMMARY_FILE, summary)
    log.info("trained in %.1fs; exported %s", train_seconds, out / SERVING_DIR)
    return {"model_dir": str(out / SERVING_DIR), "artifact_dir": str(out),
            "val_auc": summary["history"].get("val_auc", [None])[-1],
            "val_log_loss": summary["history"].get("val_log_loss", [None])[-1],
            "train_seconds": summary["train_seconds"]}


if __name__ == "__main__":
    sys.exit(main(TrainSpec, run))
