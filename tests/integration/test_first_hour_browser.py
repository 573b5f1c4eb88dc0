"""A person's first hour, in a real browser (issue 46): the demo's data, `make ui`, then
every step through the Airflow UI.

The home holds what `retrain demo` generates (the synthetic click logs and the bundled
reviews, three days ending yesterday, demo-sized), made with the same commands the demo
runs; the demo's own DAG runs are left out, so the first trigger is the user's. Airflow is
started as `make ui` starts it (retrain.orchestration.local_airflow: scripts/airflow-ui.sh,
API server + scheduler + dag-processor, SQLite, LocalExecutor, on 127.0.0.1), on the test
AIRFLOW_HOME. Then, in headless chromium (tests/integration/ui_browser.py):

- log in; submit the CTR DAG's Trigger form as it opens, then the text DAG's: both runs
  succeed and their Retrain tabs say "Published ctr v1" / "Published text v1", and the
  registry has each version;
- the recommendations DAG (scheduled by the CTR model's asset) has a successful run for
  that publish, and the Retrain assets page shows its event with the model version;
- the CTR form submitted as it opens again: the run reuses the trained model and its
  Retrain tab says "Unchanged: identical to ctr v1"; the registry keeps one version;
- a run with `approval: always` waits in Required Actions; a person approves it in the page.

Screenshots (first-hour-*.png) land in the test's folder and, with RETRAIN_SCREENSHOT_DIR
set, there too (`RETRAIN_SCREENSHOT_DIR=docs/images`). The wall time of each step and of
the whole is printed.
"""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrain.common import paths
from retrain.common.registry import Registry
from retrain.orchestration import demo
from retrain.orchestration.local_airflow import DEMO_TEXT_CONFIG, LocalAirflow
from components.text import task_config as text_config
from ui_browser import (Page, answer_required_action, log_in, need_browser, open_retrain_tab,
                        open_trigger_form)

pytestmark = pytest.mark.integration

CTR, TEXT, RECS = "ctr_daily_retrain", "text_daily_finetune", "ctr_daily_recommendations"
RETRAIN = str(Path(sys.executable).with_name("retrain"))
DAYS = 3                # the forms' window (window_days 3), ending yesterday
# Impressions a day, as tests/integration/test_demo.py runs the demo. Fewer fail the
# span's validation: at 3,000 a day the category_id drift between the demo world's days
# is JS 0.24 > 0.2 (noise of small days over 1,000 categories), measured; the gate's
# evidence (200 held-out rows, 20 clicks) is far below either.
CTR_ROWS_PER_DAY = 8000
RUN_TIMEOUT = 600


class Clock:
    """Seconds since the test began, per step: the test's wall time is part of its result
    (CI's budget: the whole suite under 45 minutes)."""

    def __init__(self):
        self.start = self.last = time.time()
        self.steps: list[tuple[str, float]] = []

    def lap(self, step: str) -> None:
        now = time.time()
        self.steps.append((step, now - self.last))
        self.last = now
        print(f"[first hour] {step}: +{self.steps[-1][1]:.0f} s, {now - self.start:.0f} s in",
              flush=True)

    def report(self) -> str:
        lines = [f"  {s:<48} {t:6.0f} s" for s, t in self.steps]
        return "\n".join(["first hour in the browser, wall time by step:", *lines,
                          f"  {'total':<48} {time.time() - self.start:6.0f} s"])


@pytest.fixture(scope="module")
def first_hour(airflow_home, tmp_path_factory):
    """The demo's data under a fresh home, and Airflow as `make ui` starts it."""
    clock = Clock()
    base = tmp_path_factory.mktemp("first-hour")
    home = base / "home"
    start = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=DAYS)
    # What `retrain demo` writes before its runs (retrain.orchestration.demo.run_demo).
    subprocess.run([RETRAIN, "generate", "--out-root", str(home), "--start", start.isoformat(),
                    "--days", str(DAYS), "--rows-per-day", str(CTR_ROWS_PER_DAY)],
                   check=True, capture_output=True, text=True, timeout=300)
    subprocess.run([RETRAIN, "load-text", "--root", str(home), "--start", start.isoformat(),
                    "--days", str(DAYS), "--max-rows-per-day", str(demo.TEXT_ROWS_PER_DAY)],
                   check=True, capture_output=True, text=True, timeout=300)
    clock.lap("the demo's data")
    with LocalAirflow(home, CTR, base / "airflow-logs") as airflow:
        clock.lap("Airflow up (make ui)")
        yield {"airflow": airflow, "home": home, "base": base, "clock": clock,
               "span": (start + dt.timedelta(days=DAYS - 1)).isoformat()}
    print(clock.report(), flush=True)


