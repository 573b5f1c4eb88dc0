"""Evaluate a fine-tuned text model against the published one, through the serving path.

Both models score the same raw eval texts (the preprocessing job's eval split: texts
whose hash never put them in any training split) through their exported `serving_default`
signatures, so what is measured is what would serve. Per task: accuracy, macro-F1, log
loss, AUC (of the positive class for a binary task, macro one-vs-rest otherwise), the
majority-class baseline, and a classical baseline (TF-IDF word + character n-grams and
logistic regression, `components.text.baseline`) fitted on the window's training texts
and scored on the same eval texts. The baseline is fitted on *all* training texts:
`max_train_examples` caps the fine-tune (its speed), not the figure it must beat
(`classical_max_train_examples` caps it explicitly, for memory on a huge corpus). A gate
rule (on by default, `gate.beat_classical_baseline`) rejects a candidate whose macro-F1 on
any task is below the classical baseline's: a broken fine-tune or a checkpoint unfit for
the language is caught here, not by a user later.

Verdicts need evidence (rule 21, docs/principles.md). Per task, fewer labelled eval
texts than `gate.min_eval_rows`, or fewer eval texts of any one class than
`gate.min_eval_positives` (params of the same names override them per run), fail a rule
that names the task, the classes and their counts. Macro-F1 differences are judged on
paired bootstrap intervals (`components.metrics.paired_macro_f1_interval`: both models'
predictions on the same eval texts, resampled together, fixed seed): against the
classical baseline, and, with `gate.refuse_confidently_worse` (on), against the published
model, which a candidate never replaces when its interval lies wholly below it.

The shared gate (`components.gate.decide`) is fed the mean of the tasks' AUC and log
loss as its headline `auc`/`log_loss`, and each task as a slice (`task=sentiment`,
`task=topic`), so its slice guard rejects a candidate that loses more than
`max_task_auc_drop` AUC on either task even if the average improves.

Writes `<out_dir>/eval.json` (metrics, gate decision, and `report_details`: intervals,
reliability curves, slices by text length and by day), `scores_sample.json` (texts and
the candidate's probabilities, which the serving check compares in a fresh process) and
`report.html` (`components.text.report`; a page that cannot be drawn is logged loudly and
never fails the evaluation).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from retrain.common.step import main

log = logging.getLogger("retrain.text.evaluate")

EVAL_FILE = "eval.json"
SCORES_SAMPLE_FILE = "scores_sample.json"
LENGTH_BUCKETS = 4          # text-length slices: quantiles of the eval texts' word counts
RELIABILITY_BINS = 10


@dataclasses.dataclass
class TextEvaluateSpec:
    preprocess_dir: str
    candidate_model_dir: str
    out_dir: str
    baseline_model_dir: str | None = None
    min_auc: float | None = None  # default: the config's gate.min_auc; other limits: config
    beat_classical_baseline: bool | None = None   # default: the config's gate setting
    classical_report: bool = True  # fit the classical baseline for the report even if off
    # The fine-tune's training cap, recorded beside the classical baseline's figures only:
    # the baseline trains on every training text unless classical_max_train_examples says.
    max_train_examples: int | None = None
    classical_max_train_examples: int | None = None   # None: all training texts
    # Evidence per task (labelled rows) and per class; None: the config's gate settings.
    min_eval_rows: int | None = None
    min_eval_positives: int | None = None
    # Paired bootstrap intervals of the macro-F1 differences.
    bootstrap_resamples: int = 1000
    bootstrap_seed: int = 0
    force_reason: str | None = None
    max_eval_examples: int | None = None
    eval_offset: int = 0          # skip this many eval rows (those used for early stopping)
    sample_rows: int = 32
    batch_size: int = 64


def read_eval_rows(preprocess_dir: str, tasks, limit: int | None = None, offset: int = 0,
                   split: str | None = None) -> dict:
    """One split (default: eval) as columns: texts, ids and one label-index array per task."""
    import numpy as np

    from components.text import model as M
    from components.text.formats import EVAL_DIR

    ds = M.read_records(str(Path(preprocess_dir) / (split or EVAL_DIR) / "*.tfrecord.gz"),
                        tasks)
    if offset:
        ds = ds.skip(offset)
    if limit:
        ds = ds.take(limit)
    # The record's day ("span") only where the parsing spec reads it: by-day slices.
    strings = ["text", "example_id", *(["span"] if "span" in ds.element_spec else [])]
    cols: dict[str, list] = {k: [] for k in [*strings, *tasks]}
    for ex in ds.as_numpy_iterator():
        for k in cols:
            cols[k].append(ex[k])
    out = {k: np.asarray(cols[k], dtype=np.int64) for k in tasks}
    out.update({k: [t.decode("utf-8") for t in cols[k]] for k in strings})
    return out


def task_metrics(names: list[str], labels, probs, positive: int | None = None) -> dict:
    """Metrics of one task on its labelled rows (label >= 0). A binary task (`positive`
    set) is scored as one: macro-F1 over its two classes, AUC of the positive class."""
    import numpy as np

    from components import metrics as MX

    y = np.asarray(labels, dtype=np.int64)
    keep = y >= 0
    y, p = y[keep], np.asarray(probs, dtype=np.float64)[keep]
    if y.size == 0:
        return {"n": 0}
    cls = MX.classification_metrics(y, p, list(names))
    p_true = np.clip(p[np.arange(y.size), y], 1e-7, 1.0)
    aucs = {}
    for k, name in enumerate(names):
        pos = y == k
        if 0 < pos.sum() < y.size:
            aucs[name] = MX.auc(pos.astype(np.int64), p[:, k])
    if positive is not None:
        auc = aucs.get(names[positive])
    else:
        auc = float(np.mean(list(aucs.values()))) if aucs else None
    majority = int(np.bincount(y, minlength=len(names)).argmax())
    maj_pred = np.full_like(y, majority)
    out = {"n": int(y.size), "accuracy": cls["accuracy"], "macro_f1": cls["macro_f1"],
           "log_loss": float(-np.mean(np.log(p_true))), "auc": auc,
           "auc_kind": "positive class" if positive is not None else "macro one-vs-rest",
           "auc_per_class": aucs, "per_class": cls["per_class"],
           "confusion_matrix": cls["confusion_matrix"],
           "majority_class": names[majority],
           "majority_accuracy": MX.accuracy(y, maj_pred),
           "majority_macro_f1": MX.macro_f1(y, maj_pred, len(names))}
    if positive is not None:
        out["positive_class"] = names[positive]
    elif "negative" in names and "positive" in names:
        neg, pos = names.index("negative"), names.index("positive")
        polar = (y == neg) | (y == pos)
        if polar.any():
            pred_pos = p[polar, pos] > p[polar, neg]
            out["pos_vs_neg_accuracy"] = float(np.mean(pred_pos == (y[polar] == pos)))
            out["pos_vs_neg_n"] = int(polar.sum())
    return out


def model_metrics(rows: dict, probs: dict, cfg) -> dict:
    """Per-task metrics plus the gate's headline auc/log_loss and per-task slices."""
    import numpy as np

    tasks = {t.name: task_metrics(list(t.labels), rows[t.name], probs[t.name],
                                  t.positive_index) for t in cfg.tasks}
    scored = [m for m in tasks.values() if m.get("n") and m.get("auc") is not None]
    if not scored:
        raise ValueError("no task has labelled eval rows with two classes: cannot evaluate")
    return {"auc": float(np.mean([m["auc"] for m in scored])),
            "log_loss": float(np.mean([m["log_loss"] for m in scored])),
            "tasks": tasks,
            "slices": {"task": {t: {"n": m["n"], "auc": m.get("auc")}
                                for t, m in tasks.items() if m.get("n")}}}


