"""The text evaluation report: one self-contained HTML page per evaluation, next to eval.json.

A newcomer should see, per task, whether the fine-tune is worth serving: accuracy and
macro-F1 with 95 % intervals, the fine-tune beside the published model and the TF-IDF +
logistic-regression baseline (the figure it must beat), where it errs (the confusion
matrix, per-class F1), whether its probabilities can be trusted (reliability of the
predicted class) and whether short or long texts, or one day, do worse. The verdict, every
gate rule with its numbers, history and thresholds are the shared sections
(`components.report`). Reads the dict `components.text.evaluate` writes to eval.json
(its `report_details` included); labels come from the user's config, so every value is
escaped.
"""
from __future__ import annotations

from pathlib import Path

from components import report as R

MODELS = [R.Series("candidate", "Candidate (fine-tuned)", "#1f6feb"),
          R.Series("baseline", "Published model", "#d97706",
                   note="no published model (or one with other labels)"),
          R.Series("classical_baseline", "TF-IDF + logistic regression", "#6b7280",
                   dashed=True, note="not fitted for this run")]


def write_report(evaluation: dict, path, history: list[dict] | None = None,
                 model_name: str = "text") -> Path:
    """Render and write the page atomically; returns its path."""
    return R.write_page(render(evaluation, history=history, model_name=model_name), path)


def _task_metrics(evaluation: dict, model: str, task: str) -> dict:
    return (((evaluation.get(model) or {}).get("tasks") or {}).get(task)) or {}


def _cis(evaluation: dict, model: str, task: str) -> dict:
    return ((evaluation.get("intervals") or {}).get(model) or {}).get(task) or {}


def _paired(evaluation: dict, against: str, task: str) -> dict | None:
    d = ((evaluation.get("candidate") or {}).get("macro_f1_delta") or {}).get(against) or {}
    return d.get(task)


def _overview(evaluation: dict, tasks: list[str]) -> str:
    """One row per task: the three models' macro-F1 and the candidate's paired gaps."""
    rules = (evaluation.get("decision") or {}).get("rules") or []
    rows = []
    for task in tasks:
        own = [r for r in rules if str(r.get("name", "")).endswith(f"[{task}]")
               or str(r.get("name", "")).endswith(f"[task={task}]")]
        failed = [r for r in own if not r.get("passed")]
        res = (f'<td class="res fail">{len(failed)} of {len(own)} FAIL</td>' if failed
               else f'<td class="res">{len(own)} pass</td>')
        f1 = [_task_metrics(evaluation, s.key, task).get("macro_f1") for s in MODELS]
        n = _task_metrics(evaluation, "candidate", task).get("n")
        ci = _cis(evaluation, "candidate", task).get("macro_f1")
        rows.append(
            f'<tr class="{"fail" if failed else "pass"}"><td><a href="#task-{R.e(task)}">'
            f'{R.e(task)}</a></td><td>{R.num(n)}</td><td>{R.num(f1[0])} {R.interval(ci)}'
            f'</td><td>{R.num(f1[1])}</td><td>{R.num(f1[2])}</td>'
            f'<td>{R.delta(_paired(evaluation, "baseline", task))}</td>'
            f'<td>{R.delta(_paired(evaluation, "classical", task))}</td>{res}</tr>')
    return R.table(["task", "labelled eval texts", "macro-F1 candidate", "published",
                    "TF-IDF", "candidate &minus; published<br><small>paired</small>",
                    "candidate &minus; TF-IDF<br><small>paired</small>", "gate rules"], rows)


