"""Throughput and peak memory of CTR preprocessing: (a) a naive tf.Transform pipeline fed
Python dicts, (b) this project's job (beam_jobs/preprocess_ctr.py), (c) pandas in memory.

All three do the same work (hashing of the ID features, top-k vocabularies of the
categorical ones, NaN-aware log1p + z-score of the numeric ones) on data from the
project's generator, in one run, so the machine's noise hits them alike. Each
measurement runs in its own process.

(a) is very slow, so it runs on a smaller sample (`--naive-rows`); (b) is also measured
on that same sample, so the a/b ratio compares like with like. (b)'s peak memory is
measured for a growing window (1, 2, ... days of `--rows-per-day`); peak memory is the
largest sum of RSS over the measured process and its helpers (the job's shard writers,
the DirectRunner's workers in multi-process mode), sampled every 0.1 s from the bench's
own process. Each side's seconds count from before its own imports (TensorFlow and Beam
for (b), pandas for (c)): what a fresh task process waits; `import_seconds` says how much
of it that was. With `--baseline-root DIR` (a git worktree of an earlier commit) (b) on
the full rows also runs with that checkout's code, in the same run. Prints a table and writes
bench/results/preprocess_ctr.json.

    .venv/bin/python bench/preprocess_ctr.py --rows-per-day 250000 --days 4 --naive-rows 20000
    # the issue's sizes (1M rows/day, 5 days, 1M..5M rows for the memory curve):
    .venv/bin/python bench/preprocess_ctr.py --rows-per-day 1000000 --days 5 --growth-days 1,5
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
START = dt.date(2026, 11, 1)


def _cpu_seconds() -> float:
    """User + system CPU of this process and its children: less noisy than wall time on a
    shared machine."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, 1)


class _TreePeak:
    """Peak RSS of a measured process and all its descendants together, watched from the
    bench's own process (a sampling thread inside the measured one took CPU and the GIL
    from it: 0.8 CPU s in a 15 s run). RSS every 0.1 s; the list of descendants, the
    costly part (a scan of /proc), every 0.5 s: helpers here live for seconds. Not
    ru_maxrss: a helper process (the job's shard writers) counts there with the parent's
    whole image, which it shares for the instant between fork and exec."""

    def __init__(self, pid: int):
        import threading
        import psutil
        self._root, self.peak = psutil.Process(pid), 0
        self._tree = [self._root]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self, rescan: bool) -> int:
        import psutil
        if rescan:
            try:
                self._tree = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:   # the measured process has ended
                pass
        total = 0
        for proc in self._tree:
            try:
                total += proc.memory_info().rss
            except psutil.Error:   # ended since the last scan
                pass
        return total

    def _run(self):
        tick = 0
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self._sample(rescan=tick % 5 == 0))
            tick += 1

    def stop_mb(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak / 2**20, 1)


def _days(n: int) -> list[dt.date]:
    return [START + dt.timedelta(days=i) for i in range(n)]


# ---------------------------------------------------------------- workers (one process each)

def _read_parquet(day_dir: Path, columns: list[str] | None = None):
    """A generated day as one Arrow table, read the plain pyarrow way ((a) and (c) are
    the baselines: no dead-letter checks, just the columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    return pa.concat_tables(pq.read_table(p, columns=columns)
                            for p in sorted(day_dir.glob("part-*.parquet")))


def work_job(raw_root: str, window_days: int, out: str, runner_args: list[str]) -> dict:
    """(b): the project's job, exactly as the DAG runs it."""
    t0 = time.perf_counter()
    try:   # what run() does before importing TensorFlow (absent in an older --baseline-root)
        from retrain.common.tf_keras_env import use_keras2
        use_keras2()
    except ImportError:
        pass
    import tensorflow_transform.beam  # noqa: F401  (run() imports it: counted apart)
    from beam_jobs import preprocess_ctr
    imported = time.perf_counter()
    span = _days(window_days)[-1]
    summary = preprocess_ctr.run(["--raw-root", raw_root, "--span", span.isoformat(),
                                  "--window-days", str(window_days), "--output-dir", out,
                                  *runner_args])
    return {"rows": summary["rows_in"], "seconds": time.perf_counter() - t0,
            "import_seconds": round(imported - t0, 2),
            "stage_seconds": summary.get("stage_seconds"), "code": preprocess_ctr.__file__}


