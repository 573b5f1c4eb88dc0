"""Refuse a run's inputs before any work, naming each problem: a span in the future, a data
folder or config file outside the allowed roots or given as a relative path, a config
file that does not parse. Stdlib only (the DAG factory's first task calls it).

Why: a span in 2030 or `raw_root: /etc` used to wait 12 hours in the sensor, `../../` was
taken relative to wherever the worker ran, and a wrong config failed only when a step read
it, after the wait.

Deployment settings (environment): RETRAIN_MAX_FUTURE_DAYS (default 1: a span may be at
most that many days after today, for clock skew and time zones) and
RETRAIN_ALLOWED_DATA_ROOTS (os.pathsep-separated folders; unset: any absolute path).
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

URL_SCHEMES = ("gs://", "s3://", "hdfs://", "abfs://", "az://")


def allowed_roots() -> list[Path]:
    value = os.environ.get("RETRAIN_ALLOWED_DATA_ROOTS", "")
    return [Path(p).resolve() for p in value.split(os.pathsep) if p]


def check(span: dt.date, *, raw_root: str | None, config: str | None, config_param: str,
          today: dt.date | None = None, max_future_days: int | None = None,
          roots: list[Path] | None = None) -> list[str]:
    """Every problem of the run's inputs (empty: fine)."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    if max_future_days is None:
        max_future_days = int(os.environ.get("RETRAIN_MAX_FUTURE_DAYS", "1"))
    roots = allowed_roots() if roots is None else roots
    problems = []
    if span > today + dt.timedelta(days=max_future_days):
        problems.append(f"span {span} is in the future (today is {today}; at most "
                        f"{max_future_days} day(s) ahead, RETRAIN_MAX_FUTURE_DAYS)")
    for name, value, must_be_file in (("raw_root", raw_root, False),
                                      (config_param, config, True)):
        if not value:
            continue
        if not must_be_file and value.startswith(URL_SCHEMES):
            continue
        path = Path(value)
        if not path.is_absolute():
            problems.append(f"{name} {value!r} is a relative path: give an absolute one")
            continue
        resolved = path.resolve()
        if roots and not any(resolved == r or r in resolved.parents for r in roots):
            problems.append(f"{name} {value!r} is outside the allowed data roots "
                            f"{[str(r) for r in roots]} (RETRAIN_ALLOWED_DATA_ROOTS)")
        elif must_be_file and not resolved.is_file():
            problems.append(f"{name} {value!r} does not exist or is not a file")
        elif not must_be_file and not resolved.is_dir():
            problems.append(f"{name} {value!r} is not a folder")
    return problems
