"""Enough evidence, honest verdicts, for the text family (issue 28, point 4; rule 21).

The gate does not bless below the config's minimum labelled eval texts per task and per
class (params override them per run); the classical-baseline rule and the "not worse
than the published model" rule are decided on paired bootstrap intervals of macro-F1
differences; the TF-IDF baseline fits on every training text, whatever the fine-tune's
`max_train_examples` says. Real metrics, real rules, the real baseline on real shards.
"""
from __future__ import annotations

import numpy as np
import pytest

from components import metrics as MX
from retrain.common.errors import ConfigError
from components.gate import Thresholds, decide
from components.text import stages
from components.text import task_config as T
from components.text.evaluate import (TextEvaluateSpec, _with_run_overrides, model_metrics,
                                      paired_intervals, task_rules)
from retrain.common.run_context import RunContext

TOPICS = ["Bottoms", "Dresses", "Trend"]


def _cfg(**gate) -> T.TextConfig:
    return T.from_dict({"example_id": "id", "text": "t",
                        "tasks": {"topic": {"labels": TOPICS}}, "gate": gate})


def _onehot(pred: np.ndarray, k: int) -> np.ndarray:
    p = np.full((pred.size, k), 0.05 / (k - 1))
    p[np.arange(pred.size), pred] = 0.95
    return p


def _rows(counts: list[int]) -> dict:
    return {"topic": np.repeat(np.arange(len(counts)), counts)}


def _decide(cfg, candidate, baseline=None, classical=None):
    return decide(candidate, baseline, Thresholds(min_auc=0.0, max_slice_auc_drop=None),
                  extra_rules=task_rules(cfg, candidate, baseline, classical))


# ------------------------------------------------------------------ evidence

def test_gate_defaults_a_real_daily_feed_passes_and_their_keys_are_checked():
    g = T.default().gate
    assert (g.min_eval_rows, g.min_eval_positives, g.refuse_confidently_worse) == (200, 5, True)
    cfg = _cfg(min_eval_rows=50, min_eval_positives=2, refuse_confidently_worse=False)
    assert (cfg.gate.min_eval_rows, cfg.gate.min_eval_positives) == (50, 2)
    with pytest.raises(ConfigError, match=r"gate\.min_eval_positives: must be an integer >= 0"):
        _cfg(min_eval_positives=-1)
    with pytest.raises(ConfigError, match=r"gate\.refuse_confidently_worse: must be true or"):
        _cfg(refuse_confidently_worse="yes")


def test_a_class_below_the_minimum_is_not_blessed_and_the_reason_names_it():
    """300 labelled texts, a good model, but only 3 texts of the rare class: not blessed,
    and the reason says topic, Trend, 3 vs 5."""
    cfg = _cfg()
    rows = _rows([150, 147, 3])
    cand = model_metrics(rows, {"topic": _onehot(rows["topic"], 3)}, cfg)
    d = _decide(cfg, cand)
    assert not d.blessed and d.failed_rules == ["min_eval_positives[topic]"]
    rule = next(r for r in d.rules if r["name"] == "min_eval_positives[topic]")
    assert rule["observed"] == 3 and rule["limit"] == 5 and rule["class"] == "Trend"
    assert rule["per_class"] == {"Bottoms": 150, "Dresses": 147, "Trend": 3}
    (line,) = [r for r in d.reasons if r.startswith("topic: eval texts of every class")]
    assert "min_eval_positives 5" in line and "below it: Trend 3" in line
    assert line.endswith(": fail")
    # Enough of every class: the same model is blessed.
    rows = _rows([150, 145, 5])
    assert _decide(cfg, model_metrics(rows, {"topic": _onehot(rows["topic"], 3)}, cfg)).blessed


def test_too_few_labelled_rows_per_task_fail_and_a_run_param_overrides_the_config():
    rows = _rows([60, 60, 30])                      # 150 < the default 200
    probs = {"topic": _onehot(rows["topic"], 3)}
    cfg = _cfg()
    d = _decide(cfg, model_metrics(rows, probs, cfg))
    assert d.failed_rules == ["min_eval_rows[topic]"]
    assert "topic: 150 labelled eval texts >= min_eval_rows 200: fail" in d.reasons
    # The param of the same name (None: the config's) lowers it for one run, said so.
    run_cfg, notes = _with_run_overrides(cfg, TextEvaluateSpec(
        preprocess_dir="p", candidate_model_dir="c", out_dir="o", min_eval_rows=100))
    assert run_cfg.gate.min_eval_rows == 100 and run_cfg.gate.min_eval_positives == 5
    assert notes == ["min_eval_rows 100 for this run (param min_eval_rows; config "
                     "gate.min_eval_rows 200)"]
    assert _decide(run_cfg, model_metrics(rows, probs, run_cfg)).blessed
    same, no_notes = _with_run_overrides(cfg, TextEvaluateSpec("p", "c", "o"))
    assert same is cfg and no_notes == []


