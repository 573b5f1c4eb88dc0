"""What a user sees in the Airflow UI, on the production shape: a real browser against a
real Airflow on PostgreSQL with the CeleryExecutor.

The stack is `retrain stack up` (retrain/orchestration/stack.py): PostgreSQL and Redis from Debian's
packages; api-server, scheduler, dag-processor and triggerer as separate processes from
Airflow's own environment (requirements-airflow.lock: no TensorFlow, Beam or
great-expectations); two Celery workers as two hosts, each in its own network namespace
with its own address and task-log server, sharing the artifact root; steps run by the ML
environment's interpreter. Debian's chromium, headless, driven by selenium through
Debian's chromedriver.

As a user would: log in, open both DAGs, submit the Trigger form of ctr_daily_retrain as
it opens with one param changed (its "unpause on trigger" box, ticked as the form opens,
also lets the scheduler make the daily run), see the runs succeed, read a step's line in a
task log, then create a 3-day backfill in the dialog. Backfill runs are shadow runs: push
is skipped in each, and its log says why. Every step is asserted on the page; behind it,
the registry, the model Asset's events and the run folders are checked through the REST
API and on disk. Then the stack itself: the text DAG's daily run on a small slice, tasks
on both worker hosts with their logs read through the API from each, and no ML library in
any live Airflow process. Screenshots land in the test's folder and, with
RETRAIN_SCREENSHOT_DIR set, there too (docs/images: `RETRAIN_SCREENSHOT_DIR=docs/images
make test-server`).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from components.ctr.generate import GenerateSpec, run as generate
from retrain.common import paths
from retrain.common.registry import Registry
from components.text.load import LoadTextSpec, run as load_text
from retrain.orchestration.stack import Stack, StackSpec
from ui_browser import Page, answer_required_action, log_in, need_browser, open_retrain_tab

pytestmark = [pytest.mark.integration, pytest.mark.airflow_server]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "ctr_daily_retrain"
TEXT_DAG_ID = "text_daily_finetune"
RECS_DAG_ID = "ctr_daily_recommendations"
RUN_TIMEOUT = 900
# Airflow's own environment (requirements-airflow.lock): no TensorFlow, Beam or GX.
AIRFLOW_VENV = Path(os.environ.get("RETRAIN_AIRFLOW_VENV", REPO / ".venv-airflow"))
HEAVY = ("tensorflow", "apache_beam", "great_expectations")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The REST API with the admin's token: only for the checks behind the page."""

    def __init__(self, base: str, password: str):
        self.base, self.password, self.token = base, password, None

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        if self.token is None and not path.startswith("/auth/"):
            self.token = self.call("POST", "/auth/token", {
                "username": "admin", "password": self.password})["access_token"]
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path} -> {e.code}: {e.read()[:500]!r}") from None

    def runs(self) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]


