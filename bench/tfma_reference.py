"""TensorFlow Model Analysis as a reference for the evaluation job's numbers, on the same rows.

The evaluation job (`beam_jobs/evaluate_ctr.py`) computes AUC from score histograms and
log loss from per-row sums; here TFMA computes both on the very rows the job scored, and
scikit-learn gives the exact figures that settle any disagreement:

1. project venv: two CTR SavedModels (trained by the product's trainer, as in
   `bench/evaluate_ctr.py`: candidate seed 1, published "baseline" seed 2) and generated
   days in which every row is held out (eval_percent 100). The job runs on them in its
   own process (1 worker, 200 bootstrap replicates, slices category / device / user_type
   and span: what the DAG runs), measured;
2. project venv, its own process (measured too): the same rows read and scored in memory
   by both models, written with their slice values to one Parquet file
   (label, candidate, baseline, category, device, user_type, span);
3. TFMA venv, its own process (measured): TFMA reads that file (Arrow record batches into
   `tfma.ExtractEvaluateAndWriteResults`, as `tfma.analyze_raw_data` does, batched) and
   computes, for both models without loading them (`ModelSpec.prediction_key` /
   `label_key`), ExampleCount, AUC (`--auc-thresholds` thresholds), BinaryCrossentropy,
   Calibration, MeanLabel and MeanPrediction, overall and per slice;
4. scikit-learn (`roc_auc_score`, `log_loss` on scores clipped to [1e-7, 1 - 1e-7], the
   clipping of our evaluation and of Keras' cross-entropy) on the same file.

TFMA 0.52 pins pandas < 3 (the project has pandas 3), so it lives in a venv of its own,
`.venv-bench-tfma` (git-ignored), used only for step 3:

    python3.11 -m venv .venv-bench-tfma
    .venv-bench-tfma/bin/pip install -r bench/requirements-tfma.txt
    .venv/bin/python bench/tfma_reference.py --rows 1000000

Peak memory is the largest RSS of the measured process and its children together,
sampled from the bench's own process (`preprocess_ctr._TreePeak`); CPU seconds are the
process tree's (rusage), as other jobs may share the cores. The job's time includes
scoring both models and the bootstrap; TFMA's does not (it gets the scores), so step 2's
time is printed beside it. Prints a table and writes bench/results/tfma_reference.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TFMA_PYTHON = REPO / ".venv-bench-tfma" / "bin" / "python"
SLICES = ["category", "device", "user_type"]
SPAN = "span"                 # components.ctr.slices.SPAN_SLICE (a window of several days)
EPS = 1e-7                    # components.metrics.EPS, Keras' epsilon
OVERALL = "overall"
SHOWN = (OVERALL, "device", "user_type", SPAN)     # the printed table's slices (JSON: all)


# ------------------------------------------------------------ step 2 (project venv)

def export_rows(days: list[str], models: dict[str, str], out: str) -> dict:
    """Every held-out row of `days`, scored by each model, with its slice values (the
    job's rules: top-10 categories + other, span vs earlier days) -> Parquet."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from components.ctr import feature_config, rawdata, slices
    cfg = feature_config.for_model_dir(next(iter(models.values())))
    tables = [rawdata.read_eval_rows(d, 100, cfg) for d in days]
    rows = pa.concat_tables(tables)
    columns = {"label": rows.column(cfg.label).to_numpy().astype(np.int64)}
    for name, path in models.items():
        columns[name] = rawdata.predict(path, rawdata.to_raw_features(
            rows, feature_config.for_model_dir(path)))
    for name, values in slices.assign(rows, SLICES, 10).items():
        columns[name] = values.astype(str)
    if len(days) > 1:
        columns[SPAN] = np.concatenate([
            np.full(t.num_rows, slices.THIS_SPAN if i == 0 else slices.EARLIER_DAYS)
            for i, t in enumerate(tables)])
    pq.write_table(pa.table(columns), out)
    return {"rows": rows.num_rows, "output": out,
            "score_dtype": str(columns[next(iter(models))].dtype)}


# ------------------------------------------------------------ step 3 (TFMA venv)

def tfma_metrics(rows_file: str, models: list[str], slice_names: list[str], out_dir: str,
                 auc_thresholds: int, batch_rows: int) -> dict:
    """TFMA's metrics of each model's prediction column, overall and per slice."""
    import apache_beam as beam
    import pyarrow.parquet as pq
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.proto import config_pb2   # tfma.EvalConfig & co. before 0.47
    from tfx_bsl.arrow import table_util

    shutil.rmtree(out_dir, ignore_errors=True)      # a rerun's results only
    metrics = [config_pb2.MetricConfig(class_name="ExampleCount"),
               config_pb2.MetricConfig(class_name="AUC",
                                       config=json.dumps({"num_thresholds": auc_thresholds})),
               config_pb2.MetricConfig(class_name="BinaryCrossentropy"),
               config_pb2.MetricConfig(class_name="Calibration"),
               config_pb2.MetricConfig(class_name="MeanLabel"),
               config_pb2.MetricConfig(class_name="MeanPrediction")]
    eval_config = config_pb2.EvalConfig(
        model_specs=[config_pb2.ModelSpec(name=m, prediction_key=m, label_key="label")
                     for m in models],
        metrics_specs=[config_pb2.MetricsSpec(metrics=metrics, model_names=models)],
        slicing_specs=[config_pb2.SlicingSpec(),
                       *(config_pb2.SlicingSpec(feature_keys=[s]) for s in slice_names)])
    table = pq.read_table(rows_file, columns=["label", *models, *slice_names])
    batches = [table_util.CanonicalizeRecordBatch(b)
               for b in table.to_batches(max_chunksize=batch_rows)]
    del table
    started = time.time()
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | "Batches" >> beam.Create(batches)
             | "TFMA" >> tfma.ExtractEvaluateAndWriteResults(eval_config=eval_config,
                                                             output_path=out_dir))
    result: dict = {"tfma_version": tfma.__version__,
                    "pipeline_seconds": round(time.time() - started, 2),
                    "auc_thresholds": auc_thresholds, "models": {}}
    for model in models:
        per_slice = {}
        evaluated = tfma.load_eval_result(out_dir, model_name=model)
        for slice_key, by_output in evaluated.slicing_metrics:
            values = by_output[""][""]
            name = OVERALL if not slice_key else ",".join(f"{k}={v}" for k, v in slice_key)
            per_slice[name] = {k: v.get("doubleValue") for k, v in values.items()}
        result["models"][model] = per_slice
    return result


