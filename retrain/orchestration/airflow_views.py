"""The run views behind the Airflow UI's "Retrain" tab (retrain.orchestration.airflow_plugin), a
FastAPI app the API server mounts at /retrain, behind Airflow's own login and DAG
permissions:

- /retrain/runs/{dag_id}/{run_id}: the run's outcome in a line first ("Published ctr v5",
  "Not published: 124 eval texts < min_eval_rows 200": retrain.orchestration.run_outcome),
  then its span, window, validation gate, verdict, published version, its tasks' waits for
  pool slots, and links to the files below (the tab shows this page);
- /retrain/dags/{dag_id}/runs (a "Retrain runs" tab on the DAG) and /retrain/runs (every
  retrain DAG): the newest runs with their span and outcome in columns, and the tasks
  waiting now for a pool slot with what holds it (retrain.orchestration.pool_view);
- /retrain/runs/{dag_id}/{run_id}/files/{path}: a file of that run's folder (the
  evaluation report, the Data Docs), read by the API server from RETRAIN_HOME, never a
  path of the server's disk that the browser names; its type from its suffix and its
  Content-Security-Policy from retrain.common.served_files (these pages are served in the
  Airflow UI's origin and hold values of the training data);
- /retrain/assets: the newest asset events with their span, version and fingerprint in
  columns (retrain.orchestration.asset_events_view), which Airflow's asset page folds away;
- /retrain/lineage/{model}/{version}: the chain of `retrain lineage MODEL --version N` as
  a graph (retrain.orchestration.lineage_graph), each artifact a link to
  /retrain/lineage/{model}/{version}/artifacts/{fingerprint}, its own page.

Every response carries `X-Content-Type-Options: nosniff` and a Content-Security-Policy
(the generated pages run no script). Stdlib + FastAPI + the light registry and lineage
modules: the API server must not load TensorFlow or Beam.
"""
from __future__ import annotations

import datetime as dt
import html
import json
import logging
from pathlib import Path
from typing import Annotated, Callable

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_asset, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from retrain.common import paths, served_files, window
from retrain.common.run_context import CONTEXT_FILE
from retrain.orchestration import asset_events_view, pool_view, pool_wait, run_outcome
from retrain.orchestration.families import FAMILIES
from retrain.orchestration.ui_routes import PREFIX
from retrain.orchestration.dag_defaults import home

log = logging.getLogger("retrain.views")

app = FastAPI(title="retrain run views", docs_url=None, redoc_url=None, openapi_url=None)


