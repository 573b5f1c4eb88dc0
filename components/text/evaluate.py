"""Evaluate a fine-tuned text model against the published one, through the serving path.

Both models score the same raw eval texts (the preprocessing job's eval split: texts
whose hash never put them in any training split) through their exported `serving_default`
signatures, so what is measured is what would serve. Per task: accuracy, macro-F1, log
loss, macro one-vs-rest AUC, and the majority-class baseline beside them; for sentiment
also positive-vs-negative accuracy (rows labelled negative or positive; the model's
P(positive) vs P(negative)).

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
    min_auc: float = 0.6
    max_auc_drop: float = 0.005
    max_log_loss_increase: float = 0.02
    max_task_auc_drop: float = 0.02
    min_task_rows: int = 20
    force_reason: str | None = None
    max_eval_examples: int | None = None
    eval_offset: int = 0          # skip this many eval rows (those used for early stopping)
    sample_rows: int = 32
    batch_size: int = 64


def read_eval_rows(preprocess_dir: str, limit: int | None = None, offset: int = 0) -> dict:
    """The eval split as numpy columns (texts, ids, label indices, ratings)."""
    import numpy as np

    from components.text import model as M
    from components.text.preprocess import EVAL_DIR

    ds = M.read_records(str(Path(preprocess_dir) / EVAL_DIR / "*.tfrecord.gz"))
    if offset:
        ds = ds.skip(offset)
    if limit:
        ds = ds.take(limit)
    cols: dict[str, list] = {k: [] for k in M.FEATURES}
    for ex in ds.as_numpy_iterator():
        for k in cols:
            cols[k].append(ex[k])
    out = {k: np.asarray(v) for k, v in cols.items()}
    out["text"] = [t.decode("utf-8") for t in cols["text"]]
    out["example_id"] = [t.decode("utf-8") for t in cols["example_id"]]
    return out


def task_metrics(task: str, labels, probs) -> dict:
    """Metrics of one task on its labelled rows (label >= 0)."""
    import numpy as np

    from components import metrics as MX
    from components.text import config as C

    names = C.TASKS[task]
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
    majority = int(np.bincount(y, minlength=len(names)).argmax())
    maj_pred = np.full_like(y, majority)
    out = {"n": int(y.size), "accuracy": cls["accuracy"], "macro_f1": cls["macro_f1"],
           "log_loss": float(-np.mean(np.log(p_true))),
           "auc": float(np.mean(list(aucs.values()))) if aucs else None,
           "auc_per_class": aucs, "per_class": cls["per_class"],
           "confusion_matrix": cls["confusion_matrix"],
           "majority_class": names[majority],
           "majority_accuracy": MX.accuracy(y, maj_pred),
           "majority_macro_f1": MX.macro_f1(y, maj_pred, len(names))}
    if task == C.SENTIMENT:
        neg, pos = names.index("negative"), names.index("positive")
        polar = (y == neg) | (y == pos)
        if polar.any():
            pred_pos = p[polar, pos] > p[polar, neg]
            out["pos_vs_neg_accuracy"] = float(np.mean(pred_pos == (y[polar] == pos)))
            out["pos_vs_neg_n"] = int(polar.sum())
    return out


def model_metrics(rows: dict, probs: dict) -> dict:
    """Per-task metrics plus the gate's headline auc/log_loss and per-task slices."""
    import numpy as np

    from components.text import config as C

    tasks = {t: task_metrics(t, rows[t], probs[t]) for t in C.TASKS}
    scored = [m for m in tasks.values() if m.get("n") and m.get("auc") is not None]
    if not scored:
        raise ValueError("no task has labelled eval rows with two classes: cannot evaluate")
    return {"auc": float(np.mean([m["auc"] for m in scored])),
            "log_loss": float(np.mean([m["log_loss"] for m in scored])),
            "tasks": tasks,
            "slices": {"task": {t: {"n": m["n"], "auc": m.get("auc")}
                                for t, m in tasks.items() if m.get("n")}}}