@pytest.fixture(scope="module")
def airflow_server(tmp_path_factory):
    """The production-shaped stack (retrain.orchestration.stack: PostgreSQL, Redis, CeleryExecutor,
    api-server / scheduler / dag-processor / triggerer as separate processes from the
    environment without TensorFlow, two Celery workers as two hosts in their own network
    namespaces, steps in the ML environment), on free ports and its own subnet."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        message = "the stack needs root and iproute2 (network namespaces); CI runs as root"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    base = tmp_path_factory.mktemp("airflow-server")
    home = base / "retrain-home"
    today = dt.datetime.now(dt.timezone.utc).date()
    # Spans today-6 .. today-1: the daily runs' window and the backfill's spans.
    generate(GenerateSpec(out_root=str(home), start=(today - dt.timedelta(days=6)).isoformat(),
                          days=6, rows_per_day=3000, n_users=4000, n_items=2500, n_categories=40))
    load_text(LoadTextSpec(out_root=str(home), start=(today - dt.timedelta(days=3)).isoformat(),
                           days=3, max_rows_per_day=100))
    spec = StackSpec(root=str(base / "stack"), retrain_home=str(home),
                     airflow_venv=str(AIRFLOW_VENV), ml_python=sys.executable,
                     subnet=f"10.213.{secrets.randbelow(200) + 20}",
                     prefix=f"rt{secrets.token_hex(2)}", api_port=_free_port(),
                     pg_port=_free_port(), redis_port=_free_port(),
                     env={"RETRAIN_SPAN_POKE_SECONDS": "5",
                          "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                          "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5"})
    stack = Stack(spec)
    try:
        stack.up(install=True)
        api = Api(spec.base_url, stack.admin_password())
        deadline = time.time() + 180
        while True:
            try:
                dag = api.call("GET", f"/api/v2/dags/{DAG_ID}")
                break
            except (urllib.error.URLError, ConnectionError, AssertionError, OSError):
                if time.time() > deadline:
                    raise AssertionError("Airflow did not serve the DAG within 180 s; see "
                                         f"{stack.logs}") from None
                time.sleep(3)
        assert dag["is_paused"], "a new DAG starts paused"
        yield {"api": api, "home": home, "today": today, "base": base, "stack": stack,
               "url": spec.base_url, "password": stack.admin_password()}
    finally:
        stack.down(purge=True)       # its database under /var/tmp too


@pytest.fixture(scope="module")
def page(airflow_server):
    need_browser()
    p = Page(airflow_server["url"], airflow_server["base"])
    yield p
    p.driver.quit()


def _stack_processes(stack) -> dict[str, list[psutil.Process]]:
    """The live processes of each component the stack started (its process group)."""
    groups = stack.pids_by_name()
    found: dict[str, list[psutil.Process]] = {name: [] for name in groups}
    by_group = {pgid: name for name, pgid in groups.items()}
    for p in psutil.process_iter():
        try:
            name = by_group.get(os.getpgid(p.pid))
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
        if name:
            found[name].append(p)
    return found


def _listening_sockets(pid: int) -> set[tuple[str, int]]:
    """The TCP sockets a process listens on, read from its own network namespace's tables
    (/proc/<pid>/net/tcp*: psutil reads the caller's namespace, blind to a worker's)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, size in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:     # 0A: LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)
            # The kernel prints the address as 32-bit words in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            found.add((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def test_every_stack_socket_listens_on_the_stacks_own_addresses(airflow_server):
    """Nothing the stack starts is reachable from outside it: the host's services bind
    loopback and the bridge address, a worker's log server binds inside its namespace."""
    stack = airflow_server["stack"]
    own_netns = os.readlink("/proc/self/ns/net")
    subnet = ipaddress.ip_network(f"{stack.spec.subnet}.0/24")
    listening, exposed = {}, {}
    for name, procs in _stack_processes(stack).items():
        for p in procs:
            try:
                in_worker_ns = os.readlink(f"/proc/{p.pid}/ns/net") != own_netns
                sockets = _listening_sockets(p.pid)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            for ip, port in sockets:
                listening[(name, ip, port)] = in_worker_ns
                addr = ipaddress.ip_address(ip)
                if not (addr.is_loopback or addr in subnet or in_worker_ns):
                    exposed[(name, ip, port)] = " ".join(p.cmdline()[:4])
    assert ("api-server", stack.spec.host_ip, stack.spec.api_port) in listening, listening
    for i in range(1, stack.spec.workers + 1):      # each worker serves its own logs
        assert any(n == f"worker-{i}" and port == 8793 and ns
                   for (n, _, port), ns in listening.items()), listening
    assert not exposed, f"listening beyond the stack's addresses: {exposed}"


def test_the_run_views_need_a_login(airflow_server):
    """The plugin's pages (reports, Data Docs, lineage, asset events) are behind Airflow's
    own login."""
    base = f"{airflow_server['url']}/retrain"
    for path in (f"/runs/{DAG_ID}/any_run", f"/runs/{DAG_ID}/any_run/files/run_summary.json",
                 "/lineage/ctr/1", "/lineage/ctr/1/artifacts/any", "/assets"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + path, timeout=30)
        assert e.value.code in (401, 403), path