@app.middleware("http")
async def page_policy(request: Request, call_next):
    """Pages built here run no script and nothing is sniffed; a served file's own policy
    (run_file) is kept."""
    response = await call_next(request)
    response.headers.setdefault("Content-Security-Policy", served_files.PAGE_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


# Airflow's own check: the logged-in user (the UI's session cookie or a bearer token) may
# read the runs of the path's dag_id (any DAG's, where the path names none).
can_read_runs = requires_access_dag("GET", DagAccessEntity.RUN)
READ = [Depends(can_read_runs)]
can_read_assets = requires_access_asset("GET")


def run_asset_events(dag_id: str, run_id: str) -> list[dict]:
    """The asset events a run emitted (a dependency, so tests without a DB replace it)."""
    return asset_events_view.recent(dag_id=dag_id, run_id=run_id)


def recent_asset_events() -> list[dict]:
    return asset_events_view.recent()


def _from_db(read: Callable, empty, what: str):
    """A page reads its run folder first; what Airflow's DB adds (task states, pools) is
    left out, said in the server's log, when it cannot be read."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - any DB or ORM error: the page still shows the folder
        log.warning("retrain views: could not read %s from Airflow's DB", what,
                    exc_info=True)
        return empty


def run_tasks(dag_id: str, run_id: str) -> list[dict]:
    """The run's task instances from Airflow's DB (a dependency: tests replace it)."""
    return _from_db(lambda: pool_view.run_task_rows(dag_id, run_id), [], "the run's tasks")


def pool_waits() -> list[dict]:
    """The pools with a task waiting for a slot now (a dependency: tests replace it)."""
    return _from_db(pool_view.current, [], "the pools")


def recent_runs(dag_id: str | None = None) -> list[dict]:
    """The newest runs of one retrain DAG (every retrain DAG's without one)."""
    dag_ids = [dag_id] if dag_id else sorted(f.dag_id for f in FAMILIES.values())
    return _from_db(lambda: pool_view.recent_run_rows(dag_ids), [], "the runs")


def _run_folder(dag_id: str, run_id: str) -> Path:
    """The run's artifact folder: runs/<family>/dt=<span>/<run id>, found by run id. A run
    also writes under older days of its window (their validation), so its own span is the
    latest day with a folder of that run id."""
    family = _family(dag_id)
    folder = run_outcome.run_folder(home(), family, run_id)
    if folder is None:
        raise HTTPException(404, f"no artifacts for run {run_id} of {dag_id} yet under "
                                 f"{home() / 'runs'} (the run has not written any)")
    return folder


def _family(dag_id: str) -> str:
    family = next((f.name for f in FAMILIES.values() if f.dag_id == dag_id), None)
    if family is None:
        raise HTTPException(404, f"{dag_id} is not a retrain DAG")
    return family


def _summary(folder: Path, name: str = "run_summary.json") -> dict:
    try:
        return json.loads((folder / name).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _status_before_push(folder: Path, ctx: dict) -> str:
    """What a run with no run_summary.json is doing, as far as its folder tells."""
    marker = Path(ctx["span_dir"]) / "_SUCCESS" if ctx.get("span_dir") else None
    if marker is not None and not marker.exists():
        since = dt.datetime.fromtimestamp((folder / CONTEXT_FILE).stat().st_mtime,
                                          dt.timezone.utc)
        return (f"waiting for the span's data: no {marker} yet "
                f"(run started {since:%Y-%m-%d %H:%M} UTC; the wait_for_span log counts it)")
    return ("no run_summary.json yet: the run has not reached push, or failed before it "
            "(see the task logs)")


def _policy_line(policy: dict) -> str:
    """The window policy's verdict in a line (retrain.common.window.policy)."""
    n, allowed = len(policy.get("left_out") or []), policy.get("allowed")
    limit = (f"{allowed} may be (max_left_out_percent="
             f"{policy.get('max_left_out_percent')})")
    if not n:
        return f"no day left out; {limit}"
    days = ", ".join(str(i.get("span")) for i in policy["left_out"])
    return (f"{n} of {policy.get('counted')} day(s) left out ({days}); {limit}: "
            + ("the run went on without them" if policy.get("ok") else
               "the run was stopped, nothing was trained on this window"))


def _link(href: str, text: str) -> str:
    return f'<a href="{html.escape(href)}">{html.escape(text)}</a>'


FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")


def run_state_of(tasks: list[dict]) -> str | None:
    """The run's end as its tasks tell it (None: still going, or unknown)."""
    states = [t.get("state") for t in tasks]
    if not states or any(s not in FINISHED for s in states):
        return None
    return "failed" if any(s in run_outcome.FAILED_STATES for s in states) else "success"


def pool_wait_lines(tasks: list[dict], pools: list[dict], run_id: str) -> list[str]:
    """The run's tasks that waited for a pool slot (queued - scheduled, from Airflow's DB)
    and those waiting now, with what holds the slots."""
    out = []
    for t in tasks:
        scheduled, queued = t.get("scheduled_dttm"), t.get("queued_dttm")
        if scheduled and queued and t.get("pool") and (
                queued - scheduled).total_seconds() >= pool_wait.MIN_WAIT_S:
            out.append(f"{t['task_id']} waited "
                       f"{pool_wait.duration_words((queued - scheduled).total_seconds())} "
                       f"for a slot of pool {t['pool']}")
    for pool in pools:
        out.extend(pool_view.lines(pool, run_id=run_id))
    return out


def run_page(dag_id: str, run_id: str, folder: Path, events: list[dict] = (),
             tasks: list[dict] = (), pools: list[dict] = ()) -> str:
    """The run at a glance, from its run_summary.json (written by push) and its folder;
    `tasks` (its task instances) and `pools` (pool_view.current()) from Airflow's DB."""
    s, ctx = _summary(folder), _summary(folder, CONTEXT_FILE)
    tasks = list(tasks)
    failed = [t["task_id"] for t in tasks if t.get("state") == "failed"]
    outcome = run_outcome.outcome_of(folder, model=folder.parents[1].name,
                                     failed_tasks=failed, run_state=run_state_of(tasks))
    base = f"{PREFIX}/runs/{dag_id}/{run_id}/files"
    span = s.get("span") or ctx.get("span") or folder.parent.name[3:]
    why = f" ({ctx['span_reason']})" if ctx.get("span_reason") else ""
    rows: list[tuple[str, str]] = [("run", html.escape(run_id)),
                                   ("span", html.escape(span + why))]
    pre = s.get("preprocess") or {}
    # A run the window policy stopped has no summary: its window_policy.json says why.
    judged = _summary(folder, window.POLICY_FILE)
    screen = pre.get("window_screen") or judged.get("screen") or {}
    if pre or screen:
        used = screen.get("used") or [pre.get("span")]
        left_out = screen.get("left_out") or []
        rows.append(("window", html.escape(
            f"{len(used)} day(s): {', '.join(map(str, used))}"
            + (f"; left out: {', '.join(i['span'] + ' (' + i['reason'] + ')' for i in left_out)}"
               if left_out else ""))))
    policy = pre.get("window_policy") or judged.get("policy") or {}
    if policy:
        rows.append(("window policy", html.escape(_policy_line(policy))))
    val = s.get("validation") or {}
    if val:
        rows.append(("validation", html.escape(
            f"{val.get('gate')}: {val.get('n_failed', 0)} failed of "
            f"{val.get('n_expectations')} expectations")))
    ev = s.get("evaluation") or {}
    if ev:
        reasons = "".join(f"<li>{html.escape(r)}</li>" for r in ev.get("reasons") or [])
        rows.append(("verdict", ("blessed" if ev.get("blessed") else "not blessed")
                     + f"<ul>{reasons}</ul>"))
    published = s.get("published")
    model = folder.parents[1].name          # runs/<family>/dt=<span>/<run id>
    if s:
        rows.append(("published", (_link(f"{PREFIX}/lineage/{model}/{published['version']}",
                                         f"{model} version {published['version']} (lineage)")
                                   if published else
                                   _unchanged_cell(model, s["unchanged"]) if s.get("unchanged")
                                   else "nothing (shadow run)" if s.get("shadow")
                                   else "nothing (not blessed)")))
    else:
        rows.append(("status", html.escape(_status_before_push(folder, ctx))))
    waits = pool_wait_lines(tasks, list(pools), run_id)
    if waits:
        rows.append(("pool slots", "<br>".join(html.escape(w) for w in waits)))
    links = [(rel, text) for rel, text in (("evaluation/report.html", "Evaluation report"),
                                           ("validation/data_docs/index.html", "Data Docs"))
             if (folder / rel).is_file()]
    rows.append(("reports", " · ".join(_link(f"{base}/{rel}", text) for rel, text in links)
                 or "none yet"))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return _page(f"{html.escape(dag_id)}: {html.escape(run_id)}",
                 f"<p class='outcome'><strong>{html.escape(outcome)}</strong></p>"
                 f"<table>{body}</table><h3>asset events of this run</h3>"
                 + asset_events_view.table(list(events), with_run=False))


def _unchanged_cell(model: str, unchanged: dict) -> str:
    """A push that found the candidate identical to the published model (push.py)."""
    version = unchanged.get("version")
    return ("nothing: unchanged, identical to "
            + _link(f"{PREFIX}/lineage/{model}/{version}", f"{model} version {version}")
            + html.escape(f" (model digest {unchanged.get('model_digest')})"))


def _page(title: str, body: str) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + title + "</title>"
            "<style>body{font-family:sans-serif;margin:1.5em}th{text-align:left;"
            "padding:.3em 1em .3em 0;vertical-align:top}td{padding:.3em 0}"
            "pre{font-size:13px}table.events td,table.events th{padding:.2em .8em .2em 0;"
            "font-size:13px}</style></head><body><h2>" + title + "</h2>" + body
            + "</body></html>")


@app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse,
         dependencies=READ)
def run_view(dag_id: str, run_id: str,
             events: Annotated[list[dict], Depends(run_asset_events)],
             tasks: Annotated[list[dict], Depends(run_tasks)],
             pools: Annotated[list[dict], Depends(pool_waits)]) -> str:
    return run_page(dag_id, run_id, _run_folder(dag_id, run_id), events, tasks, pools)


def runs_page(title: str, runs: list[dict], pools: list[dict]) -> str:
    """The newest runs with their span and outcome in columns (what Airflow's runs list
    leaves to a click per run), then the tasks waiting for a pool slot now."""
    folders = {}
    for f in FAMILIES.values():
        folders[f.dag_id] = (f.name, run_outcome.run_folders(home(), f.name))
    rows = []
    for r in runs:
        family, found = folders.get(r["dag_id"], (None, {}))
        if family is None:
            continue
        folder = found.get(paths.safe_run_id(r["run_id"]))
        line = run_outcome.outcome_of(folder, model=family, failed_tasks=r.get("failed") or (),
                                      run_state=r.get("state"))
        started = r.get("start_date")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            _link(f"{PREFIX}/runs/{r['dag_id']}/{r['run_id']}", r["run_id"]),
            html.escape(r["dag_id"]), html.escape(str(r.get("state") or "")),
            html.escape(run_outcome.span_of(folder) or "not resolved yet"),
            html.escape(line),
            html.escape(f"{started:%Y-%m-%d %H:%M}" if started else ""))) + "</tr>")
    table = ("<table class='events'><tr><th>run</th><th>DAG</th><th>state</th><th>span</th>"
             "<th>outcome</th><th>started (UTC)</th></tr>" + "".join(rows) + "</table>"
             if rows else "<p>no runs yet</p>")
    return _page(title, "<h3>tasks waiting for a pool slot now</h3>" + pool_view.table(pools)
                 + "<h3>runs, newest first</h3>" + table)


