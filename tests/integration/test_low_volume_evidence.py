"""A low-volume daily log is judged on the whole window's held-out rows, and too few rows
never bless.

The seed of issue "Chain of custody": a real feed of ~330 rows a day with 5 % clicks was
published on the span's 60 eval rows and 3 clicks (AUC 0.912; the window's 1,947 held-out
rows gave 0.743). Here a generated log of 300 rows a day for 30 days goes through the real
preprocess (Beam + tf.Transform), training and evaluate steps: evaluation scores the
held-out rows of all 30 days (the span's own are a slice), and the evidence rules pass;
the same candidate judged on a 3-day window has fewer held-out rows than the feature
config's `gate.min_eval_rows` (200), is not blessed, and the reason is what the Retrain
tab of the run shows.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from components.ctr.generate import GenerateSpec, run as generate

pytestmark = pytest.mark.integration

DAYS, ROWS, SPAN = 30, 300, dt.date(2026, 10, 30)


@pytest.fixture(scope="module")
def low_volume(tmp_path_factory):
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from components.ctr.ps_train import PsTrainSpec, run as train
    home = tmp_path_factory.mktemp("low-volume")
    generate(GenerateSpec(out_root=str(home), start=str(SPAN - dt.timedelta(days=DAYS - 1)),
                          days=DAYS, rows_per_day=ROWS, n_users=2000, n_items=500,
                          n_categories=20))
    raw = home / "raw" / "ctr"
    pre = preprocess(PreprocessSpec(raw_root=str(raw), span=SPAN.isoformat(),
                                    output_dir=str(home / "pre"), window_days=DAYS))
    model = train(PsTrainSpec(preprocess_dir=pre["output_dir"], out_dir=str(home / "model")))
    return home, raw, model


def _evaluate(home, raw, model, days: int, name: str) -> dict:
    from components.ctr.evaluate import EvaluateSpec, run as evaluate
    window = [str(raw / f"dt={SPAN - dt.timedelta(days=i)}") for i in range(days)]
    return evaluate(EvaluateSpec(span_dir=window[0], candidate_model_dir=model["model_dir"],
                                 out_dir=str(home / name), window_span_dirs=window,
                                 min_auc=0.5, slices=[]))


def test_the_window_is_judged_on_all_its_held_out_rows(low_volume):
    home, raw, model = low_volume
    ev = _evaluate(home, raw, model, DAYS, "eval-window")
    rows, span_rows = ev["rows"], ev["span_rows"]
    assert 0.15 * DAYS * ROWS < rows < 0.25 * DAYS * ROWS     # 20 % of every day held out
    assert span_rows < 0.1 * rows                            # the span alone: a few dozen
    rules = {r["name"]: r for r in json.loads(open(ev["eval_uri"]).read())["decision"]["rules"]}
    assert rules["min_eval_rows"]["passed"] and rules["min_eval_rows"]["observed"] == rows
    assert rules["min_eval_positives"]["passed"]


def test_too_few_held_out_rows_never_bless_and_the_retrain_tab_says_why(low_volume):
    from retrain.orchestration.airflow_views import run_page
    home, raw, model = low_volume
    ev = _evaluate(home, raw, model, 3, "eval-3-days")
    assert ev["rows"] < 200 and not ev["blessed"]
    assert "min_eval_rows" in ev["failed_rules"]
    reason = next(r for r in ev["reasons"] if r.startswith(f"eval rows {ev['rows']} >= "
                                                           "min_eval_rows 200"))
    run = home / "runs" / "ctr" / f"dt={SPAN}" / "manual__low_volume"
    run.mkdir(parents=True)
    (run / "run_summary.json").write_text(json.dumps({"span": SPAN.isoformat(),
                                                      "evaluation": ev}))
    page = run_page("ctr_daily_retrain", "manual__low_volume", run)
    assert "not blessed" in page and reason.replace(">", "&gt;") in page