def _run_rows(page: Page, kind: str) -> list[str]:
    """The runs table's rows of one run type ("manual__", "backfill__", ...)."""
    from selenium.webdriver.common.by import By
    return [r.text for r in page.driver.find_elements(By.CSS_SELECTOR, "tbody tr")
            if r.text.startswith(kind)]


def _wait_for_runs(page: Page, server, kind: str, count: int) -> list[str]:
    """Until `count` runs of that kind succeeded (read from the API, the page parked: an
    open runs page of active runs refreshes itself, a quarter of a core), then the DAG's
    runs page must show them Success; a Failed one stops the wait with the failed tasks'
    logs."""
    page.park()
    deadline = time.time() + RUN_TIMEOUT
    while True:
        runs = [r for r in server["api"].runs() if r["dag_run_id"].startswith(kind)]
        if any(r["state"] == "failed" for r in runs):
            raise AssertionError(f"a {kind} run failed:\n" + _failure_report(server))
        if sum(r["state"] == "success" for r in runs) >= count:
            break
        assert time.time() < deadline, (f"{count} {kind} run(s) not successful in "
                                        f"{RUN_TIMEOUT} s: {runs}\n" + _failure_report(server))
        time.sleep(5)
    page.open(f"/dags/{DAG_ID}/runs")

    def finished(_text):
        rows = _run_rows(page, kind)
        if any("\nFailed\n" in r for r in rows):
            raise AssertionError("a run failed on the page:\n" + "\n".join(rows) + "\n"
                                 + _failure_report(server))
        done = [r for r in rows if "\nSuccess\n" in r]
        return done if len(done) >= count else None

    rows = page.wait_for(f"{count} {kind} run(s) in state Success", finished, 60,
                         reload_every=10, on_timeout=lambda: _failure_report(server))
    return [r.split("\n", 1)[0] for r in rows]


