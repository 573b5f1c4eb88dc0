"""Evaluate a candidate CTR model against the published one, then apply the gate.

Both models score the same raw held-out rows of the whole training window (no model ever
trains on them; the span's own rows are a slice), through their own serving signatures,
in a Beam job (`beam_jobs.evaluate_ctr`: part files spread over workers, rows folded into
mergeable histograms and bootstrap replicates, so no process holds the window's rows);
when the published model was trained with another held-out share, only rows held out
under both splits are scored, and the report says so; the click probabilities that generated the labels give the Bayes-optimal
figures on those rows, the ceiling any model can reach. Headline metrics carry paired
bootstrap intervals, and per-slice metrics (`components.ctr.slices`) feed the gate's
slice guards, so a better average cannot hide a segment that got worse.

Writes into `out_dir`, each file atomically: `scores_sample.json` (the candidate's
scores for the first eval rows, which the serving check compares against before
publishing), `eval.json` (everything the gate saw, its decision, the curves) and
`report.html` (`components.ctr.report`, whose path is logged for the task log). The
blessing is `components.gate.decide`.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from retrain.common import tf_keras_env
from retrain.common.step import main

log = logging.getLogger(__name__)

EVAL_FILE = "eval.json"
SCORES_SAMPLE_FILE = "scores_sample.json"
ROC_POINTS = 200
RELIABILITY_BINS = 10


@dataclasses.dataclass
class EvaluateSpec:
    span_dir: str
    candidate_model_dir: str
    out_dir: str
    baseline_model_dir: str | None = None
    eval_percent: int = 20
    # The window's older days that were trained on (their held-out rows are scored too).
    window_span_dirs: list[str] | None = None
    min_auc: float = 0.6
    max_auc_drop: float = 0.002
    max_log_loss_increase: float = 0.002
    # "interval": the two rules above on the paired bootstrap interval (fail only when
    # worse with 95 % confidence); "point": on the point estimates (components.gate).
    regression_test: str = "interval"
    # Evidence the gate needs before it may bless (components.gate.Thresholds); None:
    # the feature config's `gate` section (default 200 rows, 20 clicks).
    min_eval_rows: int | None = None
    min_eval_positives: int | None = None
    refuse_confidently_worse: bool | None = None   # None: the feature config's gate section
    force_reason: str | None = None
    # Slices (components.ctr.slices.SLICES when None, none when []) and their guard.
    slices: list[str] | None = None
    top_categories: int = 10
    max_slice_auc_drop: float | None = 0.03
    min_slice_rows: int = 2000
    min_slice_positives: int = 50
    # Bootstrap confidence intervals of AUC and log loss.
    bootstrap_resamples: int = 200
    bootstrap_seed: int = 0
    # Rows whose candidate scores are kept for the serving check.
    scores_sample_rows: int = 500
    # Runner options of the evaluation job (e.g. ["--direct_running_mode=multi_processing",
    # "--direct_num_workers=2"], or a Flink/Spark/Dataflow runner's flags).
    beam_args: list[str] = dataclasses.field(default_factory=list)
    # The report's metric history of published versions (no history section if None).
    registry_root: str | None = None
    model_name: str = "ctr"
    history_versions: int = 10


def _curves(labels, scores: dict) -> dict:
    from components.metrics import reliability_curve, roc_curve
    out: dict = {"roc": {}, "reliability": {}}
    for name, s in scores.items():
        try:
            out["roc"][name] = roc_curve(labels, s, max_points=ROC_POINTS)
        except ValueError:  # one class only: no ROC curve
            out["roc"][name] = None
        out["reliability"][name] = reliability_curve(labels, s, n_bins=RELIABILITY_BINS)
    return out


def assess(labels, scores: dict, slice_values: dict, thresholds, force_reason: str | None = None,
           n_resamples: int = 200, seed: int = 0, notes: list[str] = ()) -> dict:
    """Everything eval.json holds about the models, from every row's scores in memory.

    `scores` maps "candidate" (required), "baseline" and "bayes_optimal" (optional) to
    one probability per row; `slice_values` is `components.ctr.slices.assign`'s output.
    Pure (no I/O, no TensorFlow): the exact reference `assess_accumulated` is tested
    against, and what small in-memory checks use.
    """
    from components.metrics import binary_metrics, bootstrap_ci, slice_metrics

    metrics: dict = {name: binary_metrics(labels, s) for name, s in scores.items()}
    for name, s in scores.items():
        # Same seed => same resamples: the candidate's delta interval is paired.
        metrics[name]["ci"] = bootstrap_ci(
            labels, s, baseline_probs=scores.get("baseline") if name == "candidate" else None,
            n_resamples=n_resamples, seed=seed)
    per_slice = {name: slice_metrics(labels, s, slice_values) for name, s in scores.items()}
    return _decided(int(len(labels)), metrics, per_slice, list(slice_values),
                    _curves(labels, scores), thresholds, force_reason, notes)


def assess_accumulated(acc, slice_names: list[str], thresholds,
                       force_reason: str | None = None, notes: list[str] = ()) -> dict:
    """`assess`'s answer from a `components.binned_metrics.EvalAccumulator` (what the
    evaluation job folded the window's rows into)."""
    metrics: dict = {name: acc.binary_metrics(name) for name in acc.models}
    for name in acc.models:
        metrics[name]["ci"] = acc.bootstrap_ci(
            name, baseline="baseline" if name == "candidate" and "baseline" in acc.models
            else None)
    per_slice = {name: acc.slice_metrics(name, slice_names) for name in acc.models}
    curves: dict = {"roc": {}, "reliability": {}}
    for name in acc.models:
        try:
            curves["roc"][name] = acc.roc_curve(name, max_points=ROC_POINTS)
        except ValueError:  # one class only: no ROC curve
            curves["roc"][name] = None
        curves["reliability"][name] = acc.reliability_curve(name, n_bins=RELIABILITY_BINS)
    return _decided(acc.rows, metrics, per_slice, list(slice_names), curves, thresholds,
                    force_reason, notes)


