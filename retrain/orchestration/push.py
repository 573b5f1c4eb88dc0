"""Publish a blessed candidate, after checking that it really serves.

Runs in the Airflow push task (the standard library and the settings only: the serving
check itself is a child process, so TensorFlow never loads here). A rejected candidate is
recorded in the run summary and left unpublished; a blessed one that fails the serving check is never
published, forced or not. The publish is a compare-and-swap against the model evaluation
compared the candidate with (design rule 20): if a rollback or another publish changed the
current version since, the registry refuses with `StaleBaseline`, the refusal is recorded
in the summary (`publish_refused`) and the error is raised. The same happens when the
candidate's files or its eval.json are not the bytes the evaluate step judged
(`ChangedAfterEvaluation`, retrain.common.evaluated). A candidate that is the model
already current (same `registry.model_digest`) is not published again: the summary says
`unchanged` (the version it matches) and the registry keeps its versions as they are. Writes
`<run_dir>/run_summary.json`: everything the run did, which the demo and the lineage tools
read.
"""
from __future__ import annotations

import logging
from pathlib import Path

from retrain.orchestration import lineage
from retrain.common.atomic import write_json
from retrain.orchestration.launch import StepFailed, run_step
from retrain.common.version import code_version
from retrain.common import evaluated
from retrain.common.registry import ChangedAfterEvaluation, Registry, StaleBaseline

log = logging.getLogger("retrain.push")

SUMMARY_FILE = "run_summary.json"
# baseline_version not passed: take the one the evaluate task recorded.
_FROM_EVALUATION = object()