def classical_baseline(spec, cfg, rows: dict) -> tuple[dict, dict]:
    """TF-IDF + logistic regression fitted on the window's training texts and scored on the
    same eval texts: the figure a fine-tune must beat to be worth serving. All training
    texts, whatever `max_train_examples` (the fine-tune's cap) says: a baseline that sees
    fewer rows than exist is a lower bar than the data allows. Returns (metrics, probs)."""
    import time

    from components.text import baseline as B
    from components.text.formats import TRAIN_DIR

    t0 = time.perf_counter()
    tasks = cfg.task_labels
    train = read_eval_rows(spec.preprocess_dir, tasks, spec.classical_max_train_examples,
                           split=TRAIN_DIR)
    probs = B.fit_predict(train["text"], {t: train[t].tolist() for t in tasks}, rows["text"],
                          {t: len(v) for t, v in tasks.items()},
                          class_weight=None if cfg.class_weighting == "none" else "balanced")
    metrics = model_metrics(rows, probs, cfg)
    log.info("classical baseline fitted on %d training texts (cap %s; the fine-tune's "
             "max_train_examples %s)", len(train["text"]),
             spec.classical_max_train_examples or "none", spec.max_train_examples or "none")
    return {**metrics, "model": B.describe(), "train_rows": len(train["text"]),
            "max_train_examples": spec.classical_max_train_examples,
            "finetune_max_train_examples": spec.max_train_examples,
            "seconds": round(time.perf_counter() - t0, 1)}, probs


