"""Asset events as a person reads them: one row per event, its span, fingerprint, version
and gate in columns.

Airflow's asset page folds each event's `extra` into a collapsed JSON block, so "which
day, which bytes, which model version" takes a click per event. The Retrain views
(retrain.orchestration.airflow_views) show these rows on a page of their own (the UI's
"Retrain assets" link) and, for one run, on its Retrain tab. Read from Airflow's own
metadata DB through its ORM: the API server that serves the views has it configured.
"""
from __future__ import annotations

import html
from typing import Any

# The extra keys the DAGs write (retrain.orchestration.dag_factory, dag_defaults,
# recommend_dag) that tell events apart, in the order they are shown; a table shows those
# at least one of its events has.
COLUMNS = ("span", "day", "version", "model_version", "fingerprint", "gate", "rows",
           "users", "window")


def recent(*, dag_id: str | None = None, run_id: str | None = None,
           limit: int = 100) -> list[dict[str, Any]]:
    """The newest asset events (of one DAG's run, where named), newest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (select(AssetEvent, AssetModel.name)
             .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
             .order_by(AssetEvent.timestamp.desc()).limit(limit))
    if dag_id is not None:
        query = query.where(AssetEvent.source_dag_id == dag_id)
    if run_id is not None:
        query = query.where(AssetEvent.source_run_id == run_id)
    with create_session() as session:
        return [{"asset": name, "timestamp": event.timestamp, "dag_id": event.source_dag_id,
                 "run_id": event.source_run_id, "extra": dict(event.extra or {})}
                for event, name in session.execute(query)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        value = f"{len(value)} day(s): {value[0]} .. {value[-1]}" if value else ""
    return html.escape(str(value))


def table(events: list[dict[str, Any]], *, with_run: bool = True) -> str:
    """An HTML table of `recent()`'s events; the full fingerprint is kept (it is what a
    person compares with a lineage record)."""
    if not events:
        return "<p>no asset events yet</p>"
    columns = [c for c in COLUMNS if any(e["extra"].get(c) is not None for e in events)]
    head = ["asset", "time (UTC)", *(["run"] if with_run else []), *columns]
    rows = []
    for e in events:
        cells = [_cell(e["asset"]), _cell(f"{e['timestamp']:%Y-%m-%d %H:%M:%S}"),
                 *([_cell(f"{e['dag_id']} / {e['run_id']}")] if with_run else []),
                 *(_cell(e["extra"].get(c)) for c in columns)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table class='events'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
            + "".join(rows) + "</table>")
