"""The trainer's export: the serving model, written only by the chief.

Why apart from the loop: it must not gather. The serving model is saved from the
trained network itself: TensorFlow saves each shard of a ShardedVariable as a slice of
one full-shape variable, written by the parameter server that holds it, and traces the
serving function against that full-shape variable; so no process copies a whole table
and a model whose tables exceed any one machine still exports. (The model that serving
loads is whole; serving a table larger than a machine is a serving-side concern.) The
figures shown in the training summary come from a bounded sample of eval rows
(`sample_metrics`, lookups on the parameter servers); the evaluation step scores every
held-out row.

Writes `<out_dir>/serving_model` (whose `serving_default` takes RAW features and applies
the transform graph) and `<out_dir>/train_summary.json`, atomically.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("retrain.ps_train")

SERVING_DIR = "serving_model"
SUMMARY_FILE = "train_summary.json"
CHECK_FILE = "in_training_predictions.json"
# At most this many eval rows are scored for the training summary's figures.
EXPORT_SAMPLE_ROWS = 65_536
EXPORT_SAMPLE_BATCH = 8192


def parameter_count(net) -> int:
    import numpy as np

    from components.ctr.model import named_variables
    return int(sum(np.prod(v.shape) for _, v in named_variables(net)))


def sample_metrics(net, eval_pattern: str, feature_spec: dict, label: str,
                   base_rate: float) -> dict:
    """AUC and log loss of `net` on at most EXPORT_SAMPLE_ROWS eval rows, labelled as a
    sample; {} when the eval split is empty, AUC None when the sample has one class."""
    import numpy as np

    from components import metrics
    from components.ctr.train_input import make_dataset_fn
    eval_ds = make_dataset_fn(eval_pattern, feature_spec, EXPORT_SAMPLE_BATCH, {}, None,
                              repeat=False, label=label)()
    labels_all, probs_all = [], []
    for feats, labels in eval_ds.take(-(-EXPORT_SAMPLE_ROWS // EXPORT_SAMPLE_BATCH)):
        probs_all.append(net(feats).numpy())
        labels_all.append(labels.numpy())
    val = {}
    if labels_all:
        y, p = np.concatenate(labels_all), np.concatenate(probs_all)
        # Every learned term starts at zero, so the untrained model predicts the base rate.
        # A quiet span's sample may hold one class only: AUC is undefined there (None),
        # which must not fail a training that the evaluation step judges on every row.
        one_class = len(np.unique(y)) < 2
        val = {"val_auc": None if one_class else round(metrics.auc(y, p), 5),
               "val_log_loss": round(metrics.log_loss(y, p), 5),
               "initial_val_log_loss": round(metrics.log_loss(y, np.full(len(y), base_rate)), 5),
               "eval_rows": int(len(y)),
               "eval_rows_are": f"a bounded sample: the first {len(y)} rows of the eval "
                                f"split's shards, at most {EXPORT_SAMPLE_ROWS} (the "
                                "evaluation step scores all)"}
    log.info("eval: %s", val)
    return val


def write_serving_model(out: Path, net, tft_output, fcfg, summary: dict,
                        check: dict | None = None) -> str:
    """The serving SavedModel, its feature config and the summary, into `out` at once."""
    import tensorflow as tf

    from components.ctr import feature_config as fc
    from components.ctr.transform import serving_signature, serving_to_transform_inputs
    from retrain.common.atomic import atomic_dir, write_json

    root = tf.Module()
    root.model = net
    root.tft_layer = tft_output.transform_features_layer()

    @tf.function(input_signature=[serving_signature(fcfg)])
    def serve_fn(raw_features):
        transformed = root.tft_layer(serving_to_transform_inputs(fcfg, raw_features))
        transformed.pop(fcfg.label, None)
        return {"p_click": root.model(transformed)}

    with atomic_dir(out) as tmp:
        # The signature is traced inside the save, where a ShardedVariable stands for one
        # full-shape variable (traced before it, it would capture the shards' devices).
        tf.saved_model.save(root, str(tmp / SERVING_DIR),
                            signatures={"serving_default": serve_fn})
        if not (tmp / SERVING_DIR / "saved_model.pb").exists():
            raise RuntimeError("export wrote no saved_model.pb")
        fc.write_model_config(tmp / SERVING_DIR, fcfg)
        write_json(tmp / SUMMARY_FILE, summary)
        if check is not None:
            write_json(tmp / CHECK_FILE, check)
    log.info("exported %s", out / SERVING_DIR)
    return str(out / SERVING_DIR)
