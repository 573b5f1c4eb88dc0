"""A user's own labelled text through the real `text_daily_finetune` DAG (`dag.test()`),
with only a config file and params: support tickets routed to queues (labels the bundled
reviews do not have), one binary task, the text in a template of two differently named
columns, no id column (the config names none: ids are derived from each record's text and
label), the user's own `dt=` partitions as gzip JSONL outside RETRAIN_HOME.

Validated, preprocessed, fine-tuned, evaluated against the classical baseline, published;
`retrain lineage text` reaches the raw partitions and the config; a rerun reuses the
artifacts. A span of Chinese text with the English checkpoint fails validation naming the
unknown-token rate, is quarantined and is not retried; a span that never arrives times out
in the sensor.
"""
from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import subprocess
import sys

import pytest

from retrain.orchestration import lineage

from retrain.common import paths
from retrain.common.registry import Registry
from components.text import tickets as tickets_corpus
from retrain.orchestration.lineage_query import chain

from dag_helpers import environ, load_dag, task_states, walk

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
DOWNSTREAM = ("preprocess", "finetune", "evaluate", "push")
CONFIG = tickets_corpus.CONFIG.replace("example_id: ticket_id\n", "")     # ids derived
assert CONFIG != tickets_corpus.CONFIG


def _write_span(raw, day: str, rows: list[dict]) -> None:
    span = raw / f"dt={day}"
    span.mkdir(parents=True)
    with gzip.open(span / "part-00000.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (span / "_SUCCESS").write_text("")


@pytest.fixture(scope="module")
def tickets(tmp_path_factory):
    home = tmp_path_factory.mktemp("tickets-home")
    raw = tmp_path_factory.mktemp("tickets-raw")
    for day in (1, 2):
        _write_span(raw, f"2026-12-{day:02d}", [
            {k: v for k, v in row.items() if k != "ticket_id"}
            for row in tickets_corpus.tickets(day, 160)])
    config = raw.parent / f"{raw.name}-tickets.yaml"
    config.write_text(CONFIG)
    with environ(RETRAIN_HOME=str(home), RETRAIN_SPAN_POKE_SECONDS="1"):
        yield home, raw, config


def _dag():
    return load_dag("text_daily_finetune", "text_daily_finetune_tickets").text_daily_finetune()


def _conf(raw, config, **extra) -> dict:
    return {"raw_root": str(raw), "text_config": str(config), "window_days": 2,
            "eval_percent": 30, "epochs": 2, "batch_size": 16, "dev_examples": 0,
            # About 96 held-out tickets (2 x 160, 30 %): below the daily default of 200
            # labelled eval texts per task (test_text_evidence.py), enough for this corpus.
            "min_eval_rows": 60, "warm_start": False, **extra}


def test_user_tickets_train_validate_publish_and_rerun(airflow_home, tickets, caplog):
    home, raw, config = tickets
    dag = _dag()
    with caplog.at_level(logging.INFO, logger="retrain"):
        first = dag.test(logical_date=dt.datetime(2026, 12, 3, tzinfo=UTC),
                         run_conf=_conf(raw, config))
    states = task_states(first)
    assert states and all(s == "success" for s in states.values()), states
    # A clean run's steps log no WARNING or ERROR line (what their task logs show): benign
    # lines are INFO, tracebacks only where a task fails.
    relayed = [r for r in caplog.records if r.name == "retrain.launch"]
    assert any("[train]" in r.getMessage() for r in relayed)    # the steps' own lines
    loud = [f"{r.levelname} {r.name}: {r.getMessage()[:160]}" for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith("retrain")]
    assert not loud, loud[:5]

    registry = Registry(home / "registry")
    current = registry.current("text")
    assert current["version"] == 1 and current["data_span"] == "2026-12-02"
    assert current["labels"] == {"queue": ["billing", "outage"]}      # exactly one head
    assert current["serving_check"]["passed"] is True
    queue = current["metrics"]["tasks"]["queue"]
    assert queue["positive_class"] == "outage" and len(queue["per_class"]) == 2
    run_dir = paths.run_dir(home, "text", dt.date(2026, 12, 2), first.run_id)
    report = json.loads((run_dir / "evaluation" / "eval.json").read_text())
    classical = report["classical_baseline"]["tasks"]["queue"]
    assert classical["n"] == queue["n"] > 0                  # same eval texts
    rules = {r["name"]: r for r in report["decision"]["rules"]}
    beats = rules["beats_classical_baseline[queue]"]
    assert beats["passed"] is True and beats["test"] == "paired_interval"
    assert beats["baseline"] == classical["macro_f1"]
    assert beats["observed"] == pytest.approx(queue["macro_f1"] - classical["macro_f1"])
    assert beats["delta_low"] <= beats["delta_high"] and beats["rows"] == queue["n"]
    # The baseline fitted on every training text of the window.
    pre = json.loads((run_dir / "preprocess" / "summary.json").read_text())
    assert report["classical_baseline"]["train_rows"] == pre["rows_train"] > 0
    assert rules["min_eval_rows[queue]"]["observed"] == queue["n"] >= 60
    # The minimums are recorded as applied (per task), the same limit the rule used.
    applied = report["decision"]["thresholds"]
    assert applied["min_eval_rows"] == rules["min_eval_rows[queue]"]["limit"] > 0
    assert applied["evidence_applied_per"] == "task"
    validation = json.loads((run_dir / "validation" / "validation.json").read_text())
    assert validation["gate"] == "passed" and validation["rows"] == 160
    # The text family's HTML report, next to eval.json: the task, its confusion matrix,
    # and slices by day of the window.
    page = (run_dir / "evaluation" / "report.html").read_text()
    assert '<h2 id="task-queue"' in page and "Confusion matrix" in page
    assert "2026-12-01" in page and "2026-12-02" in page
    # Every record got a derived id: a content hash, the same for the same record.
    scored = json.loads((run_dir / "evaluation" / "scores_sample.json").read_text())
    ids = scored["example_ids"]
    assert ids and all(i.startswith("h") and len(i) == 25 for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
    assert validation["unknown_tokens"]["rate"] < 0.05

    # `retrain lineage text`: the published model back to the user's partitions + config.
    nodes = [n for n in walk(chain(registry, "text")) if not n.get("see_above")]
    assert {n["name"] for n in nodes if n.get("type") == "raw_span"} == {"dt=2026-12-01",
                                                                       "dt=2026-12-02"}
    assert any(n.get("type") == "text_config" and n["name"] == config.name for n in nodes)
    out = subprocess.run([sys.executable, "-m", "retrain.cli", "lineage", "text"],
                         capture_output=True, text=True, env={**__import__("os").environ,
                                                              "RETRAIN_HOME": str(home)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "dt=2026-12-01" in out.stdout and first.run_id in out.stdout

    # A rerun of the same span with the same inputs, code and params reuses the Beam and
    # fine-tuning artifacts instead of recomputing them, and says whose they are.
    again = dag.test(logical_date=dt.datetime(2026, 12, 3, tzinfo=UTC), run_conf=_conf(raw, config))
    assert all(s in ("success", "skipped") for s in task_states(again).values())
    records = lineage.read_records(paths.run_dir(home, "text", dt.date(2026, 12, 2),
                                                 again.run_id))
    for step in ("preprocess", "train"):
        assert records[step]["reused"] is True, step
        assert records[step]["producer"]["run_id"] == first.run_id, step
    assert records["evaluate"]["reused"] is False
    assert records["evaluate"]["inputs"][-1]["type"] == "published_model"


def test_chinese_span_with_english_checkpoint_is_quarantined(airflow_home, tickets):
    home, raw, config = tickets
    phrases = ["这个商品质量很好，物流也很快", "包装破损，客服态度很差", "价格便宜，下次还会再来",
               "尺寸不合适，申请退货退款", "颜色和图片不一样，很失望"]
    rows = [{"ticket_id": f"C{i:04d}", "subject": "订单问题", "body": f"{phrases[i % 5]}（{i}）",
             "team": ["billing", "outage"][i % 2]} for i in range(60)]
    _write_span(raw, "2026-12-05", rows)
    run = _dag().test(logical_date=dt.datetime(2026, 12, 6, tzinfo=UTC),
                      run_conf=_conf(raw, config))
    states = task_states(run)
    assert states["validate"] == "failed", states
    assert all(states[t] == "upstream_failed" for t in DOWNSTREAM), states
    run_dir = paths.run_dir(home, "text", dt.date(2026, 12, 5), run.run_id)
    summary = json.loads((run_dir / "validation" / "validation.json").read_text())
    failed = [f for f in summary["failed"] if f["expectation"] == "unknown_token_rate"]
    assert failed and "[UNK]" in failed[0]["observed"] and "checkpoint" in failed[0]["observed"]
    assert summary["unknown_tokens"]["rate"] > 0.25
    assert (home / "quarantine" / "text" / "dt=2026-12-05.json").exists()
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    with create_session() as session:
        tries = session.query(TaskInstance.try_number).filter(
            TaskInstance.run_id == run.run_id, TaskInstance.task_id == "validate").scalar()
    assert tries == 1                                   # bad data is not retried


def test_a_quarantined_day_never_trains_a_model(airflow_home, tickets):
    """The next day's window holds the quarantined Chinese span: it is left out, and the
    lineage and summary say so; the override param names it to use it anyway. Half of a
    2-day window is more than the window policy's default lets go (10 %: none), so the
    run stops, naming the day, unless it allows that share."""
    home, raw, config = tickets
    _write_span(raw, "2026-12-06", tickets_corpus.tickets(6, 120))
    later = ("finetune", "evaluate", "push")      # the window is what is tested here
    stopped = _dag().test(logical_date=dt.datetime(2026, 12, 7, tzinfo=UTC),
                          run_conf=_conf(raw, config), mark_success_pattern="|".join(later))
    assert task_states(stopped)["preprocess"] == "failed"
    policy = json.loads((paths.run_dir(home, "text", dt.date(2026, 12, 6), stopped.run_id)
                         / "window_policy.json").read_text())["policy"]
    assert not policy["ok"] and [i["span"] for i in policy["left_out"]] == ["2026-12-05"]
    run = _dag().test(logical_date=dt.datetime(2026, 12, 7, tzinfo=UTC),
                      run_conf=_conf(raw, config, max_left_out_percent=50),
                      mark_success_pattern="|".join(later))
    states = task_states(run)
    assert states["validate"] == states["preprocess"] == "success", states
    run_dir = paths.run_dir(home, "text", dt.date(2026, 12, 6), run.run_id)
    summary = json.loads((run_dir / "preprocess" / "summary.json").read_text())
    assert summary["window"] == ["2026-12-06"] and summary["excluded_spans"] == ["2026-12-05"]
    assert summary["rows_in"] == 120
    record = lineage.read_records(run_dir)["preprocess"]
    left_out = record["figures"]["window_left_out"]
    assert [i["span"] for i in left_out] == ["2026-12-05"]
    assert left_out[0]["reason"].startswith("quarantined: failed validation in run")
    assert [i["name"] for i in record["inputs"] if i["type"] == "raw_span"] == ["dt=2026-12-06"]

    # Naming the day without a reason is refused; with one, the day is trained on.
    refused = _dag().test(logical_date=dt.datetime(2026, 12, 7, tzinfo=UTC),
                          run_conf=_conf(raw, config, include_spans=["2026-12-05"]),
                          mark_success_pattern="|".join(later))
    assert task_states(refused)["preprocess"] == "failed"
    forced = _dag().test(logical_date=dt.datetime(2026, 12, 7, tzinfo=UTC),
                         run_conf=_conf(raw, config, include_spans=["2026-12-05"],
                                        override_validation_reason="checked by hand"),
                         mark_success_pattern="|".join(later))
    assert task_states(forced)["preprocess"] == "success"
    forced_dir = paths.run_dir(home, "text", dt.date(2026, 12, 6), forced.run_id)
    record = lineage.read_records(forced_dir)["preprocess"]
    assert [i["span"] for i in record["figures"]["window_included_by_override"]] == [
        "2026-12-05"]


def test_bad_run_inputs_are_refused_before_any_wait(airflow_home, tickets, tmp_path):
    """A config file that does not parse fails the first task (its problems in the message;
    the other refusals are unit-tested in test_run_inputs.py) instead of waiting in the
    sensor and failing a step later."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    _, raw, _ = tickets
    broken = tmp_path / "broken.yaml"
    broken.write_text("example_id: id\ntext: body\ntasks:\n  queue: {labels: [only_one]}\n")
    run = _dag().test(logical_date=dt.datetime(2026, 12, 3, tzinfo=UTC),
                      run_conf={"raw_root": str(raw), "text_config": str(broken)})
    states = task_states(run)
    assert states["resolve_span"] == "failed", states
    assert states["wait_for_span"] == "upstream_failed"
    with create_session() as session:
        ti = session.query(TaskInstance).filter(TaskInstance.run_id == run.run_id,
                                                TaskInstance.task_id == "resolve_span").one()
        assert ti.try_number == 1                        # refused, not retried


def test_missing_text_span_times_out_in_the_sensor(airflow_home, tickets):
    _, raw, config = tickets
    run = _dag().test(logical_date=dt.datetime(2026, 12, 20, tzinfo=UTC),
                      run_conf=_conf(raw, config, span="2026-12-19",
                                     span_timeout_minutes=0.02))
    states = task_states(run)
    assert states["wait_for_span"] == "failed", states
    assert states["validate"] == "upstream_failed"
