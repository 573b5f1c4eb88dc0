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
job's counts, per-worker shares), the export (`components.ctr.train_export`); this module
keeps the spec, the roles and the loop. It is the platform's one CTR trainer: the tests
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

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

from components.ctr import train_export
from components.ctr.chunks import ChunkScheduler
from components.ctr.model import build_net, leaves, named_variables, shard_layout
from components.ctr.train_export import SERVING_DIR
from components.ctr.train_input import (MAX_VALIDATION_ROWS, VALIDATION_BATCH, make_dataset_fn,
                                        preprocessed_validation_percent, prior_weights,
                                        window_rows)
from retrain.common import tf_keras_env
from retrain.common.step import drop_known_lines, main

log = logging.getLogger("retrain.ps_train")

PROGRESS_FILE = "progress.json"
SERVER_ROLES = ("ps", "worker")
DEFAULT_PASSES = 3
MIN_TRAIN_EXAMPLES = 300_000
VALIDATIONS_PER_BUDGET = 12
MIN_REMOTE_CALL_TIMEOUT_S = 5
REMOTE_TIMEOUT_RETRIES = 3    # timed-out remote calls the coordinator runs again, per run
BEST_DIR = "best"             # under the checkpoint dir: the best validated parameters


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
    # REMOTE_TIMEOUT_RETRIES times a run, then the run fails typed). 0: no deadline.
    remote_call_timeout_s: float = 300.0
    table_rows: dict[str, int] = dataclasses.field(default_factory=dict)  # bigger tables
    # Checkpoints, warm start, limits
    checkpoint_dir: str | None = None      # default <out_dir>_checkpoints
    checkpoint_every_steps: int = 100     # 0: no checkpoints (and no resume)
    warm_start_from: str | None = None     # a previous serving_model dir (or its artifact dir)
    max_steps: int | None = None           # cap on the total steps (tests, benchmarks)
    export: bool = True
    check_raw_rows: str | None = None      # JSON {feature: [values]} scored in-cluster too


def _set_remote_call_deadline(seconds: float) -> None:
    """Give the chief's remote calls a deadline (only possible before TensorFlow runs its
    first op: the eager context's config is then fixed), and let
    the coordinator run a timed-out chunk again instead of failing: TensorFlow's eager RPCs
    have none, and one lost in a network cut left the coordinator waiting forever."""
    if seconds <= 0:
        return
    if seconds < MIN_REMOTE_CALL_TIMEOUT_S:
        raise ValueError(f"remote_call_timeout_s must be 0 (no deadline) or at least "
                         f"{MIN_REMOTE_CALL_TIMEOUT_S} s, got {seconds}: a shorter one times "
                         f"out ordinary calls")
    from tensorflow.python.eager import context   # no public setter for this config field
    os.environ.setdefault("TF_COORDINATOR_IGNORE_TRANSIENT_TIMEOUTS", str(REMOTE_TIMEOUT_RETRIES))
    try:
        context.context().operation_timeout_in_ms = int(seconds * 1000)
    except RuntimeError as e:   # TensorFlow already ran in this process: no deadline
        log.warning("remote calls get no deadline (%s); a lost reply can stall the run", e)


# ----------------------------------------------------------------------------- model

def _fields(spec: PsTrainSpec, fcfg) -> tuple[list[str], list[str], dict[str, float], list[str]]:
    """deep_fields, count_features, id_l2, fm_fields: the spec's, else the feature
    config's defaults."""
    deep = list(fcfg.model.deep_fields if spec.deep_fields is None else spec.deep_fields)
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
    fcfg.check_fields("PsTrainSpec.fm_fields", fm_fields, single_valued=True)
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
    dims = {k: int(spec.embedding_dims.get(k, spec.embedding_dim)) for k in deep_fields}
    return {"rows": rows, "dims": {k: d for k, d in dims.items() if d > 0},
            "hidden": [int(u) for u in spec.hidden_units], "dropout": float(spec.dropout),
            "count_features": count_features, "id_l2": id_l2, "seed": int(spec.seed),
            "fm": fm_fields, "fm_dim": int(spec.fm_dim),
            "embedding_init": spec.embedding_init,
            "multi": {k: fcfg.max_values(k) for k in fields if fcfg.max_values(k)},
            "dense": fcfg.dense_features(), "label": fcfg.label}


