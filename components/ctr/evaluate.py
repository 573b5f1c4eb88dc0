"""Evaluate a candidate CTR model against the published one, then apply the gate.

Both models score the same raw eval rows of the span (through their own serving
signatures); the click probabilities that generated the labels give the Bayes-optimal
AUC and log loss on those rows, the ceiling any model can reach. Writes `eval.json`
atomically into `out_dir`; the blessing is `components.gate.decide`.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from components.common.step import main

log = logging.getLogger(__name__)

EVAL_FILE = "eval.json"


@dataclasses.dataclass
class EvaluateSpec:
    span_dir: str
    candidate_model_dir: str
    out_dir: str
    baseline_model_dir: str | None = None
    eval_percent: int = 20
    min_auc: float = 0.6
    max_auc_drop: float = 0.002
    max_log_loss_increase: float = 0.002
    force_reason: str | None = None


def run(spec: EvaluateSpec) -> dict:
    """Score candidate and baseline on the same rows; decide whether to bless."""
    from components import gate
    from components.common.atomic import write_json
    from components.ctr import features as F
    from components.ctr import rawdata
    from components.metrics import binary_metrics

    rows = rawdata.read_eval_rows(spec.span_dir, spec.eval_percent)
    if rows.num_rows == 0:
        raise ValueError(f"no eval rows in {spec.span_dir} at eval_percent={spec.eval_percent}")
    labels = rows.column(F.LABEL_KEY).to_numpy()
    raw = rawdata.to_raw_features(rows)
    candidate = binary_metrics(labels, rawdata.predict(spec.candidate_model_dir, raw))
    baseline = None
    if spec.baseline_model_dir:
        baseline = binary_metrics(labels, rawdata.predict(spec.baseline_model_dir, raw))
    try:
        bayes = binary_metrics(labels, rawdata.true_probabilities(
            spec.span_dir, rows.column(F.EXAMPLE_ID_KEY)))
    except FileNotFoundError:
        bayes = None  # real logs carry no true probability
    thresholds = gate.Thresholds(min_auc=spec.min_auc, max_auc_drop=spec.max_auc_drop,
                                 max_log_loss_increase=spec.max_log_loss_increase)
    decision = gate.decide(candidate, baseline, thresholds, force_reason=spec.force_reason)
    report = {
        "span_dir": spec.span_dir,
        "rows": rows.num_rows,
        "candidate": candidate,
        "baseline": baseline,
        "bayes_optimal": bayes,
        "candidate_model_dir": spec.candidate_model_dir,
        "baseline_model_dir": spec.baseline_model_dir,
        "thresholds": dataclasses.asdict(thresholds),
        "decision": decision.to_dict(),
    }
    out = write_json(Path(spec.out_dir) / EVAL_FILE, report)
    for reason in decision.reasons:
        log.info("gate: %s", reason)
    log.info("candidate auc=%.4f log_loss=%.4f; blessed=%s",
             candidate["auc"], candidate["log_loss"], decision.blessed)
    return {"eval_uri": str(out), "blessed": decision.blessed, "reasons": decision.reasons,
            "candidate": {k: candidate[k] for k in ("auc", "log_loss")},
            "baseline": baseline and {k: baseline[k] for k in ("auc", "log_loss")},
            "bayes_optimal": bayes and {k: bayes[k] for k in ("auc", "log_loss")},
            "rows": rows.num_rows}


if __name__ == "__main__":
    sys.exit(main(EvaluateSpec, run))
