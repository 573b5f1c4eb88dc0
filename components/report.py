"""The evaluation report: one self-contained HTML page per evaluation, next to eval.json.

The person on call should see at a glance why a model was (not) published: candidate vs
baseline vs Bayes-optimal with confidence intervals, ROC and calibration plots, the
per-slice table, every gate rule with its numbers, and how the metric moved over the
last published versions. Plots are matplotlib PNGs inlined as base64 and the styles are
inline, so the page opens from a file, an artifact store or a mail attachment with no
network. Reads eval.json (and the registry for history); writes report.html atomically.
"""
from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import html
import io
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from retrain.common.step import main

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
MODELS = (("candidate", "Candidate", "#1f6feb"), ("baseline", "Baseline (published)", "#d97706"),
          ("bayes_optimal", "Bayes-optimal", "#6b7280"))
# The candidate is drawn on top: it hides an identical baseline rather than the reverse.
_Z = {"candidate": 4, "baseline": 3, "bayes_optimal": 2}


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
    history = registry_history(spec.registry_root, spec.model_name, spec.history_versions)
    out = Path(spec.out_path) if spec.out_path else Path(spec.eval_json).with_name(REPORT_FILE)
    path = write_report(evaluation, out, history=history, model_name=spec.model_name)
    log.info("evaluation report: %s", path)
    return {"report_uri": str(path)}


def registry_history(registry_root: str | os.PathLike | None, model_name: str,
                     n: int = 10) -> list[dict]:
    """The last `n` versions of the model (every version was published when made)."""
    if not registry_root:
        return []
    from retrain.common.registry import NotFound, Registry
    registry = Registry(registry_root)
    try:
        versions = registry.list_versions(model_name)
        current = registry.current_version(model_name)
    except NotFound:
        return []
    out = []
    for meta in (versions[-int(n):] if n > 0 else []):
        metrics = meta.get("metrics") or {}
        ci = metrics.get("ci") or {}
        gate = meta.get("gate") or {}
        out.append({"version": meta.get("version"), "stage": meta.get("stage"),
                    "current": meta.get("version") == current,
                    "created_at": meta.get("created_at"), "data_span": meta.get("data_span"),
                    "run_id": meta.get("run_id"), "auc": metrics.get("auc"),
                    "log_loss": metrics.get("log_loss"),
                    "auc_low": (ci.get("auc") or {}).get("low"),
                    "auc_high": (ci.get("auc") or {}).get("high"),
                    "forced": bool(gate.get("forced"))})
    return out


def write_report(evaluation: dict, path: str | os.PathLike, history: list[dict] | None = None,
                 model_name: str = "ctr") -> Path:
    """Render and write the page atomically (temp file + rename); returns its path."""
    path = Path(path)
    text = render(evaluation, history=history, model_name=model_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# --------------------------------------------------------------------------- plots

def _figure(width: float = 5.2, height: float = 4.2):
    # Figure + Agg canvas directly: no pyplot, so no global backend or state is touched.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return (f'<img class="plot" alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{b64}">')


def _roc_plot(curves: dict) -> str | None:
    roc = (curves or {}).get("roc") or {}
    if not any(roc.get(k) for k, _, _ in MODELS):
        return None
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="#d1d5db", lw=1, label="random")
    for key, label, color in MODELS:
        c = roc.get(key)
        if c:
            ax.plot(c["fpr"], c["tpr"], color=color, lw=1.2 if key == "bayes_optimal" else 2,
                    ls="--" if key == "bayes_optimal" else "-", label=label, zorder=_Z[key])
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="false positive rate",
           ylabel="true positive rate", title="ROC curve")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _img(_png(fig), "ROC curve: candidate vs baseline vs Bayes-optimal")


def _reliability_plot(curves: dict) -> str | None:
    rel = (curves or {}).get("reliability") or {}
    shown = [(k, lab, col) for k, lab, col in MODELS if rel.get(k)]
    if not shown:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    top = max(max(rel[k]["mean_pred"] + rel[k]["observed"]) for k, _, _ in shown)
    top = min(1.0, top * 1.08) or 1.0
    ax.plot([0, top], [0, top], color="#d1d5db", lw=1, label="perfectly calibrated")
    for key, label, color in shown:
        c = rel[key]
        ax.plot(c["mean_pred"], c["observed"], marker="o", ms=4, color=color,
                ls="--" if key == "bayes_optimal" else "-", lw=1.2, label=label,
                zorder=_Z[key])
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="mean predicted click rate (per bin)",
           ylabel="observed click rate", title="Calibration (reliability)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _img(_png(fig), "Calibration plot: predicted vs observed click rate per bin")