def _metrics(evaluation: dict, task: str) -> str:
    rows = []
    for s in MODELS:
        m = _task_metrics(evaluation, s.key, task)
        if not m.get("n"):
            rows.append(f'<tr><th>{R.dot(s.color)}{R.e(s.label)}</th><td colspan="6" '
                        f'class="muted">{R.e(s.note if not m else "no labelled eval texts")}'
                        "</td></tr>")
            continue
        ci = _cis(evaluation, s.key, task)
        ece = ((((evaluation.get("curves") or {}).get("reliability") or {}).get(s.key) or {})
               .get(task) or {}).get("ece")
        rows.append(
            f'<tr><th>{R.dot(s.color)}{R.e(s.label)}</th>'
            f'<td>{R.num(m.get("accuracy"))} {R.interval(ci.get("accuracy"))}</td>'
            f'<td>{R.num(m.get("macro_f1"))} {R.interval(ci.get("macro_f1"))}</td>'
            f'<td>{R.num(m.get("auc"))}</td><td>{R.num(m.get("log_loss"))}</td>'
            f'<td>{R.num(ece)}</td><td>{R.num(m.get("n"))}</td></tr>')
    cand = _task_metrics(evaluation, "candidate", task)
    if cand.get("majority_class") is not None:
        rows.append(f'<tr><th>Majority class (always &ldquo;{R.e(cand["majority_class"])}'
                    f'&rdquo;)</th><td>{R.num(cand.get("majority_accuracy"))}</td>'
                    f'<td>{R.num(cand.get("majority_macro_f1"))}</td><td colspan="4"></td></tr>')
    for against, label in (("baseline", "published"), ("classical", "TF-IDF")):
        d = _paired(evaluation, against, task)
        if d:
            rows.append(f'<tr class="delta"><th>Candidate &minus; {label} (paired)</th><td></td>'
                        f'<td>{R.delta(d)}</td><td colspan="4"></td></tr>')
    ci = _cis(evaluation, "candidate", task).get("macro_f1") or {}
    auc_kind = cand.get("auc_kind")
    note = (("AUC: " + R.e(auc_kind)
             + (f' (&ldquo;{R.e(cand["positive_class"])}&rdquo;)' if cand.get("positive_class")
                else "") + "; ") if auc_kind else "")
    if ci:
        note += (f'{int(round(ci.get("level", 0.95) * 100))}% intervals: accuracy Wilson '
                 f'score, macro-F1 {R.e(ci.get("method", "bootstrap"))}, '
                 f'{R.e(ci.get("n_resamples", "?"))} resamples; differences: paired '
                 f'bootstrap, both models on the same eval texts. ')
    note += ("Calibration error: mean |accuracy &minus; confidence| over the reliability "
             "bins, weighted by texts.")
    return (R.table(["", "accuracy", "macro-F1", "AUC", "log loss", "calibration error",
                     "rows"], rows) + f'<p class="note">{note}</p>')


def _per_class(evaluation: dict, task: str, labels: list[str]) -> str:
    per = {s.key: _task_metrics(evaluation, s.key, task).get("per_class") or {}
           for s in MODELS}
    rows = []
    for label in labels:
        c = per["candidate"].get(label) or {}
        rows.append(f'<tr><td>{R.e(label)}</td><td>{R.num(c.get("support"))}</td>'
                    f'<td>{R.num(c.get("precision"))}</td><td>{R.num(c.get("recall"))}</td>'
                    + "".join(f'<td>{R.num((per[s.key].get(label) or {}).get("f1"))}</td>'
                              for s in MODELS) + "</tr>")
    return R.table(["class", "eval texts", "precision cand.", "recall cand.", "F1 cand.",
                    "F1 published", "F1 TF-IDF"], rows)


def _confusion(evaluation: dict, task: str, labels: list[str]) -> str:
    """Counts per (true, predicted) class for every model scored, side by side."""
    tables = []
    for s in MODELS:
        cm = _task_metrics(evaluation, s.key, task).get("confusion_matrix")
        if not cm:
            continue
        rows = [f'<tr><th>{R.e(labels[i] if i < len(labels) else i)}</th>'
                + "".join(f'<td class="{"diag" if i == j else ""}">{R.num(v)}</td>'
                          for j, v in enumerate(row)) + "</tr>" for i, row in enumerate(cm)]
        head = ["true &darr; / predicted &rarr;", *(R.e(x) for x in labels[:len(cm)])]
        tables.append(f'<div><h3>{R.dot(s.color)}{R.e(s.label)}</h3>'
                      + R.table(head, rows) + "</div>")
    if not tables:
        return '<p class="muted">No labelled eval texts.</p>'
    return f'<div class="side">{"".join(tables)}</div>'


def _calibration(evaluation: dict, task: str) -> str:
    rel = ((evaluation.get("curves") or {}).get("reliability") or {})
    curves = {s.key: (rel.get(s.key) or {}).get(task) for s in MODELS}
    return R.plots([R.reliability_plot(
        curves, MODELS, xlabel="probability of the predicted class (mean per bin)",
        ylabel="share of those predictions that are right",
        title=f"Calibration: {task}",
        alt=f"Calibration plot of task {task}: confidence vs accuracy per bin")],
        "No reliability curves in eval.json.")


