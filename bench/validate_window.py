"""A long window's first run: its unvalidated older days in one pass against one step each.

Generates DAYS days of click logs (ROWS rows a day, a small world so that day-to-day
drift stays within a low-volume config's bounds), derives that config from the bundled
`generated.yaml` (min_rows 100, drift bounds for 400-row days), then validates the
DAYS-1 older days twice, each into its own history, both as the DAG launches steps
(`python -m ...` with a spec file, a fresh process):

- per day (the path before): `components.ctr.validate` once per day, oldest first;
- one pass: `components.ctr.validate_window` over all of them;
- one pass over a single day: the fixed cost a pass pays whatever its length, so
  (pass over N days - pass over 1 day) / (N - 1) is the cost of each further day.

Both paths must give every day the same gate and failed rules (checked). With `--dag`,
the first run of the `ctr_daily_retrain` DAG over the whole window (`airflow dags test`
in a fresh AIRFLOW_HOME) is timed too: the preprocess task holds the window screen, so
its duration is what a user waits for (read from the task instance in Airflow's DB).

    .venv/bin/python bench/validate_window.py --days 60 --rows-per-day 400 --dag

Prints the figures; writes bench/results/validate_window.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PY = sys.executable
# Drift at 400 rows a day (measured on the generator with 20 categories): device, hour and
# position JS 0.05-0.13 between consecutive days, category_id 0.05-0.1.
LOW_VOLUME = {"thresholds": {"min_rows": 100},
              "drift": {"device": 0.3, "hour": 0.3, "position": 0.3, "category_id": 0.4}}


def low_volume_config(work: Path) -> Path:
    import yaml

    cfg = yaml.safe_load((REPO / "components/ctr/feature_configs/generated.yaml").read_text())
    cfg["name"] = "generated_low_volume"
    cfg["validation"]["thresholds"].update(LOW_VOLUME["thresholds"])
    for feature, bound in LOW_VOLUME["drift"].items():
        cfg["validation"]["drift"][feature]["max"] = bound
    path = work / "configs" / "generated_low_volume.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def step(module: str, spec: dict, work: Path) -> tuple[float, dict]:
    """Run a step as the DAG's launcher does; (seconds, result or error)."""
    fd, spec_file = tempfile.mkstemp(suffix=".json", dir=work)
    os.write(fd, json.dumps(spec).encode())
    os.close(fd)
    result_file = Path(spec_file + ".result")
    t0 = time.perf_counter()
    subprocess.run([PY, "-m", module, "--spec", f"@{spec_file}", "--result-file",
                    str(result_file)], cwd=REPO, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    seconds = time.perf_counter() - t0
    return seconds, json.loads(result_file.read_text())


def day_spec(raw: Path, home: Path, day: str, config: Path) -> dict:
    return {"span_dir": str(raw / f"dt={day}"),
            "out_dir": str(home / "runs" / f"dt={day}" / "bench" / "validation"),
            "history_root": str(home / "runs"), "quarantine_dir": str(home / "quarantine"),
            "run_id": "bench", "feature_config": str(config)}


def verdicts(home: Path, days: list[str]) -> dict:
    out = {}
    for day in days:
        report = home / "runs" / f"dt={day}" / "bench" / "validation" / "validation.json"
        data = json.loads(report.read_text()) if report.exists() else {}
        out[day] = (data.get("gate"), sorted(f["rule"] for f in data.get("failed", [])))
    return out


def dag_first_run(work: Path, raw: Path, config: Path, span: str, window_days: int) -> dict:
    """`airflow dags test` of the CTR DAG over the window; each task's duration."""
    af, home = work / "airflow", work / "dag-home"
    env = {**os.environ, "RETRAIN_AIRFLOW_HOME": str(af), "RETRAIN_HOME": str(home),
           "RETRAIN_CONFIG_ROOTS": str(config.parent),
           "PATH": f"{Path(PY).parent}:{os.environ['PATH']}"}
    logical = (dt.date.fromisoformat(span) + dt.timedelta(days=1)).isoformat()
    conf = json.dumps({"raw_root": str(raw), "feature_config": str(config),
                       "window_days": window_days})
    script = (f"source scripts/airflow-env.sh && mkdir -p $AIRFLOW_HOME && airflow db migrate "
              f"&& airflow pools import scripts/pools.json && airflow dags test "
              f"ctr_daily_retrain {logical} -c '{conf}'")
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - t0
    (work / "dag.log").write_text(proc.stdout + proc.stderr)
    with sqlite3.connect(af / "airflow.db") as db:
        rows = db.execute("SELECT task_id, state, duration FROM task_instance "
                          "WHERE dag_id = 'ctr_daily_retrain'").fetchall()
    return {"wall_seconds": round(wall, 1), "exit_code": proc.returncode,
            "tasks": {t: {"state": s, "seconds": round(d or 0, 1)} for t, s, d in rows}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=60)
    p.add_argument("--rows-per-day", type=int, default=400)
    p.add_argument("--dag", action="store_true", help="also time the DAG's first run")
    p.add_argument("--results", default=str(RESULTS / "validate_window.json"))
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from components.ctr.generate import GenerateSpec, run as generate

    work = Path(tempfile.mkdtemp(prefix="bench-window-"))
    start = dt.date(2026, 1, 1)
    days = [(start + dt.timedelta(days=i)).isoformat() for i in range(args.days)]
    generate(GenerateSpec(out_root=str(work), start=days[0], days=args.days,
                          rows_per_day=args.rows_per_day, n_users=2000, n_items=1000,
                          n_categories=20))
    raw, config = work / "raw" / "ctr", low_volume_config(work)
    older = days[:-1]

    per_day_home = work / "per-day"
    per_day = []
    for day in older:
        seconds, _ = step("components.ctr.validate", day_spec(raw, per_day_home, day, config),
                          work)
        per_day.append(seconds)
    pass_home = work / "pass"
    pass_seconds, result = step("components.ctr.validate_window", {
        "days": [day_spec(raw, pass_home, d, config) for d in older],
        "out_dir": str(pass_home / "window")}, work)
    single_seconds, _ = step("components.ctr.validate_window", {
        "days": [day_spec(raw, work / "single", older[0], config)],
        "out_dir": str(work / "single" / "window")}, work)
    same = verdicts(per_day_home, older) == verdicts(pass_home, older)
    gates = [g for g, _ in verdicts(pass_home, older).values()]
    figures = {
        "days_validated": len(older), "rows_per_day": args.rows_per_day,
        "per_day_total_seconds": round(sum(per_day), 1),
        "per_day_mean_seconds": round(sum(per_day) / len(per_day), 2),
        "one_pass_seconds": round(pass_seconds, 1),
        "one_pass_single_day_seconds": round(single_seconds, 1),
        "one_pass_each_further_day_seconds": round(
            (pass_seconds - single_seconds) / max(len(older) - 1, 1), 3),
        "speedup": round(sum(per_day) / pass_seconds, 1),
        "pass_stage_seconds": result.get("seconds"),
        "same_verdicts": same, "passed": gates.count("passed"),
        "failed": len(gates) - gates.count("passed"),
    }
    if args.dag:
        figures["dag_first_run"] = dag_first_run(work, raw, config, days[-1], args.days)
    figures["command"] = ("python bench/validate_window.py --days "
                          f"{args.days} --rows-per-day {args.rows_per_day}"
                          + (" --dag" if args.dag else ""))
    figures["measured_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    Path(args.results).write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    if not same:
        sys.exit("the two paths disagree on some day's verdict")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
