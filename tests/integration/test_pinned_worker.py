"""A cluster whose processes may run on one core only still trains.

TensorFlow sizes its inter-op pool from the cores a process may run on; a worker pinned
to one core (taskset, a container's cpuset) got one thread and its first remote training
function never finished (found by bench/ps_workers.py: the chief retried the chunk until
its remote-call deadline, then failed the run). The launcher and every role it starts run
here on one core; with a short remote-call deadline the run fails in about a minute
if the hang is back, and finishes in seconds otherwise.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_ensure_inter_op_threads_on_one_core(monkeypatch):
    from components.ctr.train_roles import ensure_inter_op_threads
    monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    ensure_inter_op_threads()
    assert "TF_NUM_INTEROP_THREADS" not in os.environ      # TensorFlow's own size stands
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1}, raising=False)
    ensure_inter_op_threads()
    assert os.environ["TF_NUM_INTEROP_THREADS"] == "2"
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "1")       # an explicit choice wins
    ensure_inter_op_threads()
    assert os.environ["TF_NUM_INTEROP_THREADS"] == "1"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_cluster_pinned_to_one_core_trains(preprocessed, tmp_path):
    core = min(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CONFIG", "TF_NUM_INTEROP_THREADS")}
    spec = {"train": {"preprocess_dir": preprocessed["output_dir"],
                      "out_dir": str(tmp_path / "model"), "batch_size": 256, "max_steps": 12,
                      "steps_per_execution": 4, "validation_percent": 0, "export": False,
                      "checkpoint_every_steps": 0, "remote_call_timeout_s": 15}}
    done = subprocess.run(
        [sys.executable, "-m", "components.ctr.cluster", "--spec", json.dumps(spec),
         "--result-file", str(tmp_path / "result.json")],
        env=env, capture_output=True, text=True, timeout=240,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["steps_run"] == 12, result