# ------------------------------------------------------------ the bench (project venv)

def _key(slice_name: str, value: str) -> str:
    return OVERALL if slice_name == OVERALL else f"{slice_name}={value}"


def ours(state: str, models: list[str], slice_names: list[str]) -> dict:
    """{model: {slice key: {n, auc, log_loss, calibration}}} from the job's output."""
    from components.binned_metrics import EvalAccumulator
    acc = EvalAccumulator.load(state)
    pick = ("n", "positives", "auc", "log_loss", "calibration")
    out: dict = {}
    for model in models:
        out[model] = {OVERALL: {k: acc.binary_metrics(model)[k] for k in pick}}
        for slice_name, values in acc.slice_metrics(model, slice_names).items():
            for value, m in values.items():
                out[model][_key(slice_name, value)] = {k: m[k] for k in pick}
    return out


def exact(rows_file: str, models: list[str], slice_names: list[str]) -> dict:
    """scikit-learn's AUC and log loss on the exported rows, per model and slice."""
    import numpy as np
    import pyarrow.parquet as pq
    from sklearn.metrics import log_loss, roc_auc_score
    table = pq.read_table(rows_file)
    y = table.column("label").to_numpy()
    groups = {OVERALL: np.ones(len(y), dtype=bool)}
    for s in slice_names:
        col = table.column(s).to_numpy(zero_copy_only=False).astype(str)
        for value in np.unique(col):
            groups[_key(s, value)] = col == value
    out: dict = {}
    for model in models:
        p = np.clip(table.column(model).to_numpy().astype(np.float64), EPS, 1 - EPS)
        out[model] = {}
        for key, mask in groups.items():
            yk, pk = y[mask], p[mask]
            two = 0 < yk.sum() < len(yk)
            out[model][key] = {"n": int(mask.sum()),
                               "auc": float(roc_auc_score(yk, pk)) if two else None,
                               "log_loss": float(log_loss(yk, pk, labels=[0, 1]))}
    return out