# ----------------------------------------------------------------------------- roles

def task_role() -> tuple[str | None, int]:
    """(task type, index) from TF_CONFIG, or (None, 0) when it is not set."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None, 0
    try:
        task = json.loads(raw)["task"]
        return task["type"], int(task.get("index", 0))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"TF_CONFIG is not valid: {e}: {raw[:200]}") from e


def ensure_inter_op_threads() -> None:
    """At least 2 inter-op threads unless TF_NUM_INTEROP_THREADS says otherwise.

    TensorFlow sizes the pool from the cores this process may run on, so a worker pinned to
    one core (taskset, a container's cpuset) got a single thread, and its first remote
    training function never finished (bench/ps_workers.py found it: the chief retried the
    chunk until its remote-call deadline, then failed the run; with 2 threads on the same
    core it trains) - most likely the function waits on the worker's input iterator while
    the input pipeline needs a thread of that pool. Must run before the server starts."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cores or 1) < 2:
        os.environ.setdefault("TF_NUM_INTEROP_THREADS", "2")


def serve() -> int:
    """Run this process's parameter-server or worker gRPC server until killed."""
    ensure_inter_op_threads()
    import tensorflow as tf
    role, index = task_role()
    if role not in SERVER_ROLES:
        raise ValueError(f"--serve needs TF_CONFIG task type ps or worker, got {role!r}")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if role == "worker":
        gpus = tf.config.list_physical_devices("GPU")
        print(f"worker {index}: {'GPU ' + str(gpus) if gpus else 'no GPU visible, using CPU'}",
              flush=True)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    print(f"{role} {index} serving at {server.target}", flush=True)
    server.join()
    return 0


# ----------------------------------------------------------------------------- train

def checkpoint_dir(spec: PsTrainSpec) -> Path:
    if spec.checkpoint_dir:
        return Path(spec.checkpoint_dir)
    out = Path(spec.out_dir)
    return out.with_name(out.name + "_checkpoints")


def _warm_start_path(path: str) -> str:
    """The variables checkpoint inside a SavedModel (or an artifact dir holding one); a
    published version whose files differ from its recorded digests is refused."""
    from retrain.common.registry import verify_model_dir

    verify_model_dir(path)   # the published model: its files as published (ModelTampered)
    p = Path(path)
    for cand in (p, p / SERVING_DIR):
        if (cand / "variables" / "variables.index").exists():
            return str(cand / "variables" / "variables")
    raise FileNotFoundError(f"warm_start_from={path}: no SavedModel variables found "
                            f"(looked for variables/variables.index in it and in {SERVING_DIR}/)")


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
        _set_remote_call_deadline(spec.remote_call_timeout_s)   # before TensorFlow's first op
    try:
        return _train(spec, distributed=role == "chief")
    except BaseException:
        drop_partial_checkpoints(checkpoint_dir(spec))
        raise


def drop_partial_checkpoints(directory: Path) -> list[str]:
    """Remove the `*_temp` folders a save cut short leaves (a full disk, a kill between
    write and rename); complete checkpoints stay, so a retry resumes from the last one."""
    import shutil
    dropped = []
    if Path(directory).is_dir():
        for tmp in sorted(Path(directory).rglob("*_temp")):
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
                dropped.append(str(tmp))
    return dropped


def _train(spec: PsTrainSpec, distributed: bool) -> dict:
    import numpy as np
    import tensorflow as tf
    import tensorflow_transform as tft
    from tensorflow_transform.keras_lib import tf_keras

    from retrain.common.atomic import write_json
    from components.ctr import feature_config as fc
    from components.ctr import optimizers
    from components.ctr.formats import EVAL_DIR, TRAIN_DIR, TRANSFORM_DIR
    from components.ctr.transform import (raw_batch, serving_signature,
                                          serving_to_transform_inputs)

    entered = time.time()
    pre = Path(spec.preprocess_dir)
    fcfg = fc.for_preprocess_dir(pre)
    cfg = _config(spec, fcfg)
    tf.random.set_seed(spec.seed)
    if not (pre / TRANSFORM_DIR).exists():
        raise FileNotFoundError(f"no tf.Transform output in {pre / TRANSFORM_DIR}")
    tft_output = tft.TFTransformOutput(str(pre / TRANSFORM_DIR))
    feature_spec = dict(tft_output.transformed_feature_spec())
    eval_pattern = str(pre / EVAL_DIR / "*.tfrecord.gz")

    started = time.time()
    train_stats, validation_rows, train_patterns, validation_pattern = window_rows(
        pre, fcfg, spec.validation_percent > 0)
    if train_stats.rows == 0:
        raise ValueError(f"no training rows in {pre / TRAIN_DIR}")
    rows, click_rate, counts = train_stats.rows, train_stats.click_rate, train_stats.counts
    validation_percent = (preprocessed_validation_percent(pre)
                          if validation_pattern is not None else 0)
    stats_seconds = time.time() - started      # reading the job's counts: no pass over rows
    priors = prior_weights(spec, cfg, counts)
    budget_examples, total_steps = train_budget(spec, rows)
    log.info("budget: %d examples = %d steps of %d over %d training rows (%.1f passes)%s",
             budget_examples, total_steps, spec.batch_size, rows,
             total_steps * spec.batch_size / rows,
             f"; validation slice {validation_rows} rows" if validation_percent else "")
    base_rate = min(max(click_rate, 1e-4), 1 - 1e-4)

    strategy = coordinator = None
    if distributed:
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
    scope = strategy.scope() if strategy else _nullcontext()

    with scope:
        net = build_net(cfg, counts, base_rate)
        if spec.lr_decay == "cosine":
            lr = tf_keras.optimizers.schedules.CosineDecay(spec.learning_rate, total_steps,
                                                           alpha=0.1)
        else:
            lr = spec.learning_rate
        optimizer = optimizers.make(spec.optimizer, lr)
        train_vars = leaves(net)
        optimizer.build(train_vars)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    layout = shard_layout(net)
    for name, shards in layout.items():
        if len(shards) > 1 or name.startswith("emb/user"):
            log.info("%s: %s", name, ", ".join(f"{s['shape']}@{s['device']}" for s in shards))

    ckpt_dir = checkpoint_dir(spec)
    # For variables on several devices (the parameter servers) TensorFlow's
    # `MultiDeviceSaver.save` defines a new tf.function on every call, so from the fifth
    # checkpoint on each save "triggered tf.function retracing": by design, nothing to do.
    drop_known_lines("tensorflow", "MultiDeviceSaver.save")
    ckpt = tf.train.Checkpoint(model=net, optimizer=optimizer, step=step_var)
    manager = tf.train.CheckpointManager(ckpt, str(ckpt_dir), max_to_keep=2)
    resumed_from = 0
    warm_started = None
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        resumed_from = int(step_var.numpy())
        log.info("resumed from %s at step %d", manager.latest_checkpoint, resumed_from)
    elif spec.warm_start_from:
        # Only the learned parameters: today's counts, optimizer state and step start anew,
        # and rows of IDs the previous model never saw are still at their initial values.
        path = _warm_start_path(spec.warm_start_from)
        view = tf.Module()              # the export's object path: root.model.params
        view.model = tf.Module()
        view.model.params = net.params
        saved = [k for k in tf.train.load_checkpoint(path).get_variable_to_shape_map()
                 if k.startswith("model/params/") and k.endswith("VARIABLE_VALUE")]
        wanted = [n for n, _ in named_variables(net) if not n.startswith("count/")]
        if len(saved) != len(wanted):
            raise ValueError(f"warm_start_from={spec.warm_start_from}: it holds {len(saved)} "
                             f"model parameters, this model has {len(wanted)}: incompatible")
        tf.train.Checkpoint(root=view).restore(path).expect_partial()
        warm_started = path
        log.info("warm start from %s", path)

    def step_fn(features, labels):
        with tf.GradientTape() as tape:
            probs, penalty = net.forward(features, training=True)
            loss = tf.reduce_mean(tf_keras.losses.binary_crossentropy(
                labels[:, None], probs[:, None])) + penalty
        grads = tape.gradient(loss, train_vars)
        optimizer.apply_gradients(zip(grads, train_vars))
        return loss

    k = int(spec.steps_per_execution)

    @tf.function
    def train_chunk(iterator, n):
        total = tf.constant(0.0)
        for _ in tf.range(n):
            features, labels = next(iterator)
            if strategy is not None:
                loss = strategy.run(step_fn, args=(features, labels))
            else:
                loss = step_fn(features, labels)
            total += loss
        return total / tf.cast(n, tf.float32)

    def val_fn(features, labels):
        probs, _ = net.forward(features, training=False)
        per_row = tf_keras.losses.binary_crossentropy(labels[:, None], probs[:, None])
        return tf.reduce_sum(per_row), tf.cast(tf.size(per_row), tf.float32)

    @tf.function
    def val_pass(iterator, n):
        total, count = tf.constant(0.0), tf.constant(0.0)
        for _ in tf.range(n):
            features, labels = next(iterator)
            if strategy is not None:
                s, c = strategy.run(val_fn, args=(features, labels))
            else:
                s, c = val_fn(features, labels)
            total += s
            count += c
        return total / tf.maximum(count, 1.0)

    def iterate(dataset_fn):
        if coordinator is not None:
            return iter(coordinator.create_per_worker_dataset(dataset_fn))
        return iter(dataset_fn())

    train_fn = make_dataset_fn(
        train_patterns, feature_spec, spec.batch_size, priors,
        seed=None if distributed else spec.seed, repeat=True, label=fcfg.label, split="train",
        workers=num_workers if distributed else 1)
    def chunked(fn, dataset_fn, input_name):
        """On a cluster, a scheduler that runs lost chunks again; locally, a plain iterator."""
        if coordinator is not None:
            return ChunkScheduler(coordinator, fn, lambda: iterate(dataset_fn),
                                  input_name=input_name), None
        return None, iterate(dataset_fn)

    chunks, iterator = chunked(train_chunk, train_fn, "training input")
    progress_file = ckpt_dir / PROGRESS_FILE
    stopper = _EarlyStopping(spec.early_stopping_patience,
                             _read_progress(progress_file, resumed_from).get("early_stopping"))
    val_every = val_batches = 0
    if validation_percent:
        val_fn_data = make_dataset_fn(
            validation_pattern, feature_spec, VALIDATION_BATCH, {}, None, repeat=True,
            label=fcfg.label, split="validation")
        val_chunks, val_iterator = chunked(val_pass, val_fn_data, "validation input")
        val_batches = -(-min(validation_rows, MAX_VALIDATION_ROWS) // VALIDATION_BATCH)
        val_every = spec.validate_every_steps or k * max(
            1, round(total_steps / VALIDATIONS_PER_BUDGET / k))
    best_manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=net),
                                              str(ckpt_dir / BEST_DIR), max_to_keep=1)

    def validate(at_step: int) -> None:
        if val_chunks is not None:
            val_chunks.schedule(at_step, val_batches)
            [(_, loss)] = val_chunks.settle()
        else:
            loss = float(val_pass(val_iterator, tf.constant(val_batches)))
        if stopper.update(at_step, loss):
            best_manager.save(checkpoint_number=at_step)
        log.info("validation log loss %.5f at step %d (best %.5f at step %d%s)", loss, at_step,
                 stopper.best, stopper.best_step,
                 f"; no improvement {stopper.bad}/{stopper.patience}" if stopper.bad else "")

    losses: list[tuple[int, float]] = []   # (step at the end of the chunk, mean loss)
    step = resumed_from
    every = spec.checkpoint_every_steps if spec.checkpoint_every_steps > 0 else None
    next_ckpt = (step // every + 1) * every if every else total_steps
    next_val = (step // val_every + 1) * val_every if val_every else None
    loop_started = time.time()
    try:
        while step < total_steps and not stopper.stop:
            n = min(k, total_steps - step, (next_val - step) if next_val else k)
            if chunks is not None:
                chunks.schedule(step + n, n)
            else:
                losses.append((step + n, float(train_chunk(iterator, tf.constant(n)))))
            step += n
            checkpoint_now = step >= next_ckpt or step >= total_steps
            validate_now = next_val is not None and (step >= next_val or step >= total_steps)
            if chunks is not None and (checkpoint_now or validate_now):
                losses += chunks.settle()
            if validate_now:
                validate(step)
                next_val += val_every
            if checkpoint_now or stopper.stop:
                if every:
                    step_var.assign(step)
                    manager.save(checkpoint_number=step)
                    next_ckpt = (step // every + 1) * every
                write_json(progress_file, {"step": step, "total_steps": total_steps,
                                           "loss": losses[-1][1] if losses else None,
                                           "early_stopping": stopper.state()})
                done, elapsed = step - resumed_from, time.time() - loop_started
                rate = done / elapsed if elapsed > 0 and done > 0 else 0.0
                eta = f"{(total_steps - step) / rate:.0f}s" if rate else "?"
                log.info("step %d/%d loss %.4f, %.1f steps/s (%.0f examples/s), ETA %s%s",
                         step, total_steps, losses[-1][1] if losses else float("nan"),
                         rate, rate * spec.batch_size, eta,
                         " (checkpoint saved)" if every else "")
    except (tf.errors.UnavailableError, tf.errors.AbortedError,
            tf.errors.CancelledError, tf.errors.DeadlineExceededError) as e:
        raise RuntimeError(
            f"cluster failed at about step {step}/{total_steps} (a parameter server is "
            f"probably down; workers are restarted transparently): {type(e).__name__}: "
            f"{str(e).splitlines()[0][:300]}. The last checkpoint is in {ckpt_dir} "
            f"(step {int(_latest_step(manager))}); a retry resumes from it.") from e
    loop_seconds = time.time() - loop_started
    trained_steps = step - resumed_from
    if stopper.stop:
        log.info("early stopping at step %d of %d: validation log loss did not improve for %d "
                 "validations", step, total_steps, stopper.patience)
    if stopper.best_step is not None and stopper.best_step != step:
        if best_manager.latest_checkpoint is None:
            raise RuntimeError(f"best validated parameters (step {stopper.best_step}) are "
                               f"missing from {ckpt_dir / BEST_DIR}")
        tf.train.Checkpoint(model=net).restore(best_manager.latest_checkpoint).expect_partial()
        log.info("restored the best validated parameters (step %d, validation log loss %.5f)",
                 stopper.best_step, stopper.best)
    examples_per_second = trained_steps * spec.batch_size / max(loop_seconds, 1e-9)
    log.info("trained %d steps in %.1fs: %.0f examples/s", trained_steps, loop_seconds,
             examples_per_second)

    # In-cluster predictions on transformed features of the given raw rows (export check).
    check = None
    if spec.check_raw_rows:
        raw = json.loads(Path(spec.check_raw_rows).read_text())
        tft_layer_local = tft_output.transform_features_layer()
        transformed = tft_layer_local(serving_to_transform_inputs(fcfg, raw_batch(fcfg, raw)))
        transformed = {k: v for k, v in transformed.items() if k != fcfg.label}

        @tf.function
        def predict_fn(feats):
            if strategy is not None:
                return strategy.run(lambda f: net.forward(f, training=False)[0], args=(feats,))
            return net.forward(feats, training=False)[0]

        if coordinator is not None:
            in_cluster = coordinator.schedule(predict_fn, args=(transformed,)).fetch()
        else:
            in_cluster = predict_fn(transformed).numpy()
        check = [float(x) for x in np.asarray(in_cluster).reshape(-1)]

    summary = {
        "trainer": "ps_train", "distributed": distributed,
        "cluster": {"ps": num_ps, "workers": num_workers} if distributed else None,
        "epochs": spec.epochs, "train_rows": rows, "train_click_rate": round(click_rate, 6),
        "spec": dataclasses.asdict(spec),
        "stats_seconds": round(stats_seconds, 2), "loop_seconds": round(loop_seconds, 2),
        # from entering the trainer to scheduling its first step (statistics, model,
        # datasets; the rows of the window are not read before it)
        "before_first_step_seconds": round(loop_started - entered, 2),
        "examples_per_second": round(examples_per_second, 1),
        "total_steps": total_steps, "steps_run": step, "resumed_from_step": resumed_from,
        "input_recoveries": {"count": chunks.recoveries, "rerun_steps": chunks.rerun_steps}
        if chunks is not None else None,
        "budget_examples": budget_examples,
        "early_stopping": {"validation_percent": validation_percent,
                           "validation_rows": validation_rows if validation_percent else 0,
                           "validate_every_steps": val_every, **stopper.state(),
                           "stopped_early": stopper.stop},
        "warm_started_from": warm_started, "checkpoint_dir": str(ckpt_dir),
        "losses": [[s, round(x, 5)] for s, x in losses],
        "shards": layout,
        "serving_inputs": sorted(serving_signature(fcfg)),
        "feature_config": {"name": fcfg.name, "fingerprint": fcfg.fingerprint()},
        "fields": {"deep_fields": list(cfg["dims"]), "count_features": cfg["count_features"],
                   "id_l2": cfg["id_l2"]},
    }
    result = {"artifact_dir": str(Path(spec.out_dir)), "total_steps": total_steps,
              "steps_run": step, "best_step": stopper.best_step, "resumed_from_step": resumed_from,
              "examples_per_second": summary["examples_per_second"],
              "stats_seconds": summary["stats_seconds"], "loop_seconds": summary["loop_seconds"],
              "before_first_step_seconds": summary["before_first_step_seconds"],
              "checkpoint_dir": str(ckpt_dir)}
    if not spec.export:
        # No copy to the coordinator (a table may not fit there), so no evaluation either.
        summary["train_seconds"] = round(time.time() - started, 1)
        return {**result, "model_dir": None, "val_auc": None, "val_log_loss": None,
                "train_seconds": summary["train_seconds"], "summary": summary}

    # The export: a bounded sample scored for the summary, then the serving model saved
    # from the sharded network (each ps writes its own shards; nothing is gathered).
    train_seconds = time.time() - started
    val = train_export.sample_metrics(net, eval_pattern, feature_spec, fcfg.label, base_rate)
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
        Path(spec.out_dir), net, tft_output, fcfg, summary,
        check=None if check is None else {"rows": spec.check_raw_rows, "p_click": check})
    return {**result, "model_dir": model_dir}


class _EarlyStopping:
    """Validation losses so far; `stop` once `patience` validations brought no improvement
    (a relative 1e-4 at least). Its state goes into progress.json, so a resumed run goes on
    with the same best and count."""

    def __init__(self, patience: int, state: dict | None = None):
        state = state or {}
        self.patience = int(patience)
        self.best = state.get("best_val_log_loss")
        self.best_step = state.get("best_step")
        self.bad = int(state.get("validations_without_improvement", 0))
        self.history = [tuple(x) for x in state.get("validations", [])]

    def update(self, step: int, loss: float) -> bool:
        """Record a validation; True when it is the best so far."""
        self.history.append((step, round(loss, 6)))
        if self.best is None or loss < self.best - 1e-4 * abs(self.best):
            self.best, self.best_step, self.bad = loss, step, 0
            return True
        self.bad += 1
        return False

    @property
    def stop(self) -> bool:
        return self.patience > 0 and self.bad >= self.patience

    def state(self) -> dict:
        return {"best_val_log_loss": self.best, "best_step": self.best_step,
                "validations_without_improvement": self.bad,
                "validations": [list(x) for x in self.history]}


def _read_progress(path: Path, step: int) -> dict:
    """progress.json when it describes `step` (the checkpoint being resumed), else {}."""
    try:
        progress = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return progress if step and progress.get("step") == step else {}


def _latest_step(manager) -> int:
    path = manager.latest_checkpoint
    return int(path.rsplit("-", 1)[-1]) if path else 0


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


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
