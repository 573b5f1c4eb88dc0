"""The text family's HTML evaluation report, rendered from what the text evaluation really
computes (its pure functions on synthetic probabilities, through a JSON round trip): per
task metrics with intervals, candidate vs published vs TF-IDF, the confusion matrix,
calibration, slices by text length and by day, every gate rule; labels from the user's
config escaped; nothing from the network. And the evaluation step writes the page (or
logs why not) without a model: serving is replaced by fixed probabilities."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from components.gate import Thresholds, decide
from components.text import report
from components.text import task_config as T
from components.text.evaluate import (model_metrics, paired_intervals, report_details,
                                      task_rules)

EVIL = "<script>alert(1)</script>"
MOOD = [EVIL, "ok & fine"]                 # binary task, labels straight from a user's file
TOPICS = ["Bottoms", "Dresses", "Trend"]
DAYS = ["2026-11-03", "2026-11-04", "2026-11-05"]
N = 600


def _cfg() -> T.TextConfig:
    return T.from_dict({"example_id": "id", "text": "t",
                        "tasks": {"mood": {"labels": MOOD}, "topic": {"labels": TOPICS}},
                        "gate": {"min_eval_rows": 100, "min_eval_positives": 5}})


def _probs(rng, y: np.ndarray, k: int, skill: float) -> np.ndarray:
    logits = rng.normal(size=(y.size, k))
    logits[np.arange(y.size), np.maximum(y, 0)] += skill
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def _rows(rng) -> dict:
    lengths = rng.integers(2, 60, N)
    topic = rng.integers(0, 3, N)
    topic[:40] = T.UNLABELLED                  # labelled for one task only
    return {"text": [" ".join(["word"] * int(n)) for n in lengths],
            "example_id": [f"id{i}" for i in range(N)],
            "span": [DAYS[i % 3] for i in range(N)],
            "mood": rng.integers(0, 2, N), "topic": topic}


def build_evaluation(with_days: bool = True, with_others: bool = True) -> dict:
    """eval.json as `components.text.evaluate.run` assembles it, from the same functions."""
    rng = np.random.default_rng(0)
    cfg, rows = _cfg(), _rows(rng)
    if not with_days:
        del rows["span"]
    skills = {"candidate": 2.5, "baseline": 2.0, "classical_baseline": 1.2}
    probs = {m: {t.name: _probs(rng, rows[t.name], len(t.labels), s) for t in cfg.tasks}
             for m, s in skills.items() if with_others or m == "candidate"}
    metrics = {m: model_metrics(rows, p, cfg) for m, p in probs.items()}
    cand, base = metrics["candidate"], metrics.get("baseline")
    classical = metrics.get("classical_baseline")
    if with_others:
        cand["macro_f1_delta"] = {
            "baseline": paired_intervals(rows, probs["candidate"], probs["baseline"], cfg,
                                         n_resamples=200),
            "classical": paired_intervals(rows, probs["candidate"],
                                          probs["classical_baseline"], cfg, n_resamples=200)}
        classical.update(model="TF-IDF word + char n-grams, logistic regression",
                         train_rows=2400, max_train_examples=None,
                         finetune_max_train_examples=500, seconds=1.3)
    g = cfg.gate
    decision = decide(cand, base, Thresholds(min_auc=0.5, max_slice_auc_drop=g.max_task_auc_drop,
                                             min_slice_rows=g.min_task_rows,
                                             min_slice_positives=0),
                      extra_rules=task_rules(cfg, cand, base, classical),
                      notes=[f"judged on {N} eval texts"])
    ev = {"preprocess_dir": "/runs/text/pre", "rows": N, "candidate_model_dir": "/m/cand",
          "baseline_model_dir": "/registry/text/3" if with_others else None,
          "labels": cfg.task_labels, "candidate": cand, "baseline": base,
          "classical_baseline": classical, "decision": decision.to_dict(),
          "scores_sample": "/x", "span": DAYS[-1], "window": DAYS,
          **report_details(rows, probs, cfg, n_resamples=200)}
    return json.loads(json.dumps(ev))          # what the report reads back from eval.json


@pytest.fixture(scope="module")
def evaluation() -> dict:
    return build_evaluation()


@pytest.fixture(scope="module")
def page(evaluation) -> str:
    return report.render(evaluation)


def test_report_details_hold_intervals_calibration_and_slices(evaluation):
    for model in ("candidate", "baseline", "classical_baseline"):
        for task in ("mood", "topic"):
            m = evaluation[model]["tasks"][task]
            ci = evaluation["intervals"][model][task]
            assert ci["accuracy"]["estimate"] == pytest.approx(m["accuracy"])
            assert ci["macro_f1"]["estimate"] == pytest.approx(m["macro_f1"])
            for key in ("accuracy", "macro_f1"):
                assert ci[key]["low"] <= ci[key]["estimate"] <= ci[key]["high"]
                assert ci[key]["rows"] == m["n"]
            curve = evaluation["curves"]["reliability"][model][task]
            assert sum(curve["count"]) == m["n"] and 0 <= curve["ece"] < 0.5
            per = evaluation["slices"][model][task]
            # Every labelled row in exactly one bucket of each slice.
            for name in ("text length", "day"):
                assert sum(v["n"] for v in per[name].values()) == m["n"], name
            assert list(per["day"]) == DAYS
    assert evaluation["slices"]["names"] == ["text length", "day"]
    buckets = list(evaluation["slices"]["candidate"]["topic"]["text length"])
    firsts = [int(b.split("-")[0].split()[0]) for b in buckets]
    assert len(buckets) == 4 and firsts == sorted(firsts), buckets


def test_page_shows_every_task_with_its_numbers(evaluation, page):
    assert page.startswith("<!DOCTYPE html>")
    assert "Published model" in page and "TF-IDF + logistic regression" in page
    for task, labels in (("mood", MOOD), ("topic", TOPICS)):
        assert f'<h2 id="task-{task}">' in page
        for model in ("candidate", "baseline", "classical_baseline"):
            m = evaluation[model]["tasks"][task]
            ci = evaluation["intervals"][model][task]["macro_f1"]
            assert (f'{m["macro_f1"]:.4f} <span class="ci">[{ci["low"]:.4f}, '
                    f'{ci["high"]:.4f}]</span>') in page
            assert f'{m["accuracy"]:.4f}' in page and f'{m["auc"]:.4f}' in page
            # The confusion matrix: its counts, row by row, label names escaped.
            for i, row in enumerate(m["confusion_matrix"]):
                cells = "".join(f'<td class="{"diag" if i == j else ""}">{v:,}</td>'
                                for j, v in enumerate(row))
                assert f"<tr><th>{report.R.e(labels[i])}</th>{cells}</tr>" in page
        paired = evaluation["candidate"]["macro_f1_delta"]["classical"][task]
        assert f'{paired["estimate"]:+.4f} <span class="ci">[{paired["low"]:+.4f}' in page
        assert f'alt="Calibration plot of task {task}' in page
    # One calibration plot per task; slices by text length and by day.
    assert page.count('src="data:image/png;base64,') == 2
    for value in [*DAYS, *evaluation["slices"]["candidate"]["topic"]["text length"]]:
        assert f"<td>{value}</td>" in page, value
    assert "no by-day slices" not in page


def test_page_has_the_verdict_and_every_gate_rule(evaluation, page):
    d = evaluation["decision"]
    assert ("NOT BLESSED" if not d["blessed"] else "BLESSED") in page
    for rule in d["rules"]:
        assert f'<code>{report.R.e(rule["name"])}</code>' in page, rule["name"]
    for reason in d["reasons"]:
        assert report.R.e(reason) in page, reason
    assert "beats_classical_baseline[topic]" in page and "min_eval_rows[mood]" in page
    assert "fitted on 2,400 training texts" in page


def test_labels_from_config_are_escaped_and_nothing_is_remote(page):
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "ok &amp; fine" in page
    # Self-contained: every src/href is inline data or a link within the page.
    for target in re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page):
        assert target.startswith(("data:image/png;base64,", "#")), target[:40]
    assert "url(" not in page and "@import" not in page


def test_page_without_published_model_classical_baseline_or_days():
    ev = build_evaluation(with_days=False, with_others=False)
    text = report.render(ev, history=[])
    assert "no published model" in text and "Not fitted for this run" in text
    assert "no by-day slices" in text and "No published versions" in text
    assert text.count('src="data:image/png;base64,') == 2


def test_evaluate_step_writes_the_page_and_survives_a_failing_one(tmp_path, monkeypatch):
    """`run` end to end on real shards, serving replaced by fixed probabilities: eval.json
    holds the report's details, report.html sits next to it; a page that cannot be drawn
    leaves the evaluation (and eval.json) intact and says why in the result."""
    import tensorflow as tf

    from beam_jobs.preprocess_text import to_examples
    from components.text import evaluate as E
    from components.text import model as M
    from components.text.formats import EVAL_DIR, SUMMARY_FILE, TRAIN_DIR
    from retrain.common.atomic import write_json

    cfg, rng = _cfg(), np.random.default_rng(1)
    words = [["jeans", "pants", "skirt"], ["dress", "gown", "frock"], ["trendy", "bold", "new"]]
    for split, n in ((TRAIN_DIR, 150), (EVAL_DIR, 240)):
        (tmp_path / split).mkdir()
        opts = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(str(tmp_path / split / "part-0.tfrecord.gz"), opts) as w:
            for i in range(n):
                c = i % 3
                text = " ".join(rng.choice(words[c], 1 + i % 7))
                w.write(to_examples([{"example_id": f"{split}{i}", "text": text,
                                      "span": DAYS[i % 3], "topic": c, "mood": i % 2}],
                                    ("mood", "topic"))[0])
    write_json(tmp_path / T.CONFIG_FILE, T.resolved(cfg))
    write_json(tmp_path / SUMMARY_FILE, {"span": DAYS[-1], "window": DAYS})

    def serve(_sig, texts, _batch=64):
        topic = np.array([next(k for k, ws in enumerate(words) if t.split()[0] in ws)
                          for t in texts])
        return {"mood": _probs(rng, np.zeros(len(texts), int), 2, 0.0),
                "topic": _probs(rng, topic, 3, 3.0)}

    monkeypatch.setattr(M, "read_labels", lambda _d: {"tasks": cfg.task_labels})
    monkeypatch.setattr(M, "load_serving", lambda _d: (None, None))
    monkeypatch.setattr(M, "serve_proba", serve)
    cand = tmp_path / "cand"     # a stand-in export: serving is replaced above; its files
    cand.mkdir()                 # are digested for push like a real one's
    (cand / "saved_model.pb").write_bytes(b"")
    spec = E.TextEvaluateSpec(preprocess_dir=str(tmp_path), candidate_model_dir=str(cand),
                              out_dir=str(tmp_path / "out"), bootstrap_resamples=100)
    result = E.run(spec)
    assert result["report_uri"] == str(tmp_path / "out" / "report.html")
    assert result["report_error"] is None
    saved = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert saved["span"] == DAYS[-1] and saved["slices"]["names"][0] == "text length"
    assert set(saved["intervals"]) == {"candidate", "classical_baseline"}
    text = (tmp_path / "out" / "report.html").read_text()
    assert f"span {DAYS[-1]}" in text and "&lt;script&gt;" in text and "<script" not in text
    cm = saved["candidate"]["tasks"]["topic"]["confusion_matrix"]
    assert f'<td class="diag">{cm[2][2]:,}</td>' in text
    # A page that cannot be drawn: logged, reported, the evaluation stands.
    import components.text.report as text_report

    def broken(_evaluation):
        raise RuntimeError("matplotlib is gone")
    monkeypatch.setattr(text_report, "render", broken)
    spec.out_dir = str(tmp_path / "again")
    again = E.run(spec)
    assert again["report_uri"] is None and again["report_error"] == (
        "RuntimeError: matplotlib is gone")
    assert (tmp_path / "again" / "eval.json").is_file()
    assert not (tmp_path / "again" / "report.html").exists()
    assert again["blessed"] == result["blessed"]
    # The records carry their day and the parsing spec reads it: slices by day.
    assert "day" in saved["slices"]["names"] and "no by-day slices" not in text
    assert all(day in text for day in DAYS)
    plain = M.features
    monkeypatch.setattr(M, "features", lambda tasks: {
        **plain(tasks), "span": tf.io.FixedLenFeature([], tf.string, default_value=b"")})
    rows = E.read_eval_rows(str(tmp_path), cfg.task_labels)
    assert rows["span"][:4] == [DAYS[0], DAYS[1], DAYS[2], DAYS[0]]
