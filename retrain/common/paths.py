"""Where artifacts live: one root, paths keyed by model family, span and run id.

Local runs default to the checkout's `var/` (whatever the working directory); production
points RETRAIN_HOME at shared storage. Every path derivation lives here, the `dt=<day>`
partition name included, so no stage invents its own.
"""
from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

ENV_HOME = "RETRAIN_HOME"


def artifact_root(root: str | os.PathLike | None = None) -> Path:
    """`root`, else RETRAIN_HOME, else the default home (see default_home)."""
    from retrain.common.settings import settings
    return Path(root or settings().home or default_home()).resolve()


def default_home() -> Path:
    """`var/` of the checkout this package runs from (a clone: it has `dags/` beside the
    package), so `retrain registry list` answers the same in any folder; `./var` for an
    installed package, which has no checkout."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "dags").is_dir() and (checkout / "components").is_dir():
        return checkout / "var"
    return Path.cwd() / "var"


PARTITION_PREFIX = "dt="


def partition_name(day: dt.date | str) -> str:
    """`dt=YYYY-MM-DD`: a day's folder name (raw spans, run history, quarantine markers)."""
    return f"{PARTITION_PREFIX}{day.isoformat() if isinstance(day, dt.date) else day}"


def partition(root: str | os.PathLike, day: dt.date | str) -> str:
    """`<root>/dt=<day>` as a string, so a URL root (gs://, s3://) stays a URL."""
    return f"{str(root).rstrip('/')}/{partition_name(day)}"


def default_raw_root(root: str | os.PathLike, family: str) -> Path:
    """Where a family's dt= partitions are when no raw_root is given: <home>/raw/<family>."""
    return Path(root) / "raw" / family


def raw_span_dir(root: Path, family: str, span: dt.date) -> Path:
    return default_raw_root(root, family) / partition_name(span)


def safe_run_id(run_id: str) -> str:
    """Airflow run ids contain ':' and '+'; keep them readable but path-safe."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)


def run_dir(root: Path, family: str, span: dt.date, run_id: str) -> Path:
    return Path(root) / "runs" / family / partition_name(span) / safe_run_id(run_id)


def registry_root(root: Path) -> Path:
    return Path(root) / "registry"


OUTPUT_KEYS = ("out_dir", "output_dir")


def output_dir_of(spec: dict) -> Path | None:
    """The local output folder a step's spec names (`out_dir` / `output_dir`, at the top
    or one level down, as a cluster spec's `train`), None if it names none (or a URL)."""
    nested = [v for v in spec.values() if isinstance(v, dict)]
    for level in (spec, *nested):
        for key in OUTPUT_KEYS:
            value = level.get(key)
            if isinstance(value, str) and value and "://" not in value \
                    and os.path.isabs(value):
                return Path(value)
    return None