def test_a_user_trains_and_backfills_from_the_ui(airflow_server, page):
    api, home, today = airflow_server["api"], airflow_server["home"], airflow_server["today"]

    # Log in through the login form (the root redirects there).
    log_in(page, airflow_server["password"])
    # Recommendations follow every publish (the CTR model Asset schedules them).
    api.call("PATCH", f"/api/v2/dags/{RECS_DAG_ID}", {"is_paused": False})

    # Both DAGs are listed and open; each Trigger form can be submitted as it opens. The
    # text DAG's is: its manual run (no span: the newest delivered day) and the scheduled
    # run the unpause makes go on meanwhile on whichever worker is free;
    # test_the_text_daily_run_succeeds_on_the_stack follows them.
    page.open("/dags")
    page.wait_for("both DAGs", lambda t: DAG_ID in t and TEXT_DAG_ID in t)
    for dag_id, task in ((TEXT_DAG_ID, "finetune"), (DAG_ID, "preprocess")):
        page.open(f"/dags/{dag_id}")
        page.wait_for(f"{dag_id} and its tasks", lambda t, d=dag_id, k=task: d in t and k in t)
        page.find(css="button[aria-label='Trigger Dag']").click()
        submit = page.button("Trigger", within="//*[@role='dialog']")
        assert submit.is_enabled(), f"{dag_id}: the Trigger form cannot be submitted as it opens"
        if dag_id == TEXT_DAG_ID:
            submit.click()
            page.wait_for("the text DAG's manual run", lambda _: [
                r for r in api.call("GET", f"/api/v2/dags/{TEXT_DAG_ID}/dagRuns")["dag_runs"]
                if r["run_type"] == "manual"], reload_every=10)

    # The CTR form too is submitted as it opens (its params editable, none changed);
    # "unpause on trigger" is ticked as the form opens.
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    unpause = page.driver.find_element(By.XPATH, "//label[contains(., 'on trigger')]//input")
    assert unpause.is_selected()
    assert page.find(css="[name='element_epochs']").is_enabled()
    page.shot("ui-trigger-form.png")
    page.button("Trigger", within="//*[@role='dialog']").click()
    (manual,) = _wait_for_runs(page, airflow_server, "manual__", 1)
    (scheduled,) = _wait_for_runs(page, airflow_server, "scheduled__", 1)  # of the unpause
    page.shot("ui-runs.png")

    # A step's own line in a task log: PS training's summary line, relayed from the child,
    # in whichever of the two runs trained (both on the newest day with the form's
    # defaults: the second reuses the first one's model, and its log says so).
    def reused(run_id: str) -> bool:
        (folder,) = home.glob(f"runs/ctr/dt=*/{paths.safe_run_id(run_id)}/run_summary.json")
        return bool(json.loads(folder.read_text())["train"].get("reused_from"))

    trained = [r for r in (manual, scheduled) if not reused(r)]
    assert trained, (manual, scheduled)       # both, if they overlapped: neither reused
    page.open(f"/dags/{DAG_ID}/runs/{trained[0]}/tasks/train")
    log = page.wait_for("the train task's log", lambda t: "trained " in t and
                        "examples/s" in t and t)
    assert "[cluster] [chief] INFO retrain.ps_train" in log
    page.shot("ui-task-log.png")

    # The run's "Retrain" tab (retrain.orchestration.airflow_plugin): span, window, gate, verdict, and
    # the evaluation report and Data Docs one click away, served through the API server.
    open_retrain_tab(page, DAG_ID, manual)
    tab = page.wait_for("the run's summary in the Retrain tab",
                        lambda t: "verdict" in t and "Data Docs" in t and t)
    span = (today - dt.timedelta(days=1)).isoformat()
    assert f"span {span}" in tab and "validation passed" in tab, tab
    page.shot("ui-retrain-tab.png")
    page.find(xpath="//a[normalize-space(.)='Evaluation report']").click()
    page.wait_for("the evaluation report", lambda t: "Evaluation of ctr" in t and span in t)
    page.shot("ui-evaluation-report.png")
    open_retrain_tab(page, DAG_ID, manual)
    page.find(xpath="//a[normalize-space(.)='Data Docs']").click()
    # The index lists the validations only when its JavaScript libraries load: they are
    # served from the docs folder (retrain.common.docs_assets), not from CDNs.
    page.wait_for("the Data Docs index listing the 3 validations",
                  lambda t: "Validation Results" in t and "Showing 1 to 3 of 3 rows" in t)
    page.shot("ui-data-docs.png")
    page.driver.switch_to.default_content()

    # A 3-day backfill from the dialog (it POSTs /api/v2/backfills), with a param: "Override parameters on existing
    # runs" must be ticked, or Airflow 3.3's dialog sends no run config at all.
    first, last = today - dt.timedelta(days=5), today - dt.timedelta(days=3)
    page.open(f"/dags/{DAG_ID}")
    page.find(css="button[aria-label='Trigger Dag']").click()
    page.find(xpath="//*[@role='dialog']//label[contains(., 'Backfill')]").click()
    for i, day in enumerate((first, last)):
        page.find(css="[data-testid='datetime-input']")
        page.driver.find_elements(By.CSS_SELECTOR, "[data-testid='datetime-input']")[i].click()
        popup = page.find(css="[data-scope='popover'][data-part='content']")
        date_in, time_in = popup.find_elements(By.CSS_SELECTOR, "input")[:2]
        date_in.send_keys(day.strftime("%Y/%m/%d"))
        time_in.send_keys("00:00")
        time_in.send_keys(Keys.ESCAPE)
    page.find(xpath="//label[contains(., 'Override parameters on existing runs')]").click()
    page.type_into("element_epochs", "1")
    page.type_into("element_window_days", "1")
    # The days overlap: the dialog allows up to the DAG's max_active_runs (the setting
    # RETRAIN_MAX_ACTIVE_RUNS, 3 by default; it was capped at 1).
    page.type_into("max_active_runs", "3")
    page.shot("ui-backfill-dialog.png")
    submit = page.button("Run Backfill")
    assert submit.is_enabled()
    submit.click()
    backfill_runs = _wait_for_runs(page, airflow_server, "backfill__", 3)
    assert len(backfill_runs) == 3, backfill_runs
    (backfill,) = api.call("GET", f"/api/v2/backfills?dag_id={DAG_ID}")["backfills"]
    assert backfill["from_date"][:10] == first.isoformat(), backfill
    assert backfill["to_date"][:10] == last.isoformat(), backfill
    assert backfill["max_active_runs"] == 3, backfill

    # Push was skipped in both (shadow runs), and the task log says why.
    for run_id in backfill_runs:
        page.open(f"/dags/{DAG_ID}/runs/{run_id}/tasks/push")
        page.wait_for(f"push skipped in {run_id} with its reason",
                      lambda t: "Skipped" in t and "push skipped: shadow run" in t)
    page.open(f"/dags/{DAG_ID}")
    page.wait_for("the grid", lambda t: "push" in t)
    page.shot("ui-grid.png")

    # Behind the page: the backfill honoured its run config, trained and evaluated the
    # spans before the logical dates, published nothing and emitted no asset event.
    runs = {r["dag_run_id"]: r for r in api.runs()}
    registry = Registry(home / "registry")
    daily_runs = [r for r in runs.values() if r["run_type"] in ("manual", "scheduled")]
    published = registry.list_versions("ctr")
    assert 1 <= len(published) <= len(daily_runs)
    for run_id in backfill_runs:
        run = runs[run_id]
        assert run["run_type"] == "backfill" and run["conf"].get("epochs") == 1, run
        assert run["conf"].get("window_days") == 1, run
        span = (dt.date.fromisoformat(run["logical_date"][:10]) - dt.timedelta(days=1))
        (run_dir,) = (home / "runs" / "ctr" / f"dt={span}").iterdir()
        summary = json.loads((run_dir / "run_summary.json").read_text())
        assert summary["shadow"] is True and summary["published"] is None
        assert (run_dir / "model" / "serving_model" / "saved_model.pb").is_file()
        tis = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")
        pools = {t["task_id"]: t["pool"] for t in tis["task_instances"]}
        assert pools["preprocess"] == "retrain_backfill", pools   # moved by the policy
    def events(asset: str) -> list[dict]:
        (found,) = api.call("GET", f"/api/v2/assets?name_pattern={asset}")["assets"]
        return api.call("GET", f"/api/v2/assets/events?asset_id={found['id']}"
                               "&limit=100")["asset_events"]

    model_events = events("ctr_model")
    sources = {e["source_run_id"] for e in model_events}
    assert sources and sources <= {r["dag_run_id"] for r in daily_runs}, sources
    assert len(model_events) == len(published)
    # The data behind them is lineage in the UI too: every run validated its raw partition
    # and transformed its window, backfills included, each event with span and fingerprint.
    for asset in ("ctr_raw_logs", "ctr_transformed_examples"):
        extras = {e["source_run_id"]: e["extra"] for e in events(asset)}
        assert set(runs) <= set(extras), (asset, sorted(extras))
        assert all(x.get("fingerprint") and x.get("span") for x in extras.values()), extras
    # ... and shown without a click: the "Retrain assets" page lists every event with its
    # span and fingerprint in columns.
    raw = next(iter(extras.values()))
    page.open("/retrain/assets")
    page.wait_for("asset events with span and fingerprint",
                  lambda t: raw["fingerprint"] in t and raw["span"] in t)
    page.shot("ui-asset-events.png")