def _decided(rows: int, metrics: dict, per_slice: dict, slice_names: list[str], curves: dict,
             thresholds, force_reason, notes) -> dict:
    from components import gate
    candidate, baseline = metrics["candidate"], metrics.get("baseline")
    decision = gate.decide(
        {**candidate, "slices": per_slice["candidate"]},
        baseline and {**baseline, "slices": per_slice["baseline"]},
        thresholds, force_reason=force_reason, notes=list(notes))
    return {
        "rows": rows,
        "candidate": candidate,
        "baseline": baseline,
        "bayes_optimal": metrics.get("bayes_optimal"),
        "thresholds": thresholds.to_dict(),
        "decision": decision.to_dict(),
        "slices": {"names": slice_names,
                   **{name: per_slice.get(name) for name in
                      ("candidate", "baseline", "bayes_optimal")}},
        "curves": curves,
    }


def _or_config(value, configured):
    return configured if value is None else value


def thresholds_of(spec: EvaluateSpec, cfg):
    """The gate's rules for this run: the spec's values, and where the spec leaves one
    unset (None), the feature config's `gate:` section (`cfg.gate`)."""
    from components import gate
    return gate.Thresholds(min_auc=spec.min_auc, max_auc_drop=spec.max_auc_drop,
                           max_log_loss_increase=spec.max_log_loss_increase,
                           regression_test=spec.regression_test,
                           min_eval_rows=_or_config(spec.min_eval_rows, cfg.gate.min_eval_rows),
                           min_eval_positives=_or_config(spec.min_eval_positives,
                                                         cfg.gate.min_eval_positives),
                           refuse_confidently_worse=_or_config(spec.refuse_confidently_worse,
                                                               cfg.gate.refuse_confidently_worse),
                           max_slice_auc_drop=spec.max_slice_auc_drop,
                           min_slice_rows=spec.min_slice_rows,
                           min_slice_positives=spec.min_slice_positives)


def split_of(cfg, eval_percent: int) -> dict:
    """How the held-out rows were chosen; recorded with every published version."""
    from components.ctr import features as F
    return {"id_column": cfg.example_id, "hash": F.EVAL_HASH, "eval_percent": int(eval_percent)}


