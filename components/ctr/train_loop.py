"""The CTR trainer's step loop: chunks of steps, checkpoints, validation and early stopping.

Why a module of its own: the loop is where a run spends its time and where a failure
lands, so what it promises is kept in one place a reader can hold in mind: it runs
`steps_per_execution` steps per call (one remote call on a cluster, a plain call in one
process), checkpoints every `checkpoint_every` steps together with `progress.json`
(the step, the last loss and the early-stopping state, so a retried task resumes with
the same best), validates on the preprocessing job's validation slice, stops when the
validation log loss stops improving and leaves the best validated parameters in the
network. It imports nothing of the trainer (`components.ctr.ps_train`), which builds the
network, the inputs and the placement and hands them in.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

from components.ctr.chunks import ChunkScheduler

log = logging.getLogger("retrain.ps_train")

VALIDATIONS_PER_BUDGET = 12
BEST_DIR = "best"             # under the checkpoint dir: the best validated parameters


@dataclasses.dataclass
class Placement:
    """Where steps run: a cluster's strategy and coordinator, or this process (both None)."""
    strategy: Any = None
    coordinator: Any = None
    num_ps: int = 0
    num_workers: int = 0


@dataclasses.dataclass
class Trainable:
    """The network and what a checkpoint holds beside it (optimizer state, the step), so a
    resumed run goes on where the saved one stopped."""
    net: Any
    optimizer: Any
    train_vars: list
    step_var: Any
    manager: Any = None        # tf.train.CheckpointManager of the three, in the checkpoint dir


@dataclasses.dataclass
class LoopPlan:
    """How many steps, from where, and when to checkpoint and validate."""
    total_steps: int
    resumed_from: int
    steps_per_execution: int
    batch_size: int
    checkpoint_dir: Path
    progress_file: Path
    checkpoint_every: int = 0      # 0: no checkpoints (and no resume)
    validate_every: int = 0        # 0: no validation (no early stopping)
    validation_batches: int = 0
    patience: int = 0


@dataclasses.dataclass
class LoopResult:
    """What the summary reports of the loop."""
    step: int
    losses: list                   # (step at the end of a chunk, its mean loss)
    stopper: "EarlyStopping"
    started: float
    seconds: float
    examples_per_second: float
    recoveries: dict | None        # the scheduler's lost chunks run again (None: one process)
    validate_every: int


def validate_every(requested: int, total_steps: int, k: int) -> int:
    """Steps between validations: the spec's, else VALIDATIONS_PER_BUDGET over the budget,
    a whole number of chunks so a validation never splits one."""
    return requested or k * max(1, round(total_steps / VALIDATIONS_PER_BUDGET / k))


def step_functions(trainable: Trainable, strategy) -> tuple[Callable, Callable]:
    """(train_chunk, val_pass): compiled functions that run `n` steps or validation batches
    per call, so a cluster pays one round trip per chunk, not per step."""
    import tensorflow as tf
    from tensorflow_transform.keras_lib import tf_keras
    net, optimizer, train_vars = trainable.net, trainable.optimizer, trainable.train_vars

    def step_fn(features, labels):
        with tf.GradientTape() as tape:
            probs, penalty = net.forward(features, training=True)
            loss = tf.reduce_mean(tf_keras.losses.binary_crossentropy(
                labels[:, None], probs[:, None])) + penalty
        grads = tape.gradient(loss, train_vars)
        optimizer.apply_gradients(zip(grads, train_vars))
        return loss

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

    return train_chunk, val_pass


def _runner(coordinator, fn, dataset_fn, input_name: str):
    """On a cluster, a scheduler that runs lost chunks again; locally, a plain iterator."""
    if coordinator is not None:
        return ChunkScheduler(
            coordinator, fn, lambda: iter(coordinator.create_per_worker_dataset(dataset_fn)),
            input_name=input_name), None
    return None, iter(dataset_fn())