def work_naive(raw_root: str, window_days: int, out: str, runner_args: list[str]) -> dict:
    """(a): the textbook tf.Transform pipeline: rows as Python dicts through beam.Create,
    instance-dict input, per-row encoding and per-record TFRecord writes."""
    import apache_beam as beam
    import numpy as np
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from components.ctr import features as F
    from components.ctr.transform import preprocessing_fn, raw_training_spec

    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    keys = list(raw_training_spec())
    rows = []
    for day in _days(window_days):
        table = _read_parquet(Path(raw_root) / f"dt={day}", columns=keys)
        for r in table.to_pylist():
            rows.append({k: (np.nan if r[k] is None else r[k]) for k in keys})
    metadata = tft.DatasetMetadata.from_feature_spec(raw_training_spec())
    with beam.Pipeline(options=PipelineOptions(runner_args)) as p:
        with tft_beam.Context(temp_dir=tempfile.mkdtemp(dir=out)):
            (transformed, transformed_meta), _ = (
                (p | beam.Create(rows), metadata)
                | tft_beam.AnalyzeAndTransformDataset(preprocessing_fn))
            _ = ((transformed, transformed_meta) | tft_beam.EncodeTransformedDataset()
                 | beam.io.WriteToTFRecord(f"{out}/train/part", file_name_suffix=".tfrecord.gz"))
    assert F.LABEL_KEY in keys
    return {"rows": len(rows), "seconds": time.perf_counter() - t0}


def work_pandas(raw_root: str, window_days: int, out: str, runner_args: list[str]) -> dict:
    """(c): the same transforms in pandas, all rows in memory: the reference ceiling."""
    t0 = time.perf_counter()
    import numpy as np
    import pandas as pd
    import pyarrow.parquet  # noqa: F401  (what _read_parquet needs)
    from components.ctr import features as F
    imported = time.perf_counter()
    df = pd.concat([_read_parquet(Path(raw_root) / f"dt={d}").to_pandas()
                    for d in _days(window_days)])
    res = {}
    for key, buckets in F.HASHED_ID_FEATURES.items():
        res[key] = pd.util.hash_array(df[key].to_numpy(dtype=object)) % buckets
    for key, cfg in F.VOCAB_FEATURES.items():
        vocab = df[key].value_counts().index[: cfg["top_k"]]
        idx = pd.Index(vocab).get_indexer(df[key])
        oov = pd.util.hash_array(df[key].to_numpy(dtype=object)) % cfg["oov_buckets"]
        res[key] = np.where(idx >= 0, idx, cfg["top_k"] + oov)
    for key, size in F.IDENTITY_FEATURES.items():
        res[key] = df[key].clip(0, size - 1).to_numpy()
    for key in F.NUMERIC_FEATURES:
        x = np.log1p(df[key].clip(lower=0))
        res[key] = ((x - x.mean()) / x.std()).fillna(0.0).to_numpy()
        res[F.missing_name(key)] = df[key].isna().to_numpy(dtype=np.float32)
    return {"rows": len(df), "seconds": time.perf_counter() - t0,
            "import_seconds": round(imported - t0, 2)}


WORKERS = {"job": work_job, "naive": work_naive, "pandas": work_pandas}


