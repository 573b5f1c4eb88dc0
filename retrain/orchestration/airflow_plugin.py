"""The Airflow UI's way into a run's artifacts: a "Retrain" tab on every DAG run.

Registered by the package's `airflow.plugins` entry point, so any Airflow that has retrain
installed loads it. Every Airflow process loads plugins, task processes included, so this
module stays light: the views (FastAPI, Airflow's security helpers) are imported by the
API server on the first request to /retrain (retrain.orchestration.airflow_views).

Also a "Retrain runs" tab on each DAG (its runs with span and outcome in columns, and who
waits for a pool slot) and a listener that sets a run's note to its span and outcome when
it ends (retrain.orchestration.run_note_listener: stdlib + the light outcome module).
"""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from retrain.orchestration import run_note_listener
from retrain.orchestration.ui_routes import PREFIX


class _ViewsOnFirstRequest:
    """An ASGI app that imports retrain.orchestration.airflow_views when it is first called."""

    def __init__(self):
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            from retrain.orchestration.airflow_views import app
            self._app = app
        await self._app(scope, receive, send)


class RetrainPlugin(AirflowPlugin):
    name = "retrain"
    fastapi_apps = [{"app": _ViewsOnFirstRequest(), "url_prefix": PREFIX,
                     "name": "retrain run views"}]
    # A tab on every DAG run's page; the UI fills in {DAG_ID} and {RUN_ID}.
    external_views = [{"name": "Retrain", "href": PREFIX + "/runs/{DAG_ID}/{RUN_ID}",
                       "destination": "dag_run", "url_route": "retrain_run"},
                      # A DAG's runs with span and outcome in columns; pool waits.
                      {"name": "Retrain runs", "href": PREFIX + "/dags/{DAG_ID}/runs",
                       "destination": "dag", "url_route": "retrain_dag_runs"},
                      # Asset events with span, version and fingerprint in columns.
                      {"name": "Retrain assets", "href": PREFIX + "/assets",
                       "destination": "nav", "url_route": "retrain_assets"}]
    # The run's note: its span and outcome, set by the scheduler when the run ends.
    listeners = [run_note_listener]