def _history_plot(history: list[dict], candidate: dict | None) -> str | None:
    points = [h for h in history if isinstance(h.get("auc"), (int, float))]
    if not points:
        return None
    fig = _figure(7.5, 3.0)
    ax = fig.add_subplot()
    xs = list(range(len(points)))
    ys = [h["auc"] for h in points]
    ax.plot(xs, ys, color="#6b7280", marker="o", lw=1.5, label="published versions")
    for x, h in zip(xs, points):
        if h.get("auc_low") is not None and h.get("auc_high") is not None:
            ax.plot([x, x], [h["auc_low"], h["auc_high"]], color="#9ca3af", lw=3, alpha=0.6)
        if h.get("current"):
            ax.plot([x], [h["auc"]], marker="o", ms=9, mfc="none", color="#d97706",
                    label="currently published")
    labels = [f"v{h['version']}\n{h.get('data_span') or ''}" for h in points]
    cand_auc = (candidate or {}).get("auc")
    if isinstance(cand_auc, (int, float)):
        x = len(points)
        ci = (candidate.get("ci") or {}).get("auc") or {}
        if ci.get("low") is not None:
            ax.plot([x, x], [ci["low"], ci["high"]], color="#1f6feb", lw=3, alpha=0.5)
        ax.plot([x], [cand_auc], marker="*", ms=13, color="#1f6feb", ls="none",
                label="this candidate")
        labels.append("candidate")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set(ylabel="AUC", title="AUC over the last published versions (bars: 95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _img(_png(fig), "AUC history of published versions and this candidate")


# --------------------------------------------------------------------------- html

def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "&ndash;"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def _ci(metrics: dict | None, key: str) -> str:
    ci = ((metrics or {}).get("ci") or {}).get(key) or {}
    if ci.get("low") is None:
        return ""
    return f'<span class="ci">[{ci["low"]:.4f}, {ci["high"]:.4f}]</span>'


def _headline(evaluation: dict) -> str:
    rows = []
    for key, label, color in MODELS:
        m = evaluation.get(key)
        if not m:
            note = {"baseline": "no published model yet",
                    "bayes_optimal": "no true click probabilities"}.get(key, "")
            rows.append(f'<tr><th><span class="dot" style="background:{color}"></span>'
                        f'{_e(label)}</th><td colspan="6" class="muted">{_e(note)}</td></tr>')
            continue
        rows.append(
            f'<tr><th><span class="dot" style="background:{color}"></span>{_e(label)}</th>'
            f'<td>{_num(m.get("auc"))} {_ci(m, "auc")}</td>'
            f'<td>{_num(m.get("log_loss"))} {_ci(m, "log_loss")}</td>'
            f'<td>{_num(m.get("calibration"), 3)}</td>'
            f'<td>{_num(m.get("normalized_entropy"))}</td>'
            f'<td>{_num(m.get("mean_prob"))} / {_num(m.get("ctr"))}</td>'
            f'<td>{_num(m.get("n"))}</td></tr>')
    cand, base = evaluation.get("candidate") or {}, evaluation.get("baseline") or {}
    ci = cand.get("ci") or {}
    if base and ci.get("auc_delta"):
        d_auc, d_ll = ci["auc_delta"], ci.get("log_loss_delta") or {}

        def delta(d: dict) -> str:
            if d.get("estimate") is None:
                return "&ndash;"
            text = f"{d['estimate']:+.4f}"
            if d.get("low") is not None:
                text += f' <span class="ci">[{d["low"]:+.4f}, {d["high"]:+.4f}]</span>'
            return text
        rows.append(f'<tr class="delta"><th>Candidate &minus; baseline (paired)</th>'
                    f'<td>{delta(d_auc)}</td><td>{delta(d_ll)}</td>'
                    f'<td colspan="4"></td></tr>')
    level = ci.get("level", 0.95)
    note = (f'{int(round(level * 100))}% intervals: {_e(ci.get("method", "bootstrap"))}, '
            f'{_e(ci.get("n_resamples", "?"))} resamples of the eval rows (seed '
            f'{_e(ci.get("seed", "?"))}); all models scored on the same rows.') if ci else ""
    return (
        '<table class="grid"><thead><tr><th></th><th>AUC</th><th>log loss</th>'
        '<th>calibration<br><small>pred / observed</small></th><th>normalized entropy</th>'
        '<th>mean pred / CTR</th><th>rows</th></tr></thead><tbody>'
        + "".join(rows) + f'</tbody></table><p class="note">{note}</p>')


def _verdict(decision: dict) -> str:
    if decision.get("forced"):
        cls, text = "forced", "PUBLISHED BY FORCE"
    elif decision.get("blessed"):
        cls, text = "pass", "BLESSED"
    else:
        cls, text = "fail", "NOT BLESSED"
    return f'<div class="verdict {cls}">{text}</div>'


def _gate(decision: dict) -> str:
    rows = []
    for r in decision.get("rules") or []:
        ok = r.get("passed")
        interval = (f'[{_num(r["delta_low"])}, {_num(r["delta_high"])}]'
                    if "delta_low" in r and "delta_high" in r else "")
        rows.append(f'<tr class="{"pass" if ok else "fail"}"><td><code>{_e(r.get("name"))}'
                    f'</code></td><td>{_num(r.get("observed"))}</td><td>{interval}</td>'
                    f'<td>{_num(r.get("limit"))}</td><td>{_num(r.get("baseline"))}</td>'
                    f'<td class="res">{"pass" if ok else "FAIL"}</td></tr>')
    reasons = "".join(f"<li>{_e(line)}</li>" for line in decision.get("reasons") or [])
    forced = ""
    if decision.get("force_reason"):
        forced = f'<p><b>Force reason:</b> {_e(decision["force_reason"])}</p>'
    return ('<table class="grid"><thead><tr><th>rule</th><th>observed</th>'
            '<th>interval<br><small>of the difference</small></th><th>limit</th><th>baseline</th><th>result</th></tr></thead><tbody>' + "".join(rows)
            + f'</tbody></table>{forced}<h3>Reasons, as recorded</h3>'
              f'<ol class="reasons">{reasons}</ol>')


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
            delta = (m["auc"] - b["auc"]) if isinstance(m.get("auc"), float) \
                and isinstance(b.get("auc"), float) else None
            guard = guards.get(f"max_slice_auc_drop[{slice_name}={value}]")
            if guard is not None:
                res = ("pass", "pass") if guard["passed"] else ("fail", "FAIL")
            else:
                res = ("muted", "not guarded")
            rows.append(
                f'<tr class="{res[0] if res[0] == "fail" else ""}"><td>{_e(slice_name)}</td>'
                f'<td>{_e(value)}</td><td>{_num(m.get("n"))}</td>'
                f'<td>{_num(m.get("ctr"))}</td><td>{_num(m.get("auc"))}</td>'
                f'<td>{_num(b.get("auc"))}</td>'
                f'<td class="{"neg" if delta is not None and delta < 0 else ""}">'
                f'{"&ndash;" if delta is None else f"{delta:+.4f}"}</td>'
                f'<td>{_num(o.get("auc"))}</td><td>{_num(m.get("log_loss"))}</td>'
                f'<td>{_num(b.get("log_loss"))}</td><td>{_num(m.get("calibration"), 3)}</td>'
                f'<td class="res {res[0]}">{res[1]}</td></tr>')
    note = ""
    if thresholds.get("max_slice_auc_drop") is not None:
        note = (f'<p class="note">Guard: a slice value with at least '
                f'{_e(thresholds.get("min_slice_rows"))} rows and '
                f'{_e(thresholds.get("min_slice_positives"))} positives may lose at most '
                f'{_e(thresholds.get("max_slice_auc_drop"))} AUC against the baseline on '
                f'the same rows.</p>')
    return ('<table class="grid slices"><thead><tr><th>slice</th><th>value</th><th>rows</th>'
            '<th>CTR</th><th>AUC cand.</th><th>AUC base.</th><th>&Delta; AUC</th>'
            '<th>AUC Bayes</th><th>log loss cand.</th><th>log loss base.</th>'
            '<th>calibration cand.</th><th>guard</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>" + note)


def _history(history: list[dict], candidate: dict | None) -> str:
    if not history:
        return '<p class="muted">No published versions in the registry yet.</p>'
    plot = _history_plot(history, candidate) or ""
    rows = "".join(
        f'<tr><td>v{_e(h.get("version"))}{" (current)" if h.get("current") else ""}</td>'
        f'<td>{_e(h.get("stage"))}</td><td>{_e(h.get("data_span") or "")}</td>'
        f'<td>{_e((h.get("created_at") or "")[:19])}</td><td>{_num(h.get("auc"))}</td>'
        f'<td>{_num(h.get("log_loss"))}</td><td>{"forced" if h.get("forced") else ""}</td>'
        f'<td><code>{_e(h.get("run_id") or "")}</code></td></tr>' for h in reversed(history))
    return (plot + '<table class="grid"><thead><tr><th>version</th><th>stage</th>'
            '<th>span</th><th>created (UTC)</th><th>AUC</th><th>log loss</th><th>gate</th>'
            '<th>run id</th></tr></thead><tbody>' + rows + "</tbody></table>")


_CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#111827;
margin:0;background:#f9fafb}
main{max-width:1150px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid
#e5e7eb;padding-bottom:4px}h3{font-size:14px;margin:14px 0 4px}
.meta{color:#4b5563;font-size:12.5px}.meta code{font-size:12px}
.verdict{display:inline-block;padding:6px 14px;border-radius:6px;font-weight:700;
letter-spacing:.04em;margin:10px 0;color:#fff}
.verdict.pass{background:#15803d}.verdict.fail{background:#b91c1c}
.verdict.forced{background:#b45309}
table.grid{border-collapse:collapse;background:#fff;margin:6px 0;font-size:13px}
table.grid th,table.grid td{border:1px solid #e5e7eb;padding:4px 8px;text-align:right;
white-space:nowrap}
table.grid th:first-child,table.grid td:first-child{text-align:left}
table.grid thead th{background:#f3f4f6;text-align:center}
table.slices td:nth-child(2){text-align:left}
tr.fail td{background:#fef2f2}td.res.fail,tr.fail td.res{color:#b91c1c;font-weight:700}
tr.pass td.res{color:#15803d}td.res.muted,.muted{color:#6b7280}
td.neg{color:#b91c1c}tr.delta th,tr.delta td{background:#f3f4f6}
.ci{color:#6b7280;font-size:11.5px}.note{color:#6b7280;font-size:12px;margin:2px 0 0}
.dot{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:6px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
img.plot{background:#fff;border:1px solid #e5e7eb;max-width:100%}
ol.reasons{margin:4px 0;padding-left:22px;font-family:ui-monospace,Menlo,Consolas,monospace;
font-size:12.5px}
"""


def render(evaluation: dict, history: list[dict] | None = None,
           model_name: str = "ctr") -> str:
    """The whole page as a string; no I/O (only its arguments and the clock)."""
    decision = evaluation.get("decision") or {}
    curves = evaluation.get("curves") or {}
    plots = [p for p in (_roc_plot(curves), _reliability_plot(curves)) if p]
    span_dir = evaluation.get("span_dir") or ""
    span = Path(span_dir).name.removeprefix("dt=") if span_dir else "?"
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    meta = (f'span <b>{_e(span)}</b> &middot; {_num(evaluation.get("rows"))} eval rows '
            f'&middot; generated {generated}<br>candidate <code>'
            f'{_e(evaluation.get("candidate_model_dir") or "")}</code><br>baseline <code>'
            f'{_e(evaluation.get("baseline_model_dir") or "none")}</code>')
    body = [
        f"<h1>Evaluation of {_e(model_name)} &mdash; span {_e(span)}</h1>",
        f'<div class="meta">{meta}</div>', _verdict(decision),
        "<h2>Headline metrics</h2>", _headline(evaluation),
        "<h2>Gate decision</h2>", _gate(decision),
        "<h2>ROC and calibration</h2>",
        f'<div class="plots">{"".join(plots)}</div>' if plots
        else '<p class="muted">No curves (one class only in the eval rows?).</p>',
        "<h2>Per-slice metrics</h2>", _slices(evaluation),
        "<h2>History of published versions</h2>",
        _history(history or [], evaluation.get("candidate")),
        "<h2>Thresholds</h2>",
        f'<pre>{_e(json.dumps(decision.get("thresholds") or {}, indent=2, sort_keys=True))}'
        "</pre>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(model_name)} evaluation {_e(span)}</title>"
            f"<style>{_CSS}</style></head><body><main>" + "\n".join(body)
            + "</main></body></html>\n")


if __name__ == "__main__":
    sys.exit(main(ReportSpec, run))
