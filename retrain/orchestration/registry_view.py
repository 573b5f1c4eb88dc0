"""`retrain registry show` for a person: one registry version on a screen.

Why: a version's metadata is hundreds of lines of JSON (the run's lineage copy, every
file's digest, the gate's thresholds); the questions asked of it are few: which model,
when, from which data and run, how good, why it was published (the gate's verdict, its
rules, who approved) and where its files are. This answers those in about 25 lines of at
most 100 characters; `retrain registry show --json` prints the whole record. Stdlib only.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from retrain.common import screen

LABEL = 13      # "  validation " : the column the values start in


def show_text(meta: dict, model_path: str | None = None, current: int | None = None,
              width: int = screen.WIDTH) -> str:
    """The screen for one version's metadata (`meta`, as the registry keeps it);
    `model_path`: its folder; `current`: the version CURRENT names."""
    lines: list[str] = []

    def field(label: str, text: Any) -> None:
        if text not in (None, ""):
            lines.extend(screen.fit(str(text), width, f"  {label:<{LABEL - 2}}", " " * LABEL))

    version = meta.get("version")
    serving = ", serving" if current is not None and current == version else ""
    lines.append(f"{meta.get('model_name') or '?'} version {version}  "
                 f"[{meta.get('stage')}{serving}]")
    field("created", _when(meta.get("created_at")))
    field("span", _span(meta.get("data_span")))
    field("run", " / ".join(str(x) for x in (meta.get("dag_id"), meta.get("run_id")) if x)
          or "-")
    field("code", meta.get("code_version"))
    field("model", _digests(meta))
    headline = meta.get("headline") if isinstance(meta.get("headline"), list) else \
        ["auc", "log_loss"]
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    field("metrics", _metrics(metrics, headline) or "-")
    field("", _evidence(metrics))
    field("tasks", _tasks(metrics))
    baseline = meta.get("baseline_metrics")
    field("baseline", _metrics(baseline, headline, with_ci=False)
          if isinstance(baseline, dict) else "none: no published model to compare with")
    gate = meta.get("gate") if isinstance(meta.get("gate"), dict) else None
    verdict, failed = _gate(gate)
    field("gate", verdict)
    for line in failed[:5]:
        field("", line)
    if len(failed) > 5:
        field("", f"({len(failed) - 5} more failed rule(s) in --json)")
    val = meta.get("validation_gate") or {}
    if isinstance(val, dict) and val.get("outcome"):
        field("validation", val["outcome"] + (f" (override: {val['override_reason']})"
                                              if val.get("override_reason") else ""))
    field("serving", _serving(meta.get("serving_check")))
    field("approval", _approval(meta.get("approval")))
    history = meta.get("history") if isinstance(meta.get("history"), list) else []
    previous = None
    for i, h in enumerate(history[-3:]):
        field("history" if i == 0 else "", _event(h, previous))
        previous = h
    if len(history) > 3:
        field("", f"({len(history) - 3} earlier event(s) in --json)")
    lines.append("  paths")
    field("  model", model_path)
    field("  run", meta.get("run_dir"))
    report = meta.get("report_uri")
    if report and meta.get("run_dir"):
        report = screen.under(str(report), str(meta["run_dir"]))
        report = report if report.startswith("/") else f"{report} (in the run folder)"
    field("  report", report)
    lines.append("  the whole record (lineage, file digests, thresholds): add --json")
    return "\n".join(lines)


def _when(value: Any) -> str | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value)).strftime("%Y-%m-%d %H:%M:%SZ")
    except ValueError:
        return str(value)


def _span(span: Any) -> str:
    if isinstance(span, (list, tuple)) and span:
        return str(span[0]) if len(span) == 1 else f"{span[0]}..{span[-1]}"
    if isinstance(span, dict):
        start, end = span.get("start") or span.get("first"), span.get("end") or span.get("last")
        return f"{start}..{end}" if start != end else str(start)
    return str(span) if span not in (None, "") else "-"


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "-"


def _digests(meta: dict) -> str:
    content = meta.get("content") if isinstance(meta.get("content"), dict) else {}
    files = content.get("files") if isinstance(content.get("files"), dict) else {}
    text = f"digest {_short(meta.get('model_digest'))}"
    if files:
        text += f", {len(files)} file(s) recorded (content {_short(content.get('digest'))})"
    return text


def _num(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return f"{value:.4f}"


def _metrics(metrics: dict, headline: list, with_ci: bool = True) -> str:
    ci = metrics.get("ci") if with_ci and isinstance(metrics.get("ci"), dict) else {}
    level = ci.get("level")
    parts = []
    for name in headline:
        value = _num(metrics.get(name))
        if value is None:
            continue
        band = ci.get(name) if isinstance(ci.get(name), dict) else {}
        low, high = _num(band.get("low")), _num(band.get("high"))
        if low and high:
            value += f" ({level * 100:.0f}% {low}..{high})" if isinstance(level, float) \
                else f" ({low}..{high})"
        parts.append(f"{name} {value}")
    return ", ".join(parts)


def _evidence(metrics: dict) -> str | None:
    rows, positives = metrics.get("n"), metrics.get("positives")
    if not isinstance(rows, int):
        return None
    return f"on {rows:,} eval rows" + (f", {positives:,} positives"
                                        if isinstance(positives, int) else "")


def _tasks(metrics: dict) -> str | None:
    tasks = metrics.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        return None
    parts = []
    for name, m in tasks.items():
        figures = [f"{k} {_num(m.get(k))}" for k in ("macro_f1", "accuracy")
                   if isinstance(m, dict) and _num(m.get(k))]
        parts.append(f"{name}: {', '.join(figures) or '-'}")
    return "; ".join(parts)


def _gate(gate: dict | None) -> tuple[str, list[str]]:
    """The verdict with its rule count, and one line per failed rule."""
    if gate is None:
        return "-", []
    rules = [r for r in gate.get("rules") or [] if isinstance(r, dict)]
    failed = [r for r in rules if not r.get("passed")]
    verdict = ("forced past the gate" if gate.get("forced") else
               "blessed" if gate.get("blessed") else "not blessed")
    text = f"{verdict}: {len(rules) - len(failed)} of {len(rules)} rules pass"
    if not gate.get("baseline_present", True):
        text += " (no published baseline: absolute thresholds only)"
    if gate.get("forced"):
        text += f"; why: {gate.get('force_reason') or 'no reason recorded'}"
    return text, [f"failed {r.get('name')}: observed {_num(r.get('observed')) or r.get('observed')}"
                  f", limit {_num(r.get('limit')) or r.get('limit')}" for r in failed]


def _serving(check: Any) -> str | None:
    if not isinstance(check, dict):
        return None
    if not check.get("passed"):
        return f"FAILED: {check.get('error') or 'see --json'}"
    latency = check.get("latency") if isinstance(check.get("latency"), dict) else {}
    p99 = [f"{n} row(s) {v['p99_ms']:.2f} ms" for n, v in latency.items()
           if isinstance(v, dict) and isinstance(v.get("p99_ms"), (int, float))]
    diff = check.get("max_abs_diff")
    return ("checked" + (f"; p99 latency {', '.join(p99)}" if p99 else "")
            + (f"; max score difference {diff:g}" if isinstance(diff, (int, float)) else ""))


def _approval(approval: Any) -> str | None:
    if not isinstance(approval, dict) or not approval.get("asked"):
        return "not asked (the gate's verdict stands)" if approval is None else None
    who = approval.get("by") or ("nobody: no answer in time" if approval.get("timed_out")
                                 else "unknown")
    reason = f": {approval['reason']}" if approval.get("reason") else ""
    return f"{approval.get('decision')} by {who} at {_when(approval.get('answered_at'))}{reason}"


def _event(h: Any, previous: Any = None) -> str:
    """One history event; who and why only where they differ from the event before."""
    if not isinstance(h, dict):
        return str(h)
    text = f"{_when(h.get('at'))} {h.get('action')} {h.get('from') or '-'} -> {h.get('to')}"
    same = isinstance(previous, dict) and all(previous.get(k) == h.get(k)
                                              for k in ("who", "why"))
    return text + ("" if same else f" by {h.get('who')}: {h.get('why')}")