@app.get("/dags/{dag_id}/runs", response_class=HTMLResponse, dependencies=READ)
def dag_runs_view(dag_id: str, runs: Annotated[list[dict], Depends(recent_runs)],
                  pools: Annotated[list[dict], Depends(pool_waits)]) -> str:
    _family(dag_id)
    return runs_page(f"runs of {html.escape(dag_id)}", runs, pools)


@app.get("/runs", response_class=HTMLResponse, dependencies=READ)
def runs_view(runs: Annotated[list[dict], Depends(recent_runs)],
              pools: Annotated[list[dict], Depends(pool_waits)]) -> str:
    return runs_page("retrain runs", runs, pools)


@app.get("/assets", response_class=HTMLResponse, dependencies=[Depends(can_read_assets)])
def assets_view(events: Annotated[list[dict], Depends(recent_asset_events)]) -> str:
    return _page("asset events", "<p>The newest first; Airflow's Assets page has each "
                 "event's full extra.</p>" + asset_events_view.table(events))


@app.get("/runs/{dag_id}/{run_id}/files/{rel:path}", dependencies=READ)
def run_file(dag_id: str, run_id: str, rel: str) -> FileResponse:
    folder = _run_folder(dag_id, run_id).resolve()
    target = (folder / rel).resolve()
    if not target.is_relative_to(folder) or not target.is_file():
        raise HTTPException(404, f"{rel}: no such file in the run's folder")
    name = target.relative_to(folder).as_posix()
    kind = served_files.content_type(name)
    page = (target.read_bytes() if served_files.is_data_docs(name)
            and kind.startswith("text/html") else None)
    return FileResponse(target, media_type=kind, headers=served_files.headers(name, page))