def compare(job: dict, tfma: dict, sk: dict) -> list[dict]:
    rows = []
    for model, per_slice in job.items():
        for key, j in per_slice.items():
            t, s = tfma[model].get(key), sk[model].get(key)
            if t is None or s is None:
                raise RuntimeError(f"slice {key!r} of {model}: job has it, "
                                   f"TFMA {t is not None}, sklearn {s is not None}")
            if not (j["n"] == s["n"] == round(t["example_count"])):
                raise RuntimeError(f"{model} {key}: rows differ: job {j['n']}, TFMA "
                                   f"{t['example_count']}, exported {s['n']}")
            row = {"model": model, "slice": key, "rows": j["n"]}
            for metric, tname in (("auc", "auc"), ("log_loss", "binary_crossentropy")):
                a, b, c = j[metric], t.get(tname), s[metric]
                row[metric] = {"ours": a, "tfma": b, "sklearn": c,
                               "ours_minus_tfma": None if None in (a, b) else a - b,
                               "ours_minus_sklearn": None if None in (a, c) else a - c,
                               "tfma_minus_sklearn": None if None in (b, c) else b - c}
            row["calibration"] = {"ours": j["calibration"], "tfma": t.get("calibration")}
            rows.append(row)
    return rows


def _max_abs(rows: list[dict], metric: str, diff: str) -> dict:
    worst = max((r for r in rows if r[metric][diff] is not None),
                key=lambda r: abs(r[metric][diff]))
    return {"value": abs(worst[metric][diff]), "model": worst["model"], "slice": worst["slice"]}


