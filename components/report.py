"""The evaluation page's shared parts: shell, styles, plots, the verdict and the gate.

Every family writes one self-contained `report.html` next to its eval.json, so the person
on call sees why a model was (not) published without opening JSON. The page a family
draws is its own (`components/<family>/report.py`: its metrics, its slices); what every
page shares lives here, so the verdict, every gate rule with its numbers, the history of
published versions and the look are the same in every family and written once. Plots are
matplotlib PNGs inlined as base64 and the styles are inline: the page opens from a file,
an artifact store or a mail attachment with no network. Writes the page atomically.
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
import tempfile
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"


@dataclasses.dataclass(frozen=True)
class Series:
    """One model as the page draws it; the first of a list is drawn on top (it hides an
    identical second model rather than the reverse)."""

    key: str                 # the model's key in eval.json ("candidate", ...)
    label: str
    color: str
    dashed: bool = False     # a reference (a ceiling, a classical model), not a contender
    note: str = ""           # shown in a table when eval.json has no such model


def write_page(text: str, path: str | os.PathLike) -> Path:
    """Write the page atomically (temp file + rename); returns its path."""
    path = Path(path)
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


def write_or_log(draw: Callable[[], str], path: str | os.PathLike
                 ) -> tuple[str | None, str | None]:
    """(page path, None), or (None, the error) when the page cannot be drawn: the page is
    for people, so a failure is logged loudly but never blocks the gate's decision
    (eval.json already holds everything)."""
    try:
        written = write_page(draw(), path)
    except Exception as e:  # noqa: BLE001 - reported in the log and the result
        log.exception("evaluation report could not be written")
        return None, f"{type(e).__name__}: {e}"
    log.info("evaluation report: %s", written.resolve())
    return str(written), None


def registry_history(registry_root: str | os.PathLike | None, model_name: str,
                     n: int = 10) -> list[dict]:
    """The last `n` versions of the model (every version was published when made), with
    the gate's headline metrics."""
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


# --------------------------------------------------------------------------- plots

