"""Lineage records, fingerprints and fingerprint-keyed reuse (retrain/orchestration/lineage.py)
and the `retrain lineage` view of them (retrain/orchestration/lineage_query.py).

The step runner here is a small real function that writes an artifact atomically, so
these tests stay fast; tests/integration/test_rerun.py does the same with the real
Beam preprocessing step in a child process.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from retrain.orchestration import lineage
from retrain.common.atomic import atomic_dir
from retrain.common.registry import Registry
from retrain import cli
from retrain.orchestration.lineage_query import chain, render


def make_span(home: Path, day: str, rows: int = 10) -> Path:
    d = home / "raw" / "ctr" / f"dt={day}"
    d.mkdir(parents=True)
    (d / "part-00000.parquet").write_bytes(b"x" * rows)
    (d / "_SUCCESS").write_text(json.dumps({"rows": rows, "click_rate": 0.04}))
    return d


class CountingStep:
    """Writes `<out>/data.txt` from the spec's `value`; counts how often it really ran."""

    def __init__(self):
        self.calls = 0

    def __call__(self, module: str, spec: dict) -> dict:
        self.calls += 1
        with atomic_dir(spec["out"]) as tmp:
            (tmp / "data.txt").write_text(str(spec["value"]))
        return {"out": spec["out"], "rows": 3}


@pytest.fixture
def airflow_ctx(monkeypatch):
    def set_ctx(run_id: str, task: str = "preprocess", try_number: int = 1):
        monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "ctr_daily_retrain")
        monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", run_id)
        monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", task)
        monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", str(try_number))
    return set_ctx


def test_fingerprint_ignores_key_order_but_not_values():
    assert lineage.fingerprint({"a": 1, "b": [1, 2]}) == lineage.fingerprint({"b": [1, 2], "a": 1})
    assert lineage.fingerprint({"a": 1}) != lineage.fingerprint({"a": 2})


def test_raw_span_fingerprint_is_the_digest_of_its_bytes_not_names_sizes_or_mtimes(tmp_path):
    d = make_span(tmp_path, "2026-11-01")
    part = d / "part-00000.parquet"
    before = lineage.raw_span_ref(d)
    (d / ".part.tmp-123").mkdir()                      # an atomic write in progress
    (d / ".part.tmp-123" / "half").write_text("partial")
    assert lineage.raw_span_ref(d)["fingerprint"] == before["fingerprint"]
    st = part.stat()
    part.write_bytes(b"y" * st.st_size)                # same size ...
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and same mtime
    changed = lineage.raw_span_ref(d)
    assert changed["fingerprint"] != before["fingerprint"]
    assert changed["content"]["files"]["part-00000.parquet"] != \
        before["content"]["files"]["part-00000.parquet"]
    (d / "_SUCCESS").write_text(json.dumps({"rows": 11}))   # the producer's note, not data
    assert lineage.raw_span_ref(d)["fingerprint"] == changed["fingerprint"]
    (d / "part-00001.parquet").write_bytes(b"more")
    assert lineage.raw_span_ref(d)["fingerprint"] != changed["fingerprint"]


def test_a_feature_config_is_an_input_whose_content_is_fingerprinted(tmp_path):
    assert lineage.config_refs("") == []               # the built-in default config
    cfg = tmp_path / "logs.yaml"
    cfg.write_text("label: clicked\n")
    (ref,) = lineage.config_refs(cfg)
    assert ref["type"] == "feature_config" and ref["uri"] == f"file://{cfg.resolve()}"
    cfg.write_text("label: converted\n")
    assert lineage.config_refs(cfg)[0]["fingerprint"] != ref["fingerprint"]


def test_raw_span_refs_cover_the_window_oldest_first(tmp_path):
    for day in ("2026-11-01", "2026-11-03"):
        make_span(tmp_path, day, rows=5)
    refs = lineage.raw_span_refs(tmp_path / "raw" / "ctr", "2026-11-03", window_days=3)
    assert [r["name"] for r in refs] == ["dt=2026-11-01", "dt=2026-11-03"]   # 11-02 missing
    assert refs[0]["uri"].startswith("file://") and refs[0]["figures"]["rows"] == 5
    assert all(r["complete"] for r in refs)


def test_step_fingerprint_leaves_out_this_runs_output_paths(tmp_path):
    inputs = [{"fingerprint": "f1"}]
    a = lineage.step_fingerprint("m", {"out": f"{tmp_path}/runA/x", "k": 1}, inputs, f"{tmp_path}/runA")
    b = lineage.step_fingerprint("m", {"out": f"{tmp_path}/runB/x", "k": 1}, inputs, f"{tmp_path}/runB")
    assert a == b
    assert a != lineage.step_fingerprint("m", {"out": f"{tmp_path}/runB/x", "k": 2}, inputs,
                                         f"{tmp_path}/runB")
    assert a != lineage.step_fingerprint("m", {"out": f"{tmp_path}/runB/x", "k": 1},
                                         [{"fingerprint": "f2"}], f"{tmp_path}/runB")


def _run(home: Path, run: str, step: CountingStep, value: int = 1, reuse: bool = True) -> dict:
    run_dir = home / "runs" / run
    return lineage.run_tracked(
        "preprocess", "tests.step", {"out": f"{run_dir}/pre", "value": value},
        home=str(home), family="ctr", run_dir=str(run_dir),
        inputs=lineage.raw_span_refs(home / "raw" / "ctr", "2026-11-02", 2), uri_key="out",
        artifact_type="transformed_examples", figures=("rows",), reuse=reuse, runner=step)


