"""Which code made an artifact: the git commit (plus `-dirty`) or the package version."""
from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def git_commit(root: Path = REPO) -> str | None:
    """The HEAD commit (12 hex digits) of the checkout at `root`; None outside one."""
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5,
                              check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _package_version() -> str:
    try:
        return f"retrain=={metadata.version('retrain')}"
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    commit = git_commit()
    if commit is None:
        return _package_version()
    try:
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return _package_version()   # never call a tree clean without knowing it
    return f"git:{commit}{'-dirty' if dirty else ''}"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """`code_version()`, plus a hash of the uncommitted changes when the tree is dirty, so a
    cached artifact is never reused across an edit that was not committed yet."""
    version = code_version()
    if not version.endswith("-dirty"):
        return version
    try:
        diff = subprocess.run(["git", "-C", str(REPO), "diff", "HEAD"], capture_output=True,
                              timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return version + "+unknown-changes"
    return f"{version}+{hashlib.sha256(diff).hexdigest()[:12]}"
