"""Run a step's `python -m` entry point as a child process from an Airflow task.

Output is streamed line by line into the task log (prefixed with the step name), and a
failure is raised with the step's own error message. A task's death ends everything its
step started: the step runs in its own process group, gets SIGTERM from the kernel when
the task process dies however it dies (PR_SET_PDEATHSIG, even SIGKILL), and its entry
point (`components.common.step`) then kills its whole group. Stdlib only, so DAG files may
import it.

The launcher's own files (the spec, the step's result) live in a scratch folder beside the
step's output folder, in the run's own folder
(`<run>/.<output>.launch-<step>-<pid>-<host>-XXXX`), removed on every exit Python sees; a
launcher killed outright leaves it there, inside that run, and the next launcher of that
output on this host removes it once its pid is gone. Only a spec that names no local
output folder uses the system temp dir (`retrain-launch-<step>-XXXX`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from components.common.errors import (BAD_DATA, TRANSIENT, disk_full_message, low_space,
                                      out_of_space)
from components.common.paths import output_dir_of  # noqa: F401  (also the cluster's)

log = logging.getLogger("retrain.launch")

# A child's log line as components.common.step formats it ("WARNING name: message"), after
# the prefixes of any relays on the way ("[chief] "), or TensorFlow's C++ line ("E0000 ...").
_LEVEL = re.compile(r"^(?:\[[^\]]+\] )*(?:(DEBUG|INFO|WARNING|ERROR|CRITICAL) |([IWEF])\d{4} )")
_RELAYS = re.compile(r"^(?:\[[^\]]+\] )*")
_CPP_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
# TensorFlow probes CUDA at start and logs its failure as an error; on a machine with no
# GPU device that is expected, not a problem of the step.
_NO_GPU_NOISE = ("failed call to cuInit", "Could not find cuda drivers")


def has_gpu_device() -> bool:
    """Whether this machine exposes an NVIDIA device (what TensorFlow's CUDA probe needs)."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


class LineLevels:
    """The Airflow log level of each line a child prints: its own level where the line
    names one (so a step's WARNING is a WARNING in the task log and the UI's level filter
    works); a record's continuation (an indented or blank line) and a whole traceback keep
    their record's level; any other line is INFO (a plain `print` after an error line is
    not an error)."""

    def __init__(self, gpu: bool | None = None):
        self.level = logging.INFO
        self.gpu = has_gpu_device() if gpu is None else gpu
        self.traceback = False

    def __call__(self, line: str) -> int:
        m = _LEVEL.match(line)
        if m:
            self.traceback = False
            if not self.gpu and any(n in line for n in _NO_GPU_NOISE):
                self.level = logging.INFO
                return logging.DEBUG
            self.level = (logging.getLevelName(m.group(1)) if m.group(1)
                          else _CPP_LEVELS[m.group(2)])
            return self.level
        body = _RELAYS.sub("", line)     # "[chief]   detail" continues like "  detail"
        if "Traceback (most recent call last)" in body:
            self.level, self.traceback = logging.ERROR, True
        elif self.traceback:
            if body.strip() and not body[:1].isspace() and not body.startswith(
                    ("During handling", "The above exception")):
                self.traceback = False     # the exception's own line ends the traceback
        elif body.strip() and not body[:1].isspace():
            self.level = logging.INFO
        return self.level


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


LAUNCHER_ENV = "RETRAIN_STEP_LAUNCHER"
LAUNCHERS = ("subprocess", "kubernetes")
# The interpreter of the ML environment (TensorFlow, Beam, great-expectations). Airflow's
# own processes run from an environment without them (requirements-airflow.lock), so the
# task hands each step to this interpreter; unset, the step runs with the task's own.
STEP_PYTHON_ENV = "RETRAIN_STEP_PYTHON"


def step_python() -> str:
    """The interpreter that runs steps: $RETRAIN_STEP_PYTHON, else this process's own.
    A configured path that is not an executable file is a setup error, said at once."""
    configured = os.environ.get(STEP_PYTHON_ENV, "").strip()
    if not configured:
        return sys.executable
    if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
        raise FileNotFoundError(f"{STEP_PYTHON_ENV}={configured} is not an executable file: "
                                "point it at the ML environment's python (e.g. .venv/bin/python)")
    return configured


def run_step(module: str, spec: dict, env: dict | None = None) -> dict:
    """Run a step's entry point and return its result; how is configuration
    ($RETRAIN_STEP_LAUNCHER): `subprocess` (default: a child process of the task, with
    RETRAIN_STEP_PYTHON) or `kubernetes` (a pod of the ML image: components.common.pod_launch)."""
    launcher = os.environ.get(LAUNCHER_ENV, "").strip() or "subprocess"
    if launcher not in LAUNCHERS:
        raise ValueError(f"{LAUNCHER_ENV}={launcher}: must be one of {LAUNCHERS}")
    if launcher == "kubernetes":
        from components.common.pod_launch import run_step_in_pod
        return run_step_in_pod(module, spec, env)
    return _run_step_here(module, spec, env)


def _remove_stale(parent: Path, prefix: str) -> None:
    """Scratch folders of launchers that are gone (killed outright: no `finally` ran)."""
    from components.common.atomic import pid_alive
    host = _host()
    for old in parent.glob(f"{prefix}*"):
        pid, _, rest = old.name[len(prefix):].partition("-")
        # Only this host's: a pid says nothing about a launcher on another host that
        # shares the artifact volume.
        if old.is_dir() and pid.isdigit() and rest.startswith(f"{host}-") \
                and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


@contextlib.contextmanager
def scratch_dir(output: str | os.PathLike | None, tag: str) -> Iterator[Path]:
    """A private folder for a launcher's own files. Beside `output` (the step's output
    folder, so inside the run's folder) as `.<output name>.<tag>-<pid>-<host>-XXXX`, stale
    ones of this host's dead launchers removed first; with no output folder (or one whose
    parent cannot be written) in the system temp dir as `retrain-<tag>-XXXX`. Removed on
    success, failure, exception and SIGTERM-turned-exception; after a SIGKILL what is left
    lies in the run."""
    tmp = None
    if output is not None:
        output = Path(output)
        prefix = f".{output.name}.{tag}-"
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale(output.parent, prefix)
            tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{_host()}-",
                                        dir=output.parent))
        except OSError as e:
            log.warning("no scratch folder beside %s (%s); using the system temp dir",
                        output, type(e).__name__)
    if tmp is None:
        tmp = Path(tempfile.mkdtemp(prefix=f"retrain-{tag}-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
