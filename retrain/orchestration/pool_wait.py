"""The first line of a heavy task's log when it had to wait for a pool slot: "waited 3 min
2 s for a slot of pool gpu_training (1 slot): ready since preprocess ended at 10:01:02
UTC, started 10:04:04 UTC".

Why: a backfill's train task can wait minutes on the one-slot gpu_training pool (or the
one-slot retrain_backfill pool) and its log, the first place a person looks, started
with nothing saying why.

How it is measured: Airflow 3.3's Task SDK gives a task its own start time
(`context["ti"].start_date`) but neither the time the scheduler found it ready
(`scheduled_dttm`) nor the time it was queued (`queued_dttm`): those stay in the metadata
DB, which tasks may not read. In a retrain DAG each task runs after the one before it
(resolve_span -> wait_for_span -> validate -> preprocess -> train -> wait_for_turn ->
evaluate), so the task was ready when that one ended: every task records its end in the
run's folder (`mark_ended`) and a pooled task measures from it. Only a first try is
measured (a retry or a cleared task became ready later than its upstream's end), and a
wait under MIN_WAIT_S is the scheduler's own loop, not a pool: nothing is said. The
Retrain tab shows the exact figure from the DB (queued - scheduled; retrain.orchestration.
pool_view) and what holds the slots.

Stdlib + the light policy module; the slot counts from scripts/pools.json (what
`airflow pools import` loads, locally and on the stack).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

from retrain.orchestration.airflow_policy import BACKFILL_POOL, HEAVY_POOL, is_backfill

ENDED_DIR = "task_ends"              # <run_dir>/task_ends/<task_id>.json: {"ended_at"}
MIN_WAIT_S = 30.0                    # below: the scheduler's loop and the executor's start
POOLS_FILE = Path(__file__).resolve().parents[2] / "scripts" / "pools.json"

log = logging.getLogger("retrain.dag")


def duration_words(seconds: float) -> str:
    """'3 min 2 s', '1 h 5 min', '12 s' (the log lines and the Retrain tab say it alike)."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def slots_words(slots) -> str:
    if slots is None:
        return "slots unknown"
    if slots < 0:
        return "unlimited slots"
    return f"{slots} slot" + ("" if slots == 1 else "s")


def wait_line(pool: str, slots: int | None, ready_at: dt.datetime, started_at: dt.datetime,
              after: str, min_wait_s: float = MIN_WAIT_S) -> str | None:
    """The log line for a task that became ready at `ready_at` (when `after` ended) and
    started at `started_at` in `pool` of `slots`; None when it did not wait."""
    waited = (started_at - ready_at).total_seconds()
    if waited < min_wait_s:
        return None
    return (f"waited {duration_words(waited)} for a slot of pool {pool} "
            f"({slots_words(slots)}): ready since {after} ended at "
            f"{ready_at.astimezone(dt.timezone.utc):%H:%M:%S} UTC, started "
            f"{started_at.astimezone(dt.timezone.utc):%H:%M:%S} UTC (the Retrain tab shows "
            f"what holds the pool's slots)")


def effective_pool(pool: str | None, dag_run) -> str | None:
    """The pool the task instance really ran in: backfill runs move heavy tasks to their
    own pool (retrain.orchestration.airflow_policy)."""
    return BACKFILL_POOL if pool == HEAVY_POOL and is_backfill(None, dag_run) else pool


def configured_slots(pool: str, pools_file: Path = POOLS_FILE) -> int | None:
    try:
        return int(json.loads(pools_file.read_text())[pool]["slots"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def mark_ended(run_dir: str | Path, task_id: str,
               now: dt.datetime | None = None) -> None:
    """Record that `task_id` of the run ended now (the next task's wait starts here)."""
    from retrain.common.atomic import write_json

    now = now or dt.datetime.now(dt.timezone.utc)
    write_json(Path(run_dir) / ENDED_DIR / f"{task_id}.json", {"ended_at": now.isoformat()})


def ended_at(run_dir: str | Path, task_id: str) -> dt.datetime | None:
    try:
        data = json.loads((Path(run_dir) / ENDED_DIR / f"{task_id}.json").read_text())
        return dt.datetime.fromisoformat(data["ended_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def log_wait(run_dir: str | Path, after: str, pool: str | None, ti, dag_run,
             pools_file: Path = POOLS_FILE) -> str | None:
    """At a pooled task's start: log how long it waited for a slot, when it did (first try
    only). Returns the line logged."""
    pool = effective_pool(pool, dag_run)
    started = getattr(ti, "start_date", None)
    if not pool or started is None or (getattr(ti, "try_number", 1) or 1) > 1:
        return None
    ready = ended_at(run_dir, after)
    if ready is None:
        return None
    line = wait_line(pool, configured_slots(pool, pools_file), ready, started, after)
    if line:
        log.warning("%s", line)
    return line
