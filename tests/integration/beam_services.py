"""Beam's portability services on this host, for running a job on the PortableRunner.

Beam's Python job service (`local_job_service_main`) takes the pipeline as Flink's,
Spark's or Dataflow's job servers do, and hands bundles to an EXTERNAL SDK worker pool
(`worker_pool_main`): the same boundary a production runner crosses. Both listen on
loopback ports and are stopped (their process groups) when the block ends.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not listening on port {port} after {timeout} s")


@contextlib.contextmanager
def portable_runner_args(log=subprocess.DEVNULL):
    """Start a job service and a worker pool (their output to `log`); yield the job's
    runner flags."""
    job_port, pool_port = _free_port(), _free_port()
    # The pool starts each SDK worker as `python`: this environment's, not the system's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    procs = []
    try:
        for what, argv, port in (
                ("job service", ["-m", "apache_beam.runners.portability.local_job_service_main",
                                 "--port", str(job_port)], job_port),
                ("worker pool", ["-m", "apache_beam.runners.worker.worker_pool_main",
                                 "--service_port", str(pool_port)], pool_port)):
            procs.append(subprocess.Popen([sys.executable, *argv], start_new_session=True,
                                          stdout=log, stderr=log, env=env))
            _wait_listening(port, procs[-1], what)
        yield ["--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
               "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"]
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