@pytest.fixture(scope="module")
def page(first_hour):
    need_browser()
    p = Page(first_hour["airflow"].base, first_hour["base"])
    yield p
    p.driver.quit()


def _runs(airflow: LocalAirflow, dag_id: str) -> list[dict]:
    return airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]


def _triggered_by(airflow: LocalAirflow, dag_id: str, run_id: str) -> set[str]:
    """Run ids whose asset events triggered this run."""
    events = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents")
    return {e.get("source_run_id") for e in events["asset_events"]}


def _failure_report(airflow: LocalAirflow, dag_id: str, run_id: str) -> str:
    """The run's task states, with the end of each failed task's log."""
    lines = []
    tis = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    for ti in tis["task_instances"]:
        lines.append(f"{ti['task_id']}: {ti['state']}")
        if ti["state"] in ("failed", "upstream_failed", "up_for_retry"):
            folder = airflow.airflow_home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
            for log in sorted(folder.glob(f"task_id={ti['task_id']}/*.log")):
                lines.append(f"--- {log}")
                lines.extend(_loud_events(log))
    return "\n".join(lines)


def _loud_events(log: Path) -> list[str]:
    """A task log's warnings and errors (one JSON record a line), each with its
    exception's last frame: what the person would read first."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("level") in ("warning", "error", "critical"):
            detail = record.get("error_detail") or []
            last = detail[-1] if isinstance(detail, list) and detail else {}
            out.append(f"{record['level']}: {str(record.get('event'))[:1500]}"
                       + (f" [{last.get('exc_type')}: {str(last.get('exc_value'))[:1500]}]"
                          if isinstance(last, dict) and last else ""))
    return out


def _submit_form_as_opened(page: Page, airflow: LocalAirflow, dag_id: str, task: str,
                           shot: str | None = None) -> str:
    """The DAG's Trigger form, submitted with nothing changed; returns the new run's id."""
    before = {r["dag_run_id"] for r in _runs(airflow, dag_id)}
    submit = open_trigger_form(page, dag_id, task)
    assert submit.is_enabled(), f"{dag_id}: the Trigger form cannot be submitted as it opens"
    if shot:
        page.shot(shot)
    submit.click()
    deadline = time.time() + 60
    while True:
        new = [r["dag_run_id"] for r in _runs(airflow, dag_id)
               if r["dag_run_id"] not in before and r["run_type"] == "manual"]
        if new:
            page.park()         # the run exists: the waits read the API, not this page
            return new[0]
        assert time.time() < deadline, f"{dag_id}: the form made no run in 60 s"
        time.sleep(2)


class Progress:
    """This test's DAG runs, watched together: a wait fails when for RUN_TIMEOUT seconds
    none of their tasks has run or changed state (a hang), not because a slower machine
    takes longer in all. A run queued behind another's training (pool gpu_training, 1
    slot) moves when that training ends; a running task is bounded by its own
    execution_timeout (every task has one: tests/unit/test_task_timeouts.py), which fails
    it, and a failed task fails the wait at once."""

    def __init__(self, airflow: LocalAirflow):
        self.airflow, self.runs = airflow, []
        self.seen, self.since = None, time.time()

    def add(self, dag_id: str, run_id: str) -> str:
        self.runs.append((dag_id, run_id))
        return run_id

    def tasks(self, dag_id: str, run_id: str) -> dict[str, str]:
        tis = self.airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {t["task_id"]: t["state"] for t in tis["task_instances"]}

    def stalled_for(self) -> float:
        """Seconds since a task of the watched runs last changed state or ran."""
        now = [sorted(self.tasks(d, r).items()) for d, r in self.runs]
        running = any(state == "running" for tasks in now for _, state in tasks)
        if now != self.seen or running:
            self.seen, self.since = now, time.time()
        return time.time() - self.since


def _wait_for_run(progress: Progress, dag_id: str, run_id: str) -> None:
    airflow = progress.airflow
    while True:
        state = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
        if state in ("success", "failed"):
            break
        assert progress.stalled_for() < RUN_TIMEOUT, (
            f"{dag_id} {run_id} still {state}, nothing ran or moved for {RUN_TIMEOUT} s:\n"
            + _failure_report(airflow, dag_id, run_id))
        time.sleep(5)
    assert state == "success", (f"{dag_id} {run_id} {state}:\n"
                                + _failure_report(airflow, dag_id, run_id))


def _wait_for_task(progress: Progress, dag_id: str, run_id: str, task_id: str,
                   states: tuple[str, ...]) -> str:
    while True:
        state = progress.tasks(dag_id, run_id).get(task_id)
        if state in states:
            return state
        assert state not in ("failed", "upstream_failed", "skipped"), (
            f"{task_id} of {run_id} is {state}:\n"
            + _failure_report(progress.airflow, dag_id, run_id))
        assert progress.stalled_for() < RUN_TIMEOUT, (
            f"{task_id} of {run_id} stayed {state}, nothing ran or moved for {RUN_TIMEOUT} s")
        time.sleep(3)


def _retrain_tab(page: Page, dag_id: str, run_id: str, outcome: str) -> str:
    """The run's Retrain tab, once it leads with `outcome`; its text."""
    open_retrain_tab(page, dag_id, run_id)
    return page.wait_for(f"the Retrain tab of {run_id} saying {outcome!r}",
                         lambda t: outcome in t.split("\n", 2)[1] and t, timeout=30,
                         on_timeout=lambda: "the tab begins: " + page.text()[:400])