def measure(kind: str, raw_root: Path, window_days: int, runner_args: str,
            code_root: Path = REPO) -> dict:
    """One worker in its own process, importing the product's code from `code_root`."""
    out = tempfile.mkdtemp(prefix=f"bench-{kind}-")
    try:
        cmd = [sys.executable, __file__, "--worker", kind, "--raw-root", str(raw_root),
               "--window", str(window_days), "--out", f"{out}/o", f"--runner-args={runner_args}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=code_root, env={**os.environ, "PYTHONPATH": str(code_root)})
        tree = _TreePeak(proc.pid)
        stdout, stderr = proc.communicate()
        peak_mb = tree.stop_mb()
        if proc.returncode:
            raise RuntimeError(f"{kind} failed:\n{stderr[-3000:]}")
        result = {**json.loads(stdout.strip().splitlines()[-1]), "peak_mb": peak_mb}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    result["rows_per_second"] = round(result["rows"] / result["seconds"])
    result["seconds"] = round(result["seconds"], 2)
    label = kind if code_root == REPO else "base"
    print(f"  {label:7} {window_days} day(s): {result['rows']:>10,} rows {result['seconds']:>9.1f} s "
          f"{result['rows_per_second']:>10,} rows/s  peak {result['peak_mb']:>8,.0f} MB  "
          f"cpu {result['cpu_seconds_process']:>7.1f} s", flush=True)
    return result


def add_ratios(result: dict) -> dict:
    """Ratios from the measurements: on wall time (what a user waits for) and on CPU
    seconds of the measured process (steadier on a machine shared with other work)."""
    naive, small, job, pandas = (result[k] for k in ("a_naive_dicts", "b_job_same_sample",
                                                     "b_job", "c_pandas"))
    for m in (naive, small, job, pandas, *result["b_job_by_window"].values()):
        m["rows_per_cpu_second"] = round(m["rows"] / max(m["cpu_seconds_process"], 1e-9))
    for unit in ("rows_per_second", "rows_per_cpu_second"):
        result[f"b_over_a_{unit}"] = round(job[unit] / naive[unit], 1)
        result[f"b_over_a_{unit}_same_sample"] = round(small[unit] / naive[unit], 1)
        result[f"c_over_b_{unit}"] = round(pandas[unit] / job[unit], 1)
    return result


def generate(root: Path, days: int, rows_per_day: int) -> Path:
    from components.ctr.generate import GenerateSpec, run
    run(GenerateSpec(out_root=str(root), start=START.isoformat(), days=days,
                     rows_per_day=rows_per_day))
    return root / "raw" / "ctr"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows-per-day", type=int, default=250_000)
    p.add_argument("--days", type=int, default=4, help="days generated; (b) and (c) use all")
    p.add_argument("--growth-days", default="",
                   help="windows (in days) at which (b)'s peak memory is measured, e.g. 1,2,4 "
                        "(default: 1, days/2, days)")
    p.add_argument("--naive-rows", type=int, default=20_000,
                   help="rows of the sample that (a) and (b) both process")
    p.add_argument("--runner-args", default="--runner=DirectRunner")
    p.add_argument("--data-dir", help="keep generated data here and reuse it (default: temp)")
    p.add_argument("--baseline-root", type=Path,
                   help="an earlier checkout (e.g. a git worktree): (b) on the full rows runs "
                        "with its code too, in the same run")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--raw-root", help=argparse.SUPPRESS)
    p.add_argument("--window", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.worker:
        import logging
        logging.disable(logging.WARNING)
        result = WORKERS[args.worker](args.raw_root, args.window, args.out,
                                      args.runner_args.split())
        result["cpu_seconds_process"] = _cpu_seconds()
        print(json.dumps(result), flush=True)
        sys.stderr.flush()
        os._exit(0)   # skip interpreter teardown: TF/Beam threads sometimes segfault there

    from retrain.common.version import git_commit
    growth = sorted({int(x) for x in args.growth_days.split(",") if x} or
                    {1, max(1, args.days // 2), args.days})
    work = Path(args.data_dir or tempfile.mkdtemp(prefix="bench-preprocess-"))
    started = time.perf_counter()
    try:
        big = generate(work / "big", args.days, args.rows_per_day)
        small = generate(work / "small", 1, args.naive_rows)
        print(f"(a) naive tf.Transform vs (b) this job on the same {args.naive_rows:,} rows:")
        naive = measure("naive", small, 1, args.runner_args)
        job_small = measure("job", small, 1, args.runner_args)
        print(f"(b) this job vs (c) pandas on {args.days * args.rows_per_day:,} rows, "
              f"(b)'s peak memory over a growing window:")
        jobs = {d: measure("job", big, d, args.runner_args) for d in growth}
        pandas = measure("pandas", big, args.days, args.runner_args)
        baseline = args.baseline_root and measure("job", big, args.days, args.runner_args,
                                                  args.baseline_root.resolve())
    finally:
        if not args.data_dir:
            shutil.rmtree(work, ignore_errors=True)
    job = jobs.get(args.days) or jobs[max(jobs)]
    result = {
        "command": "bench/preprocess_ctr.py " + " ".join(sys.argv[1:]),
        "runner_args": args.runner_args,
        "feature_shape": "generator: 2 hashed ids, 2 vocab categoricals, 2 identity, 3 numeric",
        "a_naive_dicts": naive,
        "b_job_same_sample": job_small,
        "b_job": job,
        "b_job_peak_mb_by_rows": {str(r["rows"]): r["peak_mb"] for r in jobs.values()},
        "b_job_by_window": {str(d): r for d, r in jobs.items()},
        "c_pandas": pandas,
        "baseline": baseline and {**baseline, "root": str(args.baseline_root),
                                  "commit": git_commit(args.baseline_root)},
        "commit": git_commit(REPO),
        "bench_seconds": round(time.perf_counter() - started),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    add_ratios(result)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "preprocess_ctr.json").write_text(json.dumps(result, indent=2) + "\n")
    for unit in ("rows_per_second", "rows_per_cpu_second"):
        print(f"{unit}: (b)/(a) {result[f'b_over_a_{unit}']}x at {job['rows']:,} vs "
              f"{naive['rows']:,} rows, {result[f'b_over_a_{unit}_same_sample']}x on the same "
              f"sample; (c)/(b) {result[f'c_over_b_{unit}']}x")
    print(f"written to {RESULTS / 'preprocess_ctr.json'}")


if __name__ == "__main__":
    main()