def _slices(evaluation: dict, task: str) -> str:
    slices = evaluation.get("slices") or {}
    per = {s.key: (slices.get(s.key) or {}).get(task) or {} for s in MODELS}
    rows = []
    for name in slices.get("names") or []:
        for value, m in (per["candidate"].get(name) or {}).items():
            other = [((per[s.key].get(name) or {}).get(value) or {}) for s in MODELS]
            base = other[1].get("macro_f1")
            d = m["macro_f1"] - base if isinstance(base, float) else None
            rows.append(
                f'<tr><td>{R.e(name)}</td><td>{R.e(value)}</td><td>{R.num(m.get("n"))}</td>'
                + "".join(f'<td>{R.num(o.get("accuracy"))}</td>' for o in other)
                + "".join(f'<td>{R.num(o.get("macro_f1"))}</td>' for o in other)
                + f'<td class="{"neg" if d is not None and d < 0 else ""}">'
                  f'{"&ndash;" if d is None else f"{d:+.4f}"}</td></tr>')
    notes = []
    if "day" not in (slices.get("names") or []):
        notes.append("The eval texts carry no day here: no by-day slices.")
    notes.append("Not guarded by the gate: a slice of a few dozen texts moves by chance.")
    note = f'<p class="note">{" ".join(notes)}</p>'
    if not rows:
        return '<p class="muted">No slices were computed.</p>' + note
    return R.table(["slice", "value", "rows", "accuracy cand.", "published", "TF-IDF",
                    "macro-F1 cand.", "published", "TF-IDF",
                    "&Delta; macro-F1<br><small>cand. &minus; published</small>"],
                   rows, cls="grid slices") + note


def _task(evaluation: dict, task: str, labels: list[str]) -> str:
    n = _task_metrics(evaluation, "candidate", task).get("n")
    head = (f'<h2 id="task-{R.e(task)}">Task {R.e(task)} &mdash; {len(labels)} classes: '
            f'{R.e(", ".join(labels))}</h2>')
    if not n:
        return head + '<p class="muted">No labelled eval texts for this task.</p>'
    return "".join([
        head, "<h3>Metrics</h3>", _metrics(evaluation, task),
        "<h3>Per class</h3>", _per_class(evaluation, task, labels),
        "<h3>Confusion matrix</h3>", _confusion(evaluation, task, labels),
        "<h3>Calibration</h3>", _calibration(evaluation, task),
        "<h3>Slices by text length and by day</h3>", _slices(evaluation, task)])


def _classical(evaluation: dict) -> str:
    c = evaluation.get("classical_baseline")
    if not c:
        return '<p class="muted">Not fitted for this run.</p>'
    cap = c.get("max_train_examples")
    return (f'<p>{R.e(c.get("model") or "TF-IDF + logistic regression")}: fitted on '
            f'{R.num(c.get("train_rows"))} training texts of the window (cap: '
            f'{R.e(cap if cap else "none")}; the fine-tune\'s cap: '
            f'{R.e(c.get("finetune_max_train_examples") or "none")}) in '
            f'{R.num(c.get("seconds"), 1)} s, scored on the same eval texts.</p>')


def render(evaluation: dict, history: list[dict] | None = None,
           model_name: str = "text") -> str:
    """The whole page as a string; no I/O (only its arguments and the clock)."""
    decision = evaluation.get("decision") or {}
    labels = {t: list(v) for t, v in (evaluation.get("labels") or {}).items()}
    span = evaluation.get("span") or "?"
    window = evaluation.get("window") or []
    meta = (f'span <b>{R.e(span)}</b>'
            + (f' (window {R.e(", ".join(map(str, window)))})' if window else "")
            + f' &middot; {R.num(evaluation.get("rows"))} eval texts &middot; generated '
              f'{R.generated_at()}<br>candidate <code>'
              f'{R.e(evaluation.get("candidate_model_dir") or "")}</code><br>published '
              f'<code>{R.e(evaluation.get("baseline_model_dir") or "none")}</code><br>'
              f'eval texts <code>{R.e(evaluation.get("preprocess_dir") or "")}</code>')
    body = [
        f"<h1>Evaluation of {R.e(model_name)} &mdash; span {R.e(span)}</h1>",
        f'<div class="meta">{meta}</div>', R.verdict(decision),
        "<h2>Tasks at a glance</h2>", _overview(evaluation, list(labels)),
        "<h2>Gate decision</h2>", R.gate(decision),
        *(_task(evaluation, task, names) for task, names in labels.items()),
        "<h2>Classical baseline</h2>", _classical(evaluation),
    ]
    if history is not None:
        body += ["<h2>History of published versions</h2>",
                 R.history(history, evaluation.get("candidate"))]
    body += ["<h2>Thresholds</h2>", R.thresholds(decision)]
    return R.page(f"{model_name} evaluation {span}", body)