def test_a_task_with_no_labelled_eval_text_fails_the_evidence_rules():
    cfg = T.from_dict({"example_id": "id", "text": "t", "tasks": {
        "topic": {"labels": TOPICS}, "urgent": {"labels": ["no", "yes"]}}})
    rows = {**_rows([100, 100, 20]), "urgent": np.full(220, -1)}
    probs = {"topic": _onehot(rows["topic"], 3), "urgent": _onehot(np.zeros(220, int), 2)}
    d = _decide(cfg, model_metrics(rows, probs, cfg))
    assert d.failed_rules == ["min_eval_rows[urgent]", "min_eval_positives[urgent]"]
    assert "urgent: 0 labelled eval texts >= min_eval_rows 200: fail" in d.reasons


def test_the_text_params_reach_the_evaluate_spec():
    params = {"dev_examples": 0, "min_eval_rows": 50, "min_eval_positives": 1,
              "max_train_examples": 10, "classical_max_train_examples": 30}
    spec = stages.evaluate(RunContext.create("text", "2026-12-01", "/h", "r"), params, {
        "preprocess": {"output_dir": "/p", "rows_eval": 400}, "train": {"model_dir": "/m"},
        "published": None})
    assert TextEvaluateSpec(**spec).min_eval_rows == 50
    assert (spec["min_eval_positives"], spec["max_train_examples"],
            spec["classical_max_train_examples"]) == (1, 10, 30)


# ------------------------------------------------------------------ paired intervals

def _flip(y: np.ndarray, pred: np.ndarray, k: int, to_wrong: int, to_right: int,
          seed: int) -> np.ndarray:
    """`pred` with `to_wrong` of its right rows made wrong and `to_right` wrong ones right."""
    rng = np.random.default_rng(seed)
    out = pred.copy()
    spoil = rng.choice(np.flatnonzero(pred == y), to_wrong, replace=False)
    out[spoil] = (y[spoil] + rng.integers(1, k, spoil.size)) % k
    mend = rng.choice(np.flatnonzero(pred != y), to_right, replace=False)
    out[mend] = y[mend]
    return out


def _classical_setup():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, 400)
    classical = np.where(rng.random(400) < 0.7, y, rng.integers(0, 3, 400))
    return {"topic": y}, classical


def _rule(cfg, rows, cand_pred, other_pred, against="classical"):
    cand = model_metrics(rows, {"topic": _onehot(cand_pred, 3)}, cfg)
    other = model_metrics(rows, {"topic": _onehot(other_pred, 3)}, cfg)
    cand["macro_f1_delta"] = {against: paired_intervals(
        rows, {"topic": _onehot(cand_pred, 3)}, {"topic": _onehot(other_pred, 3)}, cfg)}
    args = (other, None) if against == "baseline" else (None, other)
    rules = {r["name"]: r for r in task_rules(cfg, cand, *args)}
    return rules, cand, other


def test_paired_macro_f1_interval_is_the_row_bootstrap_of_both_models_together():
    rows, classical = _classical_setup()
    y = rows["topic"]
    cand = _flip(y, classical, 3, 30, 40, seed=1)
    ci = MX.paired_macro_f1_interval(y, cand, classical, 3, n_resamples=2000, seed=0)
    assert ci["a"]["estimate"] == pytest.approx(MX.macro_f1(y, cand, 3))
    assert ci["delta"]["estimate"] == pytest.approx(MX.macro_f1(y, cand, 3)
                                                    - MX.macro_f1(y, classical, 3))
    assert ci == MX.paired_macro_f1_interval(y, cand, classical, 3, n_resamples=2000)  # seed
    # Resampling rows (slowly, by index) gives the same spread.
    rng = np.random.default_rng(1)
    idx = rng.integers(0, y.size, (2000, y.size))
    brute = [MX.macro_f1(y[i], cand[i], 3) - MX.macro_f1(y[i], classical[i], 3) for i in idx]
    assert ci["delta"]["std"] == pytest.approx(np.std(brute), rel=0.1)
    # Pairing: far tighter than the two models' own intervals side by side.
    assert ci["delta"]["high"] - ci["delta"]["low"] < 0.6 * (
        (ci["a"]["high"] - ci["a"]["low"]) + (ci["b"]["high"] - ci["b"]["low"]))


def test_classical_rule_passes_on_a_level_candidate_and_records_its_interval():
    rows, classical = _classical_setup()
    cand = _flip(rows["topic"], classical, 3, 20, 22, seed=2)   # about level
    cfg = _cfg(classical_baseline_margin=0.02)
    rules, cm, other = _rule(cfg, rows, cand, classical)
    r = rules["beats_classical_baseline[topic]"]
    assert r["passed"] is True and r["test"] == "paired_interval"
    assert r["observed"] == pytest.approx(cm["tasks"]["topic"]["macro_f1"]
                                          - other["tasks"]["topic"]["macro_f1"])
    assert r["limit"] == -0.02 and r["baseline"] == other["tasks"]["topic"]["macro_f1"]
    assert r["delta_low"] < r["observed"] < r["delta_high"] and r["rows"] == 400
    assert "TF-IDF" in r["line"] and "paired 95% interval" in r["line"]