def _wait_for_task(server, run_id: str, task_id: str, states: tuple[str, ...]) -> str:
    deadline = time.time() + RUN_TIMEOUT
    while True:
        tis = server["api"].call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/"
                                        "taskInstances")["task_instances"]
        state = {t["task_id"]: t["state"] for t in tis}.get(task_id)
        if state in states:
            return state
        assert state not in ("failed", "upstream_failed", "skipped"), (
            f"{task_id} of {run_id} is {state}", _failure_report(server))
        assert time.time() < deadline, f"{task_id} of {run_id} stayed {state}"
        time.sleep(3)


def _answer_in_the_page(page: Page, run_id: str, option: str, reason: str) -> None:
    """Open Required Actions, find the run's request, answer it with a reason."""
    answer_required_action(page, DAG_ID, run_id, option, reason,
                           ("ui-required-actions.png", f"ui-approval-{option.lower()}.png"))


def test_a_person_approves_and_rejects_a_candidate_in_required_actions(airflow_server, page):
    """`approval: always`: the run waits in Required Actions with the gate's verdict; Approve
    in the page publishes with the approver in the registry entry, Reject skips push and
    records who and why. Preprocessing and training are reused from the runs above."""
    api, home = airflow_server["api"], airflow_server["home"]
    registry = Registry(home / "registry")
    before = registry.current("ctr")["version"]

    def trigger() -> str:
        # A gate rejection is never put to a person, and a 1-epoch candidate may lose to
        # the published model: the operator's override blesses it, then the person decides.
        return api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {
            "logical_date": None, "conf": {
                "epochs": 1, "approval": "always",
                "force_bless_reason": "browser test: the person decides"}})["dag_run_id"]

    approved = trigger()
    assert _wait_for_task(airflow_server, approved, "approve", ("awaiting_input",))
    _answer_in_the_page(page, approved, "Approve", "checked the report")
    assert _wait_for_task(airflow_server, approved, "push", ("success",)) == "success"
    current = registry.current("ctr")
    assert current["version"] == before + 1 and current["run_id"] == approved
    assert current["approval"]["decision"] == "approved", current["approval"]
    assert current["approval"]["by"] == "admin" and current["approval"]["reason"] == (
        "checked the report")

    rejected = trigger()
    assert _wait_for_task(airflow_server, rejected, "approve", ("awaiting_input",))
    _answer_in_the_page(page, rejected, "Reject", "too close to call")
    assert _wait_for_task(airflow_server, rejected, "push", ("skipped",)) == "skipped"
    assert registry.current("ctr")["version"] == before + 1
    (record,) = home.glob(f"runs/ctr/dt=*/{rejected.replace(':', '_').replace('+', '_')}"
                          "/approval.json")
    decision = json.loads(record.read_text())
    assert decision["decision"] == "rejected" and decision["by"] == "admin"
    assert decision["reason"] == "too close to call"

    # The lineage graph opens from the approved run's Retrain tab; each box is a link to
    # its artifact's page.
    from selenium.webdriver.common.by import By

    open_retrain_tab(page, DAG_ID, approved)
    page.find(xpath="//a[contains(., '(lineage)')]").click()
    page.wait_for("the lineage graph", lambda t: "Click a box for its record" in t)
    boxes = page.driver.find_elements(By.CSS_SELECTOR, "svg a")
    assert len(boxes) >= 5, len(boxes)
    page.shot("ui-lineage-graph.png")
    raw = next(b for b in boxes if "raw_span" in b.text)
    raw.click()                 # an SVG link, followed inside the tab's frame
    page.wait_for("a raw day's own page", lambda t: "raw_span" in t and "fingerprint" in t)
    page.driver.switch_to.default_content()


