"""Evaluate a candidate CTR model against the published one, then apply the gate.

Both models score the same raw held-out rows of the whole training window (no model ever
trains on them; the span's own rows are a slice), through their own serving signatures;
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
    refuse_confidently_worse: bool = True
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
    """Everything eval.json holds about the models, from scores already computed.

    `scores` maps "candidate" (required), "baseline" and "bayes_optimal" (optional) to
    one probability per row; `slice_values` is `components.ctr.slices.assign`'s output.
    Pure (no I/O, no TensorFlow), so the whole evaluation logic is testable on arrays.
    """
    from components import gate
    from components.metrics import binary_metrics, bootstrap_ci, slice_metrics

    metrics: dict = {name: binary_metrics(labels, s) for name, s in scores.items()}
    for name, s in scores.items():
        # Same seed => same resamples: the candidate's delta interval is paired.
        metrics[name]["ci"] = bootstrap_ci(
            labels, s, baseline_probs=scores.get("baseline") if name == "candidate" else None,
            n_resamples=n_resamples, seed=seed)
    per_slice = {name: slice_metrics(labels, s, slice_values) for name, s in scores.items()}
    candidate, baseline = metrics["candidate"], metrics.get("baseline")
    decision = gate.decide(
        {**candidate, "slices": per_slice["candidate"]},
        baseline and {**baseline, "slices": per_slice["baseline"]},
        thresholds, force_reason=force_reason, notes=list(notes))
    return {
        "rows": int(len(labels)),
        "candidate": candidate,
        "baseline": baseline,
        "bayes_optimal": metrics.get("bayes_optimal"),
        "thresholds": thresholds.to_dict(),
        "decision": decision.to_dict(),
        "slices": {"names": list(slice_values),
                   **{name: per_slice.get(name) for name in
                      ("candidate", "baseline", "bayes_optimal")}},
        "curves": _curves(labels, scores),
    }


SPAN_SLICE = "span"


def _or_config(value, configured):
    return configured if value is None else value


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


def read_window_eval_rows(span_dir: str, older_dirs: list[str], eval_percent: int, cfg):
    """Held-out rows of the span first, then of the window's older days, with the day
    each came from (the `span` slice: this span vs the earlier days)."""
    import numpy as np
    import pyarrow as pa

    from components.ctr import rawdata
    tables, origin = [], []
    for i, day_dir in enumerate([span_dir, *older_dirs]):
        t = rawdata.read_eval_rows(day_dir, eval_percent, cfg)
        tables.append(t)
        origin.append(np.full(t.num_rows, "span" if i == 0 else "earlier days", dtype=object))
    rows = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return rows, np.concatenate(origin), [t.num_rows for t in tables]


def run(spec: EvaluateSpec) -> dict:
    """Score candidate and baseline on the same rows; decide whether to bless; report."""
    import numpy as np

    from components import gate
    from retrain.common.atomic import write_json
    from components.ctr import feature_config, rawdata, slices

    # The raw inputs each model takes come from the feature config it was trained with.
    cfg = feature_config.for_model_dir(spec.candidate_model_dir)
    split = split_of(cfg, spec.eval_percent)
    percent, notes = common_split(split, spec.baseline_model_dir)
    older = [d for d in (spec.window_span_dirs or []) if d != spec.span_dir]
    rows, origin, per_day = read_window_eval_rows(spec.span_dir, older, percent, cfg)
    if rows.num_rows == 0:
        raise ValueError(f"no eval rows in {spec.span_dir} at eval_percent={percent}")
    for note in notes:
        log.warning("%s", note)
    labels = rows.column(cfg.label).to_numpy()
    scores = {"candidate": rawdata.predict(spec.candidate_model_dir,
                                           rawdata.to_raw_features(rows, cfg))}
    if spec.baseline_model_dir:
        base_cfg = feature_config.for_model_dir(spec.baseline_model_dir)
        missing = sorted(set(base_cfg.raw_columns()) - set(rows.column_names))
        if missing:
            raise ValueError(
                f"the baseline {spec.baseline_model_dir} takes raw column(s) {missing} that "
                f"the candidate's feature config {cfg.name!r} does not read; the two cannot "
                f"be compared on the same rows (force-bless with a reason to replace it)")
        scores["baseline"] = rawdata.predict(spec.baseline_model_dir,
                                             rawdata.to_raw_features(rows, base_cfg))
    try:
        ids, start, truth = rows.column(cfg.example_id), 0, []
        for day_dir, n in zip([spec.span_dir, *older], per_day):
            truth.append(rawdata.true_probabilities(day_dir, ids.slice(start, n)))
            start += n
        scores["bayes_optimal"] = np.concatenate(truth)
    except FileNotFoundError:
        pass  # real logs carry no true probability

    thresholds = gate.Thresholds(min_auc=spec.min_auc, max_auc_drop=spec.max_auc_drop,
                                 max_log_loss_increase=spec.max_log_loss_increase,
                                 regression_test=spec.regression_test,
                                 min_eval_rows=_or_config(spec.min_eval_rows,
                                                          cfg.gate.min_eval_rows),
                                 min_eval_positives=_or_config(spec.min_eval_positives,
                                                               cfg.gate.min_eval_positives),
                                 refuse_confidently_worse=spec.refuse_confidently_worse,
                                 max_slice_auc_drop=spec.max_slice_auc_drop,
                                 min_slice_rows=spec.min_slice_rows,
                                 min_slice_positives=spec.min_slice_positives)
    if spec.slices is not None:
        wanted = spec.slices
    elif cfg.fingerprint() == feature_config.default().fingerprint():
        wanted = slices.SLICES
    else:
        wanted = list(cfg.slices)
    slice_values = slices.assign(rows, wanted, spec.top_categories)
    if older:
        slice_values[SPAN_SLICE] = origin
    assessed = assess(labels, scores, slice_values, thresholds, spec.force_reason,
                      spec.bootstrap_resamples, spec.bootstrap_seed, notes=notes)
    assessed["slices"]["top_categories"] = spec.top_categories
    candidate, baseline = assessed["candidate"], assessed["baseline"]
    bayes, decision = assessed["bayes_optimal"], gate.Decision.from_dict(assessed["decision"])

    out_dir = Path(spec.out_dir)
    n_sample = min(spec.scores_sample_rows, per_day[0])   # the span's rows only
    sample = write_json(out_dir / SCORES_SAMPLE_FILE, {
        "model_dir": spec.candidate_model_dir, "span_dir": spec.span_dir,
        "eval_percent": spec.eval_percent, "output": "p_click",
        "example_ids": rows.column(cfg.example_id).slice(0, n_sample).to_pylist(),
        "scores": [float(x) for x in scores["candidate"][:n_sample]]})
    report = {"span_dir": spec.span_dir, "eval_percent": percent, "split": split,
              "window_span_dirs": [spec.span_dir, *older], "rows_per_day": per_day,
              "candidate_model_dir": spec.candidate_model_dir,
              "baseline_model_dir": spec.baseline_model_dir,
              "scores_sample": str(sample), **assessed}
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
            "rows": rows.num_rows, "span_rows": per_day[0], "split": split,
            "scored_eval_percent": percent, "scores_sample_uri": str(sample),
            "report_uri": report_uri, "report_error": report_error}


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
    sys.exit(main(EvaluateSpec, run))