def _with_cpu(fn, *args) -> dict:
    """fn(*args) (a measured subprocess, waited for) with the CPU seconds its process tree
    used: wall time alone says little when other jobs share the two cores."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = fn(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {**out, "cpu_seconds": round(after.ru_utime + after.ru_stime
                                        - before.ru_utime - before.ru_stime, 1)}


def _fmt(x, digits=5) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_table(rows: list[dict]) -> None:
    print(f"{'model':<10} {'slice':<22} {'rows':>9}  {'AUC ours':>8} {'TFMA':>8} {'sklearn':>8} "
          f"{'|o-T|':>8} {'|o-sk|':>8}  {'LL ours':>8} {'TFMA':>8} {'sklearn':>8} {'|o-T|':>8} "
          f"{'|o-sk|':>8}")
    for r in rows:
        if r["slice"].split("=")[0] not in SHOWN:
            continue
        a, ll = r["auc"], r["log_loss"]
        cells = [_fmt(a["ours"]), _fmt(a["tfma"]), _fmt(a["sklearn"]),
                 _fmt(a["ours_minus_tfma"] and abs(a["ours_minus_tfma"]), 6),
                 _fmt(a["ours_minus_sklearn"] and abs(a["ours_minus_sklearn"]), 6)]
        cells_ll = [_fmt(ll["ours"]), _fmt(ll["tfma"]), _fmt(ll["sklearn"]),
                    _fmt(abs(ll["ours_minus_tfma"]), 6), _fmt(abs(ll["ours_minus_sklearn"]), 6)]
        print(f"{r['model']:<10} {r['slice']:<22} {r['rows']:>9,}  "
              + " ".join(f"{c:>8}" for c in cells) + "  " + " ".join(f"{c:>8}" for c in cells_ll))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="held-out rows scored")
    p.add_argument("--rows-per-day", type=int, default=500_000,
                   help="rows of each generated day (one part file each)")
    p.add_argument("--auc-thresholds", type=int, default=10_000,
                   help="TFMA AUC's num_thresholds (its default: 10,000)")
    p.add_argument("--tfma-batch-rows", type=int, default=65_536,
                   help="rows per Arrow record batch fed to TFMA")
    p.add_argument("--tfma-python", default=str(TFMA_PYTHON),
                   help="the TFMA venv's python (bench/requirements-tfma.txt)")
    p.add_argument("--data-dir", default="/tmp/retrain-tfma-bench",
                   help="where the data and models are generated (kept for reruns)")
    p.add_argument("--out", default=str(RESULTS / "tfma_reference.json"))
    a = p.parse_args(argv)
    if not Path(a.tfma_python).is_file():
        sys.exit(f"no TFMA venv at {a.tfma_python}: see this file's docstring")
    sys.path.insert(0, str(Path(__file__).parent))
    from evaluate_ctr import _measure, _models, _scored_days, job

    data = Path(a.data_dir)
    models = _models(data)
    names = list(models)
    days = _scored_days(data, a.rows, a.rows_per_day)
    slice_names = SLICES + ([SPAN] if len(days) > 1 else [])
    rows_file = str(data / f"rows-{a.rows}.parquet")
    load = {"before": os.getloadavg()[0]}
    result: dict = {"command": "bench/tfma_reference.py " + " ".join(argv or sys.argv[1:]),
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "rows": a.rows, "days": len(days), "models": names,
                    "slices": slice_names, "runs": {}}

    print("1. the evaluation job (1 worker) ...", flush=True)
    r = _with_cpu(job, days, models, 1, data / f"state-{a.rows}.npz")
    result["runs"]["beam_job"] = {**r, "what": "read raw rows, score both models, fold "
                                  "histograms + 200 bootstrap replicates + slices"}
    print("2. export: the same rows scored in memory ...", flush=True)
    m = _with_cpu(_measure, [sys.executable, str(Path(__file__)), "export",
                             "--days", json.dumps(days), "--models", json.dumps(models),
                             "--out", rows_file])
    result["runs"]["export"] = {"seconds": m["seconds"], "cpu_seconds": m["cpu_seconds"],
                                "peak_mb": m["peak_mb"],
                                **m["result"], "what": "read raw rows, score both models, "
                                "write label + scores + slice values (Parquet)"}
    print("3. TFMA on the exported rows ...", flush=True)
    m = _with_cpu(_measure, [a.tfma_python, str(Path(__file__)), "tfma",
                             "--rows-file", rows_file, "--models", json.dumps(names),
                             "--slices", json.dumps(slice_names),
                             "--out-dir", str(data / f"tfma-{a.rows}"),
                             "--auc-thresholds", str(a.auc_thresholds),
                             "--batch-rows", str(a.tfma_batch_rows)])
    tfma = m["result"]
    result["runs"]["tfma"] = {"seconds": m["seconds"], "cpu_seconds": m["cpu_seconds"],
                              "peak_mb": m["peak_mb"],
                              "pipeline_seconds": tfma["pipeline_seconds"],
                              "tfma_version": tfma["tfma_version"],
                              "auc_thresholds": tfma["auc_thresholds"],
                              "what": "read label + scores + slices, compute metrics"}
    load["after"] = os.getloadavg()[0]
    result["load_average_1min"] = load

    print("4. scikit-learn on the exported rows ...", flush=True)
    rows = compare(ours(str(data / f"state-{a.rows}.npz"), names, slice_names),
                   tfma["models"], exact(rows_file, names, slice_names))
    result["comparison"] = rows
    result["max_abs_difference"] = {
        metric: {d: _max_abs(rows, metric, d)
                 for d in ("ours_minus_tfma", "ours_minus_sklearn", "tfma_minus_sklearn")}
        for metric in ("auc", "log_loss")}
    print()
    print_table(rows)
    print()
    for kind in ("beam_job", "export", "tfma"):
        run = result["runs"][kind]
        print(f"  {kind:<9} {run['seconds']:>8.1f} s  CPU {run['cpu_seconds']:>8.1f} s  "
              f"{a.rows / run['seconds']:>8,.0f} rows/s  peak {run['peak_mb']:>8,.0f} MB  "
              f"({run['what']})")
    print(json.dumps(result["max_abs_difference"]))
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def _step(argv: list[str]) -> None:
    """The subcommands the bench runs in their own processes (last stdout line: JSON)."""
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="step", required=True)
    e = sub.add_parser("export")
    e.add_argument("--days", required=True)
    e.add_argument("--models", required=True)
    e.add_argument("--out", required=True)
    t = sub.add_parser("tfma")
    t.add_argument("--rows-file", required=True)
    t.add_argument("--models", required=True)
    t.add_argument("--slices", required=True)
    t.add_argument("--out-dir", required=True)
    t.add_argument("--auc-thresholds", type=int, required=True)
    t.add_argument("--batch-rows", type=int, required=True)
    a = p.parse_args(argv)
    if a.step == "export":
        sys.path.insert(0, str(REPO))
        out = export_rows(json.loads(a.days), json.loads(a.models), a.out)
    else:
        out = tfma_metrics(a.rows_file, json.loads(a.models), json.loads(a.slices), a.out_dir,
                           a.auc_thresholds, a.batch_rows)
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("export", "tfma"):
        _step(sys.argv[1:])
    else:
        main()
