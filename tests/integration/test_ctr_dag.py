"""The whole `ctr_daily_retrain` DAG, run for real with `dag.test()` on tiny spans.

Two consecutive days: the first publishes with no baseline, the second is evaluated
against the first on the same rows. Every task runs its real step (great-expectations,
Beam + tf.Transform, TensorFlow, registry) in a child process.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from retrain.orchestration import lineage

from retrain.common import paths
from components.ctr.generate import GenerateSpec, run as generate
from retrain.common.registry import Registry
from retrain.orchestration.lineage_query import chain, render

from dag_helpers import environ, load_dag, task_states, walk

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
TASKS = {"resolve_span", "wait_for_span", "validate", "preprocess", "train",
         "wait_for_turn", "evaluate", "approve", "push"}


@pytest.fixture(scope="module")
def retrain_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("dag-home")
    generate(GenerateSpec(out_root=str(home), start="2026-11-01", days=3, rows_per_day=6000,
                          n_users=5000, n_items=3000, n_categories=50))
    with environ(RETRAIN_HOME=str(home)):
        yield home


def _openlineage_chain(dataset: str, run_id: str) -> set[str]:
    """Dataset names reachable upstream of `dataset` through the COMPLETE events of one
    DAG run's tasks (each task's outputs lead to its inputs)."""
    transport = json.loads(os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"])
    events = [json.loads(line) for line in Path(transport["log_file_path"]).read_text().splitlines()]
    tasks = [e for e in events if e["eventType"] == "COMPLETE"
             and e["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id") == run_id
             and e["run"]["facets"]["airflow"].get("task")]
    reached, todo = set(), [dataset]
    while todo:
        name = todo.pop()
        for event in tasks:
            if name in {d["name"] for d in event["outputs"]}:
                for d in event["inputs"]:
                    if d["name"] not in reached:
                        reached.add(d["name"])
                        todo.append(d["name"])
    return reached


def test_two_daily_runs_publish_and_compare(airflow_home, retrain_home):
    module = load_dag("ctr_daily_retrain", "ctr_daily_retrain_dag")
    dag = module.ctr_daily_retrain()
    conf = {"window_days": 2, "eval_percent": 25}

    first = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC), run_conf=conf)
    states = task_states(first)
    assert set(states) == TASKS
    assert all(s == "success" for s in states.values()), states

    registry = Registry(retrain_home / "registry")
    current = registry.current("ctr")
    assert current is not None and current["version"] == 1
    assert current["data_span"] == "2026-11-02"          # the day before the logical date
    assert current["run_id"] == first.run_id
    assert 0.5 < current["metrics"]["auc"] <= 1.0 and current["metrics"]["log_loss"] > 0
    assert "no published baseline" in " ".join(current["gate"]["reasons"])
    assert (registry.model_path("ctr", 1) / "saved_model.pb").exists()
    assert current["serving_check"]["passed"] is True       # checked in a fresh process
    assert current["report_uri"].endswith("report.html")
    assert os.path.exists(current["report_uri"])
    # The window's older day, never validated before, went through the one-pass window
    # validation, and was recorded as its own validation: in its own folder, with the
    # digest of the bytes it read, by this run.
    run_dir = paths.run_dir(retrain_home, "ctr", dt.date(2026, 11, 2), first.run_id)
    window = json.loads((run_dir / "window_validation" / "window.json").read_text())
    assert [Path(d["span_dir"]).name for d in window["days"]] == ["dt=2026-11-01"]
    older = lineage.read_records(paths.run_dir(retrain_home, "ctr", dt.date(2026, 11, 1),
                                               first.run_id))["validate"]
    assert older["figures"]["gate"] == "passed" and older["figures"]["content"]["digest"]
    assert older["recorded_by"]["run_id"] == first.run_id
    assert {i["type"] for i in older["inputs"]} >= {"raw_span"}

    # An unreachable bar: the candidate is evaluated against v1 and rejected; push is
    # skipped (so no asset event) and the registry is untouched.
    rejected = dag.test(logical_date=dt.datetime(2026, 11, 4, tzinfo=UTC),
                        run_conf={**conf, "min_auc": 0.999})
    states = task_states(rejected)
    assert states.pop("push") == "skipped", states
    assert all(s == "success" for s in states.values()), states
    summary = json.loads(next((retrain_home / "runs" / "ctr" / "dt=2026-11-03")
                              .glob("*/run_summary.json")).read_text())
    assert summary["published"] is None and summary["evaluation"]["blessed"] is False
    assert summary["evaluation"]["baseline_version"] == 1
    assert summary["evaluation"]["baseline"]["auc"] > 0.5     # scored on the same rows
    assert registry.current("ctr")["version"] == 1

    # Triggered as the form opens (no span) a week after the logs end: the manual run
    # trains on the newest delivered day, 2026-11-03, instead of waiting for 2026-11-09,
    # and its run folder says why.
    forced = dag.test(logical_date=dt.datetime(2026, 11, 10, 9, 30, tzinfo=UTC),
                      run_conf={**conf, "min_auc": 0.999,
                                "force_bless_reason": "integration test: operator override"})
    states = task_states(forced)
    assert all(s == "success" for s in states.values()), states
    context = json.loads((paths.run_dir(retrain_home, "ctr", dt.date(2026, 11, 3), forced.run_id)
                          / "run_context.json").read_text())
    assert context["span"] == "2026-11-03"
    assert "newest delivered day: 2026-11-09" in context["span_reason"], context
    current = registry.current("ctr")
    assert current["version"] == 2 and current["data_span"] == "2026-11-03"
    assert current["gate"]["forced"] is True
    assert current["gate"]["force_reason"] == "integration test: operator override"
    assert registry.get("ctr", 1)["stage"] == "archived"
    assert registry.check("ctr") == []

    # The forced run re-ran span 2026-11-03 with the rejected run's inputs, code and
    # parameters (min_auc only matters to the gate): its Beam and training outputs were
    # reused, not recomputed, and the lineage says whose they are.
    records = lineage.read_records(paths.run_dir(retrain_home, "ctr", dt.date(2026, 11, 3),
                                                 forced.run_id))
    for step in ("preprocess", "train"):
        assert records[step]["reused"] is True, step
        assert records[step]["producer"]["run_id"] == rejected.run_id, step
        assert records[step]["recorded_by"]["run_id"] == forced.run_id, step
    assert records["evaluate"]["reused"] is False            # the verdict is always fresh
    assert records["publish"]["figures"]["version"] == 2

    # `retrain lineage ctr`: from the serving version back to the raw partitions.
    tree = chain(registry, "ctr")
    nodes = [n for n in walk(tree) if not n.get("see_above")]   # each artifact once
    raw = {n["name"] for n in nodes if n.get("type") == "raw_span"}
    assert raw == {"dt=2026-11-02", "dt=2026-11-03"}
    assert {n["producer"]["run_id"] for n in nodes if n.get("type") == "model"} == {rejected.run_id}
    text = render(tree)
    for needle in (forced.run_id, rejected.run_id, current["code_version"], "dt=2026-11-02",
                   records["preprocess"]["fingerprint"]):
        assert needle in text, needle

    # The same chain in the OpenLineage events (file transport, set in tests/conftest.py).
    reached = _openlineage_chain(str(registry.model_path("ctr", 2)), forced.run_id)
    assert {Path(p).name for p in reached} >= {"dt=2026-11-02", "dt=2026-11-03",
                                                "preprocess", "serving_model"}

    # Shadow mode (the default for backfills): everything runs, nothing is published and
    # no asset event is emitted (checked in the next test), even for a blessed candidate.
    shadow = dag.test(logical_date=dt.datetime(2026, 11, 4, tzinfo=UTC),
                      run_conf={**conf, "min_auc": 0.0, "shadow": True})
    states = task_states(shadow)
    assert states.pop("push") == "skipped", states
    assert all(s == "success" for s in states.values()), states
    assert registry.current("ctr")["version"] == 2 and len(registry.list_versions("ctr")) == 2

    # A shadow backfill of the older span 2026-11-02 scores v2 on that day's held-out rows,
    # which v2's window (11-02, 11-03) left out of training like every day's: an honest
    # baseline stays below the Bayes-optimal AUC there (one that trained on those rows
    # need not: 0.8206 against 0.8123 was observed before).
    backfill = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC),
                        run_conf={**conf, "min_auc": 0.0, "shadow": True})
    assert task_states(backfill)["push"] == "skipped"
    summary = json.loads((paths.run_dir(retrain_home, "ctr", dt.date(2026, 11, 2),
                                        backfill.run_id) / "run_summary.json").read_text())
    evaluation = summary["evaluation"]
    assert evaluation["baseline_version"] == 2
    assert evaluation["baseline"]["auc"] < evaluation["bayes_optimal"]["auc"], evaluation
    assert registry.current("ctr")["version"] == 2


def test_published_model_emits_an_asset_event_with_lineage(airflow_home, retrain_home):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    with create_session() as session:
        events = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.name == "ctr_model").all())
        # This module's spans only (other modules run the same DAG on other days).
        extras = [e.extra for e in events if e.extra.get("span") in ("2026-11-02", "2026-11-03")]
    assert [x["version"] for x in extras] == [1, 2]
    assert all({"span", "auc", "run_id", "code_version"} <= set(x) for x in extras)


def test_raw_partitions_and_transformed_windows_are_asset_events(airflow_home, retrain_home):
    """Lineage in the Airflow UI: each run's validated raw partition and transformed
    window are events of the ctr_raw_logs and ctr_transformed_examples assets, with the
    span and the fingerprint that the lineage records and `retrain lineage` show."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetModel.name, AssetEvent.extra)
                .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name.in_(["ctr_raw_logs", "ctr_transformed_examples"]))
                .all())
    extras = {}
    for name, extra in rows:
        # This module's runs only: the Airflow DB is shared by the session, and another
        # module's runs of the same spans (test_custody_dag rewrites its partitions) are
        # events too.
        if extra.get("span") in ("2026-11-02", "2026-11-03") and \
                str(retrain_home) in str(extra.get("uri")):
            extras.setdefault(name, []).append(extra)
    assert {x["span"] for x in extras["ctr_raw_logs"]} == {"2026-11-02", "2026-11-03"}
    for x in extras["ctr_raw_logs"]:
        assert x["fingerprint"] == lineage.raw_span_ref(x["uri"].removeprefix("file://"))[
            "fingerprint"] and x["gate"] == "passed"
    for x in extras["ctr_transformed_examples"]:
        record = json.loads(next(Path(x["uri"]).parent.glob("lineage/preprocess.json"))
                            .read_text())
        assert x["fingerprint"] == record["fingerprint"] and x["window"][-1] == x["span"]


