"""Fine-tune the pretrained encoder + one head per configured task on a preprocessed text
window; export.

Reads the preprocessing job's train/eval TFRecord shards, summary (class counts) and the
config the data was made with (`text_config.json`: tasks, labels, checkpoint, sequence
length, class weighting; a spec field that is set wins),
builds the model from the local checkpoint (or warm-starts from the published model of
the same task when its labels and sequence length match), trains with class-weighted
samples and early stopping on the eval split (best weights restored), fits per-class
decision offsets on a dev slice of the eval split (`components.text.calibrate`), and
exports the raw-string SavedModel with the offsets inside its signature
(`components.text.model.export`).

Writes `<out_dir>/{saved_model.pb, variables/, assets.extra/labels.json, keras/...}` and
`<out_dir>/../train_result.json`, atomically. The loss on the eval split before and after
training is recorded, so "did training learn anything" is a number in the task log.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from retrain.common.step import main

log = logging.getLogger("retrain.text.train")


@dataclasses.dataclass
class FinetuneSpec:
    preprocess_dir: str
    out_dir: str                           # the exported model dir (replaced atomically)
    checkpoint_dir: str | None = None      # default: the config's (else the bundled MiniLM)
    warm_start_model_dir: str | None = None  # the published model of this task, if any
    epochs: int | None = None              # default: the config's (3 unless it says)
    batch_size: int = 16
    max_seq_length: int | None = None      # default: the config's
    learning_rate: float = 1e-4            # peak (measured best with cosine, README)
    lr_schedule: str = "cosine"            # cosine (6% linear warm-up, then to 0) | constant
    padding: str = "bucket"                # bucket | dynamic | fixed
    patience: int = 1                      # early stopping on eval loss
    class_weighting: str | None = None     # balanced | sqrt | none; default: the config's
    max_train_examples: int | None = None  # a slice (tests, quick runs)
    max_eval_examples: int | None = None   # early stopping on the first N eval rows
    # Decision calibration (components.text.calibrate): per-class offsets fitted to
    # maximise macro-F1 on a dev slice of the eval split and applied in the export.
    # Dev slice: eval rows [max_eval_examples, max_eval_examples + calibration_examples)
    # when both are set (disjoint from early stopping); otherwise the early-stopping rows.
    calibrate: bool = True
    calibration_examples: int | None = None
    calibrate_tasks: tuple[str, ...] | None = None   # default: every task
    min_calibration_rows: int = 50         # fewer labelled dev rows: that task keeps 0s
    strategy: str = "default"              # default | mirrored | multi_worker_mirrored
    # Compute dtype of the fine-tune (components.text.model.compute_policy): auto |
    # float32 | mixed_bfloat16. The exported model computes in float32 either way.
    precision: str = "auto"
    seed: int = 7


def run(spec: FinetuneSpec) -> dict:
    """Fine-tune and export; return the model dir, losses and what was warm-started."""
    from retrain.common.atomic import atomic_dir, check_replaceable, read_json, write_json
    from components.text import config as C
    from components.text import task_config as T
    from components.text.formats import EVAL_DIR, SUMMARY_FILE, TRAIN_DIR

    for name, least in (("epochs", 1), ("batch_size", 1), ("patience", 0)):
        value = getattr(spec, name)
        if value is not None and value < least:      # epochs None: the config's
            raise ValueError(f"{name} must be at least {least}, got {value}")
    if not spec.learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {spec.learning_rate}")
    if spec.precision not in C.PRECISIONS:   # before any file is read or TF imported
        raise ValueError(f"precision must be one of {', '.join(C.PRECISIONS)}, "
                         f"got {spec.precision!r}")
    check_replaceable(spec.out_dir)      # before the fine-tune, not at the export
    pre = Path(spec.preprocess_dir)
    summary = read_json(pre / SUMMARY_FILE)
    cfg = T.from_resolved(read_json(pre / T.CONFIG_FILE))
    tasks = cfg.task_labels
    spec = dataclasses.replace(
        spec, checkpoint_dir=spec.checkpoint_dir or cfg.checkpoint,
        epochs=spec.epochs or cfg.epochs, max_seq_length=spec.max_seq_length or cfg.max_seq_length,
        class_weighting=spec.class_weighting or cfg.class_weighting,
        calibrate_tasks=tuple(tasks) if spec.calibrate_tasks is None else spec.calibrate_tasks)
    if summary.get("labels") != tasks:
        raise ValueError(f"{pre}: summary labels {summary.get('labels')} differ from its "
                         f"config's {tasks}")
    if summary["rows_train"] < 1 or summary["rows_eval"] < 1:
        raise ValueError(f"nothing to train on: {summary['rows_train']} train and "
                         f"{summary['rows_eval']} eval rows in {pre}")

    import keras

    from components.text import model as M
    from components.text.config import default_checkpoint_dir

    keras.utils.set_random_seed(spec.seed)
    n_steps = spec.epochs * -(-min(summary["rows_train"], spec.max_train_examples or
                                   summary["rows_train"]) // spec.batch_size)
    lr = _learning_rate(spec, n_steps)
    checkpoint = spec.checkpoint_dir or default_checkpoint_dir()
    t0 = time.perf_counter()
    strategy = M.make_strategy(spec.strategy)
    encoder = M.Encoder(checkpoint, spec.max_seq_length)
    warm = _warm_start_source(spec, tasks)
    policy = M.compute_policy(spec.precision)
    log.info("fine-tuning computes in %s (precision %s)", policy, spec.precision)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        with strategy.scope():
            model = M.build_model(checkpoint, tasks, load_weights=warm is None)
            if warm is not None:
                model.load_weights(str(Path(warm) / M.WEIGHTS_FILE))
                log.info("warm start from the published model %s", warm)
            compile_model(model, tasks, lr)
    finally:
        keras.config.set_dtype_policy(previous_policy)   # the process's other models
    t_build = time.perf_counter()

    weights = C.class_weights_for(summary["class_counts"][TRAIN_DIR], spec.class_weighting)
    train_rec = M.read_records(str(pre / TRAIN_DIR / "*.tfrecord.gz"), tasks)
    eval_rec = M.read_records(str(pre / EVAL_DIR / "*.tfrecord.gz"), tasks)
    n_train = summary["rows_train"]
    if spec.max_train_examples:
        train_rec = train_rec.take(spec.max_train_examples)
        n_train = min(n_train, spec.max_train_examples)
    if spec.max_eval_examples:
        eval_rec = eval_rec.take(spec.max_eval_examples)
    train_rec = train_rec.cache()
    eval_rec = eval_rec.cache()
    batching = {"tasks": tuple(tasks), "boundaries": cfg.bucket_boundaries}
    train_ds = M.make_dataset(train_rec, encoder, spec.batch_size, spec.padding, weights,
                              shuffle_buffer=min(n_train, 10_000), seed=spec.seed, **batching)
    # Eval is weighted like training, so the early-stopping loss is the same objective.
    eval_ds = M.make_dataset(eval_rec, encoder, spec.batch_size * 2, spec.padding, weights,
                             **batching)

    before = model.evaluate(eval_ds, verbose=0, return_dict=True)
    log.info("eval loss before fine-tuning: %.4f", before["loss"])
    t_fit = time.perf_counter()
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=spec.patience,
                                         restore_best_weights=True, verbose=1)
    first_step = []   # when the first training step finished (start-up = tracing the step)
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: first_step or first_step.append(
            time.perf_counter()))
    history = model.fit(train_ds, validation_data=eval_ds, epochs=spec.epochs,
                        callbacks=[stop, clock], verbose=2)
    log.info("first training step finished %.1f s after the model was ready (%.1f s in fit)",
             first_step[0] - t_build, first_step[0] - t_fit)
    fit_seconds = time.perf_counter() - t_fit
    val_losses = history.history["val_loss"]
    best_epoch = int(min(range(len(val_losses)), key=val_losses.__getitem__))
    after_loss = float(val_losses[best_epoch])
    epochs_run = len(val_losses)
    model = M.as_float32(model, checkpoint, tasks)   # calibrated, exported, evaluated
    calibration = _calibrate(spec, model, encoder, tasks) if spec.calibrate else None
    offsets = {t: c["offsets"] for t, c in (calibration or {}).get("tasks", {}).items()}

    meta = {"tasks": tasks, "text_config": T.resolved(cfg),
            "max_seq_length": spec.max_seq_length, "checkpoint": _checkpoint_id(checkpoint),
            "input": M.INPUT_KEY, "signature": M.SIGNATURE,
            "outputs": {t: f"probabilities over tasks.{t}" for t in tasks},
            "class_weighting": spec.class_weighting, "calibration": calibration}
    out = Path(spec.out_dir)
    with atomic_dir(out) as tmp:
        M.export(model, encoder, tmp, meta, offsets)
    if not (out / "saved_model.pb").is_file():
        raise RuntimeError(f"export did not write {out / 'saved_model.pb'}")
    examples_seen = n_train * epochs_run
    result = {
        "model_dir": str(out), "labels": meta["tasks"],
        "eval_loss_before": round(float(before["loss"]), 5),
        "eval_loss_after": round(after_loss, 5),
        "history": {k: [round(float(x), 5) for x in v] for k, v in history.history.items()},
        "epochs": spec.epochs, "epochs_run": epochs_run, "best_epoch": best_epoch + 1,
        "train_examples": n_train, "class_weighting": spec.class_weighting,
        "class_weights": weights, "calibration": calibration,
        "warm_start_from": str(warm) if warm else None,
        "checkpoint": meta["checkpoint"], "strategy": spec.strategy,
        "padding": spec.padding, "max_seq_length": spec.max_seq_length,
        "precision": spec.precision, "compute_dtype_policy": policy,
        "lr_schedule": spec.lr_schedule, "learning_rate": spec.learning_rate,
        "examples_per_second": round(examples_seen / max(fit_seconds, 1e-9), 2),
        "seconds": {"build": round(t_build - t0, 1), "fit": round(fit_seconds, 1),
                    "first_step": round(first_step[0] - t_build, 1),
                    "total": round(time.perf_counter() - t0, 1)},
    }
    write_json(out.parent / "train_result.json", result)
    log.info("fine-tuned: eval loss %.4f -> %.4f in %d epoch(s), %.1f examples/s; %s",
             before["loss"], after_loss, epochs_run, result["examples_per_second"], out)
    return result


def compile_model(model, tasks: dict[str, list[str]], learning_rate) -> None:
    """Compile for fine-tuning: AdamW (weight decay 0.01, each gradient clipped to norm 1),
    cross-entropy per task, weighted accuracy. The AdamW is `components.text.adamw`'s
    (Keras's arithmetic in a ~40% smaller train-step graph, so the first step starts sooner)."""
    import keras

    from components.text.adamw import AdamW

    model.compile(
        optimizer=AdamW(learning_rate, weight_decay=0.01, clipnorm=1.0),
        loss={t: keras.losses.SparseCategoricalCrossentropy() for t in tasks},
        weighted_metrics={t: [keras.metrics.SparseCategoricalAccuracy(name="acc")]
                          for t in tasks})
    # Without a distribution strategy Keras builds the optimizer, the compiled losses (a
    # Mean tracker per task) and the metrics inside the first trace of the train (or test)
    # step; creating variables there makes tf.function trace the step twice (~2 s of the
    # first step on 2 cores). Build them all now from symbolic inputs, as Keras does
    # itself under a strategy (`_symbolic_build`; a no-op for what is already built).
    model._symbolic_build(data_batch=(
        model.input, {t: keras.KerasTensor((None,), "int32") for t in tasks},
        {t: keras.KerasTensor((None,), "float32") for t in tasks}))


def _learning_rate(spec: FinetuneSpec, n_steps: int):
    """The optimizer's learning rate: constant, or cosine decay to 0 over all the steps
    after a linear warm-up over the first 6% (the usual BERT fine-tuning schedule)."""
    import keras

    if spec.lr_schedule == "constant":
        return spec.learning_rate
    if spec.lr_schedule != "cosine":
        raise ValueError(f"lr_schedule must be cosine or constant, got {spec.lr_schedule!r}")
    warmup = max(1, int(0.06 * n_steps))
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(1, n_steps - warmup), warmup_target=spec.learning_rate,
        warmup_steps=warmup)