def test_recommendations_follow_a_publish_through_the_model_asset(airflow_server):
    """The scheduler starts ctr_daily_recommendations from the CTR model's asset events:
    asset-triggered runs that score with the published version and commit its partition
    (the next day is not delivered here, so the quality task is skipped, saying so)."""
    api, home = airflow_server["api"], airflow_server["home"]
    deadline = time.time() + RUN_TIMEOUT
    while True:
        runs = api.call("GET", f"/api/v2/dags/{RECS_DAG_ID}/dagRuns")["dag_runs"]
        done = [r for r in runs if r["state"] in ("success", "failed")]
        if done and len(done) == len(runs):
            break
        assert time.time() < deadline, f"no finished recommendations run: {runs}"
        time.sleep(5)
    assert {r["run_type"] for r in runs} == {"asset_triggered"}, runs
    assert all(r["state"] == "success" for r in runs), _failure_report(airflow_server,
                                                                       RECS_DAG_ID)
    versions = {v["version"] for v in Registry(home / "registry").list_versions("ctr")}
    partitions = sorted((home / "recommendations" / "ctr").glob("dt=*/summary.json"))
    assert partitions, "no recommendations partition was committed"
    summary = json.loads(partitions[-1].read_text())
    assert summary["model_version"] in versions and summary["users"] > 0


