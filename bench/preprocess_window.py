"""Peak memory and wall time of CTR preprocessing as the window grows at fixed rows, and as
the rows grow at a fixed window: the job must stay flat in both. The rows sweep runs at
two windows: one within the analysis cache's reach (one tf.Transform dataset per day part)
and one past it (the window as one dataset), because the two build different pipelines.

Each point is one `beam_jobs.preprocess_ctr` process run the way the DAG runs it (with an
analysis cache dir); its peak RSS is the largest of the process and its children
(`wait4`). The baseline, measured in the same bench run, forces one tf.Transform dataset
per day part (`--max-cached-datasets` huge: the behaviour before the cap), on the windows
it survives. Writes bench/results/preprocess_window.json.

    .venv/bin/python bench/preprocess_window.py --total-rows 1000000 --windows 7,30,90 \\
        --baseline-windows 7 --rows 1000000,5000000,20000000 --rows-windows 3,7
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "preprocess_window.json"
START = dt.date(2026, 1, 1)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def generate(root: Path, days: int, rows_per_day: int) -> Path:
    subprocess.run([sys.executable, "-m", "retrain.cli", "generate", "--out-root", str(root),
                    "--start", START.isoformat(), "--days", str(days),
                    "--rows-per-day", str(rows_per_day)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root / "raw" / "ctr"


def preprocess(raw: Path, window: int, out: Path, cache: Path, per_day: bool,
               timeout_s: int) -> dict:
    """One run in its own process: wall seconds, peak RSS (MB), the summary's figures."""
    span = START + dt.timedelta(days=window - 1)
    cmd = [sys.executable, "-m", "beam_jobs.preprocess_ctr", "--raw-root", str(raw),
           "--span", span.isoformat(), "--window-days", str(window), "--output-dir", str(out),
           "--analysis-cache-dir", str(cache),
           *(["--max-cached-datasets", "100000"] if per_day else [])]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        _, err = proc.communicate()
    seconds = time.perf_counter() - t0
    # The child is reaped by communicate(); its tree's peak comes from RUSAGE_CHILDREN,
    # which only grows, so each point is measured in a fresh bench subprocess (main()).
    import resource
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    point = {"window_days": window, "per_day_datasets": per_day, "seconds": round(seconds, 1),
             "peak_rss_mb": round(peak_mb), "exit": proc.returncode}
    if proc.returncode == 0:
        s = json.loads((out / "summary.json").read_text())
        point.update(rows_in=s["rows_in"], rows_analysed=s["analysis"]["rows_analysed"],
                     datasets=len(s["analysis"]["datasets"]))
    else:
        point["error"] = (err or "").strip().splitlines()[-1:] or ["killed (timeout)"]
    return point


def _point(argv: list[str]) -> None:
    """Child mode: measure one point, print it as JSON (a fresh RUSAGE_CHILDREN)."""
    raw, window, out, cache, per_day, timeout_s = argv
    print(json.dumps(preprocess(Path(raw), int(window), Path(out), Path(cache),
                                per_day == "1", int(timeout_s))))


def measure(raw: Path, window: int, work: Path, per_day: bool, timeout_s: int) -> dict:
    tag = f"w{window}-{'perday' if per_day else 'default'}-{raw.parent.parent.name}"
    out = subprocess.run([sys.executable, __file__, "--point", str(raw), str(window),
                          str(work / f"out-{tag}"), str(work / f"cache-{tag}"),
                          "1" if per_day else "0", str(timeout_s)],
                         capture_output=True, text=True, cwd=REPO, check=True)
    point = json.loads(out.stdout.strip().splitlines()[-1])
    shutil.rmtree(work / f"out-{tag}", ignore_errors=True)
    shutil.rmtree(work / f"cache-{tag}", ignore_errors=True)
    print(f"  {tag:32} {point.get('rows_in', 0):>11,} rows  {point['seconds']:>7.1f} s  "
          f"peak {point['peak_rss_mb']:>6,} MB  datasets {point.get('datasets', '-')}"
          + ("" if point["exit"] == 0 else f"  FAILED: {point['error']}"), flush=True)
    return point


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--point":
        return _point(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--total-rows", type=int, default=36_000,
                   help="rows of every window of the window sweep")
    p.add_argument("--windows", type=_ints, default=[7, 30, 90])
    p.add_argument("--baseline-windows", type=_ints, default=[7, 21],
                   help="windows measured with one dataset per day part (the old layout)")
    p.add_argument("--rows", type=_ints, default=[1_000_000, 5_000_000],
                   help="total rows of the rows sweep (at --rows-window days)")
    p.add_argument("--rows-windows", type=_ints, default=[3, 7],
                   help="windows (days) of the rows sweep; 3: cached per-day analysis, "
                        "7: past the cache's reach, the window as one dataset")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per point")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-window-"))
    started = time.time()
    try:
        sweep, baseline, rows = [], [], {}
        print(f"window sweep at {args.total_rows:,} rows:")
        for window in sorted(set(args.windows) | set(args.baseline_windows)):
            raw = generate(work / f"data-w{window}", window, args.total_rows // window)
            if window in args.windows:
                sweep.append(measure(raw, window, work, False, args.timeout))
            if window in args.baseline_windows:
                baseline.append(measure(raw, window, work, True, args.timeout))
            shutil.rmtree(raw.parent.parent, ignore_errors=True)
        for window in args.rows_windows:
            print(f"rows sweep at {window} days:")
            for total in args.rows:
                raw = generate(work / f"data-r{total}", window, total // window)
                rows.setdefault(str(window), []).append(
                    measure(raw, window, work, False, args.timeout))
                shutil.rmtree(raw.parent.parent, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def ratio(points):
        ok = [q["peak_rss_mb"] for q in points if q["exit"] == 0]
        return round(max(ok) / min(ok), 2) if len(ok) == len(points) and ok else None

    result = {
        "command": "bench/preprocess_window.py " + " ".join(sys.argv[1:]),
        "window_sweep": sweep, "window_sweep_peak_ratio": ratio(sweep),
        "baseline_per_day_datasets": baseline,
        "rows_sweep": rows,
        "rows_sweep_peak_ratio": {w: ratio(points) for w, points in rows.items()},
        "seconds": round(time.time() - started),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    by_window = ", ".join(f"{r}x at {w} days" for w, r in result["rows_sweep_peak_ratio"].items())
    print(f"peak RSS max/min: window sweep {result['window_sweep_peak_ratio']}x, rows sweep "
          f"{by_window}; written to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
