"""Daily operations through a real Airflow: scheduler, dag-processor and API server on
127.0.0.1, driven only through the REST API, as the UI does.

The DAG is unpaused, so the scheduler makes the daily run (yesterday's span), which
publishes. Then a 3-day backfill over earlier spans is created with
`POST /api/v2/backfills`: backfill runs are shadow runs by default, so they train and
evaluate but publish nothing, emit no model Asset event, and leave the registry as it
was. Their heavy tasks run in the one-slot backfill pool (retrain.airflow_policy).
With headless Chromium on the machine, the grid and asset views are screenshotted into
the test's folder (RETRAIN_SCREENSHOT_DIR copies them elsewhere, e.g. docs/images).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from components.ctr.generate import GenerateSpec, run as generate
from components.registry import Registry

pytestmark = [pytest.mark.integration, pytest.mark.airflow_server]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "ctr_daily_retrain"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN_TIMEOUT = 900


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, base: str):
        self.base = base

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path} -> {e.code}: {e.read()[:500]!r}") from None

    def runs(self) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]

    def wait_for_runs(self, want, what: str, timeout: float = RUN_TIMEOUT) -> list[dict]:
        """Poll until the runs picked by `want` exist and are all finished."""
        deadline = time.time() + timeout
        runs: list[dict] = []
        while time.time() < deadline:
            runs = [r for r in self.runs() if want(r)]
            if runs and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            time.sleep(5)
        raise AssertionError(f"{what} did not finish in {timeout} s: "
                             f"{[(r['dag_run_id'], r['state']) for r in runs]}")


@pytest.fixture(scope="module")
def airflow_server(tmp_path_factory):
    """Migrated SQLite home + pools, then api-server, scheduler and dag-processor
    (scripts/airflow-ui.sh components) in their own process group."""
    base = tmp_path_factory.mktemp("airflow-server")
    home = base / "retrain-home"
    today = dt.datetime.now(dt.timezone.utc).date()
    # Spans today-6 .. today-1: the daily run's window and the backfill's spans.
    generate(GenerateSpec(out_root=str(home), start=(today - dt.timedelta(days=6)).isoformat(),
                          days=6, rows_per_day=3000, n_users=4000, n_items=2500, n_categories=40))
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "_RETRAIN_TEST"))}
    env.update({"RETRAIN_AIRFLOW_HOME": str(base / "airflow"), "RETRAIN_HOME": str(home),
                "AIRFLOW__API__PORT": str(port), "VENV": str(Path(sys.executable).parents[1]),
                # No login in this throwaway instance, so the screenshots need no session.
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5"})
    setup = ("source scripts/airflow-env.sh && mkdir -p \"$AIRFLOW_HOME\" && airflow db migrate "
             "&& airflow pools import scripts/pools.json")
    subprocess.run(["bash", "-c", setup], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    log = open(base / "airflow.log", "w")
    proc = subprocess.Popen(["bash", "scripts/airflow-ui.sh", "components"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api = Api(f"http://127.0.0.1:{port}")
    try:
        deadline = time.time() + 180
        while True:
            try:
                dag = api.call("GET", f"/api/v2/dags/{DAG_ID}")
                break
            except (urllib.error.URLError, ConnectionError, AssertionError, OSError):
                if time.time() > deadline or proc.poll() is not None:
                    raise AssertionError("Airflow did not serve the DAG within 180 s; see "
                                         f"{base / 'airflow.log'}") from None
                time.sleep(3)
        assert dag["is_paused"], "a new DAG starts paused"
        yield {"api": api, "home": home, "today": today, "base": base, "port": port,
               "pid": proc.pid}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)       # the script stops every component
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_every_airflow_socket_listens_on_loopback(airflow_server):
    """The security default of scripts/airflow-ui.sh: nothing it starts is reachable from
    another machine (the log servers, which bind every interface, are not started)."""
    procs = psutil.Process(airflow_server["pid"]).children(recursive=True)
    listening = {}
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
            name = " ".join(p.cmdline()[:3])
        except psutil.NoSuchProcess:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                listening[(c.laddr.ip, c.laddr.port)] = name
    assert ("127.0.0.1", airflow_server["port"]) in listening, listening   # the api-server
    exposed = {a: n for a, n in listening.items() if not ipaddress.ip_address(a[0]).is_loopback}
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_daily_run_then_shadow_backfill_through_rest(airflow_server):
    api, home, today = airflow_server["api"], airflow_server["home"], airflow_server["today"]

    # Unpausing makes the scheduler start the daily run for the latest day: yesterday's span.
    api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    daily = api.wait_for_runs(lambda r: r["run_type"] == "scheduled", "the daily run")
    assert [r["state"] for r in daily] == ["success"], _failure_report(airflow_server, daily)
    registry = Registry(home / "registry")
    published = registry.current("ctr")
    yesterday = (today - dt.timedelta(days=1)).isoformat()
    assert published["version"] == 1 and published["data_span"] == yesterday

    # A 3-day backfill over earlier spans, exactly as the UI's "Run backfill" form sends it.
    first = today - dt.timedelta(days=5)
    backfill = api.call("POST", "/api/v2/backfills", {
        "dag_id": DAG_ID, "from_date": f"{first}T00:00:00Z",
        "to_date": f"{first + dt.timedelta(days=2)}T00:00:00Z", "run_backwards": False,
        "dag_run_conf": {"window_days": 1, "epochs": 1}, "reprocess_behavior": "none",
        "max_active_runs": 2})
    runs = api.wait_for_runs(lambda r: r["run_type"] == "backfill", "the backfill")
    assert len(runs) == 3 and all(r["state"] == "success" for r in runs), \
        _failure_report(airflow_server, runs)
    assert all(r.get("backfill_id") in (None, backfill["id"]) for r in runs)

    spans = sorted((dt.date.fromisoformat(r["logical_date"][:10]) - dt.timedelta(days=1)).isoformat()
                   for r in runs)
    assert spans == [(first + dt.timedelta(days=i - 1)).isoformat() for i in range(3)]
    for run, span in zip(sorted(runs, key=lambda r: r["logical_date"]), spans):
        tis = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/taskInstances")
        states = {t["task_id"]: t["state"] for t in tis["task_instances"]}
        assert states.pop("push") == "skipped", states          # shadow: never published
        assert set(states.values()) == {"success"}, states
        pools = {t["task_id"]: t["pool"] for t in tis["task_instances"]}
        assert pools["preprocess"] == "retrain_backfill", pools   # moved by the policy
        # Each backfill run's artifacts live under its own span.
        run_dirs = list((home / "runs" / "ctr" / f"dt={span}").iterdir())
        assert len(run_dirs) == 1
        summary = json.loads((run_dirs[0] / "run_summary.json").read_text())
        assert summary["shadow"] is True and summary["published"] is None
        assert (run_dirs[0] / "preprocess" / "summary.json").is_file()
        assert (run_dirs[0] / "model" / "serving_model" / "saved_model.pb").is_file()

    # The registry and the model Asset saw only the daily run.
    assert registry.current("ctr")["version"] == 1 and len(registry.list_versions("ctr")) == 1
    events = api.call("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=100")
    sources = [e["source_run_id"] for e in events["asset_events"]]
    assert sources == [daily[0]["dag_run_id"]], sources

    if CHROMIUM:
        _screenshots(airflow_server)


def _failure_report(server, runs: list[dict]) -> str:
    """Which tasks failed, with the end of their logs: what a person would look at first."""
    lines = []
    for run in runs:
        tis = server["api"].call(
            "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/taskInstances")
        for ti in tis["task_instances"]:
            lines.append(f"{run['dag_run_id']} {ti['task_id']}: {ti['state']}")
            if ti["state"] in ("failed", "upstream_failed", "up_for_retry"):
                for log in sorted(server["base"].glob(
                        f"airflow/logs/dag_id={DAG_ID}/run_id={run['dag_run_id']}/"
                        f"task_id={ti['task_id']}/*.log")):
                    lines.append(f"--- {log}\n" + log.read_text(errors="replace")[-3000:])
    return "\n".join(lines)


def _screenshots(server) -> None:
    """Grid view of the DAG and the model asset's view, as a person sees them."""
    from PIL import Image
    import numpy as np

    api, base, port = server["api"], server["base"], server["port"]
    assets = api.call("GET", "/api/v2/assets?name_pattern=ctr_model")["assets"]
    pages = {"airflow-grid.png": f"/dags/{DAG_ID}",
             "airflow-asset.png": f"/assets/{assets[0]['id']}"}
    out = Path(os.environ.get("RETRAIN_SCREENSHOT_DIR") or base)
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--no-first-run", "--virtual-time-budget=20000", "--window-size=1600,1000"]
    for name, page in pages.items():
        url = f"http://127.0.0.1:{port}{page}"
        dom = subprocess.run([*browser, "--dump-dom", url], check=True, capture_output=True,
                             text=True, timeout=180).stdout
        assert "Page Not Found" not in dom and DAG_ID in dom, f"{url} did not render the page"
        shot = base / name
        subprocess.run([*browser, f"--screenshot={shot}", url],
                       check=True, capture_output=True, timeout=180)
        image = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
        assert image.std() > 10, f"{name} looks blank"
        if out != base:
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, out / name)