def common_split(split: dict, baseline_model_dir: str | None) -> tuple[int, list[str]]:
    """The held-out share both the candidate and the published model left out, and notes.
    Rows in bucket < min(both shares) were held out by both: scoring more would score the
    published model on its own training rows. Another id column or hash: refused."""
    from retrain.common.atomic import read_json
    if not baseline_model_dir:
        return split["eval_percent"], []
    meta_file = Path(baseline_model_dir) / "retrain_meta.json"
    base = (read_json(meta_file) if meta_file.is_file() else {}).get("split")
    if not isinstance(base, dict):
        return split["eval_percent"], [
            "the published model records no split (published before splits were pinned): "
            f"assumed held out at eval_percent={split['eval_percent']} like the candidate"]
    for key in ("id_column", "hash"):
        if base.get(key) != split[key]:
            raise ValueError(
                f"the published model {baseline_model_dir} chose its held-out rows by "
                f"{key} {base.get(key)!r}, the candidate by {split[key]!r}: no row is known "
                "to be held out by both, so they cannot be compared (force-bless with a "
                "reason to replace it)")
    percent = min(int(base["eval_percent"]), split["eval_percent"])
    if percent != split["eval_percent"]:
        return percent, [f"the published model held out eval_percent={base['eval_percent']}, "
                         f"this run {split['eval_percent']}: scored only rows held out by "
                         f"both (eval_percent={percent})"]
    return percent, []


STATE_FILE = "eval_state.npz"


def job_argv(spec: EvaluateSpec, days: list[str], percent: int, slice_names: list[str],
             truth: bool, output: str) -> list[str]:
    """The evaluation job's command line for this spec."""
    import json
    models = [f"candidate={spec.candidate_model_dir}"] + (
        [f"baseline={spec.baseline_model_dir}"] if spec.baseline_model_dir else [])
    return ["--day-dirs", json.dumps(days), "--eval-percent", str(percent),
            *[a for m in models for a in ("--model", m)], *(["--truth"] if truth else []),
            "--slices", json.dumps(slice_names), "--top-categories", str(spec.top_categories),
            "--bootstrap-resamples", str(spec.bootstrap_resamples),
            "--bootstrap-seed", str(spec.bootstrap_seed), "--output", output,
            *spec.beam_args]