def _chain(model: str, version: int) -> dict:
    from retrain.common.registry import Registry
    from retrain.orchestration import lineage_query as lineage

    try:
        return lineage.chain(Registry(home() / "registry"), model, version)
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise HTTPException(404, str(e)) from None


def _artifact_href(model: str, version: int) -> Callable[[dict], str | None]:
    def href(node: dict) -> str | None:
        fp = node.get("fingerprint")
        return f"{PREFIX}/lineage/{model}/{version}/artifacts/{fp}" if fp else None
    return href


@app.get("/lineage/{model}/{version}", response_class=HTMLResponse,
         dependencies=READ)
def lineage_view(model: str, version: int) -> str:
    """The chain as a graph (each box links to its artifact's page), the text tree below."""
    from retrain.orchestration import lineage_graph, lineage_query

    tree = _chain(model, version)
    graph = lineage_graph.svg(tree, _artifact_href(model, version))
    text = html.escape(lineage_query.render(tree))
    return _page(f"lineage of {html.escape(model)} v{version}",
                 f"<p>Raw data on the left, this registry version on the right; an arrow "
                 f"goes from each input to the step that read it. Click a box for its "
                 f"record.</p><div style='overflow-x:auto'>{graph}</div>"
                 f"<details><summary>as text (<code>retrain lineage {html.escape(model)} "
                 f"--version {version}</code>)</summary><pre>{text}</pre></details>")