def paired_intervals(rows: dict, probs: dict, other_probs: dict, cfg, *,
                     n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """{task: interval of macro-F1(probs) - macro-F1(other_probs)} on each task's labelled
    eval rows, both models resampled together (`paired_macro_f1_interval`); the estimate
    equals the difference of the two `task_metrics` macro-F1s. Tasks without labelled
    rows are left out."""
    import numpy as np

    from components import metrics as MX

    out = {}
    for task in cfg.tasks:
        y = np.asarray(rows[task.name], dtype=np.int64)
        keep = y >= 0
        if not keep.any():
            continue
        ci = MX.paired_macro_f1_interval(
            y[keep], np.asarray(probs[task.name])[keep],
            np.asarray(other_probs[task.name])[keep], len(task.labels),
            n_resamples=n_resamples, seed=seed, level=level)
        out[task.name] = {**ci["delta"], "level": ci["level"], "rows": ci["rows"],
                          "n_resamples": ci["n_resamples"], "seed": ci["seed"],
                          "method": ci["method"]}
    return out


def _wilson(k: int, n: int, level: float = 0.95) -> dict:
    """Wilson score interval of a share k/n: honest near 0 and 1 and on a few rows."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return {"estimate": p, "low": max(0.0, mid - half), "high": min(1.0, mid + half),
            "level": level, "rows": n, "method": "Wilson score"}


def _length_buckets(texts: list[str], n_buckets: int = LENGTH_BUCKETS
                    ) -> tuple[list[str], list[str]]:
    """(bucket names in increasing order, each text's bucket): word counts cut at their
    quantiles, so the buckets hold about equally many texts ("13-25 words")."""
    import numpy as np

    words = np.array([len(t.split()) for t in texts])
    edges = np.unique(np.quantile(words, np.linspace(0, 1, n_buckets + 1)[1:-1]).astype(int))
    bucket = np.searchsorted(edges, words, side="left")
    names = []
    for b in range(edges.size + 1):
        lo = int(edges[b - 1]) + 1 if b else int(words.min())
        hi = int(edges[b]) if b < edges.size else int(words.max())
        names.append(f"{lo} words" if lo == hi else f"{lo}-{hi} words")
    present = sorted(set(bucket.tolist()))
    return [names[b] for b in present], [names[b] for b in bucket]


def report_details(rows: dict, probs: dict, cfg, *, n_resamples: int = 1000,
                   seed: int = 0) -> dict:
    """What the report draws beyond the gate's figures, per model of `probs` ({"candidate":
    {task: probs}, "baseline": ..., "classical_baseline": ...}) and task, on labelled rows:
    95 % intervals of accuracy (Wilson) and macro-F1 (bootstrap of the confusion matrix);
    the reliability of the predicted class's probability (how often a "90 % sure" answer is
    right) with its expected calibration error; accuracy and macro-F1 (over the classes
    the slice holds or is predicted as: a day without a class is not scored 0 on it) per
    text-length bucket and, when the rows carry their day, per day. Pure: numpy only."""
    import numpy as np

    from components import metrics as MX

    order, lengths = _length_buckets(rows["text"])
    slice_of, order = {"text length": lengths}, {"text length": order}
    if rows.get("span"):
        slice_of["day"], order["day"] = list(rows["span"]), sorted(set(rows["span"]))
    intervals: dict = {}
    reliability: dict = {}
    slices: dict = {"names": list(slice_of)}
    for model, model_probs in probs.items():
        for task in cfg.tasks:
            y = np.asarray(rows[task.name], dtype=np.int64)
            keep = y >= 0
            if not keep.any():
                continue
            k = len(task.labels)
            p = np.asarray(model_probs[task.name], dtype=np.float64)
            pred = p.argmax(axis=1)
            right = pred[keep] == y[keep]
            intervals.setdefault(model, {})[task.name] = {
                "accuracy": _wilson(int(right.sum()), int(keep.sum())),
                "macro_f1": MX.macro_f1_interval(MX.confusion_matrix(y[keep], pred[keep], k),
                                                 n_resamples=n_resamples, seed=seed)}
            curve = MX.reliability_curve(right, p[keep].max(axis=1), RELIABILITY_BINS,
                                         strategy="uniform")
            curve["ece"] = float(sum(c * abs(o - m) for c, o, m in zip(
                curve["count"], curve["observed"], curve["mean_pred"])) / keep.sum())
            reliability.setdefault(model, {})[task.name] = curve
            per_slice = slices.setdefault(model, {}).setdefault(task.name, {})
            for name, values in slice_of.items():
                v = np.asarray(values, dtype=object)
                per_slice[name] = {}
                for value in order[name]:
                    sel = keep & (v == value)
                    if sel.any():
                        per_slice[name][value] = {
                            "n": int(sel.sum()), "accuracy": MX.accuracy(y[sel], pred[sel]),
                            "macro_f1": MX.macro_f1(y[sel], pred[sel])}
    return {"intervals": intervals, "curves": {"reliability": reliability}, "slices": slices}


def _interval_of(candidate: dict, against: str, task: str) -> dict | None:
    """The candidate's paired interval of a task's macro-F1 difference to `against`
    ("classical" or "baseline"), or None when it has none."""
    import math

    d = ((candidate.get("macro_f1_delta") or {}).get(against) or {}).get(task)
    if not isinstance(d, dict):
        return None
    for k in ("estimate", "low", "high"):
        v = d.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
    return d


def evidence_rules(cfg, candidate: dict) -> list:
    """Rule 21, per task: at least `gate.min_eval_rows` labelled eval texts and at least
    `gate.min_eval_positives` eval texts of each of its classes (0: no such rule). A task
    with no labelled eval text at all fails both: it cannot be judged."""
    g, rules = cfg.gate, []
    for task in cfg.tasks:
        m = candidate["tasks"].get(task.name) or {}
        n = int(m.get("n") or 0)
        if g.min_eval_rows:
            rules.append({"name": f"min_eval_rows[{task.name}]", "passed": n >= g.min_eval_rows,
                          "observed": n, "limit": g.min_eval_rows, "task": task.name,
                          "line": f"{task.name}: {n} labelled eval texts >= min_eval_rows "
                                  f"{g.min_eval_rows}"})
        if g.min_eval_positives:
            per_class = m.get("per_class") or {}
            counts = {c: int((per_class.get(c) or {}).get("support", 0)) for c in task.labels}
            fewest = min(counts, key=lambda c: (counts[c], task.labels.index(c)))
            below = [f"{c} {k}" for c, k in counts.items() if k < g.min_eval_positives]
            rules.append({
                "name": f"min_eval_positives[{task.name}]",
                "passed": not below, "observed": counts[fewest],
                "limit": g.min_eval_positives, "task": task.name, "class": fewest,
                "per_class": counts,
                "line": f"{task.name}: eval texts of every class >= min_eval_positives "
                        f"{g.min_eval_positives} (fewest: {fewest} {counts[fewest]}"
                        + (f"; below it: {', '.join(below)}" if below else "") + ")"})
    return rules


def task_rules(cfg, candidate: dict, baseline: dict | None, classical: dict | None) -> list:
    """The text family's own gate rules, per task: evidence (`evidence_rules`), the
    config's macro-F1 floor and largest drop against the published model, beating the
    classical baseline, and not being confidently worse than the published model.

    `beats_classical_baseline[task]` on the paired interval in
    `candidate["macro_f1_delta"]["classical"]` (`paired_intervals`): it passes only if the
    point estimate of candidate - classical macro-F1 is >= -margin AND the interval is not
    wholly below -margin. The stricter of the two honest readings, on purpose: the
    bundled margin (0.02) was set as about one interval half-width on the point estimate,
    so "fail only when the whole interval is below -margin" would count the noise twice
    and bless a fine-tune worse than a bag of n-grams with 95 % confidence. Without an
    interval, the point estimate alone (`test: point`). `observed` is the difference,
    `limit` -margin, `baseline` the classical macro-F1, `delta_low`/`delta_high` the
    interval (the report's interval column).

    `not_worse_macro_f1[task]` (with `gate.refuse_confidently_worse` and a published
    model): fails when the paired interval of candidate - published macro-F1 lies wholly
    below 0, whatever `max_macro_f1_drop` allows.
    """
    eps = 1e-9
    g = cfg.gate
    rules = evidence_rules(cfg, candidate)

    def add(name, observed, limit, line, **extra):
        rules.append({"name": name, "passed": observed >= limit - eps, "observed": observed,
                      "limit": limit, "line": line, **extra})

    def interval_fields(d: dict) -> dict:
        return {"test": "paired_interval", "level": d.get("level", 0.95),
                "rows": d.get("rows"), "delta": d["estimate"], "delta_low": d["low"],
                "delta_high": d["high"]}

    def where(d: dict) -> str:
        pct = f"{d.get('level', 0.95):.0%}"
        return (f"paired {pct} interval [{d['low']:+.4f}, {d['high']:+.4f}] on "
                f"{d.get('rows')} eval texts ({d.get('n_resamples')} bootstrap resamples)")

    for task in cfg.tasks:
        f1 = candidate["tasks"][task.name].get("macro_f1")
        if f1 is None:
            continue
        if task.min_macro_f1 is not None:
            add(f"min_macro_f1[{task.name}]", f1, task.min_macro_f1,
                f"{task.name} macro-F1 {f1:.4f} >= min_macro_f1 {task.min_macro_f1:.4f}")
        base = ((baseline or {}).get("tasks") or {}).get(task.name, {}).get("macro_f1")
        if task.max_macro_f1_drop is not None and base is not None:
            floor = base - task.max_macro_f1_drop
            add(f"max_macro_f1_drop[{task.name}]", f1, floor,
                f"{task.name} macro-F1 {f1:.4f} >= published {base:.4f} - max_macro_f1_drop "
                f"{task.max_macro_f1_drop:.4f} (= {floor:.4f})",
                baseline=base, test="point", delta=f1 - base)
        classic = ((classical or {}).get("tasks") or {}).get(task.name, {}).get("macro_f1")
        if classic is not None:
            margin = g.classical_baseline_margin
            d = _interval_of(candidate, "classical", task.name)
            name = f"beats_classical_baseline[{task.name}]"
            if d is None:
                delta = f1 - classic
                rules.append({
                    "name": name, "passed": delta >= -margin - eps, "observed": delta,
                    "limit": -margin, "baseline": classic, "test": "point",
                    "line": f"{task.name} macro-F1 {f1:.4f} - TF-IDF + logistic regression "
                            f"{classic:.4f} = {delta:+.4f} >= -margin {margin:.4f}"})
            else:
                delta = d["estimate"]
                rules.append({
                    "name": name,
                    "passed": delta >= -margin - eps and d["high"] >= -margin - eps,
                    "observed": delta, "limit": -margin, "baseline": classic,
                    **interval_fields(d),
                    "line": f"{task.name} macro-F1 {f1:.4f} vs TF-IDF + logistic regression "
                            f"{classic:.4f}: difference {delta:+.4f}, {where(d)}; needs the "
                            f"difference >= -margin {margin:.4f} and the interval not "
                            f"wholly below it"})
        if g.refuse_confidently_worse and base is not None:
            d = _interval_of(candidate, "baseline", task.name)
            if d is not None:
                pct = f"{d.get('level', 0.95):.0%}"
                rules.append({
                    "name": f"not_worse_macro_f1[{task.name}]", "passed": d["high"] >= 0,
                    "observed": d["estimate"], "limit": 0.0, "baseline": base,
                    **interval_fields(d),
                    "line": f"{task.name} macro-F1 difference to the published model "
                            f"{d['estimate']:+.4f} (published {base:.4f}), {where(d)}: not "
                            f"wholly below 0 (worse than the published model with {pct} "
                            f"confidence)"})
    return rules


def run(spec: TextEvaluateSpec) -> dict:
    """Score the eval split with candidate (and baseline); decide; write eval.json."""
    from retrain.common.atomic import write_json
    from retrain.common.atomic import read_json
    from components.gate import Thresholds, decide
    from components.text import model as M
    from components.text import task_config as T
    from retrain.common import evaluated
    from retrain.common.registry import verify_model_dir

    if spec.baseline_model_dir:   # the published model: its files as published, or refused
        verify_model_dir(spec.baseline_model_dir)
    judged = evaluated.judged(spec.candidate_model_dir)   # push publishes only this model
    cfg = T.from_resolved(read_json(Path(spec.preprocess_dir) / T.CONFIG_FILE))
    cfg, evidence_notes = _with_run_overrides(cfg, spec)
    tasks = cfg.task_labels
    rows = read_eval_rows(spec.preprocess_dir, tasks, spec.max_eval_examples, spec.eval_offset)
    if not rows["text"]:
        raise ValueError(f"no eval rows in {spec.preprocess_dir}")
    labels = M.read_labels(spec.candidate_model_dir)
    if labels.get("tasks") != tasks:
        raise ValueError(f"candidate labels {labels.get('tasks')} differ from the data's {tasks}")
    _, cand_sig = M.load_serving(spec.candidate_model_dir)
    cand_probs = M.serve_proba(cand_sig, rows["text"], spec.batch_size)
    candidate = model_metrics(rows, cand_probs, cfg)
    probs = {"candidate": cand_probs}          # every model scored: the report's slices
    intervals = {"n_resamples": spec.bootstrap_resamples, "seed": spec.bootstrap_seed}
    baseline = None
    if spec.baseline_model_dir:
        base_labels = M.read_labels(spec.baseline_model_dir)
        if base_labels.get("tasks") == labels.get("tasks"):
            _, base_sig = M.load_serving(spec.baseline_model_dir)
            base_probs = probs["baseline"] = M.serve_proba(base_sig, rows["text"],
                                                           spec.batch_size)
            baseline = model_metrics(rows, base_probs, cfg)
            candidate.setdefault("macro_f1_delta", {})["baseline"] = paired_intervals(
                rows, cand_probs, base_probs, cfg, **intervals)
        else:
            log.warning("baseline %s has other labels (%s): decided without it",
                        spec.baseline_model_dir, base_labels.get("tasks"))
    g = cfg.gate
    beat_classical = g.beat_classical_baseline if spec.beat_classical_baseline is None \
        else spec.beat_classical_baseline
    classical = None
    if beat_classical or spec.classical_report:
        classical, classical_probs = classical_baseline(spec, cfg, rows)
        probs["classical_baseline"] = classical_probs
        candidate.setdefault("macro_f1_delta", {})["classical"] = paired_intervals(
            rows, cand_probs, classical_probs, cfg, **intervals)
    thresholds = Thresholds(min_auc=g.min_auc if spec.min_auc is None else spec.min_auc,
                            max_auc_drop=g.max_auc_drop,
                            max_log_loss_increase=g.max_log_loss_increase,
                            max_slice_auc_drop=g.max_task_auc_drop,
                            min_slice_rows=g.min_task_rows, min_slice_positives=0,
                            refuse_confidently_worse=g.refuse_confidently_worse)
    labelled = ", ".join(f"{t} {m.get('n', 0)}" for t, m in candidate["tasks"].items())
    notes = [f"judged on {len(rows['text'])} eval texts (labelled per task: {labelled})",
             *evidence_notes]
    if not beat_classical:
        notes.append(
            "classical-baseline rule switched off for this run ("
            + ("param beat_classical_baseline" if spec.beat_classical_baseline is False
               else "config gate.beat_classical_baseline") + ")")
    decision = decide(candidate, baseline, thresholds, spec.force_reason,
                      extra_rules=task_rules(cfg, candidate, baseline,
                                             classical if beat_classical else None),
                      notes=notes)
    # The evidence minimums were applied per task (evidence_rules), not by the shared
    # gate's row-count rule: record them as applied, never the shared rule's unused 0.
    decision.thresholds.update(min_eval_rows=g.min_eval_rows,
                               min_eval_positives=g.min_eval_positives,
                               evidence_applied_per="task")

    out_dir = Path(spec.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = min(spec.sample_rows, len(rows["text"]))
    sample = write_json(out_dir / SCORES_SAMPLE_FILE, {
        "model_dir": spec.candidate_model_dir, "texts": rows["text"][:n],
        "example_ids": rows["example_id"][:n],
        "probs": {t: cand_probs[t][:n].tolist() for t in tasks}})
    report = {"preprocess_dir": spec.preprocess_dir, "rows": len(rows["text"]),
              "candidate_model_dir": spec.candidate_model_dir,
              "baseline_model_dir": spec.baseline_model_dir, "labels": labels["tasks"],
              "candidate": candidate, "baseline": baseline, "classical_baseline": classical,
              "decision": decision.to_dict(),
              "scores_sample": str(sample), **_window_of(spec.preprocess_dir),
              **report_details(rows, probs, cfg, **intervals)}
    out = write_json(out_dir / EVAL_FILE, report)
    for reason in decision.reasons:
        log.info("gate: %s", reason)
    for t, m in candidate["tasks"].items():
        classic = ((classical or {}).get("tasks") or {}).get(t, {}).get("macro_f1")
        log.info("%s: accuracy %.4f macro-F1 %.4f (majority class %.4f / %.4f; TF-IDF + "
                 "logistic regression %s) auc %s", t, m.get("accuracy", float("nan")),
                 m.get("macro_f1", float("nan")), m.get("majority_accuracy", float("nan")),
                 m.get("majority_macro_f1", float("nan")),
                 "n/a" if classic is None else f"{classic:.4f}", m.get("auc"))
    report_uri, report_error = _write_report(report, out_dir)

    def headline(m):
        if m is None:
            return None
        return {"auc": m["auc"], "log_loss": m["log_loss"],
                **{f"{t}_{k}": tm.get(k) for t, tm in m["tasks"].items()
                   for k in ("accuracy", "macro_f1")}}

    return {"eval_uri": str(out), "blessed": decision.blessed, "reasons": decision.reasons,
            "failed_rules": decision.failed_rules, "candidate": headline(candidate),
            "baseline": headline(baseline), "classical_baseline": headline(classical),
            "rows": len(rows["text"]),
            "scores_sample_uri": str(sample), "report_uri": report_uri,
            "report_error": report_error,
            **evaluated.sealed(spec.candidate_model_dir, judged, out)}


def _window_of(preprocess_dir: str) -> dict:
    """The span and window days the eval texts come from (the preprocessing summary), for
    the report's title; nothing when the folder has no summary."""
    from components.text.formats import SUMMARY_FILE
    from retrain.common.atomic import read_json

    path = Path(preprocess_dir) / SUMMARY_FILE
    if not path.is_file():
        return {}
    summary = read_json(path)
    return {k: summary[k] for k in ("span", "window") if k in summary}


def _write_report(report: dict, out_dir: Path):
    """report.html for people (`components.report.write_or_log`: never fails the step)."""
    from components import report as R
    from components.text.report import render
    return R.write_or_log(lambda: render(report), out_dir / R.REPORT_FILE)


def _with_run_overrides(cfg, spec: TextEvaluateSpec):
    """The config with this run's evidence minimums (params min_eval_rows /
    min_eval_positives), and a note for each one that differs from the config's, so the
    registry entry says the run was judged on other minimums."""
    overrides, notes = {}, []
    for key in ("min_eval_rows", "min_eval_positives"):
        value = getattr(spec, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be an integer >= 0, got {value!r}")
        if value != getattr(cfg.gate, key):
            overrides[key] = value
            notes.append(f"{key} {value} for this run (param {key}; config gate.{key} "
                         f"{getattr(cfg.gate, key)})")
    if not overrides:
        return cfg, notes
    return dataclasses.replace(cfg, gate=dataclasses.replace(cfg.gate, **overrides)), notes


if __name__ == "__main__":
    sys.exit(main(TextEvaluateSpec, run))
