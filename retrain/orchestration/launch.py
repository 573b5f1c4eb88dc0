"""Run a step's `python -m` entry point as a child process from an Airflow task.

Output is streamed line by line into the task log (prefixed with the step name), and a
failure is raised with the step's own error message. A task's death ends everything its
step started: the step runs in its own process group, gets SIGTERM from the kernel when
the task process dies however it dies (PR_SET_PDEATHSIG, even SIGKILL), and its entry
point (`retrain.common.step`) then kills its whole group. The standard library and
the settings (pydantic-settings) only, so DAG files may import it.

The launcher's own files (the spec, the step's result) live in a scratch folder beside the
step's output folder, in the run's own folder
(`<run>/.<output>.launch-<step>-<pid>-<host>-XXXX`), removed on every exit Python sees; a
launcher killed outright leaves it there, inside that run, and the next launcher of that
output on this host removes it once its pid is gone. Only a spec that names no local
output folder uses the system temp dir (`retrain-launch-<step>-XXXX`).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from retrain.common.errors import (BAD_DATA, BadDataFailed, StepFailed, disk_full_message,
                                   low_space, out_of_space)
from retrain.common.processes import PARENT_ENV, die_with_parent, scratch_dir
from retrain.common.settings import settings
from retrain.orchestration.step_logs import LineLevels
from retrain.common.paths import output_dir_of  # noqa: F401  (also the cluster's)

log = logging.getLogger("retrain.launch")

LAUNCHER_ENV = "RETRAIN_STEP_LAUNCHER"
LAUNCHERS = ("subprocess", "kubernetes")
# The interpreter of the ML environment (TensorFlow, Beam, great-expectations). Airflow's
# own processes run from an environment without them (requirements-airflow.lock), so the
# task hands each step to this interpreter; unset, the step runs with the task's own.
STEP_PYTHON_ENV = "RETRAIN_STEP_PYTHON"


def step_python() -> str:
    """The interpreter that runs steps: $RETRAIN_STEP_PYTHON, else this process's own.
    A configured path that is not an executable file is a setup error, said at once."""
    configured = settings().step_python
    if not configured:
        return sys.executable
    if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
        raise FileNotFoundError(f"{STEP_PYTHON_ENV}={configured} is not an executable file: "
                                "point it at the ML environment's python (e.g. .venv/bin/python)")
    return configured


def run_step(module: str, spec: dict, env: dict | None = None) -> dict:
    """Run a step's entry point and return its result; how is configuration
    ($RETRAIN_STEP_LAUNCHER): `subprocess` (default: a child process of the task, with
    RETRAIN_STEP_PYTHON) or `kubernetes` (a pod of the ML image: retrain.orchestration.pod_launch)."""
    launcher = settings().step_launcher      # a ConfigError names any other value
    if launcher == "kubernetes":
        from retrain.orchestration.pod_launch import run_step_in_pod
        return run_step_in_pod(module, spec, env)
    return _run_step_here(module, spec, env)


def _run_step_here(module: str, spec: dict, env: dict | None = None) -> dict:
    name = module.rsplit(".", 1)[-1]
    with scratch_dir(output_dir_of(spec), f"launch-{name}") as tmp:
        result_file = Path(tmp) / "result.json"
        spec_file = Path(tmp) / "spec.json"
        try:
            spec_file.write_text(json.dumps(spec, default=str))
        except OSError as e:
            if out_of_space(e) is not None:
                raise StepFailed(f"step {module} not started: "
                                 f"{disk_full_message(e, spec_file)}") from e
            raise
        cmd = [step_python(), "-m", module, "--spec", f"@{spec_file}",
               "--result-file", str(result_file)]
        log.info("running %s", " ".join(cmd))
        child_env = {**os.environ, **(env or {}), PARENT_ENV: str(os.getpid())}
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", env=child_env,
                                start_new_session=True, preexec_fn=die_with_parent())
        try:
            assert proc.stdout is not None
            level_of = LineLevels()
            for line in proc.stdout:
                line = line.rstrip()
                log.log(level_of(line), "[%s] %s", name, line)
            code = proc.wait()
        except BaseException:
            # Task killed or interrupted: take the whole child process group down with it.
            _kill_group(proc)
            raise
        try:
            result = json.loads(result_file.read_text()) if result_file.exists() else None
        except (OSError, ValueError):   # cut short: written onto a full disk
            result = None
        if result is None and code == 0:
            code = -1
        if code != 0:
            msg = (result or {}).get("error") or _no_result(code, output_dir_of(spec))
            failure = BadDataFailed if (result or {}).get("error_kind") == BAD_DATA \
                else StepFailed
            raise failure(f"step {module} failed: {msg}")
        return result


def _no_result(code: int, out: Path | None) -> str:
    """A step that left no readable result file: a full disk is the usual reason, and
    says so (exit code -1: it exited 0 but its result could not be read)."""
    low = low_space(out)
    return f"exit code {code}" + (f", no readable result file; {low}" if low else
                                  ", no readable result file" if code == -1 else "")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