def test_a_person_approves_or_rejects_a_candidate(airflow_home, tmp_path):
    """`approval: always`: the run waits in Required Actions; approve publishes with the
    approver in the registry entry, reject skips push and records who and why. A home of
    its own, with nothing published: the verdict the person is asked about must not hang
    on whether a retrained model beats the runs above (an identical candidate is
    'unchanged' and never published again, issue 46; a different one may be worse)."""
    import threading

    from dag_helpers import answer_required_action

    home = tmp_path / "approval-home"
    generate(GenerateSpec(out_root=str(home), start="2026-11-02", days=2, rows_per_day=6000,
                          n_users=5000, n_items=3000, n_categories=50))
    dag = load_dag("ctr_daily_retrain", "ctr_daily_retrain_approval").ctr_daily_retrain()
    registry = Registry(home / "registry")
    conf = {"window_days": 2, "eval_percent": 25, "min_auc": 0.0, "approval": "always",
            "epochs": 1}

    def run(option: str, user: str, reason: str):
        answer = threading.Thread(target=answer_required_action,
                                  args=("ctr_daily_retrain", option, user, reason))
        answer.start()
        with environ(RETRAIN_HOME=str(home)):
            dag_run = dag.test(logical_date=dt.datetime(2026, 11, 4, 6, tzinfo=UTC),
                               run_conf=conf)
        answer.join()
        record = json.loads((paths.run_dir(home, "ctr", dt.date(2026, 11, 3),
                                           dag_run.run_id) / "approval.json").read_text())
        return task_states(dag_run), record

    states, record = run("Approve", "alice", "looks right")
    assert states["approve"] == "success" and states["push"] == "success", states
    assert record["decision"] == "approved" and record["by"] == "alice"
    current = registry.current("ctr")
    assert current["version"] == 1
    assert current["approval"]["by"] == "alice" and current["approval"]["asked"] is True

    # The same candidate again (preprocessing and training reused): blessed against
    # itself, asked, rejected.
    states, record = run("Reject", "bob", "AUC too close to call")
    assert states["approve"] == "success" and states["push"] == "skipped", states
    assert record == {**record, "decision": "rejected", "by": "bob",
                      "reason": "AUC too close to call", "timed_out": False}
    assert registry.current("ctr")["version"] == 1      # nothing published