def test_the_text_runs_report_opens_from_its_retrain_tab(airflow_server, page):
    """The text family's HTML report, one click from the Retrain tab of its daily run."""
    api = airflow_server["api"]
    deadline = time.time() + RUN_TIMEOUT
    while True:
        runs = api.call("GET", f"/api/v2/dags/{TEXT_DAG_ID}/dagRuns")["dag_runs"]
        if runs and all(r["state"] in ("success", "failed") for r in runs):
            break
        assert time.time() < deadline, f"the text run did not finish: {runs}"
        time.sleep(5)
    run_id = runs[0]["dag_run_id"]
    open_retrain_tab(page, TEXT_DAG_ID, run_id)
    page.find(xpath="//a[normalize-space(.)='Evaluation report']").click()
    page.wait_for("the text evaluation report", lambda t: "Evaluation of text" in t)
    page.shot("ui-text-report.png")
    page.driver.switch_to.default_content()


def test_the_text_daily_run_succeeds_on_the_stack(airflow_server):
    """The text DAG's runs of the UI test, its form submitted as it opened (a manual run)
    and the scheduled run of the unpause, on a small slice of reviews: both succeed on the
    newest delivered day; fine-tuning runs in the ML environment, handed over by a worker
    without TensorFlow."""
    api = airflow_server["api"]
    deadline = time.time() + RUN_TIMEOUT
    while True:
        runs = api.call("GET", f"/api/v2/dags/{TEXT_DAG_ID}/dagRuns")["dag_runs"]
        if len(runs) >= 2 and all(r["state"] in ("success", "failed") for r in runs):
            break
        assert time.time() < deadline, f"the text runs did not finish: {runs}"
        time.sleep(5)
    assert {r["run_type"] for r in runs} == {"manual", "scheduled"}, runs
    span = (airflow_server["today"] - dt.timedelta(days=1)).isoformat()
    for run in runs:
        tis = api.call("GET", f"/api/v2/dags/{TEXT_DAG_ID}/dagRuns/{run['dag_run_id']}"
                              "/taskInstances")["task_instances"]
        states = {t["task_id"]: t["state"] for t in tis}
        assert run["state"] == "success", (states, _failure_report(airflow_server,
                                                                   TEXT_DAG_ID))
        assert states["finetune"] == "success" and states["evaluate"] == "success", states
        run_dir = (airflow_server["home"] / "runs" / "text" / f"dt={span}"
                   / paths.safe_run_id(run["dag_run_id"]))
        summary = json.loads((run_dir / "run_summary.json").read_text())
        assert summary["span"] == span
        # The second run of the same day and inputs reuses the first one's model, saying so.
        model = Path(summary["train"]["model_dir"])
        assert (model / "saved_model.pb").is_file(), summary["train"]
        assert model.parent == run_dir or summary["train"]["reused_from"]["dag_id"] == (
            TEXT_DAG_ID), summary["train"]