def test_rerun_with_same_inputs_reuses_the_artifact_and_says_so(tmp_path, airflow_ctx, caplog):
    make_span(tmp_path, "2026-11-01")
    make_span(tmp_path, "2026-11-02")
    step = CountingStep()
    airflow_ctx("run_a")
    first = _run(tmp_path, "a", step)
    assert step.calls == 1 and first["reused_from"] is None

    airflow_ctx("run_b", try_number=2)
    with caplog.at_level(logging.INFO, logger="retrain.lineage"):
        second = _run(tmp_path, "b", step)
    assert step.calls == 1, "same inputs, code and parameters: the step must not run again"
    assert second["out"] == first["out"] and second["artifact"] == first["artifact"]
    assert second["reused_from"]["run_id"] == "run_a"
    assert "reusing" in caplog.text and "run_a" in caplog.text
    rec = lineage.read_records(tmp_path / "runs" / "b")["preprocess"]
    assert rec["reused"] is True and rec["producer"]["run_id"] == "run_a"
    assert rec["recorded_by"] == {"dag_id": "ctr_daily_retrain", "run_id": "run_b",
                                  "task_id": "preprocess", "try": 2}
    assert [i["name"] for i in rec["inputs"]] == ["dt=2026-11-01", "dt=2026-11-02"]
    assert rec["figures"] == {"rows": 3}


def test_changed_parameter_input_or_missing_artifact_runs_again(tmp_path, airflow_ctx):
    make_span(tmp_path, "2026-11-02")
    step = CountingStep()
    airflow_ctx("r1")
    first = _run(tmp_path, "a", step)
    _run(tmp_path, "b", step, value=2)                   # other parameter
    assert step.calls == 2
    (tmp_path / "raw" / "ctr" / "dt=2026-11-02" / "part-00001.parquet").write_bytes(b"late")
    _run(tmp_path, "c", step)                            # a late file arrived
    assert step.calls == 3
    _run(tmp_path, "d", step, reuse=False)               # reuse switched off
    assert step.calls == 4
    import shutil
    for run in "acd":
        shutil.rmtree(tmp_path / "runs" / run)           # artifacts cleaned up
    again = _run(tmp_path, "e", step)
    assert step.calls == 5 and again["reused_from"] is None
    assert Path(again["out"]).is_dir() and again["out"] != first["out"]


def test_lineage_chain_from_registry_version_to_raw_partitions(tmp_path, airflow_ctx, capsys):
    make_span(tmp_path, "2026-11-01", rows=7)
    make_span(tmp_path, "2026-11-02", rows=9)
    step = CountingStep()
    airflow_ctx("run_a")
    pre = _run(tmp_path, "a", step)
    airflow_ctx("run_b", task="train")
    run_dir = tmp_path / "runs" / "b"
    pre_b = _run(tmp_path, "b", step)                     # reused from run_a
    model_dir = run_dir / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "saved_model.pb").write_bytes(b"")
    trained = lineage.run_tracked(
        "train", "tests.train", {"out": str(model_dir)}, home=str(tmp_path), family="ctr",
        run_dir=str(run_dir), inputs=[pre_b["artifact"]], uri_key="out", artifact_type="model",
        figures=("val_auc",),
        runner=lambda module, spec: {"out": spec["out"], "val_auc": 0.71})
    registry = Registry(tmp_path / "registry")
    registry.publish(str(model_dir), "ctr", {
        "run_id": "run_b", "dag_id": "ctr_daily_retrain", "data_span": "2026-11-02",
        "code_version": "git:abc", "metrics": {"auc": 0.7, "log_loss": 0.2},
        "run_dir": str(run_dir), "fingerprint": trained["artifact"]["fingerprint"],
        "lineage": lineage.read_records(run_dir)})

    tree = chain(registry, "ctr")
    model = tree["inputs"][0]
    assert model["type"] == "model" and model["figures"] == {"val_auc": 0.71}
    pre_node = model["inputs"][0]
    assert pre_node["fingerprint"] == pre["artifact"]["fingerprint"]
    assert pre_node["producer"]["run_id"] == "run_a" and pre_node["reused"] is True
    assert [r["name"] for r in pre_node["inputs"]] == ["dt=2026-11-01", "dt=2026-11-02"]
    assert pre_node["inputs"][1]["figures"]["rows"] == 9

    # Evaluation reads the same model: it is shown in full once, then referred to.
    evaluation = lineage.run_tracked(
        "evaluate", "tests.evaluate", {"out": str(run_dir / "eval.json")}, home=str(tmp_path),
        family="ctr", run_dir=str(run_dir), inputs=[trained["artifact"]], uri_key="out",
        artifact_type="evaluation", reuse=False, runner=lambda module, spec: {"out": spec["out"]})
    records = lineage.read_records(run_dir)
    assert set(records) == {"preprocess", "train", "evaluate"}
    from retrain.orchestration.lineage_query import _expand
    seen: set[str] = set()
    first = _expand(records["train"], {r["fingerprint"]: r for r in records.values()}, seen)
    again = _expand(records["evaluate"], {r["fingerprint"]: r for r in records.values()}, seen)
    assert first["inputs"] and again["inputs"][0]["see_above"] is True
    assert evaluation["artifact"]["type"] == "evaluation"

    text = render(tree)
    for needle in ("ctr v1", "git:abc", "run_a", "run_b", "dt=2026-11-01", "dt=2026-11-02",
                   pre["artifact"]["fingerprint"], "reused by"):
        assert needle in text, needle

    assert cli.main(["lineage", "ctr", "--root", str(tmp_path / "registry"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"][0]["name"] == "train"
    assert cli.main(["lineage", "ctr", "--root", str(tmp_path / "registry"), "--version", "9"]) == 2
    assert cli.main(["lineage", "nope", "--root", str(tmp_path / "registry")]) == 2
    err = capsys.readouterr().err
    assert "version 9" in err and "no model 'nope'" in err