def _input_link(node: dict, href: Callable[[dict], str | None]) -> str:
    label = f"{node.get('type')} {node.get('name')}"
    target = href(node)
    return _link(target, label) if target else html.escape(label)


@app.get("/lineage/{model}/{version}/artifacts/{fingerprint}", response_class=HTMLResponse,
         dependencies=READ)
def artifact_view(model: str, version: int, fingerprint: str) -> str:
    """One artifact of the chain: what it is, who made it, from what."""
    from retrain.orchestration import lineage_graph

    tree = _chain(model, version)
    node = lineage_graph.find(tree, fingerprint)
    if node is None:
        raise HTTPException(404, f"no artifact {fingerprint} in the lineage of {model} "
                                 f"v{version}")
    href = _artifact_href(model, version)
    made = node.get("producer") or {}
    rows = [("type", html.escape(str(node.get("type")))),
            ("name", html.escape(str(node.get("name")))),
            ("location", html.escape(str(node.get("uri") or "-").removeprefix("file://"))),
            ("fingerprint", html.escape(fingerprint)),
            ("made by", html.escape(" / ".join(str(made.get(k)) for k in
                                               ("dag_id", "run_id", "task_id") if made.get(k))
                                    or "-")),
            ("reused", "yes, from the run above" if node.get("reused") else "no"),
            ("code", html.escape(str(node.get("code_version") or "-"))),
            ("figures", "<pre>" + html.escape(json.dumps(node.get("figures") or {}, indent=1,
                                                         default=str)) + "</pre>"),
            ("inputs", "<ul>" + "".join(f"<li>{_input_link(i, href)}</li>"
                                        for i in node.get("inputs") or []) + "</ul>")]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    back = _link(f"{PREFIX}/lineage/{model}/{version}", f"the lineage of {model} v{version}")
    return _page(f"{html.escape(str(node.get('type')))} {html.escape(str(node.get('name')))}",
                 f"<table>{body}</table><p>Back to {back}</p>")