def publish_if_blessed(*, model_name: str, registry_root: str, run_dir: str, dag_id: str,
                       run_id: str, span: str, span_dir: str, validation: dict,
                       preprocessed: dict, trained: dict, evaluation: dict,
                       shadow: bool = False,
                       serving_check_module: str,
                       headline: tuple[str, ...] = ("auc", "log_loss"),
                       extra_metadata: dict | None = None,
                       baseline_version: int | None = _FROM_EVALUATION,  # type: ignore[assignment]
                       home: str | None = None) -> dict:
    """Returns the run summary; `summary["published"]` is None when nothing was published
    (rejected by the gate, a shadow run, which never publishes, or a candidate identical to
    the current model: then `summary["unchanged"]` = {"model", "version" (the current
    version it matches), "model_digest", "message"}).

    `serving_check_module`: the family's serving check step (same spec fields: model_dir,
    eval_dir, out_dir); `headline`: the family's headline metrics, copied into the summary
    (and the model Asset's event); `extra_metadata`: more keys for the registry entry (for example
    the text family's label names); `baseline_version`: the registry version evaluation
    compared the candidate against (None: there was no published model), by default
    `evaluation["baseline_version"]` as the DAG's evaluate task records it. The publish
    succeeds only if that version is still current; otherwise `StaleBaseline` is raised
    (forced or not: a decision made on stale facts is refused, never applied) after the
    refusal is written to the summary as `publish_refused`. The serving check runs through
    the tracked launcher like every step (a `serving_check` lineage record whose input is
    the candidate), never reused; `home`: the artifact root (default: the registry's
    parent, as `retrain.common.paths` lays them out)."""
    summary = {"dag_id": dag_id, "run_id": run_id, "span": span, "validation": validation,
               "preprocess": preprocessed, "train": trained, "evaluation": evaluation,
               "code_version": code_version(), "published": None, "unchanged": None,
               "shadow": shadow}
    summary_path = Path(run_dir) / SUMMARY_FILE
    if shadow or not evaluation["blessed"]:
        write_json(summary_path, summary)
        return summary
    out_dir = f"{run_dir}/serving_check"

    def check_step(module: str, spec: dict) -> dict:   # the check's folder is its artifact
        return {**run_step(module, spec), "out_dir": spec["out_dir"]}

    try:
        check = lineage.run_tracked(
            "serving_check", serving_check_module,
            {"model_dir": trained["model_dir"],
             "eval_dir": str(Path(evaluation["eval_uri"]).parent), "out_dir": out_dir},
            home=home or str(Path(registry_root).parent), family=model_name,
            run_dir=run_dir, inputs=[a for a in (trained.get("artifact"),) if a],
            uri_key="out_dir", artifact_type="serving_check",
            figures=("latency", "max_abs_diff"), reuse=False, runner=check_step)
    except StepFailed as e:
        summary["serving_check"] = {"passed": False, "error": str(e)}
        write_json(summary_path, summary)
        raise
    summary["serving_check"] = {"passed": True, "latency": check["latency"],
                                "max_abs_diff": check["max_abs_diff"],
                                "uri": check.get("result_uri")}
    if baseline_version is _FROM_EVALUATION:
        baseline_version = evaluation.get("baseline_version")
    registry = Registry(registry_root)
    try:
        report = evaluated.read_record(evaluation, model_name)   # the bytes evaluation wrote
        outcome = registry.publish_if_changed(trained["model_dir"], model_name, {
            "metrics": report["candidate"], "baseline_metrics": report["baseline"],
            # How its held-out rows were chosen: a later evaluation against this version
            # scores only rows held out under both splits (components.ctr.evaluate).
            "split": report.get("split"),
            "data_span": span, "run_id": run_id, "dag_id": dag_id,
            "code_version": summary["code_version"], "gate": report["decision"],
            "source_model_uri": trained["model_dir"],
            "serving_check": summary["serving_check"],
            "report_uri": evaluation.get("report_uri"),
            "inputs": {"raw_span": span_dir, "preprocess": preprocessed["output_dir"],
                       "validation": validation.get("report")},
            "validation_gate": {"outcome": validation.get("gate"),
                                "override_reason": validation.get("override_reason")},
            "run_dir": run_dir,
            "fingerprint": (trained.get("artifact") or {}).get("fingerprint"),
            "headline": list(headline),
            # A copy of the run's lineage, so the chain survives clean-up of old run folders.
            "lineage": lineage.read_records(run_dir), **(extra_metadata or {})},
            expect_current=baseline_version,
            expect_model_digest=evaluation.get(evaluated.MODEL_DIGEST_KEY))
    except ChangedAfterEvaluation as e:   # not the model (or record) evaluation judged
        summary["publish_refused"] = {"reason": str(e), "changed": e.where}
        write_json(summary_path, summary)
        raise
    except StaleBaseline as e:   # a rollback (or another publish) since evaluation
        summary["publish_refused"] = {"reason": str(e), "expected": e.expected,
                                      "current": e.current}
        write_json(summary_path, summary)
        raise
    meta = outcome["meta"]
    if outcome["outcome"] == "unchanged":
        message = (f"unchanged: the candidate is identical to the published {model_name} "
                   f"version {outcome['version']} (model digest {outcome['model_digest']}); "
                   f"nothing was published")
        log.info("push: %s", message)
        summary["unchanged"] = {"model": model_name, "version": outcome["version"],
                                "model_digest": outcome["model_digest"], "message": message}
        write_json(summary_path, summary)
        return summary
    lineage.record(run_dir, {
        "name": "publish", "type": "registered_model",
        "uri": str(registry.model_path(model_name, meta["version"])),
        "fingerprint": lineage.fingerprint([model_name, meta["version"], meta.get("fingerprint")]),
        "producer": lineage.producer(),
        "inputs": [a for a in (trained.get("artifact"), evaluation.get("artifact"),
                               validation.get("artifact")) if a],
        "figures": {"model": model_name, "version": meta["version"], "stage": meta["stage"]},
        "code_version": summary["code_version"]})
    lineage.report_to_airflow(
        [a["uri"] for a in (trained.get("artifact"), evaluation.get("artifact")) if a],
        [str(registry.model_path(model_name, meta["version"]))])
    metrics = {m: report["candidate"].get(m) for m in headline}
    summary["published"] = {"version": meta["version"], "stage": meta["stage"],
                            "model_digest": outcome["model_digest"],
                            "metrics": metrics, **metrics}
    write_json(summary_path, summary)
    return summary
