"""Helpers for the tests that run a real PS cluster (components.ctr.cluster) in a thread
and watch it from outside: its checkpoint progress and its status file (imported by name:
pytest puts this folder on sys.path)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path


def in_thread(fn):
    """Run fn in a thread; return (thread, box) where box holds its result or error."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def progress(ckpt_dir: Path) -> int:
    """The step of the last checkpoint the chief recorded (0 before the first)."""
    try:
        return json.loads((ckpt_dir / "progress.json").read_text())["step"]
    except (FileNotFoundError, ValueError, KeyError):
        return 0


def status(status_file: Path) -> dict:
    """The launcher's status file ({} before it is written)."""
    try:
        return json.loads(Path(status_file).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def pid(status_file: Path, name: str) -> int | None:
    return status(status_file).get("pids", {}).get(name)