def test_tasks_ran_on_both_worker_hosts_and_their_logs_read_through_the_api(airflow_server):
    """Each worker is its own host: tasks landed on both, each host keeps its task logs on
    its own disk, and the API server reads them from that worker's log server."""
    api, stack = airflow_server["api"], airflow_server["stack"]
    workers = {stack.spec.worker_ip(i): i for i in range(1, stack.spec.workers + 1)}
    by_host: dict[str, list[dict]] = {}
    for dag_id in (DAG_ID, TEXT_DAG_ID):
        tis = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/~/taskInstances?limit=500")
        for ti in tis["task_instances"]:
            if ti["state"] == "success":
                by_host.setdefault(ti["hostname"], []).append(ti)
    assert set(by_host) == set(workers), {h: len(t) for h, t in by_host.items()}
    # Evaluation is never reused, so its step always ran; the others may reuse an artifact.
    order = ("evaluate", "preprocess", "validate", "train", "finetune")
    for host, i in workers.items():
        ran_step = False
        for ti in sorted((t for t in by_host[host] if t["task_id"] in order),
                         key=lambda t: order.index(t["task_id"]))[:4]:
            path = (f"/api/v2/dags/{ti['dag_id']}/dagRuns/"
                    f"{urllib.parse.quote(ti['dag_run_id'])}/taskInstances/{ti['task_id']}"
                    f"/logs/{ti['try_number']}")
            text = json.dumps(api.call("GET", path))
            assert f"http://{host}:8793/log/" in text, text[:1500]   # fetched from that host
            # The file is on the worker's disk only, not where the API server looks first.
            rel = f"dag_id={ti['dag_id']}/run_id={ti['dag_run_id']}/task_id={ti['task_id']}"
            assert list((stack.worker_logs(i) / rel).glob("*.log")), rel
            assert not (stack.airflow_home / "logs" / rel).exists(), rel
            # The task handed its step to the ML environment's interpreter.
            if f"running {stack.spec.ml_python} -m components." in text:
                ran_step = True
                break
        assert ran_step, f"no log of {host} shows a step started with {stack.spec.ml_python}"


def _loaded_heavy_libraries(pid: int) -> set[str]:
    """The ML libraries whose compiled modules are mapped into a live process."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {lib for lib in HEAVY if f"/{lib}/" in maps}


def test_airflow_processes_never_loaded_tensorflow(airflow_server):
    """After every run above: the scheduler, dag-processor, api-server, triggerer and both
    workers run from Airflow's environment and no live process of theirs has TensorFlow,
    Beam or great-expectations loaded; the steps that needed them ran elsewhere."""
    assert not any((AIRFLOW_VENV / "lib" / "python3.11" / "site-packages" / lib).exists()
                   for lib in HEAVY), "Airflow's environment holds an ML library"
    checked = {}
    for name, procs in _stack_processes(airflow_server["stack"]).items():
        if name == "redis":
            continue
        live = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert live, f"{name} is not running"
        # Runs from Airflow's environment: its compiled modules are mapped (the process
        # title no longer shows the interpreter).
        assert f"{AIRFLOW_VENV}/lib/" in Path(f"/proc/{live[0].pid}/maps").read_text(), name
        for p in live:
            checked[(name, p.pid)] = _loaded_heavy_libraries(p.pid)
    assert {n for n, _ in checked} >= {"api-server", "scheduler", "dag-processor",
                                       "triggerer", "worker-1", "worker-2"}, checked
    loaded = {k: v for k, v in checked.items() if v}
    assert not loaded, f"ML libraries in Airflow processes: {loaded}"
    # The check sees a library when one is there: a process of the ML environment.
    probe = subprocess.Popen([sys.executable, "-c", "import tensorflow, sys; "
                              "print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert probe.stdout.readline().strip() == "ready"
        assert "tensorflow" in _loaded_heavy_libraries(probe.pid)
    finally:
        probe.kill()
        probe.wait()


def _failure_report(server, dag_id: str = DAG_ID) -> str:
    """Which tasks failed, with the end of their logs: what a person would look at first."""
    lines = []
    for run in server["api"].call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]:
        tis = server["api"].call(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances")
        for ti in tis["task_instances"]:
            lines.append(f"{run['dag_run_id']} {ti['task_id']}: {ti['state']}")
            if ti["state"] in ("failed", "upstream_failed", "up_for_retry"):
                # Each host keeps its own logs (the API server's and each worker's).
                for log in sorted(server["stack"].root.glob(
                        f"**/dag_id={dag_id}/run_id={run['dag_run_id']}/"
                        f"task_id={ti['task_id']}/*.log")):
                    lines.append(f"--- {log}\n" + log.read_text(errors="replace")[-3000:])
    return "\n".join(lines)