def figure(width: float = 5.2, height: float = 4.2):
    # Figure + Agg canvas directly: no pyplot, so no global backend or state is touched.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def img(fig, alt: str) -> str:
    """The figure as an inline PNG <img>."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    b64 = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{e(alt)}" src="data:image/png;base64,{b64}">'


def _draw(ax, xs, ys, s: Series, z: int, **kw) -> None:
    ax.plot(xs, ys, color=s.color, ls="--" if s.dashed else "-", label=s.label, zorder=z,
            **kw)


def roc_plot(roc: dict, series: list[Series], alt: str) -> str | None:
    """ROC curves ({key: {fpr, tpr}}) of the models in `series` that have one."""
    shown = [s for s in series if (roc or {}).get(s.key)]
    if not shown:
        return None
    fig = figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="#d1d5db", lw=1, label="random")
    for i, s in enumerate(shown):
        _draw(ax, roc[s.key]["fpr"], roc[s.key]["tpr"], s, len(series) + 1 - i,
              lw=1.2 if s.dashed else 2)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="false positive rate",
           ylabel="true positive rate", title="ROC curve")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return img(fig, alt)


def reliability_plot(curves: dict, series: list[Series], *, xlabel: str, ylabel: str,
                     title: str, alt: str) -> str | None:
    """Mean predicted vs observed per bin ({key: {mean_pred, observed}}) for the models in
    `series` that have a curve, against the diagonal of perfect calibration."""
    shown = [s for s in series if (curves or {}).get(s.key)]
    if not shown:
        return None
    fig = figure()
    ax = fig.add_subplot()
    top = max(max(curves[s.key]["mean_pred"] + curves[s.key]["observed"]) for s in shown)
    top = min(1.0, top * 1.08) or 1.0
    ax.plot([0, top], [0, top], color="#d1d5db", lw=1, label="perfectly calibrated")
    for i, s in enumerate(shown):
        _draw(ax, curves[s.key]["mean_pred"], curves[s.key]["observed"], s,
              len(series) + 1 - i, marker="o", ms=4, lw=1.2)
    ax.set(xlim=(0, top), ylim=(0, top), xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return img(fig, alt)


def _history_plot(history: list[dict], candidate: dict | None) -> str | None:
    points = [h for h in history if isinstance(h.get("auc"), (int, float))]
    if not points:
        return None
    fig = figure(7.5, 3.0)
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
    return img(fig, "AUC history of published versions and this candidate")


def plots(images: list[str | None], empty: str) -> str:
    """The drawn plots side by side, or `empty` when none could be drawn."""
    shown = [p for p in images if p]
    if not shown:
        return f'<p class="muted">{e(empty)}</p>'
    return f'<div class="plots">{"".join(shown)}</div>'


# --------------------------------------------------------------------------- html

def e(value: Any) -> str:
    """HTML-escaped text of any value (data and config never reach the page raw)."""
    return html.escape(str(value))


def num(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "&ndash;"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def interval(ci: dict | None, signed: bool = False) -> str:
    """A {low, high} interval as a small grey "[low, high]" (nothing without one)."""
    ci = ci or {}
    if not isinstance(ci.get("low"), (int, float)) or not isinstance(ci.get("high"),
                                                                     (int, float)):
        return ""
    f = "+.4f" if signed else ".4f"
    return f'<span class="ci">[{ci["low"]:{f}}, {ci["high"]:{f}}]</span>'


def delta(d: dict | None) -> str:
    """A paired difference {estimate, low, high} as "+0.0123 [low, high]"."""
    d = d or {}
    if not isinstance(d.get("estimate"), (int, float)):
        return "&ndash;"
    return f"{d['estimate']:+.4f} " + interval(d, signed=True)


def dot(color: str) -> str:
    return f'<span class="dot" style="background:{e(color)}"></span>'


def table(head: list[str], rows: list[str], cls: str = "grid") -> str:
    """A table from header cells (HTML, already escaped) and <tr> rows."""
    cells = "".join(f"<th>{h}</th>" for h in head)
    return (f'<table class="{e(cls)}"><thead><tr>{cells}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def verdict(decision: dict) -> str:
    if decision.get("forced"):
        cls, text = "forced", "PUBLISHED BY FORCE"
    elif decision.get("blessed"):
        cls, text = "pass", "BLESSED"
    else:
        cls, text = "fail", "NOT BLESSED"
    return f'<div class="verdict {cls}">{text}</div>'


def gate(decision: dict) -> str:
    """Every rule with its observed value, interval, limit and baseline; then the reasons
    exactly as the gate recorded them."""
    rows = []
    for r in decision.get("rules") or []:
        ok = r.get("passed")
        span = (f'[{num(r["delta_low"])}, {num(r["delta_high"])}]'
                if "delta_low" in r and "delta_high" in r else "")
        rows.append(f'<tr class="{"pass" if ok else "fail"}"><td><code>{e(r.get("name"))}'
                    f'</code></td><td>{num(r.get("observed"))}</td><td>{span}</td>'
                    f'<td>{num(r.get("limit"))}</td><td>{num(r.get("baseline"))}</td>'
                    f'<td class="res">{"pass" if ok else "FAIL"}</td></tr>')
    reasons = "".join(f"<li>{e(line)}</li>" for line in decision.get("reasons") or [])
    forced = ""
    if decision.get("force_reason"):
        forced = f'<p><b>Force reason:</b> {e(decision["force_reason"])}</p>'
    return (table(["rule", "observed", "interval<br><small>of the difference</small>",
                   "limit", "baseline", "result"], rows)
            + f'{forced}<h3>Reasons, as recorded</h3><ol class="reasons">{reasons}</ol>')


def history(versions: list[dict], candidate: dict | None) -> str:
    """The registry's last published versions (`registry_history`) and this candidate."""
    if not versions:
        return '<p class="muted">No published versions in the registry yet.</p>'
    plot = _history_plot(versions, candidate) or ""
    rows = [
        f'<tr><td>v{e(h.get("version"))}{" (current)" if h.get("current") else ""}</td>'
        f'<td>{e(h.get("stage"))}</td><td>{e(h.get("data_span") or "")}</td>'
        f'<td>{e((h.get("created_at") or "")[:19])}</td><td>{num(h.get("auc"))}</td>'
        f'<td>{num(h.get("log_loss"))}</td><td>{"forced" if h.get("forced") else ""}</td>'
        f'<td><code>{e(h.get("run_id") or "")}</code></td></tr>' for h in reversed(versions)]
    return plot + table(["version", "stage", "span", "created (UTC)", "AUC", "log loss",
                         "gate", "run id"], rows)


def thresholds(decision: dict) -> str:
    return (f'<pre>{e(json.dumps(decision.get("thresholds") or {}, indent=2, sort_keys=True))}'
            "</pre>")


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
td.diag{background:#ecfdf5;font-weight:600}
.ci{color:#6b7280;font-size:11.5px}.note{color:#6b7280;font-size:12px;margin:2px 0 0}
.dot{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:6px}
.plots,.side{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
img.plot{background:#fff;border:1px solid #e5e7eb;max-width:100%}
ol.reasons{margin:4px 0;padding-left:22px;font-family:ui-monospace,Menlo,Consolas,monospace;
font-size:12.5px}
"""


def generated_at() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def page(title: str, body: list[str]) -> str:
    """The whole document: `title` is plain text (escaped here), `body` ready HTML."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title><style>{_CSS}</style></head><body><main>"
            + "\n".join(body) + "</main></body></html>\n")
