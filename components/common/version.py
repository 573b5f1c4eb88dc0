"""Which code made an artifact: the git commit (plus `-dirty`) or the package version."""
from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return f"git:{commit}{'-dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        try:
            return f"retrain=={metadata.version('retrain')}"
        except metadata.PackageNotFoundError:
            return "unknown"