def _calibrate(spec: FinetuneSpec, model, encoder, tasks: dict[str, list[str]]) -> dict:
    """Fit per-class decision offsets on the dev slice of the eval split (see the spec)."""
    import numpy as np

    from components.text import model as M
    from components.text.calibrate import fit_offsets
    from components.text.evaluate import read_eval_rows

    disjoint = bool(spec.max_eval_examples and spec.calibration_examples)
    if disjoint:
        offset, limit = spec.max_eval_examples, spec.calibration_examples
    else:
        offset, limit = 0, spec.max_eval_examples
    rows = read_eval_rows(spec.preprocess_dir, tasks, limit, offset)
    out = {"dev_offset": offset, "dev_rows": len(rows["text"]),
           "disjoint_from_early_stopping": disjoint, "tasks": {}}
    if not rows["text"]:
        log.warning("calibration: no dev rows at offset %d of the eval split", offset)
        return out
    probs = M.predict_proba(model, encoder, rows["text"])
    for task in spec.calibrate_tasks:
        if task not in tasks:
            raise ValueError(f"calibrate_tasks: unknown task {task!r} (tasks: {list(tasks)})")
        y = np.asarray(rows[task], dtype=np.int64)
        labelled = int((y >= 0).sum())
        if labelled < spec.min_calibration_rows or len(set(y[y >= 0].tolist())) < 2:
            log.info("calibration of %s skipped: %d labelled dev rows", task, labelled)
            continue
        fit = fit_offsets(probs[task], y)
        out["tasks"][task] = fit
        log.info("calibration of %s on %d dev rows: offsets %s, dev macro-F1 %.4f -> %.4f",
                 task, fit["n"], fit["offsets"], fit["macro_f1_before"], fit["macro_f1_after"])
    return out