class TrainLoop:
    """One run of the loop; `run()` trains to the budget (or an early stop) and returns
    what the summary needs, with the best validated parameters restored into the net."""

    def __init__(self, trainable: Trainable, placement: Placement, plan: LoopPlan,
                 train_fn: Callable, validation_fn: Callable | None = None):
        import tensorflow as tf
        self.t, self.plan, self.placement = trainable, plan, placement
        self.train_chunk, self.val_pass = step_functions(trainable, placement.strategy)
        coordinator = placement.coordinator
        self.chunks, self.iterator = _runner(coordinator, self.train_chunk, train_fn,
                                             "training input")
        self.stopper = EarlyStopping(plan.patience, read_progress(
            plan.progress_file, plan.resumed_from).get("early_stopping"))
        self.val_chunks = self.val_iterator = None
        if validation_fn is not None:
            self.val_chunks, self.val_iterator = _runner(coordinator, self.val_pass,
                                                         validation_fn, "validation input")
        self.best = tf.train.CheckpointManager(tf.train.Checkpoint(model=trainable.net),
                                               str(plan.checkpoint_dir / BEST_DIR),
                                               max_to_keep=1)
        self.losses: list[tuple[int, float]] = []
        self.step = plan.resumed_from

    def run(self) -> LoopResult:
        """Chunks until the budget or an early stop; a cluster failure names the checkpoint
        a retry resumes from."""
        import tensorflow as tf
        started = time.time()
        try:
            self._steps(started)
        except (tf.errors.UnavailableError, tf.errors.AbortedError,
                tf.errors.CancelledError, tf.errors.DeadlineExceededError) as e:
            raise RuntimeError(
                f"cluster failed at about step {self.step}/{self.plan.total_steps} (a "
                f"parameter server is probably down; workers are restarted transparently): "
                f"{type(e).__name__}: {str(e).splitlines()[0][:300]}. The last checkpoint is "
                f"in {self.plan.checkpoint_dir} (step {int(latest_step(self.t.manager))}); a "
                f"retry resumes from it.") from e
        return self._finish(started, time.time() - started)

    def _steps(self, started: float) -> None:
        """The loop proper: schedule a chunk, settle before a checkpoint or a validation."""
        import tensorflow as tf
        plan, k = self.plan, int(self.plan.steps_per_execution)
        every, val_every, total = plan.checkpoint_every or None, plan.validate_every, plan.total_steps
        next_ckpt = (self.step // every + 1) * every if every else total
        next_val = (self.step // val_every + 1) * val_every if val_every else None
        while self.step < total and not self.stopper.stop:
            n = min(k, total - self.step, (next_val - self.step) if next_val else k)
            if self.chunks is not None:
                self.chunks.schedule(self.step + n, n)
            else:
                self.losses.append((self.step + n,
                                    float(self.train_chunk(self.iterator, tf.constant(n)))))
            self.step += n
            checkpoint_now = self.step >= next_ckpt or self.step >= total
            validate_now = next_val is not None and (self.step >= next_val or self.step >= total)
            if self.chunks is not None and (checkpoint_now or validate_now):
                self.losses += self.chunks.settle()
            if validate_now:
                self._validate(self.step)
                next_val += val_every
            if checkpoint_now or self.stopper.stop:
                if every:
                    self._save(self.step)
                    next_ckpt = (self.step // every + 1) * every
                self._progress(started, saved=bool(every))

    def _validate(self, at_step: int) -> None:
        """One pass over the validation slice; the best parameters so far are kept apart."""
        import tensorflow as tf
        if self.val_chunks is not None:
            self.val_chunks.schedule(at_step, self.plan.validation_batches)
            [(_, loss)] = self.val_chunks.settle()
        else:
            loss = float(self.val_pass(self.val_iterator,
                                       tf.constant(self.plan.validation_batches)))
        stopper = self.stopper
        if stopper.update(at_step, loss):
            self.best.save(checkpoint_number=at_step)
        log.info("validation log loss %.5f at step %d (best %.5f at step %d%s)", loss, at_step,
                 stopper.best, stopper.best_step,
                 f"; no improvement {stopper.bad}/{stopper.patience}" if stopper.bad else "")

    def _save(self, step: int) -> None:
        """A resumable checkpoint: parameters, optimizer state and the step."""
        self.t.step_var.assign(step)
        self.t.manager.save(checkpoint_number=step)

    def _progress(self, started: float, saved: bool) -> None:
        """progress.json (what the launcher and a resume read) and the log's progress line."""
        from retrain.common.atomic import write_json
        plan, step, losses = self.plan, self.step, self.losses
        write_json(plan.progress_file, {"step": step, "total_steps": plan.total_steps,
                                        "loss": losses[-1][1] if losses else None,
                                        "early_stopping": self.stopper.state()})
        done, elapsed = step - plan.resumed_from, time.time() - started
        rate = done / elapsed if elapsed > 0 and done > 0 else 0.0
        eta = f"{(plan.total_steps - step) / rate:.0f}s" if rate else "?"
        log.info("step %d/%d loss %.4f, %.1f steps/s (%.0f examples/s), ETA %s%s",
                 step, plan.total_steps, losses[-1][1] if losses else float("nan"),
                 rate, rate * plan.batch_size, eta, " (checkpoint saved)" if saved else "")

    def _finish(self, started: float, seconds: float) -> LoopResult:
        """Restore the best validated parameters (the export holds them) and report."""
        import tensorflow as tf
        stopper, step, plan = self.stopper, self.step, self.plan
        if stopper.stop:
            log.info("early stopping at step %d of %d: validation log loss did not improve "
                     "for %d validations", step, plan.total_steps, stopper.patience)
        if stopper.best_step is not None and stopper.best_step != step:
            if self.best.latest_checkpoint is None:
                raise RuntimeError(f"best validated parameters (step {stopper.best_step}) are "
                                   f"missing from {plan.checkpoint_dir / BEST_DIR}")
            tf.train.Checkpoint(model=self.t.net).restore(
                self.best.latest_checkpoint).expect_partial()
            log.info("restored the best validated parameters (step %d, validation log loss "
                     "%.5f)", stopper.best_step, stopper.best)
        trained = step - plan.resumed_from
        per_second = trained * plan.batch_size / max(seconds, 1e-9)
        log.info("trained %d steps in %.1fs: %.0f examples/s", trained, seconds, per_second)
        recoveries = ({"count": self.chunks.recoveries, "rerun_steps": self.chunks.rerun_steps}
                      if self.chunks is not None else None)
        return LoopResult(step, self.losses, stopper, started, seconds, per_second, recoveries,
                          plan.validate_every)


class EarlyStopping:
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


def read_progress(path: Path, step: int) -> dict:
    """progress.json when it describes `step` (the checkpoint being resumed), else {}."""
    try:
        progress = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return progress if step and progress.get("step") == step else {}


def latest_step(manager) -> int:
    """The step of the manager's newest checkpoint (0: none), from its file name."""
    path = manager.latest_checkpoint
    return int(path.rsplit("-", 1)[-1]) if path else 0