def run(spec: EvaluateSpec) -> dict:
    """Score candidate and baseline on the same rows; decide whether to bless; report."""
    from beam_jobs import evaluate_ctr
    from components import gate
    from components.binned_metrics import EvalAccumulator
    from components.ctr import feature_config, rawdata, slices
    from retrain.common import rawfiles
    from retrain.common.atomic import write_json
    from retrain.common import evaluated
    from retrain.common.registry import verify_model_dir

    if spec.baseline_model_dir:   # the published model: its files as published, or refused
        verify_model_dir(spec.baseline_model_dir)
    judged = evaluated.judged(spec.candidate_model_dir)   # push publishes only this model
    # The raw inputs each model takes come from the feature config it was trained with.
    cfg = feature_config.for_model_dir(spec.candidate_model_dir)
    split = split_of(cfg, spec.eval_percent)
    percent, notes = common_split(split, spec.baseline_model_dir)
    older = [d for d in (spec.window_span_dirs or []) if d != spec.span_dir]
    days = [spec.span_dir, *older]
    if spec.baseline_model_dir:
        base_cfg = feature_config.for_model_dir(spec.baseline_model_dir)
        missing = sorted(set(base_cfg.raw_columns()) - set(cfg.raw_columns()))
        if missing:
            raise ValueError(
                f"the baseline {spec.baseline_model_dir} takes raw column(s) {missing} that "
                f"the candidate's feature config {cfg.name!r} does not read; the two cannot "
                f"be compared on the same rows (force-bless with a reason to replace it)")
    for note in notes:
        log.warning("%s", note)
    if spec.slices is not None:
        wanted = list(spec.slices)
    elif cfg.fingerprint() == feature_config.default().fingerprint():
        wanted = list(slices.SLICES)
    else:
        wanted = list(cfg.slices)
    # Real logs carry no true probability: Bayes-optimal figures only for generated days.
    truth = all((Path(d) / "_truth.parquet").is_file() for d in days)
    out_dir = Path(spec.out_dir)
    state = str(out_dir / STATE_FILE)
    # The bytes the job reads are the bytes checked after it: a part rewritten while the
    # job ran (or a link out of the raw root, a FIFO) is refused, never scored.
    inputs = rawfiles.snapshot([p for d in days for p in rawdata.span_parts(d, cfg)],
                               Path(spec.span_dir).parent)
    job = evaluate_ctr.run(job_argv(spec, days, percent, wanted, truth, state))
    acc = EvalAccumulator.load(state)
    per_day = [acc.counts.get(f"day{i}", 0) for i in range(len(days))]
    if acc.rows == 0:
        raise ValueError(f"no eval rows in {spec.span_dir} at eval_percent={percent}")
    slice_names = wanted + ([slices.SPAN_SLICE] if older else [])

    thresholds = thresholds_of(spec, cfg)
    assessed = assess_accumulated(acc, slice_names, thresholds, spec.force_reason, notes=notes)
    assessed["slices"]["top_categories"] = spec.top_categories
    candidate, baseline = assessed["candidate"], assessed["baseline"]
    bayes, decision = assessed["bayes_optimal"], gate.Decision.from_dict(assessed["decision"])

    # The serving check compares against the candidate's scores of the span's first
    # held-out rows: a bounded read, scored here.
    sample_rows = rawdata.first_eval_rows(spec.span_dir, percent,
                                          min(spec.scores_sample_rows, per_day[0]), cfg)
    sample_scores = (rawdata.predict(spec.candidate_model_dir,
                                     rawdata.to_raw_features(sample_rows, cfg))
                     if sample_rows.num_rows else [])
    sample = write_json(out_dir / SCORES_SAMPLE_FILE, {
        "model_dir": spec.candidate_model_dir, "span_dir": spec.span_dir,
        "eval_percent": spec.eval_percent, "output": "p_click",
        "example_ids": sample_rows.column(cfg.example_id).to_pylist(),
        "scores": [float(x) for x in sample_scores]})
    rawfiles.verify_unchanged(inputs)
    report = {"span_dir": spec.span_dir, "eval_percent": percent, "split": split,
              "window_span_dirs": days, "rows_per_day": per_day,
              "candidate_model_dir": spec.candidate_model_dir,
              "baseline_model_dir": spec.baseline_model_dir,
              "scores_sample": str(sample),
              "evaluation_job": {k: job[k] for k in ("parts", "runner", "beam_seconds")},
              **assessed}
    out = write_json(out_dir / EVAL_FILE, report)
    for reason in decision.reasons:
        log.info("gate: %s", reason)
    ci = candidate["ci"]["auc"]
    log.info("candidate auc=%s [%s, %s] log_loss=%.4f; blessed=%s",
             _fmt(candidate["auc"]), _fmt(ci["low"]), _fmt(ci["high"]),
             candidate["log_loss"], decision.blessed)
    report_uri, report_error = _write_report(report, out_dir, spec)
    return {"eval_uri": str(out), "blessed": decision.blessed, "reasons": decision.reasons,
            "failed_rules": decision.failed_rules,
            "candidate": {k: candidate[k] for k in ("auc", "log_loss")},
            "baseline": baseline and {k: baseline[k] for k in ("auc", "log_loss")},
            "bayes_optimal": bayes and {k: bayes[k] for k in ("auc", "log_loss")},
            "rows": acc.rows, "span_rows": per_day[0], "split": split,
            "scored_eval_percent": percent, "scores_sample_uri": str(sample),
            "report_uri": report_uri, "report_error": report_error,
            **evaluated.sealed(spec.candidate_model_dir, judged, out)}


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _write_report(report: dict, out_dir: Path, spec: EvaluateSpec):
    """report.html for people (`components.report.write_or_log`: never fails the step)."""
    from components import report as R
    from components.ctr.report import render

    def draw() -> str:
        history = R.registry_history(spec.registry_root, spec.model_name,
                                     spec.history_versions)
        return render(report, history=history, model_name=spec.model_name)
    return R.write_or_log(draw, out_dir / R.REPORT_FILE)


if __name__ == "__main__":
    tf_keras_env.use_keras2()   # loads a SavedModel only: TensorFlow skips Keras 3
    sys.exit(main(EvaluateSpec, run))
