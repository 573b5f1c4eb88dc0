"""Who waits for a pool slot and who holds it, for the Retrain tab.

Why: a backfill's train task can sit three minutes in "scheduled" on the one-slot
gpu_training pool with nothing in the Grid saying why; Airflow's Pools page counts slots
but names neither the waiting task nor the holder. Here, each pool that has a task ready to
run and no open slot is shown with its slots, the tasks waiting (since when) and the run /
task holding each slot (retrain.orchestration.airflow_views renders it).

`waiting_pools` is a pure function of pool and task-instance rows (tested alone); the
`*_rows` functions read them from Airflow's metadata DB through its ORM, as
retrain.orchestration.asset_events_view does: the API server that serves the views has it
configured. Stdlib at import.
"""
from __future__ import annotations

import datetime as dt
import html
from typing import Any, Iterable

from retrain.orchestration.pool_wait import duration_words, slots_words

# A task instance in these states holds its pool's slots (deferred ones only where the
# pool counts them: include_deferred); a "scheduled" one is ready and waits for a slot.
HOLDING = ("queued", "running")
WAITING = "scheduled"


def _state(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


def waiting_pools(pools: dict[str, dict], tis: Iterable[dict],
                  now: dt.datetime | None = None) -> list[dict]:
    """The pools with a task waiting and no slot open, each {"pool", "slots", "used",
    "waiting": [ti...], "holders": [ti...]} (a ti: dag_id, run_id, task_id, state,
    pool_slots, since, waited_s).

    `pools`: {name: {"slots", "include_deferred"}}; `tis`: task instances with dag_id,
    run_id, task_id, state, pool, pool_slots, scheduled_dttm, queued_dttm, start_date."""
    now = now or dt.datetime.now(dt.timezone.utc)
    by_pool: dict[str, dict] = {}
    for ti in tis:
        pool = pools.get(ti.get("pool"))
        if pool is None:
            continue
        state = _state(ti.get("state"))
        holds = state in HOLDING or (state == "deferred" and pool.get("include_deferred"))
        if not holds and state != WAITING:
            continue
        entry = by_pool.setdefault(ti["pool"], {
            "pool": ti["pool"], "slots": pool.get("slots"), "used": 0, "waiting": [],
            "holders": []})
        since = (ti.get("scheduled_dttm") if state == WAITING
                 else ti.get("start_date") or ti.get("queued_dttm"))
        row = {k: ti.get(k) for k in ("dag_id", "run_id", "task_id")}
        row.update(state=state, pool_slots=ti.get("pool_slots") or 1, since=since,
                   waited_s=(now - since).total_seconds() if since else None)
        if holds:
            entry["used"] += row["pool_slots"]
            entry["holders"].append(row)
        else:
            entry["waiting"].append(row)
    out = []
    for entry in by_pool.values():
        slots = entry["slots"]
        full = slots is not None and slots >= 0 and entry["used"] >= slots
        if entry["waiting"] and full:
            entry["waiting"].sort(key=lambda r: r["since"] or now)
            out.append(entry)
    return sorted(out, key=lambda e: e["pool"])


def _who(row: dict) -> str:
    return f"{row['dag_id']} / {row['run_id']} / {row['task_id']}"


def lines(pool: dict, *, run_id: str | None = None) -> list[str]:
    """A waiting pool in words, one line per waiting task (only `run_id`'s, where given)."""
    holders = "; ".join(f"{_who(h)} ({h['state']}"
                        + (f", {duration_words(h['waited_s'])}" if h["waited_s"] is not None
                           else "") + ")" for h in pool["holders"]) or "nothing visible"
    out = []
    for w in pool["waiting"]:
        if run_id is not None and w["run_id"] != run_id:
            continue
        waited = (f"for {duration_words(w['waited_s'])} " if w["waited_s"] is not None
                  else "")
        out.append(f"{_who(w) if run_id is None else w['task_id']} is waiting {waited}for a "
                   f"slot of pool {pool['pool']} ({slots_words(pool['slots'])}, "
                   f"{pool['used']} used); held by {holders}")
    return out


def table(pools: list[dict]) -> str:
    """An HTML table of `waiting_pools`' answer (every value escaped)."""
    if not pools:
        return "<p>no task is waiting for a pool slot</p>"
    rows = []
    for p in pools:
        waiting = "<br>".join(html.escape(f"{_who(w)}" + (
            f" (for {duration_words(w['waited_s'])})" if w["waited_s"] is not None else ""))
            for w in p["waiting"])
        holders = "<br>".join(html.escape(f"{_who(h)} ({h['state']}, {h['pool_slots']} "
                                          f"slot{'s' if h['pool_slots'] != 1 else ''})")
                              for h in p["holders"]) or "nothing visible"
        rows.append(f"<tr><td>{html.escape(p['pool'])}</td>"
                    f"<td>{html.escape(slots_words(p['slots']))} ({p['used']} used)</td>"
                    f"<td>{waiting}</td><td>{holders}</td></tr>")
    return ("<table class='events'><tr><th>pool</th><th>slots</th><th>waiting</th>"
            "<th>holding the slots</th></tr>" + "".join(rows) + "</table>")


def _ti_row(ti) -> dict:
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "state": _state(ti.state), "pool": ti.pool, "pool_slots": ti.pool_slots,
            "scheduled_dttm": ti.scheduled_dttm, "queued_dttm": ti.queued_dttm,
            "start_date": ti.start_date, "end_date": ti.end_date}


def pool_rows() -> tuple[dict[str, dict], list[dict]]:
    """Airflow's pools and the task instances that wait for or hold a slot."""
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        pools = {p.pool: {"slots": p.slots, "include_deferred": p.include_deferred}
                 for p in session.scalars(select(Pool))}
        tis = [_ti_row(ti) for ti in session.scalars(
            select(TI).where(TI.state.in_([WAITING, *HOLDING, "deferred"])))]
    return pools, tis


def current() -> list[dict]:
    """`waiting_pools` of what Airflow's DB says now."""
    pools, tis = pool_rows()
    return waiting_pools(pools, tis)


def run_task_rows(dag_id: str, run_id: str) -> list[dict]:
    """The run's task instances (state, pool, times), in the order they started."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = [_ti_row(ti) for ti in session.scalars(
            select(TI).where(TI.dag_id == dag_id, TI.run_id == run_id))]
    far = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return sorted(rows, key=lambda r: (r["start_date"] or far, r["task_id"]))


def recent_run_rows(dag_ids: list[str], limit: int = 50) -> list[dict]:
    """The newest runs of `dag_ids` (dag_id, run_id, state, run_type, start/end, note) and
    the tasks that failed in each (`failed`, in the order they ended)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        runs = list(session.scalars(
            select(DagRun).where(DagRun.dag_id.in_(dag_ids))
            .order_by(DagRun.run_after.desc()).limit(limit)))
        out = [{"dag_id": r.dag_id, "run_id": r.run_id, "state": _state(r.state),
                "run_type": _state(r.run_type), "start_date": r.start_date,
                "end_date": r.end_date, "note": r.note, "failed": []} for r in runs]
        if out:
            index = {(r["dag_id"], r["run_id"]): r for r in out}
            failed = session.scalars(select(TI).where(
                TI.dag_id.in_(dag_ids), TI.run_id.in_([r["run_id"] for r in out]),
                TI.state == "failed").order_by(TI.end_date))
            for ti in failed:
                if (ti.dag_id, ti.run_id) in index:
                    index[(ti.dag_id, ti.run_id)]["failed"].append(ti.task_id)
    return out
