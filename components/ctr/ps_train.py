"""Train the CTR model with TensorFlow's parameter-server strategy (or in one process).

Why: the per-ID tables are what outgrow one machine, so they live on parameter servers,
split by a variable partitioner into shards (`ShardedVariable`); workers pull only the
rows a batch looks up and push sparse (IndexedSlices) gradients for them. The
coordinator (the chief) runs a custom training loop - Keras 3 `fit` does not support
this strategy - and schedules `steps_per_execution` steps per remote function call to
amortise the RPCs. Every process runs this same module; its role comes from `TF_CONFIG`:

- `ps` / `worker`: start a `tf.distribute.Server` and serve until killed;
- `chief`: coordinate, checkpoint, evaluate and (only the chief) export;
- no `TF_CONFIG`: the same model and loop in one process, without a strategy.

Reads the transformed `train/` and `eval/` shards, the tf.Transform graph and the feature
config (`feature_config.json`, components/ctr/feature_config.py; the generated logs' default
when absent) written by `beam_jobs.preprocess_ctr`: the fields, table sizes and serving
inputs all come from that config. Writes `<out_dir>/serving_model`
(a SavedModel whose `serving_default` takes RAW features and applies the transform graph)
and `<out_dir>/train_summary.json`, atomically; checkpoints go to `checkpoint_dir`
(default: `<out_dir>_checkpoints` beside it, so a retried task resumes from them).

The parts a reader holds apart: the network (`components.ctr.model`: per-ID biases with
a count-weighted prior, item popularity, numerics, a small MLP, optional factorization-
machine crosses), the input (`components.ctr.train_input`: shards, the preprocessing
job's counts, per-worker shares), the loop (`components.ctr.train_loop`: chunks of steps,
checkpoints, validation, early stopping), where a run starts from
(`components.ctr.train_checkpoint`: resume, warm start), the export
(`components.ctr.train_export`) and the roles (`components.ctr.train_roles`: TF_CONFIG, the
servers, what must precede TensorFlow's first op); this module keeps the spec and the
phases of a run in order. It is the platform's one CTR trainer: the tests
train with it in one process, production on a cluster.

How long it trains is a budget in examples (`train_examples`; default max(3 passes,
300,000)), so a 5k-row window gets ~300 steps instead of 15, and early stopping on a
validation slice of the window (chosen by a stable hash of the example id in the
preprocessing job, which writes it to shards of its own, so no row both trains and
validates) ends it when the validation log loss stops improving; the export holds the
best validated parameters. Rows, click rate and per-id counts come from the same job
(`components.ctr.split_stats`): the trainer makes no pass over the window before its
first step.

    python -m components.ctr.ps_train --spec '{"preprocess_dir": "...", "out_dir": "..."}'
    TF_CONFIG='{"cluster": ..., "task": {"type": "ps", "index": 0}}' python -m components.ctr.ps_train --serve
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from components.ctr import train_checkpoint, train_export
from components.ctr.model import build_net, leaves, shard_layout
from components.ctr.train_checkpoint import drop_partial_checkpoints
from components.ctr.train_input import (MAX_VALIDATION_ROWS, VALIDATION_BATCH, make_dataset_fn,
                                        preprocessed_validation_percent, prior_weights,
                                        window_rows)
from components.ctr.train_loop import (LoopPlan, LoopResult, Placement, Trainable, TrainLoop,
                                       validate_every)
from components.ctr.train_roles import SERVER_ROLES, serve, set_remote_call_deadline, task_role
from retrain.common import tf_keras_env
from retrain.common.step import main

log = logging.getLogger("retrain.ps_train")

PROGRESS_FILE = "progress.json"
DEFAULT_PASSES = 3
MIN_TRAIN_EXAMPLES = 300_000


@dataclasses.dataclass
class PsTrainSpec:
    """Model defaults tuned on the demo logs (3-day windows of ~140k rows)."""
    preprocess_dir: str          # output of beam_jobs.preprocess_ctr
    out_dir: str                 # model artifact directory (created atomically)
    # Budget in examples, not epochs: a pass over a 5k-row window is 5 steps, over a
    # 1M-row window 1,000. None: max(DEFAULT_PASSES passes, MIN_TRAIN_EXAMPLES); early
    # stopping on the validation slice ends training sooner when it stops helping.
    train_examples: int | None = None
    epochs: int | None = None    # budget in passes over the window instead (train_examples wins)
    # >0: early stopping on the preprocessing job's validation slice (its size was set
    # there, --validation-percent); 0: no early stopping, the slice trains too.
    validation_percent: int = 10
    early_stopping_patience: int = 5  # validations without improvement; 0: never stop early
    validate_every_steps: int = 0     # 0: VALIDATIONS_PER_BUDGET validations over the budget
    batch_size: int = 1024
    learning_rate: float = 0.01  # Adam; cosine-decayed to 10% over the run (lr_decay)
    l2: float = 2.0              # prior strength of per-ID biases (summed-loss units)
    # Per-field options name categorical fields (features or crosses) of the feature
    # config; None: the config's `model:` section (generated logs: id_l2 {user_id: 10,
    # item_id: 5}, deep_fields [category_id, device, hour, position], count_features [item_id]).
    id_l2: dict[str, float] | None = None
    hidden_units: tuple[int, ...] | list[int] = (32, 16)
    embedding_dim: int = 4       # embeddings of the deep fields
    embedding_dims: dict[str, int] = dataclasses.field(default_factory=dict)  # per-field override
    embedding_l2: float = 10.0
    embedding_init: str = "normal"  # "normal" (stddev 0.05) or "zeros" (cheapest for huge tables)
    dropout: float = 0.2
    deep_fields: list[str] | None = None
    count_features: list[str] | None = None
    # Factorization machine: pairwise dot products of per-id factor vectors of these
    # fields (None: the config's model.fm_fields; generated logs: user x item, user x
    # category), sharded like every table, with the same count-weighted prior.
    fm_fields: list[str] | None = None
    fm_dim: int = 8
    fm_l2: float = 10.0
    lr_decay: str = "cosine"     # "cosine" or "none"
    # "lazy_adam": sparse table updates touch only the looked-up rows (components.ctr.
    # optimizers); "adam" (dense slot updates), "adagrad" (one slot) or "sgd" (none).
    optimizer: str = "lazy_adam"
    seed: int = 1
    # Distribution
    steps_per_execution: int = 20          # training steps per scheduled remote call
    min_shard_bytes: int = 256 << 10       # MinSizePartitioner: tables below stay whole
    max_shards: int = 0                    # 0: one shard per parameter server at most
    # Deadline of every remote call from the chief. A call whose reply a network cut lost
    # would otherwise wait forever; past it the coordinator runs the chunk again (at most
    # train_roles.REMOTE_TIMEOUT_RETRIES times a run, then the run fails typed). 0: none.
    remote_call_timeout_s: float = 300.0
    table_rows: dict[str, int] = dataclasses.field(default_factory=dict)  # bigger tables
    # Checkpoints, warm start, limits
    checkpoint_dir: str | None = None      # default <out_dir>_checkpoints
    checkpoint_every_steps: int = 100     # 0: no checkpoints (and no resume)
    warm_start_from: str | None = None     # a previous serving_model dir (or its artifact dir)
    max_steps: int | None = None           # cap on the total steps (tests, benchmarks)
    export: bool = True
    check_raw_rows: str | None = None      # JSON {feature: [values]} scored in-cluster too


# ----------------------------------------------------------------------------- model

def _fields(spec: PsTrainSpec, fcfg) -> tuple[list[str], list[str], dict[str, float], list[str]]:
    """deep_fields, count_features, id_l2, fm_fields: the spec's, else the feature
    config's defaults."""
    deep = list(fcfg.model.deep_fields if spec.deep_fields is None else spec.deep_fields)
    if spec.deep_fields is None:    # the config's per-field embeddings join its deep fields
        deep += [k for k in fcfg.model.embedding_dict() if k not in deep]
    counts = list(fcfg.model.count_features if spec.count_features is None
                  else spec.count_features)
    id_l2 = fcfg.model.id_l2_dict() if spec.id_l2 is None else dict(spec.id_l2)
    fm = list(fcfg.model.fm_fields if spec.fm_fields is None else spec.fm_fields)
    return deep, counts, id_l2, fm


