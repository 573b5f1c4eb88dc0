"""A training process's role in the cluster, and what each role needs before TensorFlow runs.

Why a module of its own: every process of a CTR training cluster starts as
`python -m components.ctr.ps_train`, and what it does is decided by `TF_CONFIG` alone:
`ps` and `worker` serve a gRPC server until killed, `chief` coordinates, none trains in one
process. What must happen before TensorFlow's first op (a remote-call deadline for the
chief, enough inter-op threads for a worker pinned to one core) is decided here too, so the
trainer's phases (`components.ctr.ps_train`) start from a process already set up.
"""
from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("retrain.ps_train")

SERVER_ROLES = ("ps", "worker")
MIN_REMOTE_CALL_TIMEOUT_S = 5
REMOTE_TIMEOUT_RETRIES = 3    # timed-out remote calls the coordinator runs again, per run


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


def set_remote_call_deadline(seconds: float) -> None:
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
