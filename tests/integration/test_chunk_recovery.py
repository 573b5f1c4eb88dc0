"""Two ways TensorFlow's coordinator lost a chunk after a network cut, and how a run survives.

1. A worker's input that reports its end mid-run: the chunks that did not finish run again.

On a real (in-process) cluster: one ps, one worker, a ClusterCoordinator. The first
iterator the scheduler makes holds 5 elements, so the third 2-step chunk hits "End of
sequence" on the worker, as TensorFlow's rebuilt iterator did after a 20 s worker-host cut
in CI; the coordinator then cancels the chunks queued behind it. Later iterators repeat
forever, like the training input. A step counter on the ps counts only whole chunks (its
update waits for the chunk's reads, as the trainer's gradient updates do).
2. A remote call that never returns (its reply lost in the cut; here a chunk that sleeps past
the deadline stands in for it): the chief's remote-call deadline
(train_roles.set_remote_call_deadline) times it out and the coordinator runs it again.

Runs in a subprocess: connecting to a cluster changes the process's eager context (and
AutoGraph needs the chunk function's source in a file).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent("""
    import json, logging, sys, time
    import tensorflow as tf
    from components.ctr.chunks import ChunkScheduler
    from components.ctr.cluster import free_ports
    from components.ctr.train_roles import set_remote_call_deadline

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    max_recoveries, first_len = int(sys.argv[1]), int(sys.argv[2])
    hang_s, deadline_s = float(sys.argv[3]), float(sys.argv[4])
    set_remote_call_deadline(deadline_s)
    ports = dict(zip(("ps", "worker"), free_ports(2)))
    cluster = tf.train.ClusterSpec({r: [f"localhost:{p}"] for r, p in ports.items()})
    servers = [tf.distribute.Server(cluster, job_name=r, task_index=0, protocol="grpc",
                                    start=True) for r in ports]
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc"))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        steps = tf.Variable(0, dtype=tf.int64)
        hang_once = tf.Variable(hang_s > 0)

    made = []
    def make_iterator():
        size = first_len if not made else -1
        made.append(size)
        return iter(coordinator.create_per_worker_dataset(
            lambda: tf.data.Dataset.range(1, 1000).take(size)))

    @tf.function
    def chunk(iterator, n):
        total = tf.constant(0, tf.int64)
        for _ in tf.range(n):
            total += next(iterator)
        if hang_once:
            hang_once.assign(False)
            tf.py_function(lambda: time.sleep(hang_s), [], [])
        # Counted only after every read: without the data dependency TensorFlow may run the
        # update beside a loop that fails, as it orders only ops on the same resource.
        with tf.control_dependencies([total]):
            steps.assign_add(tf.cast(n, tf.int64))
        return tf.cast(total, tf.float32) / tf.cast(n, tf.float32)

    scheduler = ChunkScheduler(coordinator, chunk, make_iterator, max_recoveries=max_recoveries)
    started = time.time()
    try:
        for end in range(2, 11, 2):
            scheduler.schedule(end, 2)
        settled = scheduler.settle()
        scheduler.schedule(12, 2)            # the run goes on after a recovery
        settled += scheduler.settle()
        out = {"settled": [s for s, _ in settled], "steps": int(steps.numpy()),
               "seconds": time.time() - started,
               "recoveries": scheduler.recoveries, "rerun_steps": scheduler.rerun_steps,
               "iterators": len(made)}
    except RuntimeError as e:
        out = {"error": str(e), "steps": int(steps.numpy())}
    print("RESULT " + json.dumps(out), flush=True)
""")


REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, max_recoveries: int, first_len: int, hang_s: float = 0,
         deadline_s: float = 0, timeout_s: float = 240) -> dict:
    script = tmp_path / "chunks_on_a_cluster.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(script), *map(str, (max_recoveries, first_len, hang_s, deadline_s))],
                          capture_output=True, text=True, timeout=timeout_s, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return {**json.loads(lines[-1][len("RESULT "):]), "log": proc.stderr}


def test_an_input_that_ends_mid_run_reruns_the_unfinished_chunks_on_fresh_iterators(tmp_path):
    out = _run(tmp_path, max_recoveries=3, first_len=5, deadline_s=60)
    assert out["recoveries"] == 1 and out["iterators"] == 2, out["log"][-3000:]
    assert out["settled"] == [2, 4, 6, 8, 10, 12], out["log"][-3000:]   # every chunk, once
    assert out["steps"] == 12, out["log"][-6000:]        # the whole budget, none lost
    assert 2 <= out["rerun_steps"] <= 6                  # the failed chunk and those behind it
    assert "run again on fresh iterators (recovery 1 of at most 3)" in out["log"]


def test_an_input_that_keeps_ending_fails_the_run_after_the_bounded_recoveries(tmp_path):
    out = _run(tmp_path, max_recoveries=0, first_len=5)
    assert "training input ended 1 times although it repeats forever" in out.get("error", ""), out
    assert out["steps"] < 12


# A known defect, not fixed (docs/reliability.md): on a loaded machine TensorFlow's
# coordinator thread can block on the stuck call while it drops an executor, so the run
# waits for the whole sleep (5 of 16 runs beside three busy loops; once in a fresh-clone CI).
@pytest.mark.xfail(reason="TensorFlow's coordinator can block on the stuck call after the "
                          "deadline (executor clean-up); the launcher's stall watch ends such "
                          "a run", raises=(AssertionError, subprocess.TimeoutExpired), strict=False)
def test_a_remote_call_past_the_deadline_is_run_again_and_the_run_goes_on(tmp_path):
    # A passing run settles in under 60 s (10 s on an idle machine, TensorFlow's start
    # included); one that hit the defect cannot pass any more, so it is stopped at 120 s
    # instead of costing the suite the full 240 s.
    out = _run(tmp_path, max_recoveries=3, first_len=-1, hang_s=120, deadline_s=6,
               timeout_s=120)
    assert "error" not in out, out
    assert out["settled"] == [2, 4, 6, 8, 10, 12] and out["recoveries"] == 0
    assert out["steps"] >= 12                  # the timed-out call may have applied its steps
    assert out["seconds"] < 60                 # did not wait for the 120 s call to return
    assert "DeadlineExceeded" in out["log"]