def train_budget(spec: PsTrainSpec, rows: int) -> tuple[int, int]:
    """(examples, steps) of the training budget for a window of `rows` training rows."""
    if spec.train_examples:
        examples = int(spec.train_examples)
    elif spec.epochs:
        examples = int(spec.epochs) * rows
    else:
        examples = max(DEFAULT_PASSES * rows, MIN_TRAIN_EXAMPLES)
    steps = max(-(-examples // spec.batch_size), 1)
    if spec.max_steps:
        steps = min(steps, int(spec.max_steps))
    return examples, steps


def _config(spec: PsTrainSpec, fcfg=None) -> dict:
    """Static shape of the network (table rows and widths per field) for a FeatureConfig
    (default: the generated logs'); spec options naming unknown fields fail clearly."""
    from components.ctr import feature_config as fc
    fcfg = fc.default() if fcfg is None else fcfg
    deep_fields, count_features, id_l2, fm_fields = _fields(spec, fcfg)
    fcfg.check_fields("PsTrainSpec.deep_fields", deep_fields)
    fcfg.check_fields("PsTrainSpec.fm_fields", fm_fields)
    if len(fm_fields) == 1 or (fm_fields and spec.fm_dim < 1):
        raise ValueError(f"fm_fields crosses pairs: name two or more fields and set fm_dim "
                         f">= 1 (got {fm_fields}, fm_dim={spec.fm_dim})")
    fcfg.check_fields("PsTrainSpec.count_features", count_features, single_valued=True)
    fcfg.check_fields("PsTrainSpec.id_l2", list(id_l2))
    fcfg.check_fields("PsTrainSpec.table_rows", list(spec.table_rows))
    fcfg.check_fields("PsTrainSpec.embedding_dims", list(spec.embedding_dims))
    for key, rows in spec.table_rows.items():
        if rows < fcfg.categorical_size(key):
            raise ValueError(f"table_rows[{key!r}]={rows} is below the feature's "
                             f"{fcfg.categorical_size(key)} values")
    if spec.embedding_init not in ("normal", "zeros"):
        raise ValueError(f"embedding_init must be 'normal' or 'zeros', got {spec.embedding_init!r}")
    if spec.lr_decay not in ("cosine", "none"):
        raise ValueError(f"lr_decay must be 'cosine' or 'none', got {spec.lr_decay!r}")
    from components.ctr import optimizers
    if spec.optimizer not in optimizers.NAMES:
        raise ValueError(f"optimizer must be one of {optimizers.NAMES}, got {spec.optimizer!r}")
    if spec.steps_per_execution < 1 or spec.batch_size < 1:
        raise ValueError("steps_per_execution and batch_size must be >= 1")
    for name in ("epochs", "train_examples"):
        if getattr(spec, name) is not None and getattr(spec, name) < 1:
            raise ValueError(f"{name} must be >= 1 (or null for the default budget)")
    if not 0 <= spec.validation_percent < 50:
        raise ValueError(f"validation_percent must be in [0, 50), got {spec.validation_percent}")
    fields = fcfg.categorical_fields()
    rows = {k: int(spec.table_rows.get(k, fcfg.categorical_size(k))) for k in fields}
    # Per field: the spec's override, else the feature config's `model.embeddings`, else
    # the spec's defaults (embedding_dim, embedding_init, embedding_l2).
    emb = {k: fcfg.model.embedding_dict().get(k) or {} for k in deep_fields}
    dims = {k: int(spec.embedding_dims.get(k, emb[k].get("dim") or spec.embedding_dim))
            for k in deep_fields}
    return {"rows": rows, "dims": {k: d for k, d in dims.items() if d > 0},
            "hidden": [int(u) for u in spec.hidden_units], "dropout": float(spec.dropout),
            "count_features": count_features, "id_l2": id_l2, "seed": int(spec.seed),
            "fm": fm_fields, "fm_dim": int(spec.fm_dim),
            "embedding_init": spec.embedding_init,
            "embedding_inits": {k: emb[k].get("init") or spec.embedding_init for k in deep_fields},
            "embedding_l2": {k: spec.embedding_l2 if emb[k].get("l2") is None else emb[k]["l2"]
                             for k in deep_fields},
            "multi": {k: fcfg.max_values(k) for k in fields if fcfg.max_values(k)},
            "dense": fcfg.dense_features(), "label": fcfg.label}


# ----------------------------------------------------------------------------- train

def checkpoint_dir(spec: PsTrainSpec) -> Path:
    """The spec's checkpoint dir, else `<out_dir>_checkpoints` beside the artifact, so a
    retried task finds what the killed one saved."""
    if spec.checkpoint_dir:
        return Path(spec.checkpoint_dir)
    out = Path(spec.out_dir)
    return out.with_name(out.name + "_checkpoints")


def run(spec: PsTrainSpec) -> dict:
    """Train (cluster role from TF_CONFIG, else one process); the chief exports."""
    role, _ = task_role()
    if role in SERVER_ROLES:
        # A pod/process started with the trainer's command but a server role serves.
        serve()
        return {}
    if role not in (None, "chief"):
        raise ValueError(f"unsupported TF_CONFIG task type {role!r}: expected chief, ps or worker")
    if role == "chief":
        set_remote_call_deadline(spec.remote_call_timeout_s)   # before TensorFlow's first op
    try:
        return _train(spec, distributed=role == "chief")
    except BaseException:
        drop_partial_checkpoints(checkpoint_dir(spec))
        raise


@dataclasses.dataclass
class _Window:
    """What the preprocessing job wrote and counted for this run, and the budget it gets:
    every later phase reads it, none reads a row to make it."""
    pre: Path
    fcfg: object
    cfg: dict
    tft_output: object
    feature_spec: dict
    eval_pattern: str
    stats: object                      # training SplitStats (rows, click rate, counts)
    validation_rows: int
    train_patterns: list
    validation_pattern: str | None
    validation_percent: int
    stats_seconds: float
    priors: dict                       # per-row prior weights of the per-id tables
    budget_examples: int
    total_steps: int
    base_rate: float


def _train(spec: PsTrainSpec, distributed: bool) -> dict:
    """The chief's (or the one process's) run, phase by phase: window, placement, network,
    starting point, loop, export."""
    entered = time.time()
    window, started = _window(spec)
    placement = _placement(spec, distributed, window.total_steps)
    trainable = _trainable(spec, window, placement)
    ckpt_dir = checkpoint_dir(spec)
    vocabularies = {f.name: (window.tft_output.vocabulary_file_by_name(f.name), f.oov_buckets,
                             f.new_id_index)
                    for f in window.fcfg.features if f.transform == "vocabulary"}
    resumed_from, warm_started = train_checkpoint.restore(trainable, ckpt_dir,
                                                          spec.warm_start_from, vocabularies)
    outcome = _loop(spec, window, placement, trainable, ckpt_dir, resumed_from).run()
    check = _in_cluster_check(spec, window, trainable.net, placement)
    summary = _summary(spec, window, placement, outcome, trainable.net,
                       before_first_step=outcome.started - entered,
                       resumed_from=resumed_from, warm_started=warm_started, ckpt_dir=ckpt_dir)
    result = {"artifact_dir": str(Path(spec.out_dir)), "total_steps": window.total_steps,
              "steps_run": outcome.step, "best_step": outcome.stopper.best_step,
              "resumed_from_step": resumed_from,
              **{k: summary[k] for k in ("examples_per_second", "stats_seconds", "loop_seconds",
                                         "before_first_step_seconds")},
              "checkpoint_dir": str(ckpt_dir)}
    if not spec.export:
        # No copy to the coordinator (a table may not fit there), so no evaluation either.
        summary["train_seconds"] = round(time.time() - started, 1)
        return {**result, "model_dir": None, "val_auc": None, "val_log_loss": None,
                "train_seconds": summary["train_seconds"], "summary": summary}
    return _export(spec, window, trainable.net, summary, result, outcome, check, started)


def _window(spec: PsTrainSpec) -> tuple[_Window, float]:
    """Read the transform graph and the job's counts (no pass over rows) and fix the budget;
    also the time training starts counting from (after the transform graph loads)."""
    import tensorflow as tf
    import tensorflow_transform as tft
    from components.ctr import feature_config as fc
    from components.ctr.formats import EVAL_DIR, TRAIN_DIR, TRANSFORM_DIR

    pre = Path(spec.preprocess_dir)
    fcfg = fc.for_preprocess_dir(pre)
    cfg = _config(spec, fcfg)
    tf.random.set_seed(spec.seed)
    if not (pre / TRANSFORM_DIR).exists():
        raise FileNotFoundError(f"no tf.Transform output in {pre / TRANSFORM_DIR}")
    tft_output = tft.TFTransformOutput(str(pre / TRANSFORM_DIR))
    feature_spec = dict(tft_output.transformed_feature_spec())

    started = time.time()
    train_stats, validation_rows, train_patterns, validation_pattern = window_rows(
        pre, fcfg, spec.validation_percent > 0)
    if train_stats.rows == 0:
        raise ValueError(f"no training rows in {pre / TRAIN_DIR}")
    rows = train_stats.rows
    validation_percent = (preprocessed_validation_percent(pre)
                          if validation_pattern is not None else 0)
    stats_seconds = time.time() - started      # reading the job's counts: no pass over rows
    priors = prior_weights(spec, cfg, train_stats.counts, fcfg.new_id_rows(), rows)
    budget_examples, total_steps = train_budget(spec, rows)
    log.info("budget: %d examples = %d steps of %d over %d training rows (%.1f passes)%s",
             budget_examples, total_steps, spec.batch_size, rows,
             total_steps * spec.batch_size / rows,
             f"; validation slice {validation_rows} rows" if validation_percent else "")
    return _Window(pre, fcfg, cfg, tft_output, feature_spec,
                   str(pre / EVAL_DIR / "*.tfrecord.gz"), train_stats, validation_rows,
                   train_patterns, validation_pattern, validation_percent, stats_seconds,
                   priors, budget_examples, total_steps,
                   min(max(train_stats.click_rate, 1e-4), 1 - 1e-4)), started


def _placement(spec: PsTrainSpec, distributed: bool, total_steps: int) -> Placement:
    """On a cluster, the strategy whose partitioner shards the tables over the parameter
    servers, and its coordinator; in one process, nothing."""
    if not distributed:
        return Placement()
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_ps = resolver.cluster_spec().num_tasks("ps")
    num_workers = resolver.cluster_spec().num_tasks("worker")
    if not num_ps or not num_workers:
        raise ValueError(f"TF_CONFIG cluster needs ps and worker tasks: "
                         f"{resolver.cluster_spec().as_dict()}")
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=spec.min_shard_bytes, max_shards=spec.max_shards or num_ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    log.info("cluster: %d ps, %d workers; %d steps of %d rows, %d per remote call",
             num_ps, num_workers, total_steps, spec.batch_size, spec.steps_per_execution)
    return Placement(strategy, coordinator, num_ps, num_workers)


def _trainable(spec: PsTrainSpec, window: _Window, placement: Placement) -> Trainable:
    """The network, its optimizer and step counter, created under the strategy's scope so
    the tables land sharded on the parameter servers."""
    import tensorflow as tf
    from tensorflow_transform.keras_lib import tf_keras
    from components.ctr import optimizers

    strategy = placement.strategy
    with strategy.scope() if strategy else contextlib.nullcontext():
        net = build_net(window.cfg, window.stats.counts, window.base_rate)
        if spec.lr_decay == "cosine":
            lr = tf_keras.optimizers.schedules.CosineDecay(spec.learning_rate,
                                                           window.total_steps, alpha=0.1)
        else:
            lr = spec.learning_rate
        optimizer = optimizers.make(spec.optimizer, lr)
        train_vars = leaves(net)
        optimizer.build(train_vars)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    for name, shards in shard_layout(net).items():
        if len(shards) > 1 or name.startswith("emb/user"):
            log.info("%s: %s", name, ", ".join(f"{s['shape']}@{s['device']}" for s in shards))
    return Trainable(net, optimizer, train_vars, step_var)


def _loop(spec: PsTrainSpec, window: _Window, placement: Placement, trainable: Trainable,
          ckpt_dir: Path, resumed_from: int) -> TrainLoop:
    """The loop over this window's inputs: each worker's share of the training shards and,
    when early stopping is on, passes over the validation slice."""
    distributed = placement.coordinator is not None
    k = int(spec.steps_per_execution)
    train_fn = make_dataset_fn(
        window.train_patterns, window.feature_spec, spec.batch_size, window.priors,
        seed=None if distributed else spec.seed, repeat=True, label=window.fcfg.label,
        split="train", workers=placement.num_workers if distributed else 1,
        new_id_rows=window.fcfg.new_id_rows())
    validation_fn, val_every, val_batches = None, 0, 0
    if window.validation_percent:
        validation_fn = make_dataset_fn(
            window.validation_pattern, window.feature_spec, VALIDATION_BATCH, {}, None,
            repeat=True, label=window.fcfg.label, split="validation")
        val_batches = -(-min(window.validation_rows, MAX_VALIDATION_ROWS) // VALIDATION_BATCH)
        val_every = validate_every(spec.validate_every_steps, window.total_steps, k)
    plan = LoopPlan(window.total_steps, resumed_from, k, spec.batch_size, ckpt_dir,
                    ckpt_dir / PROGRESS_FILE, max(spec.checkpoint_every_steps, 0),
                    val_every, val_batches, spec.early_stopping_patience)
    return TrainLoop(trainable, placement, plan, train_fn, validation_fn)


def _in_cluster_check(spec: PsTrainSpec, window: _Window, net, placement: Placement
                      ) -> list[float] | None:
    """Predictions for the spec's raw rows made where the network trained (on the cluster),
    so the export can be checked against them; None without `check_raw_rows`."""
    if not spec.check_raw_rows:
        return None
    import numpy as np
    import tensorflow as tf
    from components.ctr.transform import raw_batch, serving_to_transform_inputs

    fcfg, strategy = window.fcfg, placement.strategy
    raw = json.loads(Path(spec.check_raw_rows).read_text())
    tft_layer_local = window.tft_output.transform_features_layer()
    transformed = tft_layer_local(serving_to_transform_inputs(fcfg, raw_batch(fcfg, raw)))
    transformed = {k: v for k, v in transformed.items() if k != fcfg.label}

    @tf.function
    def predict_fn(feats):
        if strategy is not None:
            return strategy.run(lambda f: net.forward(f, training=False)[0], args=(feats,))
        return net.forward(feats, training=False)[0]

    if placement.coordinator is not None:
        in_cluster = placement.coordinator.schedule(predict_fn, args=(transformed,)).fetch()
    else:
        in_cluster = predict_fn(transformed).numpy()
    return [float(x) for x in np.asarray(in_cluster).reshape(-1)]


def _summary(spec: PsTrainSpec, window: _Window, placement: Placement, outcome: LoopResult,
             net, *, before_first_step: float, resumed_from: int, warm_started: str | None,
             ckpt_dir: Path) -> dict:
    """train_summary.json's content: what trained, on what, how fast, and where it stopped."""
    from components.ctr.transform import serving_signature
    distributed, fcfg, cfg = placement.coordinator is not None, window.fcfg, window.cfg
    stopper = outcome.stopper
    return {
        "trainer": "ps_train", "distributed": distributed,
        "cluster": {"ps": placement.num_ps, "workers": placement.num_workers}
        if distributed else None,
        "epochs": spec.epochs, "train_rows": window.stats.rows,
        "train_click_rate": round(window.stats.click_rate, 6),
        "spec": dataclasses.asdict(spec),
        "stats_seconds": round(window.stats_seconds, 2),
        "loop_seconds": round(outcome.seconds, 2),
        # from entering the trainer to scheduling its first step (statistics, model,
        # datasets; the rows of the window are not read before it)
        "before_first_step_seconds": round(before_first_step, 2),
        "examples_per_second": round(outcome.examples_per_second, 1),
        "total_steps": window.total_steps, "steps_run": outcome.step,
        "resumed_from_step": resumed_from, "input_recoveries": outcome.recoveries,
        "budget_examples": window.budget_examples,
        "early_stopping": {"validation_percent": window.validation_percent,
                           "validation_rows": window.validation_rows
                           if window.validation_percent else 0,
                           "validate_every_steps": outcome.validate_every, **stopper.state(),
                           "stopped_early": stopper.stop},
        "warm_started_from": warm_started, "checkpoint_dir": str(ckpt_dir),
        "losses": [[s, round(x, 5)] for s, x in outcome.losses],
        "shards": shard_layout(net),
        "serving_inputs": sorted(serving_signature(fcfg)),
        "feature_config": {"name": fcfg.name, "fingerprint": fcfg.fingerprint()},
        "fields": {"deep_fields": list(cfg["dims"]), "count_features": cfg["count_features"],
                   "id_l2": cfg["id_l2"]},
    }


def _export(spec: PsTrainSpec, window: _Window, net, summary: dict, result: dict,
            outcome: LoopResult, check: list[float] | None, started: float) -> dict:
    """A bounded sample scored for the summary, then the serving model saved from the
    sharded network (each ps writes its own shards; nothing is gathered)."""
    train_seconds = time.time() - started
    val = train_export.sample_metrics(net, window.eval_pattern, window.feature_spec,
                                      window.fcfg.label, window.base_rate)
    losses = outcome.losses
    summary.update({
        "train_seconds": round(train_seconds, 1),
        "initial_val_log_loss": val.get("initial_val_log_loss"),
        "val_sample": {k: val.get(k) for k in ("eval_rows", "eval_rows_are")},
        "history": {"val_auc": [val.get("val_auc")], "val_log_loss": [val.get("val_log_loss")],
                    "loss": [round(losses[-1][1], 5)] if losses else []},
        "params": train_export.parameter_count(net),
    })
    result.update({"val_auc": val.get("val_auc"), "val_log_loss": val.get("val_log_loss"),
                   "train_seconds": summary["train_seconds"]})
    model_dir = train_export.write_serving_model(
        Path(spec.out_dir), net, window.tft_output, window.fcfg, summary,
        check=None if check is None else {"rows": spec.check_raw_rows, "p_click": check})
    return {**result, "model_dir": model_dir}


if __name__ == "__main__":
    tf_keras_env.use_keras2()   # every role: before TensorFlow's first import
    if "--serve" in sys.argv[1:]:
        if "-h" in sys.argv or "--help" in sys.argv:
            print(__doc__)
            sys.exit(0)
        sys.exit(serve())
    sys.exit(main(PsTrainSpec, run, description=(
        "Train the CTR model with ParameterServerStrategy when TF_CONFIG names a chief "
        "(ps/worker roles serve; add --serve to start only a server), else in one process.")))
