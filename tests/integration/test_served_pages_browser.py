"""Nothing served runs planted script, in a real browser (issue 45, item 2).

Markup planted in the training data (`<script>`, `<img onerror>`, a value that closes its
cell first: tests/planted_pages.py) goes through the real writers: great-expectations'
Data Docs of a validation that fails on it, the CTR and text evaluation reports. A page
that holds the payload raw (what an escaping bug would write) lies beside them, in the
reports' folder and in the Data Docs' folder. The Retrain tab's view
(retrain.orchestration.airflow_views) serves the run folder over HTTP on 127.0.0.1 with
Airflow's permission check replaced by "allowed" (tests/integration/test_airflow_ui.py goes
through the real one); Debian's headless chromium opens every page. Each payload sets
`window.__pwned` and the title when it runs: neither happens, the headers are there, and
GX's own scripts still run under the policy (the index lists its validations). The same raw
page opened from disk, with no policy, does run its payload: the check can see a script run.
"""
from __future__ import annotations

import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from planted_pages import EVIL, SCRIPT, build_planted_docs
from retrain.common import paths, served_files

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
RUN = "manual__2026-11-02T00:00:00+00:00"
DAG_ID = "ctr_daily_retrain"
RAW_PAGE = f"<!doctype html><title>raw</title><p>{EVIL}</p>"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A ctr run folder as the DAG lays it out, every page written from planted data."""
    from components.ctr import report as ctr_report
    from components.text import report as text_report

    home = tmp_path_factory.mktemp("served-home")
    docs = build_planted_docs(home, run_id=RUN)
    folder = docs.parents[1]
    assert folder == home / "runs" / "ctr" / "dt=2026-11-02" / paths.safe_run_id(RUN)
    slice_ = {"n": 500, "auc": 0.7, "ctr": 0.1, "log_loss": 0.3}
    ctr_report.write_report({
        "span_dir": str(home / "raw" / "ctr" / "dt=2026-11-02"), "rows": 1000,
        "candidate_model_dir": EVIL, "candidate": {"auc": 0.7},
        "slices": {"candidate": {"device": {EVIL: slice_}}},
        "decision": {"blessed": False, "reasons": [EVIL], "thresholds": {EVIL: EVIL}}},
        folder / "evaluation" / "report.html",
        history=[{"version": 1, "run_id": EVIL, "data_span": EVIL, "auc": 0.7}])
    text_report.write_report({
        "span": EVIL, "rows": 10, "labels": {EVIL: [EVIL, "fine"]},
        "decision": {"reasons": [EVIL]}}, folder / "evaluation" / "text_report.html")
    (folder / "evaluation" / "raw.html").write_text(RAW_PAGE)
    (docs / "raw.html").write_text(RAW_PAGE)
    (folder / "evaluation" / "raw_no_suffix").write_text(RAW_PAGE)
    return folder


@pytest.fixture(scope="module")
def server(run_folder):
    """The views on 127.0.0.1 (uvicorn, as Airflow's API server runs them), RETRAIN_HOME
    at the run folder's home."""
    import uvicorn

    from retrain.orchestration import airflow_views

    mp = pytest.MonkeyPatch()
    mp.setenv("RETRAIN_HOME", str(run_folder.parents[3]))
    overrides = airflow_views.app.dependency_overrides
    overrides[airflow_views.can_read_runs] = lambda: None
    overrides[airflow_views.run_asset_events] = lambda dag_id, run_id: []
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(airflow_views.app, host="127.0.0.1", port=port,
                                       log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started:
        assert time.time() < deadline, "the views did not start"
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/runs/{DAG_ID}/{RUN}"
    srv.should_exit = True
    thread.join(10)
    overrides.clear()
    mp.undo()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromedriver not installed (Debian: apt-get install -y "
                    "chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-background-networking",
                "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _ran(driver) -> dict:
    """Whether a payload ran on the open page (after its images had time to fail)."""
    time.sleep(1.0)
    return {"pwned": driver.execute_script("return window.__pwned === undefined ? null "
                                           ": window.__pwned"),
            "title": driver.title}


def _pages(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.html"))


def test_the_check_sees_a_payload_run_where_nothing_stops_it(run_folder, browser):
    browser.get((run_folder / "evaluation" / "raw.html").as_uri())
    assert _ran(browser) == {"pwned": 2, "title": "pwned"}      # the <script>, then <img>


def test_no_served_page_runs_planted_script(run_folder, server, browser):
    pages = _pages(run_folder)
    assert {"evaluation/report.html", "evaluation/text_report.html", "evaluation/raw.html",
            "validation/data_docs/index.html", "validation/data_docs/raw.html"} <= set(pages)
    planted = [p for p in pages if "__pwned" in (run_folder / p).read_text()]
    assert len(planted) >= 5, planted                 # the GX page with the values included
    for rel in pages:
        browser.get(f"{server}/files/{rel}")
        outcome = _ran(browser)
        assert outcome["pwned"] is None and outcome["title"] != "pwned", (rel, outcome)
    for page in ("", "/files/evaluation/raw_no_suffix"):
        browser.get(server + page)
        assert _ran(browser)["pwned"] is None, page


def test_the_planted_values_show_as_text_and_gx_pages_still_work(run_folder, server, browser):
    from selenium.webdriver.common.by import By

    validations = run_folder / "validation" / "data_docs" / "validations"
    page = next(validations.rglob("*ctr_span_domains.html"))
    browser.get(f"{server}/files/{page.relative_to(run_folder).as_posix()}")
    assert SCRIPT in browser.find_element(By.TAG_NAME, "body").text
    # GX's own inline scripts and its jQuery/Bootstrap from the docs folder run under the
    # policy: the index builds its table of validations in JavaScript.
    browser.get(f"{server}/files/validation/data_docs/index.html")
    deadline = time.time() + 20
    while "Showing 1 to 3 of 3 rows" not in browser.find_element(By.TAG_NAME, "body").text:
        assert time.time() < deadline, "the Data Docs index did not list its validations"
        time.sleep(0.5)
    refused = [e["message"] for e in browser.get_log("browser")
               if "Content Security Policy" in e["message"]
               and "raw.html" not in e["message"]]
    assert refused == [], refused


def test_every_served_file_carries_its_type_nosniff_and_a_policy(run_folder, server):
    for rel in [*_pages(run_folder), "evaluation/raw_no_suffix", "validation/validation.json",
                "validation/stats/sample.parquet"]:
        with urllib.request.urlopen(f"{server}/files/{rel}", timeout=10) as resp:
            headers = resp.headers
        assert headers["X-Content-Type-Options"] == "nosniff", rel
        assert headers["Content-Type"] == served_files.content_type(rel), rel
        policy = headers["Content-Security-Policy"]
        assert policy.startswith("script-src ") and "default-src 'none'" in policy, rel
        assert "'unsafe-inline'" not in policy.split(";")[0] and "http" not in policy, rel
    with urllib.request.urlopen(server, timeout=10) as resp:
        assert resp.headers["Content-Security-Policy"] == served_files.PAGE_POLICY
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