def _checkpoint_id(checkpoint: str) -> dict:
    from components.text.checkpoint import read_config
    cfg = read_config(checkpoint)
    return {"dir": checkpoint, "name_or_path": cfg.get("_name_or_path"),
            "layers": cfg["num_hidden_layers"], "hidden": cfg["hidden_size"]}


def _warm_start_source(spec: FinetuneSpec, tasks: dict[str, list[str]]) -> str | None:
    """The published model's dir if it can seed this run (same labels and checkpoint)."""
    from components.text import model as M
    from components.text.config import default_checkpoint_dir

    from retrain.common.registry import verify_model_dir

    if not spec.warm_start_model_dir:
        return None
    src = Path(spec.warm_start_model_dir)
    verify_model_dir(src)   # the published model: its files as published, or refused
    try:
        labels = M.read_labels(src)
    except (FileNotFoundError, json.JSONDecodeError) as e:
        log.warning("no warm start from %s: %s", src, e)
        return None
    if labels.get("tasks") != tasks:
        log.warning("no warm start from %s: its labels %s differ from %s", src,
                    labels.get("tasks"), tasks)
        return None
    ours = str(Path(spec.checkpoint_dir or default_checkpoint_dir()).resolve())
    theirs = (labels.get("checkpoint") or {}).get("dir")
    if theirs and str(Path(theirs).resolve()) != ours:
        log.warning("no warm start from %s: it was fine-tuned from %s, this run uses %s",
                    src, theirs, ours)
        return None
    if not (src / M.WEIGHTS_FILE).is_file():
        log.warning("no warm start from %s: no %s", src, M.WEIGHTS_FILE)
        return None
    return str(src)


if __name__ == "__main__":
    sys.exit(main(FinetuneSpec, run))
