"""Airflow as `make ui` starts it, for a command that needs real runs (`retrain demo`).

`scripts/airflow-ui.sh components` (API server, scheduler, dag-processor, every socket on
127.0.0.1) on a free port, with the project's metadata DB and log folder, so the runs it
makes are ordinary Airflow runs that `make ui` shows afterwards, each task with its log and
real durations. While it runs the DAGs have no schedule (RETRAIN_SCHEDULE=none), so
unpausing one to run it makes no catch-up run for a day there are no logs of. Everything
it started is stopped on exit, and the DAG it unpaused is paused again.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO_TEXT_CONFIG = REPO / "components" / "text" / "configs" / "reviews-demo.yaml"
FINISHED = ("success", "failed")


class LocalAirflow:
    def __init__(self, home: Path, dag_id: str, log_dir: Path, schedule: str = "none",
                 env: dict[str, str] | None = None):
        if not (REPO / "scripts" / "airflow-ui.sh").is_file():
            raise FileNotFoundError("this command runs Airflow through the checkout's "
                                    f"scripts/airflow-ui.sh; not found under {REPO}")
        self.home, self.dag_id = home, dag_id
        # "none" for triggered runs; a backfill needs a periodic schedule (bench/backfill.py)
        self.schedule, self.extra_env = schedule, dict(env or {})
        self.log_file = log_dir / f"airflow-{int(time.time())}.log"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.airflow_home = Path(os.environ.get("AIRFLOW_HOME") or REPO / "airflow_home")
        self.token: str | None = None
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict:
        # scripts/airflow-env.sh derives the execution API's URL from the port; the one
        # `make demo` exported is 8080's.
        env = {k: v for k, v in os.environ.items()
               if k != "AIRFLOW__CORE__EXECUTION_API_SERVER_URL"}
        env.update(RETRAIN_HOME=str(self.home), RETRAIN_SCHEDULE=self.schedule,
                   RETRAIN_AIRFLOW_HOME=str(self.airflow_home),
                   AIRFLOW__API__PORT=str(self.port), VENV=sys.prefix,
                   RETRAIN_SPAN_POKE_SECONDS="5",
                   AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL="5",
                   AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5")
        # The text form's default where the demo's data is: the config sized for it
        # (reviews.yaml, the full one, stays one text_config away); scripts/airflow-ui.sh too.
        env.setdefault("RETRAIN_TEXT_CONFIG", str(DEMO_TEXT_CONFIG))
        env.update(self.extra_env)
        return env

    def task_logs(self, run_id: str) -> Path:
        return self.airflow_home / "logs" / f"dag_id={self.dag_id}" / f"run_id={run_id}"

    def __enter__(self) -> "LocalAirflow":
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = self.env()
        print(f"==> starting Airflow (API server, scheduler, dag-processor) on {self.base}; "
              f"its log: {self.log_file}", flush=True)
        setup = ('source scripts/airflow-env.sh && mkdir -p "$AIRFLOW_HOME" && airflow db '
                 "migrate >/dev/null && airflow pools import scripts/pools.json >/dev/null")
        subprocess.run(["bash", "-c", setup], cwd=REPO, env=env, check=True, timeout=600)
        self._log = open(self.log_file, "w")
        self.proc = subprocess.Popen(["bash", "scripts/airflow-ui.sh", "components"], cwd=REPO,
                                     env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            self._wait_for_the_dag_with_its_schedule()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_for_the_dag_with_its_schedule(self, timeout: float = 300) -> None:
        """Until the API answers and the DAG is parsed with this schedule (an earlier `make
        ui` may have stored its @daily version, an earlier demo its unscheduled one)."""
        deadline = time.time() + timeout
        unscheduled = self.schedule.lower() == "none"
        while True:
            try:
                summary = self.call("GET", f"/api/v2/dags/{self.dag_id}").get(
                    "timetable_summary")
                if (summary in (None, "None")) == unscheduled:
                    return
            except (OSError, RuntimeError, KeyError, ValueError):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"Airflow did not serve {self.dag_id} with schedule "
                                   f"{self.schedule!r} within {timeout:.0f} s; see "
                                   f"{self.log_file}")
            time.sleep(3)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        """The REST API as the admin of the local setup (its password file)."""
        if self.token is None and not path.startswith("/auth/"):
            pwfile = self.airflow_home / "simple_auth_manager_passwords.json.generated"
            self.token = self.call("POST", "/auth/token", {
                "username": "admin",
                "password": json.loads(pwfile.read_text())["admin"]})["access_token"]
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, method=method, headers=headers,
                                     data=json.dumps(body).encode() if body else None)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read()[:300]!r}") from None

    def run(self, day: str, conf: dict, note: str, timeout: float = 3600,
            on_task=lambda ti: None) -> tuple[str, str]:
        """Trigger one run and follow it to the end; on_task(ti) once per task that
        finishes (or is up for retry). Returns (run id, final state). `day` is the logical
        date; its time of day is the trigger time's, because Airflow keeps one run per
        logical date and a day may be run again (the span, the day before, is the same)."""
        self.call("PATCH", f"/api/v2/dags/{self.dag_id}", {"is_paused": False})
        now = time.strftime("%H:%M:%S", time.gmtime())
        run = self.call("POST", f"/api/v2/dags/{self.dag_id}/dagRuns", {
            "logical_date": f"{day}T{now}Z", "conf": conf, "note": note})
        run_id, state = run["dag_run_id"], run["state"]
        seen: dict[str, str] = {}
        started = time.time()
        while state not in FINISHED and time.time() - started < timeout:
            time.sleep(5)
            state = self.call("GET", f"/api/v2/dags/{self.dag_id}/dagRuns/{run_id}")["state"]
            tis = self.call("GET", f"/api/v2/dags/{self.dag_id}/dagRuns/{run_id}/taskInstances")
            for ti in sorted(tis["task_instances"], key=lambda t: t.get("end_date") or "~"):
                if ti["state"] in ("success", "failed", "skipped", "up_for_retry") and \
                        seen.get(ti["task_id"]) != ti["state"]:
                    seen[ti["task_id"]] = ti["state"]
                    on_task(ti)
        return run_id, state

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            self.call("PATCH", f"/api/v2/dags/{self.dag_id}", {"is_paused": True})
        except (OSError, RuntimeError):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)   # the script stops every component
            self.proc.wait(timeout=90)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
        self.proc = None
