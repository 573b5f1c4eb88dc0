"""The HTML evaluation report, rendered from a real `assess()` result on tiny arrays:
plots inlined, every gate reason and slice present, history from a registry, no network.
The shared part (`components.report`) names no family; the CTR page is
`components.ctr.report`."""
from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from components import report as shared
from components.ctr import report
from components.ctr.evaluate import assess
from components.gate import Thresholds

DEVICES = np.array(["ios", "android", "web"])


def tiny_eval(n: int = 3000, seed: int = 0) -> dict:
    """A candidate better overall but worse on device=web, scored like evaluate.run does."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(-2.5, 1.0, n)
    truth = 1 / (1 + np.exp(-logit))
    labels = (rng.random(n) < truth).astype(int)
    device = rng.choice(DEVICES, size=n, p=[0.45, 0.4, 0.15])
    baseline = 1 / (1 + np.exp(-(logit + rng.normal(0, 1.2, n))))
    candidate = 1 / (1 + np.exp(-(logit + rng.normal(0, 0.2, n))))
    web = device == "web"
    candidate[web] = rng.permutation(candidate[web])  # useless on web
    th = Thresholds(min_auc=0.6, max_slice_auc_drop=0.02, min_slice_rows=300,
                    min_slice_positives=20)
    out = assess(labels, {"candidate": candidate, "baseline": baseline, "bayes_optimal": truth},
                 {"device": device}, th, n_resamples=50)
    out.update(span_dir="/data/raw/ctr/dt=2026-11-05", candidate_model_dir="/m/cand",
               baseline_model_dir="/registry/ctr/2")
    return out


HISTORY = [
    {"version": 1, "stage": "archived", "current": False, "created_at": "2026-11-03T01:00:00",
     "data_span": "2026-11-02", "run_id": "r1", "auc": 0.71, "log_loss": 0.21,
     "auc_low": 0.70, "auc_high": 0.72, "forced": False},
    {"version": 2, "stage": "published", "current": True, "created_at": "2026-11-04T01:00:00",
     "data_span": "2026-11-03", "run_id": "r2", "auc": 0.73, "log_loss": 0.20,
     "auc_low": None, "auc_high": None, "forced": True},
]


@pytest.fixture(scope="module")
def evaluation():
    return tiny_eval()


def test_assess_rejects_the_candidate_on_its_bad_slice(evaluation):
    d = evaluation["decision"]
    assert evaluation["candidate"]["auc"] > evaluation["baseline"]["auc"]
    assert d["blessed"] is False
    assert [r["name"] for r in d["rules"] if not r["passed"]] == ["max_slice_auc_drop[device=web]"]
    ci = evaluation["candidate"]["ci"]
    assert ci["auc"]["low"] < evaluation["candidate"]["auc"] < ci["auc"]["high"]
    assert ci["auc_delta"]["low"] > 0  # paired: better overall, with confidence
    assert set(evaluation["curves"]["roc"]) == {"candidate", "baseline", "bayes_optimal"}


def test_report_has_plots_slices_reasons_and_history(evaluation, tmp_path):
    path = report.write_report(evaluation, tmp_path / "report.html", history=HISTORY)
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    images = re.findall(r'<img class="plot" alt="([^"]+)" src="data:image/png;base64,', text)
    assert len(images) == 3, images  # ROC, calibration, history
    assert any("ROC" in a for a in images) and any("Calibration" in a for a in images)
    for reason in evaluation["decision"]["reasons"]:
        assert html.escape(reason) in text, reason
    assert "NOT BLESSED" in text
    assert "max_slice_auc_drop[device=web]" in text and "FAIL" in text
    for value in ("ios", "android", "web"):
        assert f"<td>{value}</td>" in text
    assert "v1" in text and "v2 (current)" in text and "forced" in text
    assert "Candidate &minus; baseline (paired)" in text
    # Self-contained: no scripts, no external resources.
    assert "<script" not in text
    assert not re.search(r'(src|href)="(https?:)?//', text)


def test_report_without_baseline_history_or_slices(tmp_path):
    rng = np.random.default_rng(1)
    y = (rng.random(400) < 0.2).astype(int)
    p = np.clip(0.2 + 0.1 * (y - 0.2) + rng.normal(0, 0.05, 400), 0.01, 0.99)
    ev = assess(y, {"candidate": p}, {}, Thresholds(min_auc=0.5), n_resamples=20)
    text = report.render(ev)
    assert "no published model yet" in text and "No published versions" in text
    assert "No slices were computed" in text
    assert text.count('src="data:image/png;base64,') == 2
    assert "no published baseline: decided on absolute thresholds only" in text


def test_registry_history_reads_the_last_versions(tmp_path):
    from retrain.common.registry import Registry
    model = tmp_path / "m"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"fake")
    reg = Registry(tmp_path / "registry")
    for i, auc in enumerate([0.70, 0.72, 0.71], start=1):
        reg.publish(model, "ctr", {"run_id": f"r{i}", "data_span": f"2026-11-0{i}",
                                   "metrics": {"auc": auc, "log_loss": 0.2,
                                               "ci": {"auc": {"low": auc - 0.01,
                                                              "high": auc + 0.01}}}})
    hist = shared.registry_history(tmp_path / "registry", "ctr", 2)
    assert [h["version"] for h in hist] == [2, 3]
    assert hist[-1]["current"] and hist[-1]["stage"] == "published"
    assert hist[0]["auc_low"] == pytest.approx(0.71)
    assert shared.registry_history(tmp_path / "registry", "other", 5) == []
    assert shared.registry_history(None, "ctr") == []
    # The step: eval.json in, report.html next to it, history from the registry.
    from retrain.common.atomic import write_json
    eval_json = write_json(tmp_path / "eval" / "eval.json", tiny_eval(1500))
    out = report.run(report.ReportSpec(eval_json=str(eval_json),
                                       registry_root=str(tmp_path / "registry")))
    assert out["report_uri"] == str(tmp_path / "eval" / "report.html")
    assert "v3 (current)" in (tmp_path / "eval" / "report.html").read_text()


def test_the_shared_report_names_no_family():
    """Rule 13: what every family's page shares names no family, column or label."""
    source = Path(shared.__file__).read_text()
    found = re.findall(r"(?i)ctr|click|text family|bayes", source)
    assert found == [], found


def test_a_page_that_cannot_be_drawn_is_logged_not_raised(tmp_path, caplog):
    def broken() -> str:
        raise ValueError("no figure")
    assert shared.write_or_log(broken, tmp_path / "report.html") == (
        None, "ValueError: no figure")
    assert "evaluation report could not be written" in caplog.text
    assert list(tmp_path.iterdir()) == []
    uri, error = shared.write_or_log(lambda: "<p>ok</p>", tmp_path / "report.html")
    assert error is None and Path(uri).read_text() == "<p>ok</p>"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install "
                                             "-y chromium): headless screenshot not taken")
def test_report_renders_in_headless_chromium(evaluation, tmp_path):
    from PIL import Image
    page = report.write_report(evaluation, tmp_path / "report.html", history=HISTORY)
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--no-first-run", f"--screenshot={shot}", "--window-size=1200,2000",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    image = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert image.shape == (2000, 1200)
    # Not a blank page: plots and tables give plenty of dark pixels and contrast.
    assert (image < 128).mean() > 0.01 and image.std() > 20
