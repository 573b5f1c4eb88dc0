"""A backfill of N days through a real Airflow (scheduler, API server, LocalExecutor),
one day at a time against several days at once, in the same run.

What a user does from the dialog: generated click logs, the CTR DAG with its default
params, `POST /api/v2/backfills` (what the dialog sends) for N logical dates, once with
`max_active_runs` 1 (the serial baseline) and once with more. Each mode gets a fresh
artifact home (the same raw logs copied in, so nothing is reused between modes) and a
fresh Airflow home. Prints and writes per mode: wall time from the request to the last
run's end, each run's duration and state, the most tasks running at once, and what every
day kept (its own evaluation, push skipped as a shadow run, nothing published).

    .venv/bin/python bench/backfill.py --days 10 --max-active-runs 1,3

Outside data instead of the generator: `--raw-root` copies a user's partitions (e.g. the
MovieLens log of bench/outside_data/README.md) and `--feature-config` names their config,
sent as the backfill's run conf.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DAG_ID = "ctr_daily_retrain"


def when(stamp: str | None) -> float | None:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at any instant."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def backfill(af, first: dt.date, days: int, max_active_runs: int, timeout: float,
             conf: dict) -> dict:
    """Request the backfill, follow it to the end, and read back every run and task."""
    af.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    started = time.time()
    last = first + dt.timedelta(days=days - 1)
    request = {"dag_id": DAG_ID, "from_date": f"{first}T00:00:00Z",
               "to_date": f"{last}T00:00:00Z", "max_active_runs": max_active_runs,
               "reprocess_behavior": "none", "dag_run_conf": conf}
    for attempt in range(10):
        try:
            created = af.call("POST", "/api/v2/backfills", request)
            break
        except RuntimeError as e:   # SQLite: "Database is locked" while the scheduler writes
            if ": 503 " not in str(e) or attempt == 9:
                raise
            time.sleep(3)
    backfill_id = created["id"]
    runs: list[dict] = []
    while time.time() - started < timeout:
        time.sleep(10)
        listed = af.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
        runs = [r for r in listed if r.get("run_type") == "backfill"]
        done = [r for r in runs if r["state"] in ("success", "failed")]
        print(f"  {time.time() - started:6.0f} s: {len(done)}/{days} runs finished", flush=True)
        if len(runs) == days and len(done) == days:
            break
    else:
        raise RuntimeError(f"backfill {backfill_id} did not finish in {timeout:.0f} s")
    ended = max(when(r["end_date"]) for r in runs)
    tasks, per_run = [], []
    for r in sorted(runs, key=lambda r: r["logical_date"]):
        tis = af.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{r['dag_run_id']}"
                             "/taskInstances")["task_instances"]
        tasks += [(when(t["start_date"]), when(t["end_date"])) for t in tis
                  if t.get("start_date") and t.get("end_date")]
        per_run.append({"run_id": r["dag_run_id"], "logical_date": r["logical_date"][:10],
                        "state": r["state"],
                        "seconds": round(when(r["end_date"]) - when(r["start_date"]), 1),
                        "tasks": {t["task_id"]: t["state"] for t in tis},
                        "task_seconds": {t["task_id"]: t.get("duration") and round(t["duration"], 1)
                                         for t in tis}})
    return {"backfill_id": backfill_id, "max_active_runs": max_active_runs,
            "wall_seconds": round(ended - started, 1), "runs": per_run,
            "most_tasks_at_once": most_at_once(tasks),
            "load_average_after": list(os.getloadavg())}


def kept(home: Path, result: dict) -> dict:
    """What each day kept: its own evaluation folder, and nothing in the registry."""
    runs_root = home / "runs" / "ctr"
    evaluated = sorted(p.parent.parent.name.removeprefix("dt=")
                       for p in runs_root.glob("dt=*/backfill__*/evaluation"))
    registry = home / "registry" / "ctr"
    versions = [p.name for p in registry.iterdir() if p.name.isdigit()] if registry.is_dir() else []
    return {"days_with_own_evaluation": evaluated, "published_versions": versions,
            "push_skipped": sum(r["tasks"].get("push") == "skipped" for r in result["runs"])}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=10, help="logical dates to backfill")
    p.add_argument("--rows-per-day", type=int, default=50_000,
                   help="generated impressions per day (the demo's default)")
    p.add_argument("--first", default="2026-11-04",
                   help="first logical date (it trains on the day before)")
    p.add_argument("--max-active-runs", default="1,3",
                   help="comma-separated modes; the first is the baseline")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per backfill")
    p.add_argument("--raw-root", help="copy these dt= partitions instead of generating logs")
    p.add_argument("--feature-config", help="their feature config (sent as run conf)")
    p.add_argument("--window-days", type=int, default=3, help="run conf window_days")
    p.add_argument("--out", default=str(RESULTS / "backfill.json"))
    args = p.parse_args(argv)

    from retrain.orchestration.local_airflow import LocalAirflow

    modes = [int(m) for m in args.max_active_runs.split(",")]
    first = dt.date.fromisoformat(args.first)
    window = args.window_days
    start = first - dt.timedelta(days=window)
    work = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    raw = Path(args.raw_root) if args.raw_root else work / "generated" / "raw" / "ctr"
    if not args.raw_root:
        subprocess.run([sys.executable, "-m", "retrain.cli", "generate", "--out-root",
                        str(work / "generated"), "--start", start.isoformat(),
                        "--days", str(args.days + window - 1),
                        "--rows-per-day", str(args.rows_per_day)], check=True,
                       stdout=subprocess.DEVNULL)
    conf = {"window_days": window}
    if args.feature_config:
        conf["feature_config"] = str(Path(args.feature_config).resolve())
    results = []
    for n in modes:
        home = work / f"home-mar{n}"
        shutil.copytree(raw, home / "raw" / "ctr")
        env = {"AIRFLOW_HOME": str(work / f"airflow-mar{n}"),
               "RETRAIN_CONFIG_ROOTS": str(Path(args.feature_config).resolve().parent)
               if args.feature_config else "",
               # the scheduled run for the latest day waits for a span that never comes:
               # keep its sensor quiet so it does not load the machine
               "RETRAIN_SPAN_POKE_SECONDS": "3600",
               "RETRAIN_MAX_ACTIVE_RUNS": str(max(modes))}
        os.environ["AIRFLOW_HOME"] = env["AIRFLOW_HOME"]
        print(f"==> backfill of {args.days} days, max_active_runs {n}", flush=True)
        with LocalAirflow(home, DAG_ID, work, schedule="@daily", env=env) as af:
            result = backfill(af, first, args.days, n, args.timeout, conf)
        result["kept"] = kept(home, result)
        results.append(result)
        states = [r["state"] for r in result["runs"]]
        print(f"    {result['wall_seconds']:.0f} s wall, runs {min(r['seconds'] for r in result['runs'])}"
              f"-{max(r['seconds'] for r in result['runs'])} s, states {set(states)}, "
              f"at most {result['most_tasks_at_once']} task(s) at once, kept {result['kept']}",
              flush=True)
    base = results[0]["wall_seconds"]
    for r in results:
        r["vs_baseline"] = round(r["wall_seconds"] / base, 3)
    out = {"benchmark": "backfill", "dag_id": DAG_ID, "days": args.days,
           "data": args.raw_root or f"generated, {args.rows_per_day} rows a day",
           "run_conf": conf, "first_logical_date": args.first,
           "modes": results,
           "machine": {"cpus": os.cpu_count(), "load_average_end": list(os.getloadavg())},
           "command": "python bench/backfill.py " + " ".join(argv or sys.argv[1:]),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for r in results:
        print(f"max_active_runs {r['max_active_runs']}: {r['wall_seconds']:.0f} s "
              f"({r['vs_baseline']:.2f}x of max_active_runs {modes[0]})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
