"""Evaluate a fine-tuned text model against the published one, through the serving path.

Both models score the same raw eval texts (the preprocessing job's eval split: texts
whose hash never put them in any training split) through their exported `serving_default`
signatures, so what is measured is what would serve. Per task: accuracy, macro-F1, log
loss, AUC (of the positive class for a binary task, macro one-vs-rest otherwise), the
majority-class baseline, and a classical baseline (TF-IDF word + character n-grams and
logistic regression, `components.text.baseline`) fitted on the same training texts and
scored on the same eval texts. A gate rule (on by default, `gate.beat_classical_baseline`)
rejects a candidate whose macro-F1 on any task is below the classical baseline's: a broken
fine-tune or a checkpoint unfit for the language is caught here, not by a user later.

The shared gate (`components.gate.decide`) is fed the mean of the tasks' AUC and log
loss as its headline `auc`/`log_loss`, and each task as a slice (`task=sentiment`,
`task=topic`), so its slice guard rejects a candidate that loses more than
`max_task_auc_drop` AUC on either task even if the average improves.

Writes `<out_dir>/eval.json` (metrics, gate decision) and `scores_sample.json` (texts and
the candidate's probabilities, which the serving check compares in a fresh process).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from components.common.step import main

log = logging.getLogger("retrain.text.evaluate")

EVAL_FILE = "eval.json"
SCORES_SAMPLE_FILE = "scores_sample.json"


@dataclasses.dataclass
class TextEvaluateSpec:
    preprocess_dir: str
    candidate_model_dir: str
    out_dir: str
    baseline_model_dir: str | None = None
    min_auc: float | None = None  # default: the config's gate.min_auc; other limits: config
    beat_classical_baseline: bool | None = None   # default: the config's gate setting
    classical_report: bool = True  # fit the classical baseline for the report even if off
    max_train_examples: int | None = None   # the classical baseline's training slice
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
    from components.text.preprocess import EVAL_DIR

    ds = M.read_records(str(Path(preprocess_dir) / (split or EVAL_DIR) / "*.tfrecord.gz"),
                        tasks)
    if offset:
        ds = ds.skip(offset)
    if limit:
        ds = ds.take(limit)
    names = ["text", "example_id", *tasks]
    cols: dict[str, list] = {k: [] for k in names}
    for ex in ds.as_numpy_iterator():
        for k in cols:
            cols[k].append(ex[k])
    out = {k: np.asarray(cols[k], dtype=np.int64) for k in tasks}
    out["text"] = [t.decode("utf-8") for t in cols["text"]]
    out["example_id"] = [t.decode("utf-8") for t in cols["example_id"]]
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


def classical_baseline(spec, cfg, rows: dict) -> dict:
    """TF-IDF + logistic regression fitted on the same training texts and scored on the
    same eval texts: the figure a fine-tune must beat to be worth serving."""
    import time

    from components.text import baseline as B
    from components.text.preprocess import TRAIN_DIR

    t0 = time.perf_counter()
    tasks = cfg.task_labels
    train = read_eval_rows(spec.preprocess_dir, tasks, spec.max_train_examples, split=TRAIN_DIR)
    probs = B.fit_predict(train["text"], {t: train[t].tolist() for t in tasks}, rows["text"],
                          {t: len(v) for t, v in tasks.items()},
                          class_weight=None if cfg.class_weighting == "none" else "balanced")
    metrics = model_metrics(rows, probs, cfg)
    return {**metrics, "model": B.describe(), "train_rows": len(train["text"]),
            "seconds": round(time.perf_counter() - t0, 1)}


def task_rules(cfg, candidate: dict, baseline: dict | None, classical: dict | None) -> list:
    """The text family's own gate rules, per task: the config's macro-F1 floor and largest
    drop against the published model, and beating the classical baseline."""
    rules = []

    def add(name, observed, limit, line):
        rules.append({"name": name, "passed": observed >= limit - 1e-9, "observed": observed,
                      "limit": limit, "line": line})

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
                f"{task.max_macro_f1_drop:.4f} (= {floor:.4f})")
        classic = ((classical or {}).get("tasks") or {}).get(task.name, {}).get("macro_f1")
        if classic is not None:
            floor = classic - cfg.gate.classical_baseline_margin
            add(f"beats_classical_baseline[{task.name}]", f1, floor,
                f"{task.name} macro-F1 {f1:.4f} >= TF-IDF + logistic regression {classic:.4f}"
                f" - margin {cfg.gate.classical_baseline_margin:.4f}")
    return rules


def run(spec: TextEvaluateSpec) -> dict:
    """Score the eval split with candidate (and baseline); decide; write eval.json."""
    from components.common.atomic import write_json
    from components.common.atomic import read_json
    from components.gate import Thresholds, decide
    from components.text import model as M
    from components.text import task_config as T

    cfg = T.from_resolved(read_json(Path(spec.preprocess_dir) / T.CONFIG_FILE))
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
    baseline = None
    if spec.baseline_model_dir:
        base_labels = M.read_labels(spec.baseline_model_dir)
        if base_labels.get("tasks") == labels.get("tasks"):
            _, base_sig = M.load_serving(spec.baseline_model_dir)
            baseline = model_metrics(rows, M.serve_proba(base_sig, rows["text"],
                                                         spec.batch_size), cfg)
        else:
            log.warning("baseline %s has other labels (%s): decided without it",
                        spec.baseline_model_dir, base_labels.get("tasks"))
    g = cfg.gate
    beat_classical = g.beat_classical_baseline if spec.beat_classical_baseline is None \
        else spec.beat_classical_baseline
    classical = classical_baseline(spec, cfg, rows) if beat_classical or spec.classical_report \
        else None
    thresholds = Thresholds(min_auc=g.min_auc if spec.min_auc is None else spec.min_auc,
                            max_auc_drop=g.max_auc_drop,
                            max_log_loss_increase=g.max_log_loss_increase,
                            max_slice_auc_drop=g.max_task_auc_drop,
                            min_slice_rows=g.min_task_rows, min_slice_positives=0)
    notes = [] if beat_classical else [
        "classical-baseline rule switched off for this run ("
        + ("param beat_classical_baseline" if spec.beat_classical_baseline is False
           else "config gate.beat_classical_baseline") + ")"]
    decision = decide(candidate, baseline, thresholds, spec.force_reason,
                      extra_rules=task_rules(cfg, candidate, baseline,
                                             classical if beat_classical else None),
                      notes=notes)

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
              "scores_sample": str(sample)}
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
            "scores_sample_uri": str(sample), "report_uri": None}


if __name__ == "__main__":
    sys.exit(main(TextEvaluateSpec, run))