def run(spec: TextEvaluateSpec) -> dict:
    """Score the eval split with candidate (and baseline); decide; write eval.json."""
    from components.common.atomic import write_json
    from components.gate import Thresholds, decide
    from components.text import config as C
    from components.text import model as M

    rows = read_eval_rows(spec.preprocess_dir, spec.max_eval_examples, spec.eval_offset)
    if not rows["text"]:
        raise ValueError(f"no eval rows in {spec.preprocess_dir}")
    labels = M.read_labels(spec.candidate_model_dir)
    if labels.get("tasks") != {t: list(v) for t, v in C.TASKS.items()}:
        raise ValueError(f"candidate labels {labels.get('tasks')} differ from {dict(C.TASKS)}")
    _, cand_sig = M.load_serving(spec.candidate_model_dir)
    cand_probs = M.serve_proba(cand_sig, rows["text"], spec.batch_size)
    candidate = model_metrics(rows, cand_probs)
    baseline = None
    if spec.baseline_model_dir:
        base_labels = M.read_labels(spec.baseline_model_dir)
        if base_labels.get("tasks") == labels.get("tasks"):
            _, base_sig = M.load_serving(spec.baseline_model_dir)
            baseline = model_metrics(rows, M.serve_proba(base_sig, rows["text"],
                                                         spec.batch_size))
        else:
            log.warning("baseline %s has other labels (%s): decided without it",
                        spec.baseline_model_dir, base_labels.get("tasks"))
    thresholds = Thresholds(min_auc=spec.min_auc, max_auc_drop=spec.max_auc_drop,
                            max_log_loss_increase=spec.max_log_loss_increase,
                            max_slice_auc_drop=spec.max_task_auc_drop,
                            min_slice_rows=spec.min_task_rows, min_slice_positives=0)
    decision = decide(candidate, baseline, thresholds, spec.force_reason)

    out_dir = Path(spec.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = min(spec.sample_rows, len(rows["text"]))
    sample = write_json(out_dir / SCORES_SAMPLE_FILE, {
        "model_dir": spec.candidate_model_dir, "texts": rows["text"][:n],
        "example_ids": rows["example_id"][:n],
        "probs": {t: cand_probs[t][:n].tolist() for t in C.TASKS}})
    report = {"preprocess_dir": spec.preprocess_dir, "rows": len(rows["text"]),
              "candidate_model_dir": spec.candidate_model_dir,
              "baseline_model_dir": spec.baseline_model_dir, "labels": labels["tasks"],
              "candidate": candidate, "baseline": baseline, "decision": decision.to_dict(),
              "scores_sample": str(sample)}
    out = write_json(out_dir / EVAL_FILE, report)
    for reason in decision.reasons:
        log.info("gate: %s", reason)
    for t, m in candidate["tasks"].items():
        log.info("%s: accuracy %.4f macro-F1 %.4f (majority class %.4f / %.4f) auc %s",
                 t, m.get("accuracy", float("nan")), m.get("macro_f1", float("nan")),
                 m.get("majority_accuracy", float("nan")),
                 m.get("majority_macro_f1", float("nan")), m.get("auc"))

    def headline(m):
        if m is None:
            return None
        return {"auc": m["auc"], "log_loss": m["log_loss"],
                **{f"{t}_{k}": tm.get(k) for t, tm in m["tasks"].items()
                   for k in ("accuracy", "macro_f1")}}

    return {"eval_uri": str(out), "blessed": decision.blessed, "reasons": decision.reasons,
            "failed_rules": decision.failed_rules, "candidate": headline(candidate),
            "baseline": headline(baseline), "rows": len(rows["text"]),
            "scores_sample_uri": str(sample), "report_uri": None}


if __name__ == "__main__":
    sys.exit(main(TextEvaluateSpec, run))
