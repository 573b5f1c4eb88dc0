"""A task's death ends everything its step started: SIGKILL of the task process (the one
that called `run_step`) takes the step and the step's own children down within seconds,
so nothing keeps writing into a dead run's folder. And no launcher (the step launcher, the
PS cluster's) leaves a folder in the system temp dir, whether its step succeeds, fails or
it is SIGKILLed: its scratch lives in the run's folder and is removed on every exit."""
from __future__ import annotations

import json
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
    from retrain.orchestration.launch import run_step
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


# ------------------------------------------------ temp folders: in the run, or removed

STEP = textwrap.dedent("""
    import dataclasses, os, sys, time
    from pathlib import Path
    from retrain.common.step import main

    @dataclasses.dataclass
    class Spec:
        out_dir: str
        mode: str = "ok"
        pid_file: str = ""

    def run(spec):
        if spec.pid_file:
            Path(spec.pid_file).write_text(str(os.getpid()))
        if spec.mode == "fail":
            raise ValueError("planned failure")
        if spec.mode == "sleep":
            time.sleep(120)
        Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
        return {"out_dir": spec.out_dir}

    if __name__ == "__main__":
        sys.exit(main(Spec, run))
""")
# A stand-in for the PS trainer (no TensorFlow): servers sleep, the chief writes its result.
FAKE_TRAINER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    args = sys.argv[1:]
    if "--serve" in args:
        time.sleep(600)
        sys.exit(0)
    spec = json.loads(Path(args[args.index("--spec") + 1][1:]).read_text())
    result = Path(args[args.index("--result-file") + 1])
    if spec.get("pid_file"):
        Path(spec["pid_file"]).write_text(str(os.getpid()))
    if spec.get("mode") == "sleep":
        time.sleep(600)
    if spec.get("mode") == "fail":
        result.write_text(json.dumps({"error": "planned failure"}))
        sys.exit(1)
    result.write_text(json.dumps({"trained": True}))
""")
LAUNCH = textwrap.dedent("""
    import json, sys
    from retrain.orchestration.launch import StepFailed, run_step
    try:
        run_step("scratch_step", json.loads(sys.argv[1]))
    except StepFailed:
        sys.exit(3)
""")
CLUSTER = textwrap.dedent("""
    import json, sys
    from components.ctr import cluster
    cluster.TRAINER_MODULE = "fake_trainer"
    try:
        cluster.run(cluster.ClusterSpec(train=json.loads(sys.argv[1]), num_ps=1,
                                        num_workers=1, startup_timeout_s=30),
                    sink=lambda line: None)
    except cluster.ClusterFailed:
        sys.exit(3)
""")


def _retrain_temps(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("retrain-"))


def _scratch(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".model."))


@pytest.mark.parametrize("launcher", ["run_step", "cluster"])
@pytest.mark.parametrize("mode", ["ok", "fail", "SIGKILL"])
def test_a_launcher_leaves_no_folder_in_the_system_temp_dir(tmp_path, launcher, mode):
    """Success, failure and a SIGKILLed launcher: nothing new in the (private) system temp
    dir; what a killed launcher leaves lies in its run's folder and the next launcher of
    that output removes it."""
    tmpdir, run_dir, code = tmp_path / "tmp", tmp_path / "run", tmp_path / "code"
    for d in (tmpdir, run_dir, code):
        d.mkdir()
    (code / "scratch_step.py").write_text(STEP)
    (code / "fake_trainer.py").write_text(FAKE_TRAINER)
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": os.pathsep.join(
        [str(code), str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    pid_file = tmp_path / "pid"
    spec = {"out_dir": str(run_dir / "model"), "pid_file": str(pid_file),
            "mode": "sleep" if mode == "SIGKILL" else mode}
    if launcher == "cluster":
        spec["preprocess_dir"] = str(tmp_path / "pre")
    script = LAUNCH if launcher == "run_step" else CLUSTER
    before = _retrain_temps(tmpdir)

    def launch(s: dict) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", script, json.dumps(s)], env=env,
                                cwd=HERE.parents[1])

    task = launch(spec)
    if mode != "SIGKILL":
        assert task.wait(timeout=120) == (0 if mode == "ok" else 3)
        assert _scratch(run_dir) == [], "a finished launcher left its scratch folder"
    else:
        deadline = time.time() + 60
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.time() < deadline, "the step never started"
            assert task.poll() is None, "the launcher ended early"
            time.sleep(0.1)
        step = int(pid_file.read_text())
        left = _scratch(run_dir)
        assert len(left) == 1 and left[0].startswith(
            ".model.launch-scratch_step-" if launcher == "run_step" else ".model.cluster-")
        task.send_signal(signal.SIGKILL)
        task.wait(timeout=30)
        deadline = time.time() + 15
        while _alive(step) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(step), "the step outlived its launcher"
        assert _scratch(run_dir) == left, "a killed launcher's scratch stays in its run"
        # The retry (a new launcher of the same output) removes the dead one's folder.
        retry = launch({**spec, "mode": "ok", "pid_file": ""})
        assert retry.wait(timeout=120) == 0
        assert _scratch(run_dir) == []
    assert _retrain_temps(tmpdir) == before == []
