"""Validate a window's unvalidated days in one process, each day keeping its own verdict.

A long window's first run (a backfill, a new user) finds dozens of older days no run has
validated. One process per day paid Python, Beam and great-expectations start-up every
time (about 7 s a day here); one pass pays it once. Each day still gets what a
single-day validation gives it: its report in its own folder, its quarantine marker when
it fails, and its own outcome in the result, so one bad day never stops the others. A
day's bad data (a failed gate, an unreadable part) is its outcome; any other error is
the pass's, and a retry runs it again.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from retrain.common.atomic import atomic_dir, write_json
from retrain.common.errors import BAD_DATA, kind_of
from retrain.common.jsonable import jsonable

log = logging.getLogger("retrain.window_validation")

SUMMARY_FILE = "window.json"


@dataclasses.dataclass
class WindowValidateSpec:
    days: list[dict]      # the family's validate spec of each day, oldest first
    out_dir: str          # this pass's own folder: window.json (each day's outcome)


def validate_days(specs: list, validate_one: Callable[[object], dict]) -> list[dict]:
    """[{"span_dir", "seconds", "result"} or {"span_dir", "seconds", "error",
    "error_kind"}] in the order of `specs` (oldest first: a day's drift rules read the
    day before, validated just before it)."""
    outcomes = []
    for i, spec in enumerate(specs, 1):
        t0 = time.perf_counter()
        outcome: dict = {"span_dir": spec.span_dir}
        try:
            outcome["result"] = validate_one(spec)
        except Exception as e:  # noqa: BLE001 - a day's bad data is that day's outcome
            if kind_of(e) != BAD_DATA:
                raise
            outcome.update(error=f"{type(e).__name__}: {e}", error_kind=BAD_DATA)
        outcome["seconds"] = round(time.perf_counter() - t0, 3)
        outcomes.append(outcome)
        log.info("window validation: %d/%d %s %s (%.1fs)", i, len(specs), spec.span_dir,
                 "passed" if "result" in outcome else "failed", outcome["seconds"])
    return outcomes


def finish(spec: WindowValidateSpec, outcomes: list[dict], seconds: dict) -> dict:
    """Write the pass's summary atomically; the step's result."""
    summary = jsonable({"days": outcomes, "seconds": seconds,
                        "passed": sum("result" in o for o in outcomes),
                        "failed": sum("error" in o for o in outcomes)})
    with atomic_dir(spec.out_dir) as tmp:
        write_json(tmp / SUMMARY_FILE, summary)
    return {**summary, "uri": spec.out_dir}
