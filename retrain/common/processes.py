"""Process hygiene every launcher shares (the step launcher of an Airflow task and the
parameter-server cluster launcher of a train step): children die with their parent, and a
launcher's own files go to a scratch folder inside the run that a later launcher of the same
output removes once its owner is gone. Stdlib only.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
from pathlib import Path
from typing import Iterator

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


def _remove_stale(parent: Path, prefix: str) -> None:
    """Scratch folders of launchers that are gone (killed outright: no `finally` ran)."""
    from retrain.common.atomic import pid_alive
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
