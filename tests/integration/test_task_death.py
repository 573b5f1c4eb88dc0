"""A task's death ends everything its step started: SIGKILL of the task process (the one
that called `run_step`) takes the step and the step's own children down within seconds,
so nothing keeps writing into a dead run's folder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TASK = textwrap.dedent("""
    import sys
    from components.common.launch import run_step
    run_step("sleeper", {"pid_file": sys.argv[1]})
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_task_ends_its_step_and_the_steps_children(tmp_path, sig):
    pid_file = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE / "fault_steps"), str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    task = subprocess.Popen([sys.executable, "-c", TASK, str(pid_file)], env=env,
                            cwd=HERE.parents[1])
    deadline = time.time() + 60
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.time() < deadline, "the step never started"
        assert task.poll() is None, "the task process ended early"
        time.sleep(0.2)
    step, child = (int(x) for x in pid_file.read_text().split())
    assert _alive(step) and _alive(child)
    task.send_signal(sig)
    task.wait(timeout=30)
    deadline = time.time() + 10
    while (_alive(step) or _alive(child)) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(step), "the step outlived its task"
    assert not _alive(child), "the step's child outlived the task"
