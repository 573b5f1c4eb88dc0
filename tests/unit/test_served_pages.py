"""Served pages are inert (issue 45, item 2): markup planted in the data comes out escaped
from every HTML writer (the CTR and text reports, the run, lineage and asset pages, the
alert mail, great-expectations' Data Docs), and every file the Retrain tab serves carries
its type from its suffix, `nosniff` and a Content-Security-Policy that lets no inline
script run but GX's own (retrain.common.served_files). In a real browser:
tests/integration/test_served_pages_browser.py."""
from __future__ import annotations

import datetime as dt
import html.parser
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from planted_pages import EVIL, PLANTED, SCRIPT, build_planted_docs
from retrain.common import paths, served_files

RUN = "manual__2026-11-04T00:00:00+00:00"
# A run id Airflow's default pattern refuses, but a CLI run or a looser pattern lets by:
# GX writes the run name raw into its pages and their paths.
HOSTILE_RUN = "r1<img src=x onerror=window.__pwned=3>"


class _Elements(html.parser.HTMLParser):
    """Every element's tag and attribute names, as a browser's tokenizer sees them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[str] = []
        self.scripts: list[str] = []
        self.sources: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [f"{tag} {k}={v}" for k, v in attrs if k.startswith("on")]
        self.sources += [v for k, v in attrs if k == "src"]
        self._in_script = tag == "script" and not any(k == "src" for k, _ in attrs)

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)
            self._in_script = False


def elements(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


def assert_inert(page: str, *, scripts_allowed=()) -> None:
    """No planted element or handler: the page's inline scripts are only `scripts_allowed`
    and the planted text is there, escaped."""
    found = elements(page)
    assert [s for s in found.scripts if s not in scripts_allowed] == []
    assert not [h for h in found.handlers if "__pwned" in h], found.handlers
    assert "x" not in found.sources
    for value in PLANTED:
        assert value not in page
    assert "&lt;script&gt;window.__pwned=1;document.title=" in page.replace("&#x27;", "'")


# --------------------------------------------------------------------------- report writers

def test_the_ctr_report_escapes_planted_values():
    from components.ctr import report

    slice_ = {"n": 500, "auc": 0.7, "ctr": 0.1, "log_loss": 0.3}
    evaluation = {
        "span_dir": f"/data/raw/ctr/dt={EVIL}", "candidate_model_dir": EVIL,
        "baseline_model_dir": EVIL, "rows": 1000,
        "candidate": {"auc": 0.7, "ci": {"method": EVIL, "seed": EVIL}},
        "slices": {"candidate": {"device": {EVIL: slice_}, EVIL: {"ios": slice_}},
                   "baseline": {"device": {EVIL: slice_}}},
        "decision": {"blessed": False, "reasons": [EVIL], "force_reason": EVIL,
                     "rules": [{"name": f"max_slice_auc_drop[device={EVIL}]",
                                "passed": False, "observed": 0.1}],
                     "thresholds": {EVIL: EVIL, "max_slice_auc_drop": EVIL,
                                    "min_slice_rows": EVIL}}}
    history = [{"version": EVIL, "stage": EVIL, "data_span": EVIL, "created_at": EVIL,
                "run_id": EVIL, "auc": 0.7}]
    assert_inert(report.render(evaluation, history=history, model_name=EVIL))


def test_the_text_report_escapes_planted_values():
    from components.text import report

    evaluation = {
        "span": EVIL, "window": [EVIL], "rows": 10, "candidate_model_dir": EVIL,
        "labels": {EVIL: [EVIL, "fine"], "topic": ["a", EVIL]},
        "candidate": {"tasks": {"topic": {
            "n": 10, "macro_f1": 0.5, "majority_class": EVIL, "auc_kind": EVIL,
            "positive_class": EVIL, "confusion_matrix": [[1, 2], [3, 4]],
            "per_class": {EVIL: {"f1": 0.5, "support": 4}}}}},
        "slices": {"names": [EVIL], "candidate": {"topic": {EVIL: {EVIL: {
            "n": 5, "macro_f1": 0.4, "accuracy": 0.5}}}}},
        "classical_baseline": {"model": EVIL, "max_train_examples": EVIL},
        "decision": {"reasons": [EVIL], "rules": [{"name": f"x[{EVIL}]", "passed": True}],
                     "thresholds": {EVIL: 1}}}
    assert_inert(report.render(evaluation, history=[], model_name=EVIL))


def test_the_lineage_graph_and_the_alert_mail_escape_planted_values():
    from retrain.orchestration import lineage_graph
    from retrain.orchestration.alerts.delivery import Alert

    raw = {"type": EVIL, "name": EVIL, "fingerprint": "aaa", "uri": EVIL, "inputs": [],
           "producer": {"run_id": EVIL}}
    tree = {"type": "model", "name": EVIL, "fingerprint": "mmm", "uri": "", "inputs": [raw]}
    assert_inert(lineage_graph.svg(tree, lambda n: f"/x/{n['fingerprint']}?{EVIL}"))
    alert = Alert(kind="rejected", dag_id=EVIL, run_id=EVIL, span=EVIL, reason=EVIL,
                  details={EVIL: [EVIL]})
    found = elements(alert.html())
    assert "script" not in found.tags and "img" not in found.tags and not found.handlers


@pytest.fixture
def home(tmp_path, monkeypatch):
    from retrain.orchestration import airflow_views

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    overrides = airflow_views.app.dependency_overrides
    overrides[airflow_views.can_read_runs] = lambda: None
    overrides[airflow_views.can_read_assets] = lambda: None
    events = [{"asset": EVIL, "timestamp": dt.datetime(2026, 11, 4), "dag_id":
               "ctr_daily_retrain", "run_id": RUN, "extra": {"span": EVIL, EVIL: EVIL}}]
    overrides[airflow_views.run_asset_events] = lambda dag_id, run_id: events
    overrides[airflow_views.recent_asset_events] = lambda: events
    folder = tmp_path / "runs" / "ctr" / "dt=2026-11-03" / paths.safe_run_id(RUN)
    folder.mkdir(parents=True)
    yield folder
    overrides.clear()


def test_the_run_and_asset_pages_escape_planted_values(home):
    from retrain.orchestration import airflow_views

    (home / "run_summary.json").write_text(json.dumps({
        "span": EVIL, "published": None,
        "preprocess": {"window_screen": {"used": [EVIL], "left_out": [
            {"span": EVIL, "reason": EVIL}]}},
        "validation": {"gate": EVIL, "n_failed": EVIL, "n_expectations": EVIL},
        "evaluation": {"blessed": False, "reasons": [EVIL]}}))
    client = TestClient(airflow_views.app)
    for url in (f"/runs/ctr_daily_retrain/{RUN}", "/assets"):
        page = client.get(url)
        assert page.status_code == 200
        assert_inert(page.text)
        assert page.headers["content-security-policy"] == served_files.PAGE_POLICY
        assert page.headers["x-content-type-options"] == "nosniff"


# --------------------------------------------------------------------------- Data Docs

@pytest.fixture(scope="module")
def data_docs(tmp_path_factory) -> Path:
    """Data Docs of a day whose `device` column holds the planted values, validated under
    a hostile run id (GX's renderer writes unexpected values and the run name into its
    pages as they are)."""
    return build_planted_docs(tmp_path_factory.mktemp("planted-docs"), run_id=HOSTILE_RUN)


def test_data_docs_show_planted_values_escaped_and_only_gx_scripts(data_docs):
    pages = sorted(data_docs.rglob("*.html"))
    assert len(pages) >= 7
    shown = [p for p in pages if "&lt;script&gt;window.__pwned" in p.read_text()]
    assert shown, "the planted values are not on any page (nothing was tested)"
    assert len(list((data_docs / "validations").rglob("*.html"))) == 3   # none lost
    for page in pages:
        text = page.read_text()
        found = elements(text)
        rel = page.relative_to(data_docs.parent).as_posix()
        # Every inline script is one of GX's (pinned): a GX upgrade that writes another
        # fails here rather than silently losing it under the policy.
        allowed, _ = served_files.gx_hashes(text)
        assert sorted({served_files.sha256(s) for s in found.scripts}) == allowed, rel
        assert not [h for h in found.handlers
                    if not served_files.GX_HANDLERS.fullmatch(h.split("=", 1)[1])], rel
        assert not [h for h in found.handlers if "__pwned" in h], rel
        assert "x" not in found.sources, rel
        if "&lt;script&gt;window.__pwned" in text.replace("&#x27;", "'"):
            assert_inert(text, scripts_allowed=found.scripts)
        # The page's policy admits exactly those scripts and handlers.
        policy = served_files.policy(f"validation/{rel}", text.encode())
        assert "'unsafe-inline'" not in policy.split(";")[0]
        for digest in allowed:
            assert f"'{digest}'" in policy


def test_the_policy_lets_no_planted_or_forged_script_through():
    index = (
        "<script>\n  $('#section-1-content-block-2-1-body-table').bootstrapTable(\n"
        "    Object.assign(\n      {\n        columns: [],\n        data: [],\n"
        "      });alert(1);(\n    )\n  );\n</script>"
        f"{SCRIPT}<button onclick=\"showAllValidations()\">x</button>"
        "<button onclick=\"showAllValidations();alert(1)\">y</button>")
    policy = served_files.policy("validation/data_docs/index.html", index.encode())
    script_src = policy.split(";")[0]
    assert script_src == ("script-src 'self' 'unsafe-hashes' '"
                          + served_files.sha256("showAllValidations()") + "'")
    # Outside the Data Docs, and for anything not a page, no script at all.
    for rel in ("evaluation/report.html", "validation/data_docs/static/x.svg",
                "validation/data_docs/index.htm", "run_summary.json"):
        assert served_files.policy(rel, index.encode()) == served_files.PAGE_POLICY
    for part in ("default-src 'none'", "object-src 'none'", "base-uri 'none'",
                 "frame-ancestors 'self'"):
        assert part in served_files.PAGE_POLICY
    assert not re.search(r"https?:|\*", served_files.PAGE_POLICY + policy)


@pytest.mark.parametrize("rel,kind", [
    ("evaluation/report.html", "text/html; charset=utf-8"),
    ("a/b.HTML", "text/html; charset=utf-8"),
    ("validation/data_docs/static/vendor/jquery.min.js", "text/javascript; charset=utf-8"),
    ("validation/data_docs/static/a.css", "text/css; charset=utf-8"),
    ("run_summary.json", "application/json"),
    ("validation/data_docs/static/vendor/logo.svg", "image/svg+xml"),
    ("notes.htm", served_files.ATTACHMENT), ("page.xhtml", served_files.ATTACHMENT),
    ("stats/sample.parquet", served_files.ATTACHMENT), ("README", served_files.ATTACHMENT),
    ("evil.html.bin", served_files.ATTACHMENT), ("x.shtml", served_files.ATTACHMENT)])
def test_the_type_comes_from_the_suffix_and_an_unknown_one_is_no_page(rel, kind):
    assert served_files.content_type(rel) == kind


def test_served_files_carry_their_type_nosniff_and_policy(home, data_docs):
    import shutil

    from retrain.orchestration import airflow_views

    shutil.copytree(data_docs, home / "validation" / served_files.DATA_DOCS_DIR)
    (home / "evaluation").mkdir()
    (home / "evaluation" / "report.html").write_text(SCRIPT)
    (home / "evaluation" / "looks_like_html").write_text("<html>" + SCRIPT)
    client = TestClient(airflow_views.app)
    base = f"/runs/ctr_daily_retrain/{RUN}/files"
    report = client.get(f"{base}/evaluation/report.html")
    assert report.headers["content-type"] == "text/html; charset=utf-8"
    assert report.headers["content-security-policy"] == served_files.PAGE_POLICY
    assert report.headers["x-content-type-options"] == "nosniff"
    sniffable = client.get(f"{base}/evaluation/looks_like_html")
    assert sniffable.headers["content-type"] == served_files.ATTACHMENT
    assert sniffable.headers["content-disposition"] == "attachment"
    assert sniffable.headers["x-content-type-options"] == "nosniff"
    index = client.get(f"{base}/validation/data_docs/index.html")
    text = index.text
    assert index.headers["content-security-policy"] == served_files.policy(
        "validation/data_docs/index.html", text.encode())
    assert index.headers["content-security-policy"].count("'sha256-") >= 4
    js = next((home / "validation" / "data_docs").rglob("jquery.min.js"))
    served = client.get(f"{base}/{js.relative_to(home).as_posix()}")
    assert served.status_code == 200
    assert served.headers["content-type"] == "text/javascript; charset=utf-8"
    assert served.headers["x-content-type-options"] == "nosniff"
