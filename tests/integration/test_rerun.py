"""Retries and reruns with the real Beam preprocessing and training steps.

A preprocess step killed with SIGKILL in the middle of writing leaves nothing a later
task can read; its retry writes exactly one complete artifact, which training reads.
A rerun with unchanged inputs, code and parameters reuses the artifacts (and says so)
instead of recomputing them.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrain.orchestration import lineage

pytestmark = pytest.mark.integration

SPAN_ISO = "2026-11-03"     # the newest of the session fixture `home`'s three days
WINDOW_DAYS = 2


def _preprocess_spec(home: Path, run_dir: Path) -> dict:
    return {"raw_root": str(home / "raw" / "ctr"), "span": SPAN_ISO,
            "output_dir": str(run_dir / "preprocess"), "window_days": WINDOW_DAYS,
            "eval_percent": 25}


def _tracked(name: str, module: str, spec: dict, home: Path, run_dir: Path, inputs, **kw):
    return lineage.run_tracked(name, module, spec, home=str(home), family="ctr",
                               run_dir=str(run_dir), inputs=inputs, **kw)


def _kill_mid_write(spec: dict, run_dir: Path) -> None:
    """Start the real step in its own process group; SIGKILL it once files are being
    written into its temp dir."""
    run_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "components.ctr.preprocess",
                             "--spec", json.dumps(spec)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            temps = list(run_dir.glob(".preprocess.tmp-*"))
            if temps and any(p.is_file() for p in temps[0].rglob("*")):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the step finished before it could be killed"
        assert temps, "the step never started writing"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_killed_preprocess_retry_leaves_one_complete_artifact_and_rerun_reuses(
        home, tmp_path, monkeypatch, caplog):
    run_a = tmp_path / "runs" / "ctr" / f"dt={SPAN_ISO}" / "run_a"
    spec = _preprocess_spec(home, run_a)
    raw = lineage.raw_span_refs(home / "raw" / "ctr", SPAN_ISO, WINDOW_DAYS)
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "ctr_daily_retrain")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "run_a")
    monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", "preprocess")

    monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "1")
    _kill_mid_write(spec, run_a)
    assert not (run_a / "preprocess").exists(), "a killed try must not leave a visible artifact"
    assert list(run_a.glob(".preprocess.tmp-*")), "the killed try was writing"

    monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "2")
    pre = _tracked("preprocess", "components.ctr.preprocess", spec, tmp_path, run_a, raw,
                   uri_key="output_dir", artifact_type="transformed_examples",
                   figures=("rows_in",))
    visible = sorted(p.name for p in run_a.iterdir() if not p.name.startswith("."))
    assert visible == ["lineage", "preprocess"]
    assert not list(run_a.glob(".preprocess.tmp-*")), "the retry cleans up the killed try"
    out = Path(pre["output_dir"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows_in"] == pre["rows_in"] > 0
    assert (summary["rows_train"] + summary["rows_eval"] + summary["rows_validation"]
            + summary["rows_held_out"] == summary["rows_in"])
    assert list((out / "train").glob("*.tfrecord.gz")) and (out / "transform_fn_output").is_dir()
    assert lineage.read_records(run_a)["preprocess"]["producer"]["try"] == 2

    monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", "train")
    train_spec = {"preprocess_dir": pre["output_dir"], "out_dir": str(run_a / "model"),
                  "epochs": 1}
    trained = _tracked("train", "components.ctr.ps_train", train_spec, tmp_path, run_a,
                       [pre["artifact"]], uri_key="model_dir", artifact_type="model")
    assert (Path(trained["model_dir"]) / "saved_model.pb").is_file()

    # A second run over the same span, inputs, code and parameters: nothing is recomputed.
    run_b = run_a.parent / "run_b"
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "run_b")
    monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "1")

    def must_not_run(module, spec):
        raise AssertionError(f"{module} ran again although its inputs did not change")

    with caplog.at_level(logging.INFO, logger="retrain.lineage"):
        pre_b = _tracked("preprocess", "components.ctr.preprocess", _preprocess_spec(home, run_b),
                         tmp_path, run_b, lineage.raw_span_refs(home / "raw" / "ctr", SPAN_ISO,
                                                               WINDOW_DAYS),
                         uri_key="output_dir", artifact_type="transformed_examples",
                         runner=must_not_run)
        trained_b = _tracked("train", "components.ctr.ps_train",
                             {**train_spec, "preprocess_dir": pre_b["output_dir"],
                              "out_dir": str(run_b / "model")},
                             tmp_path, run_b, [pre_b["artifact"]], uri_key="model_dir",
                             artifact_type="model", runner=must_not_run)
    assert pre_b["output_dir"] == pre["output_dir"] and pre_b["rows_in"] == pre["rows_in"]
    assert trained_b["model_dir"] == trained["model_dir"]
    assert pre_b["reused_from"]["run_id"] == "run_a" and trained_b["reused_from"]["run_id"] == "run_a"
    assert caplog.text.count("reusing") == 2
