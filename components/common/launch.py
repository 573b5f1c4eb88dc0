"""Run a step's `python -m` entry point as a child process from an Airflow task.

Output is streamed line by line into the task log (prefixed with the step name), and a
failure is raised with the step's own error message. A task's death ends everything its
step started: the step runs in its own process group, gets SIGTERM from the kernel when
the task process dies however it dies (PR_SET_PDEATHSIG, even SIGKILL), and its entry
point (`components.common.step`) then kills its whole group. Stdlib only, so DAG files may
import it.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from components.common.errors import BAD_DATA, TRANSIENT

log = logging.getLogger("retrain.launch")

PARENT_ENV = "RETRAIN_STEP_PARENT_PID"   # the task process a step must not outlive
_PR_SET_PDEATHSIG = 1
try:   # loaded before any fork: the child only makes the call
    import ctypes
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # pragma: no cover - not Linux: the step's parent watch still applies
    _LIBC = None


def die_with_parent(sig: int = signal.SIGTERM):
    """A preexec_fn: the kernel sends `sig` to the child when its parent dies."""
    def _set() -> None:   # runs in the child between fork and exec
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, sig)
    return _set


class StepFailed(RuntimeError):
    """The step exited non-zero; `kind` says whether a retry can help."""

    kind = TRANSIENT


class BadDataFailed(StepFailed):
    """The step rejected its input (a `BadData` error in the child): never retried."""

    kind = BAD_DATA


def run_step(module: str, spec: dict, env: dict | None = None) -> dict:
    name = module.rsplit(".", 1)[-1]
    with tempfile.TemporaryDirectory(prefix=f"retrain-{name}-") as tmp:
        result_file = Path(tmp) / "result.json"
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(spec, default=str))
        cmd = [sys.executable, "-m", module, "--spec", f"@{spec_file}",
               "--result-file", str(result_file)]
        log.info("running %s", " ".join(cmd))
        child_env = {**os.environ, **(env or {}), PARENT_ENV: str(os.getpid())}
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", env=child_env,
                                start_new_session=True, preexec_fn=die_with_parent())
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.info("[%s] %s", name, line.rstrip())
            code = proc.wait()
        except BaseException:
            # Task killed or interrupted: take the whole child process group down with it.
            _kill_group(proc)
            raise
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        if code != 0:
            msg = result.get("error") or f"exit code {code}"
            failure = BadDataFailed if result.get("error_kind") == BAD_DATA else StepFailed
            raise failure(f"step {module} failed: {msg}")
        return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
