"""Publishing runs of a DAG evaluate and publish one at a time, in the order they finished
training.

Several runs of a DAG may be active at once (RETRAIN_MAX_ACTIVE_RUNS), so that a
backfill's days overlap. Shadow runs never publish and need no turn. Two publishing runs
that overlapped would both compare their candidate with the same published model, and the
registry's compare-and-swap would then refuse the second publish (principles: "current"
changes by compare-and-swap). So a publishing run takes a ticket when its training ends,
waits (a reschedule sensor: no worker slot held) while a run with an earlier ticket is
still active, and gives its ticket back when its push ends. A run that died before its
push leaves its ticket behind; the next waiter finds that run finished and drops it.

Tickets are files under `<home>/turns/<dag_id>/`, named by the time they were taken, on
the artifact root every worker already shares.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from retrain.common.atomic import write_json
from retrain.common.paths import safe_run_id

ACTIVE = ("queued", "running")


def folder(home: str, dag_id: str) -> Path:
    return Path(home) / "turns" / dag_id


def _own(home: str, dag_id: str, run_id: str) -> list[Path]:
    return sorted(folder(home, dag_id).glob(f"*__{safe_run_id(run_id)}.json"))


def take(home: str, dag_id: str, run_id: str) -> Path:
    """This run's ticket: the one it already holds (a retried or rescheduled wait keeps its
    place), else a new one at the end of the line."""
    mine = _own(home, dag_id, run_id)
    if mine:
        return mine[0]
    return write_json(folder(home, dag_id) / f"{time.time_ns():020d}__{safe_run_id(run_id)}.json",
                      {"run_id": run_id})


def ahead(home: str, dag_id: str, run_id: str, state_of: Callable[[str], str]
          ) -> tuple[list[str], dict[str, str]]:
    """(the runs whose tickets come before this run's and that are still active, queued or
    running by `state_of`; {run: state} of the earlier tickets dropped because their runs
    ended or Airflow no longer knows them)."""
    mine = take(home, dag_id, run_id).name
    waiting, ended = [], {}
    for ticket in sorted(folder(home, dag_id).glob("*.json")):
        if ticket.name >= mine:
            break
        try:
            other = json.loads(ticket.read_text())["run_id"]
        except (OSError, ValueError, KeyError):   # given back while we read it
            continue
        state = state_of(other)
        if state in ACTIVE:
            waiting.append(other)
        else:
            ended[other] = state
            ticket.unlink(missing_ok=True)
    return waiting, ended


def give_back(home: str, dag_id: str, run_id: str) -> None:
    for ticket in _own(home, dag_id, run_id):
        ticket.unlink(missing_ok=True)


def run_not_found(error: BaseException) -> bool:
    """Whether asking Airflow for a run's state failed because there is no such run (404):
    in-process (`dag.test()`) the API client's error carries the response; in a task the
    supervisor passes the status code on in the error's detail."""
    response = getattr(error, "response", None)
    if response is not None:
        return getattr(response, "status_code", None) == 404
    detail = getattr(getattr(error, "error", None), "detail", None)
    return isinstance(detail, dict) and detail.get("status_code") == 404