def _run_file(home: Path, family: str, span: str, run_id: str, name: str) -> dict:
    folder = home / "runs" / family / f"dt={span}" / paths.safe_run_id(run_id)
    return json.loads((folder / name).read_text())


def _summary(home: Path, family: str, span: str, run_id: str) -> dict:
    return _run_file(home, family, span, run_id, "run_summary.json")


def test_first_hour_in_the_browser(first_hour, page):
    airflow, home, clock = first_hour["airflow"], first_hour["home"], first_hour["clock"]
    span = first_hour["span"]
    registry = Registry(home / "registry")
    log_in(page, json.loads((airflow.airflow_home / "simple_auth_manager_passwords.json"
                                                    ".generated").read_text())["admin"])
    page.open("/dags")
    page.wait_for("the retrain DAGs", lambda t: CTR in t and TEXT in t and RECS in t)
    clock.lap("logged in")

    # Both forms as they open. One training at a time (pool gpu_training, 1 slot): the
    # text run, submitted first, reaches it first (its preprocessing is the shorter).
    progress = Progress(airflow)
    text_run = progress.add(TEXT, _submit_form_as_opened(page, airflow, TEXT, "finetune"))
    ctr_run = progress.add(CTR, _submit_form_as_opened(page, airflow, CTR, "preprocess",
                                                       "first-hour-trigger-form.png"))
    _wait_for_task(progress, CTR, ctr_run, "train", ("success",))
    clock.lap("text fine-tuned, CTR trained")
    # CTR again, its form as opened, once the first has its model: the same data and
    # params, so the trained model is reused; it evaluates and publishes in its turn, after
    # the first (retrain.orchestration.turns). And a run that asks a person before it
    # publishes (approval: always), set in its run config.
    again = progress.add(CTR, _submit_form_as_opened(page, airflow, CTR, "preprocess"))
    asked = progress.add(CTR, airflow.call("POST", f"/api/v2/dags/{CTR}/dagRuns", {
        "logical_date": None, "conf": {"approval": "always"}})["dag_run_id"])

    _wait_for_run(progress, CTR, ctr_run)
    clock.lap("CTR published")
    tab = _retrain_tab(page, CTR, ctr_run, "Published ctr v1")
    assert f"span {span}" in tab and "blessed" in tab, tab
    assert registry.current("ctr")["run_id"] == ctr_run
    page.shot("first-hour-retrain-tab.png")
    # The lineage graph of the published version, one click from the tab.
    page.find(xpath="//a[contains(., '(lineage)')]").click()
    page.wait_for("the lineage graph", lambda t: "Click a box for its record" in t)
    page.shot("first-hour-lineage.png")
    page.driver.switch_to.default_content()

    # Recommendations follow the publish (the CTR model's asset schedules them). The
    # session's Airflow DB holds the model events of the tests before this one in the same
    # worker too, and this scheduler may run recommendations for those: count the runs that
    # this test's publish triggered.
    page.park()
    deadline = time.time() + RUN_TIMEOUT
    while True:
        recs = [r for r in _runs(airflow, RECS) if r["run_type"] == "asset_triggered"
                and ctr_run in _triggered_by(airflow, RECS, r["dag_run_id"])]
        if recs and all(r["state"] in ("success", "failed") for r in recs):
            break
        assert time.time() < deadline, f"no finished recommendations run: {recs}"
        time.sleep(5)
    assert [r["state"] for r in recs] == ["success"], _failure_report(
        airflow, RECS, recs[0]["dag_run_id"])
    page.open(f"/dags/{RECS}/runs")
    page.wait_for("the recommendations run, Success", lambda t: recs[0]["dag_run_id"] in t
                  and "Success" in t, reload_every=5)
    (summary,) = (home / "recommendations" / "ctr").glob("dt=*/summary.json")
    assert json.loads(summary.read_text())["model_version"] == 1
    clock.lap("recommendations of v1")

    # The person's answer, in Required Actions.
    _wait_for_task(progress, CTR, asked, "approve", ("awaiting_input",))
    clock.lap("approval asked")
    answer_required_action(page, CTR, asked, "Approve", "checked the report",
                           ("first-hour-required-actions.png", "first-hour-approval.png"))

    # The second run as opened: identical to v1, nothing published.
    _wait_for_run(progress, CTR, again)
    clock.lap("CTR again: ended")
    tab = _retrain_tab(page, CTR, again, "Unchanged: identical to ctr v1")
    assert "nothing: unchanged, identical to ctr version 1" in tab, tab
    assert _summary(home, "ctr", span, again)["train"].get("reused_from"), "not reused"
    page.shot("first-hour-unchanged.png")
    # The approved one: the same model too.
    _wait_for_run(progress, CTR, asked)
    approval = json.loads((home / "runs" / "ctr" / f"dt={span}" / paths.safe_run_id(asked)
                           / "approval.json").read_text())
    assert approval["decision"] == "approved" and approval["by"] == "admin", approval
    _retrain_tab(page, CTR, asked, "Unchanged: identical to ctr v1")
    assert [v["version"] for v in registry.list_versions("ctr")] == [1]
    clock.lap("approved run: ended")

    # The text run, its form as opened (text_config: the demo config, as `make ui` sets
    # it): published on the config's full evidence minimum, no rule lowered or failed.
    _wait_for_run(progress, TEXT, text_run)
    _retrain_tab(page, TEXT, text_run, "Published text v1")
    assert [v["version"] for v in registry.list_versions("text")] == [1]
    current = registry.current("text")
    assert current["run_id"] == text_run and current["data_span"] == span, current
    evaluation = _summary(home, "text", span, text_run)["evaluation"]
    assert not evaluation.get("failed_rules"), evaluation
    report = json.loads(Path(evaluation["eval_uri"]).read_text())
    demo_config = text_config.load(DEMO_TEXT_CONFIG)
    assert report["rows"] >= demo_config.gate.min_eval_rows, report["rows"]
    # The form's epochs left empty: the fine-tune ran the demo config's (2), not 3.
    trained = _run_file(home, "text", span, text_run, "train_result.json")
    assert trained["epochs"] == demo_config.epochs == 2 >= trained["epochs_run"], trained

    # The registry's versions as the UI shows them: the model assets' events, each with
    # its version (the UI has no registry page of its own): one CTR version, one text.
    page.driver.switch_to.default_content()
    page.open("/retrain/assets")
    assets = page.wait_for("both models' versions and the recommendations' event",
                           lambda t: "ctr_model" in t and "text_model" in t and RECS in t and t)
    # The Airflow home (its database) is the session's, shared with the tests before this
    # one in the same worker: count the events of this test's own runs.
    ours = [line for line in assets.splitlines()
            if any(run in line for run in (ctr_run, again, asked, text_run))]
    assert sum(line.startswith("ctr_model") for line in ours) == 1, assets
    assert sum(line.startswith("text_model") for line in ours) == 1, assets
    page.shot("first-hour-registry.png")
    clock.lap("text published, registry page")
