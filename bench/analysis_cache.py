"""What the tf.Transform analysis cache saves on a daily run: the same window preprocessed
with a warm cache (yesterday's run filled it) and without one, in one bench run.

Generates `--window + 1` days, then runs `beam_jobs.preprocess_ctr` three times, each in
its own process: yesterday's window with a fresh cache dir (fills it), today's window with
that cache, today's window with no cache. Prints wall and CPU seconds and the rows each
run read for analysis; writes bench/results/analysis_cache.json.

    .venv/bin/python bench/analysis_cache.py --rows-per-day 200000 --window 3
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START = dt.date(2026, 11, 1)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def preprocess(raw: Path, span: dt.date, window: int, out: Path, cache: Path | None) -> dict:
    cmd = [sys.executable, "-m", "beam_jobs.preprocess_ctr", "--raw-root", str(raw),
           "--span", span.isoformat(), "--window-days", str(window), "--output-dir", str(out),
           *(["--analysis-cache-dir", str(cache)] if cache else [])]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if proc.returncode:
        raise RuntimeError(f"preprocess failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    sources = summary["analysis"]["datasets"].values()
    return {"span": span.isoformat(), "cache": bool(cache), "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu, 1), "rows_in": summary["rows_in"],
            "rows_analysed": summary["analysis"]["rows_analysed"],
            "day_parts_computed": sum(s == "computed" for s in sources),
            "day_parts_from_cache": sum(s == "cache" for s in sources),
            "stage_seconds": summary["stage_seconds"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows-per-day", type=int, default=200_000)
    p.add_argument("--window", type=int, default=3, help="days analysed and trained on")
    p.add_argument("--data-dir", help="keep generated data here and reuse it (default: temp)")
    args = p.parse_args()
    if args.window < 2:
        p.error("--window must be at least 2 (a cache needs days shared by two windows)")
    sys.path.insert(0, str(REPO))
    from components.ctr.generate import GenerateSpec, run as generate

    work = Path(args.data_dir or tempfile.mkdtemp(prefix="bench-cache-"))
    try:
        generate(GenerateSpec(out_root=str(work), start=START.isoformat(), days=args.window + 1,
                              rows_per_day=args.rows_per_day))
        raw, cache = work / "raw" / "ctr", work / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        today = START + dt.timedelta(days=args.window)
        runs = {
            "yesterday_fills_cache": preprocess(raw, today - dt.timedelta(days=1), args.window,
                                                work / "out-y", cache),
            "today_warm_cache": preprocess(raw, today, args.window, work / "out-w", cache),
            "today_no_cache": preprocess(raw, today, args.window, work / "out-c", None),
        }
    finally:
        if not args.data_dir:
            shutil.rmtree(work, ignore_errors=True)
    for name, r in runs.items():
        print(f"  {name:22} {r['rows_in']:>10,} rows in  {r['rows_analysed']:>10,} analysed  "
              f"{r['seconds']:>7.1f} s  cpu {r['cpu_seconds']:>7.1f} s  parts computed "
              f"{r['day_parts_computed']}, from cache {r['day_parts_from_cache']}; "
              f"read for analysis {r['stage_seconds']['read_for_analysis']:.1f} s")
    warm, cold = runs["today_warm_cache"], runs["today_no_cache"]
    result = {"command": "bench/analysis_cache.py " + " ".join(sys.argv[1:]), **runs,
              "warm_over_cold_seconds": round(warm["seconds"] / cold["seconds"], 2),
              "warm_over_cold_cpu": round(warm["cpu_seconds"] / cold["cpu_seconds"], 2),
              "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    (REPO / "bench" / "results").mkdir(exist_ok=True)
    (REPO / "bench" / "results" / "analysis_cache.json").write_text(
        json.dumps(result, indent=2) + "\n")
    print(f"warm cache / no cache: {result['warm_over_cold_seconds']}x wall, "
          f"{result['warm_over_cold_cpu']}x CPU; written to bench/results/analysis_cache.json")


if __name__ == "__main__":
    main()