def test_classical_rule_fails_when_the_interval_is_wholly_below_minus_margin():
    rows, classical = _classical_setup()
    cand = _flip(rows["topic"], classical, 3, 90, 5, seed=3)    # much worse
    rules, _, _ = _rule(_cfg(classical_baseline_margin=0.02), rows, cand, classical)
    r = rules["beats_classical_baseline[topic]"]
    assert r["delta_high"] < -0.02 and r["passed"] is False


def test_classical_rule_fails_a_point_estimate_below_minus_margin_even_inside_the_noise():
    """The stricter reading: the interval reaches above -margin, but the point estimate is
    below it; the config's margin is the noise allowance already, so this fails."""
    rows, classical = _classical_setup()
    cand = _flip(rows["topic"], classical, 3, 36, 22, seed=4)
    rules, _, _ = _rule(_cfg(classical_baseline_margin=0.02), rows, cand, classical)
    r = rules["beats_classical_baseline[topic]"]
    assert r["observed"] < -0.02 < r["delta_high"], r
    assert r["passed"] is False


def test_a_candidate_confidently_worse_than_the_published_model_is_refused():
    """max_macro_f1_drop 0.2 would let it through; its paired interval lies wholly below 0,
    so it is not blessed (config gate.refuse_confidently_worse, on by default)."""
    rows, published = _classical_setup()
    worse = _flip(rows["topic"], published, 3, 60, 10, seed=5)
    cfg = T.from_dict({"example_id": "id", "text": "t", "tasks": {
        "topic": {"labels": TOPICS, "max_macro_f1_drop": 0.2}}})
    rules, cand, base = _rule(cfg, rows, worse, published, against="baseline")
    assert rules["max_macro_f1_drop[topic]"]["passed"] is True
    r = rules["not_worse_macro_f1[topic]"]
    assert r["delta_high"] < 0 and r["passed"] is False and r["limit"] == 0.0
    d = decide(cand, base, Thresholds(min_auc=0.0, max_auc_drop=1.0, max_log_loss_increase=9.0,
                                      max_slice_auc_drop=None),
               extra_rules=list(rules.values()))
    assert not d.blessed and d.failed_rules == ["not_worse_macro_f1[topic]"]
    # The same predictions as the published model are not worse; switched off, no rule.
    same, _, _ = _rule(cfg, rows, published, published, against="baseline")
    assert same["not_worse_macro_f1[topic]"]["passed"] is True
    off = T.from_dict({"example_id": "id", "text": "t", "gate": {
        "refuse_confidently_worse": False}, "tasks": {"topic": {"labels": TOPICS}}})
    assert "not_worse_macro_f1[topic]" not in _rule(off, rows, worse, published,
                                                    against="baseline")[0]


# ------------------------------------------------------------------ the baseline's rows

def test_the_classical_baseline_fits_on_all_training_texts(tmp_path):
    """max_train_examples caps the fine-tune, not the baseline: it fits on all 60 training
    texts; only classical_max_train_examples caps it."""
    import tensorflow as tf

    from beam_jobs.preprocess_text import to_examples
    from retrain.common.atomic import write_json
    from components.text.evaluate import classical_baseline, read_eval_rows
    from components.text.formats import EVAL_DIR, TRAIN_DIR

    cfg = _cfg()
    words = [["jeans", "pants", "skirt"], ["dress", "gown", "frock"], ["trendy", "bold", "new"]]
    rng = np.random.default_rng(0)

    def write(split: str, n: int) -> None:
        (tmp_path / split).mkdir()
        opts = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(str(tmp_path / split / "part-0.tfrecord.gz"), opts) as w:
            for i in range(n):
                c = i % 3
                text = " ".join([*rng.choice(words[c], 2), *rng.choice(["a", "the", "it"], 3)])
                w.write(to_examples([{"example_id": f"{split}{i}", "text": text,
                                      "span": "2026-11-01", "topic": c}], ("topic",))[0])

    write(TRAIN_DIR, 60)
    write(EVAL_DIR, 30)
    write_json(tmp_path / T.CONFIG_FILE, T.resolved(cfg))
    rows = read_eval_rows(str(tmp_path), cfg.task_labels)
    spec = TextEvaluateSpec(preprocess_dir=str(tmp_path), candidate_model_dir="unused",
                            out_dir=str(tmp_path / "out"), max_train_examples=10)
    metrics, probs = classical_baseline(spec, cfg, rows)
    assert metrics["train_rows"] == 60 and metrics["finetune_max_train_examples"] == 10
    assert probs["topic"].shape == (30, 3) and metrics["tasks"]["topic"]["macro_f1"] > 0.9
    spec.classical_max_train_examples = 25
    assert classical_baseline(spec, cfg, rows)[0]["train_rows"] == 25
