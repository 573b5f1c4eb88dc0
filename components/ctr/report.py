"""The CTR evaluation report: one self-contained HTML page per evaluation, next to eval.json.

The person on call should see at a glance why a model was (not) published: candidate vs
baseline vs Bayes-optimal with confidence intervals, ROC and calibration plots, the
per-slice table, every gate rule with its numbers, and how the metric moved over the
last published versions. The page shell, plots, verdict, gate and history sections are
the shared ones (`components.report`); this module adds what only click data has. Reads
eval.json (and the registry for history); writes report.html atomically.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from components import report as R
from retrain.common.step import main

log = logging.getLogger(__name__)

MODELS = [R.Series("candidate", "Candidate", "#1f6feb"),
          R.Series("baseline", "Baseline (published)", "#d97706",
                   note="no published model yet"),
          R.Series("bayes_optimal", "Bayes-optimal", "#6b7280", dashed=True,
                   note="no true click probabilities")]


@dataclasses.dataclass
class ReportSpec:
    eval_json: str                      # eval.json written by the evaluation step
    out_path: str | None = None         # default: report.html next to eval_json
    registry_root: str | None = None    # history of published versions (none if unset)
    model_name: str = "ctr"
    history_versions: int = 10


def run(spec: ReportSpec) -> dict:
    """Render report.html from an eval.json (and the registry's history)."""
    from retrain.common.atomic import read_json
    evaluation = read_json(spec.eval_json)
    history = R.registry_history(spec.registry_root, spec.model_name, spec.history_versions)
    out = Path(spec.out_path) if spec.out_path else Path(spec.eval_json).with_name(
        R.REPORT_FILE)
    path = write_report(evaluation, out, history=history, model_name=spec.model_name)
    log.info("evaluation report: %s", path)
    return {"report_uri": str(path)}


def write_report(evaluation: dict, path, history: list[dict] | None = None,
                 model_name: str = "ctr") -> Path:
    """Render and write the page atomically; returns its path."""
    return R.write_page(render(evaluation, history=history, model_name=model_name), path)


def _headline(evaluation: dict) -> str:
    rows = []
    for s in MODELS:
        m = evaluation.get(s.key)
        if not m:
            rows.append(f'<tr><th>{R.dot(s.color)}{R.e(s.label)}</th>'
                        f'<td colspan="6" class="muted">{R.e(s.note)}</td></tr>')
            continue
        ci = m.get("ci") or {}
        rows.append(
            f'<tr><th>{R.dot(s.color)}{R.e(s.label)}</th>'
            f'<td>{R.num(m.get("auc"))} {R.interval(ci.get("auc"))}</td>'
            f'<td>{R.num(m.get("log_loss"))} {R.interval(ci.get("log_loss"))}</td>'
            f'<td>{R.num(m.get("calibration"), 3)}</td>'
            f'<td>{R.num(m.get("normalized_entropy"))}</td>'
            f'<td>{R.num(m.get("mean_prob"))} / {R.num(m.get("ctr"))}</td>'
            f'<td>{R.num(m.get("n"))}</td></tr>')
    cand, base = evaluation.get("candidate") or {}, evaluation.get("baseline") or {}
    ci = cand.get("ci") or {}
    if base and ci.get("auc_delta"):
        rows.append(f'<tr class="delta"><th>Candidate &minus; baseline (paired)</th>'
                    f'<td>{R.delta(ci["auc_delta"])}</td>'
                    f'<td>{R.delta(ci.get("log_loss_delta"))}</td><td colspan="4"></td></tr>')
    level = ci.get("level", 0.95)
    note = (f'{int(round(level * 100))}% intervals: {R.e(ci.get("method", "bootstrap"))}, '
            f'{R.e(ci.get("n_resamples", "?"))} resamples of the eval rows (seed '
            f'{R.e(ci.get("seed", "?"))}); all models scored on the same rows.') if ci else ""
    return (R.table(["", "AUC", "log loss", "calibration<br><small>pred / observed</small>",
                     "normalized entropy", "mean pred / CTR", "rows"], rows)
            + f'<p class="note">{note}</p>')


def _slices(evaluation: dict) -> str:
    slices = evaluation.get("slices") or {}
    cand = slices.get("candidate") or {}
    if not cand:
        return '<p class="muted">No slices were computed.</p>'
    base = slices.get("baseline") or {}
    bayes = slices.get("bayes_optimal") or {}
    guards = {r["name"]: r for r in (evaluation.get("decision") or {}).get("rules") or []
              if str(r.get("name", "")).startswith("max_slice_auc_drop[")}
    thresholds = (evaluation.get("decision") or {}).get("thresholds") or {}
    rows = []
    for slice_name, values in cand.items():
        for value, m in values.items():
            b = (base.get(slice_name) or {}).get(value) or {}
            o = (bayes.get(slice_name) or {}).get(value) or {}
            d = (m["auc"] - b["auc"]) if isinstance(m.get("auc"), float) \
                and isinstance(b.get("auc"), float) else None
            guard = guards.get(f"max_slice_auc_drop[{slice_name}={value}]")
            if guard is not None:
                res = ("pass", "pass") if guard["passed"] else ("fail", "FAIL")
            else:
                res = ("muted", "not guarded")
            rows.append(
                f'<tr class="{res[0] if res[0] == "fail" else ""}"><td>{R.e(slice_name)}</td>'
                f'<td>{R.e(value)}</td><td>{R.num(m.get("n"))}</td>'
                f'<td>{R.num(m.get("ctr"))}</td><td>{R.num(m.get("auc"))}</td>'
                f'<td>{R.num(b.get("auc"))}</td>'
                f'<td class="{"neg" if d is not None and d < 0 else ""}">'
                f'{"&ndash;" if d is None else f"{d:+.4f}"}</td>'
                f'<td>{R.num(o.get("auc"))}</td><td>{R.num(m.get("log_loss"))}</td>'
                f'<td>{R.num(b.get("log_loss"))}</td><td>{R.num(m.get("calibration"), 3)}</td>'
                f'<td class="res {res[0]}">{res[1]}</td></tr>')
    note = ""
    if thresholds.get("max_slice_auc_drop") is not None:
        note = (f'<p class="note">Guard: a slice value with at least '
                f'{R.e(thresholds.get("min_slice_rows"))} rows and '
                f'{R.e(thresholds.get("min_slice_positives"))} positives may lose at most '
                f'{R.e(thresholds.get("max_slice_auc_drop"))} AUC against the baseline on '
                f'the same rows.</p>')
    return R.table(["slice", "value", "rows", "CTR", "AUC cand.", "AUC base.", "&Delta; AUC",
                    "AUC Bayes", "log loss cand.", "log loss base.", "calibration cand.",
                    "guard"], rows, cls="grid slices") + note


def render(evaluation: dict, history: list[dict] | None = None,
           model_name: str = "ctr") -> str:
    """The whole page as a string; no I/O (only its arguments and the clock)."""
    decision = evaluation.get("decision") or {}
    curves = evaluation.get("curves") or {}
    span_dir = evaluation.get("span_dir") or ""
    span = Path(span_dir).name.removeprefix("dt=") if span_dir else "?"
    meta = (f'span <b>{R.e(span)}</b> &middot; {R.num(evaluation.get("rows"))} eval rows '
            f'&middot; generated {R.generated_at()}<br>candidate <code>'
            f'{R.e(evaluation.get("candidate_model_dir") or "")}</code><br>baseline <code>'
            f'{R.e(evaluation.get("baseline_model_dir") or "none")}</code>')
    images = [
        R.roc_plot(curves.get("roc"), MODELS,
                   "ROC curve: candidate vs baseline vs Bayes-optimal"),
        R.reliability_plot(curves.get("reliability"), MODELS,
                           xlabel="mean predicted click rate (per bin)",
                           ylabel="observed click rate", title="Calibration (reliability)",
                           alt="Calibration plot: predicted vs observed click rate per bin")]
    body = [
        f"<h1>Evaluation of {R.e(model_name)} &mdash; span {R.e(span)}</h1>",
        f'<div class="meta">{meta}</div>', R.verdict(decision),
        "<h2>Headline metrics</h2>", _headline(evaluation),
        "<h2>Gate decision</h2>", R.gate(decision),
        "<h2>ROC and calibration</h2>",
        R.plots(images, "No curves (one class only in the eval rows?)."),
        "<h2>Per-slice metrics</h2>", _slices(evaluation),
        "<h2>History of published versions</h2>",
        R.history(history or [], evaluation.get("candidate")),
        "<h2>Thresholds</h2>", R.thresholds(decision),
    ]
    return R.page(f"{model_name} evaluation {span}", body)


if __name__ == "__main__":
    sys.exit(main(ReportSpec, run))
