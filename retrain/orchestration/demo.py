"""The embedded default: a week of synthetic logs, two daily runs of the real DAG.

`make demo` (or `retrain demo`) generates seven days of click logs (ending yesterday) and
the same days of the bundled reviews for the text DAG under RETRAIN_HOME,
starts Airflow as `make ui` does (retrain.orchestration.local_airflow: API server, scheduler and
dag-processor on 127.0.0.1, the project-local metadata DB), triggers `ctr_daily_retrain`
for two consecutive logical dates, follows each run's tasks, and prints what a person
wants to know: rows validated and processed, the model's metrics next to the
Bayes-optimal ones, whether it was blessed and why, and the registry version. They are
ordinary Airflow runs: `make ui` shows them afterwards, every task with its log and real
durations. Safe to run again on the same checkout: existing days are reused and every run
gets its own run id and artifact folder.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from retrain.common import screen
from retrain.common.paths import artifact_root, raw_span_dir, registry_root, run_dir
from retrain.orchestration.launch import step_python
from retrain.orchestration import ui_links
from retrain.orchestration.local_airflow import LocalAirflow

DAG_ID = "ctr_daily_retrain"
MODEL = "ctr"
TEXT_ROWS_PER_DAY = 700


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="generate a week of logs and run the daily DAG for two days",
        description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--start", default=None,
                   help="first generated day (default: the logs end yesterday, so the day a "
                        "scheduled run waits for is there once the DAG is unpaused)")
    p.add_argument("--days", type=int, default=7, help="days of logs to generate (default 7)")
    p.add_argument("--rows-per-day", type=int, default=50_000, help="impressions per day (default 50000)")
    p.add_argument("--runs", type=int, default=2,
                   help="consecutive daily runs, ending with the last generated day (default 2)")
    p.add_argument("--window-days", type=int, default=3,
                   help="days of logs each run analyses and trains on (default 3)")
    p.add_argument("--home", default=None, help="artifact root (default: $RETRAIN_HOME or ./var)")
    p.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    start = (dt.date.fromisoformat(args.start) if args.start else
             dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=args.days))
    return run_demo(start, args.days, args.rows_per_day,
                    args.runs, artifact_root(args.home), args.window_days)


def run_demo(start: dt.date, days: int, rows_per_day: int, runs: int, home: Path,
             window_days: int = 3) -> int:
    if runs < 1 or window_days < 1 or days < runs + window_days - 1:
        raise ValueError(f"{runs} daily runs over {window_days}-day windows need at least "
                         f"{runs + window_days - 1} days of logs; --days is {days}")
    os.environ["RETRAIN_HOME"] = str(home)
    print(f"==> generating {days} days x {rows_per_day} rows under {home}/raw/ctr", flush=True)
    # `retrain generate` in the ML environment (a step: this side of the boundary never
    # imports step code); it prints the per-day table itself.
    subprocess.run([step_python(), "-m", "retrain.cli", "generate", "--out-root", str(home),
                    "--start", start.isoformat(), "--days", str(days),
                    "--rows-per-day", str(rows_per_day)], check=True)
    # The text DAG's Trigger form then has data too: the bundled real reviews, a slice a
    # day over the same days (the run itself is left to the user: `make ui`).
    # Days already there are kept as they are (a validated day must not be rewritten).
    if any(not (raw_span_dir(home, "text", start + dt.timedelta(days=d)) / "_SUCCESS").exists()
           for d in range(days)):
        print(f"==> {TEXT_ROWS_PER_DAY} bundled reviews a day under {home}/raw/text", flush=True)
        subprocess.run([step_python(), "-m", "retrain.cli", "load-text", "--root", str(home),
                        "--start", start.isoformat(), "--days", str(days),
                        "--max-rows-per-day", str(TEXT_ROWS_PER_DAY)], check=True,
                       stdout=subprocess.DEVNULL)
    last = start + dt.timedelta(days=days - 1)
    spans = [last - dt.timedelta(days=i) for i in range(runs - 1, -1, -1)]
    summaries = []
    with LocalAirflow(home, DAG_ID, home / "demo-logs") as airflow:
        for span in spans:
            logical = span + dt.timedelta(days=1)   # the DAG trains on the day before its run
            summaries.append(run_dag(airflow, logical, span, home,
                                     {"window_days": window_days}))
    print(format_summary(summaries, home))
    return 0 if all(s.get("ok") for s in summaries) else 1


def run_dag(airflow: LocalAirflow, logical: dt.date, span: dt.date, home: Path,
            conf: dict) -> dict:
    """One triggered run, its tasks printed as they finish; returns its run summary (read
    from its artifacts) and where its task logs are."""
    def show(ti: dict) -> None:
        took = f" in {ti['duration']:.0f} s" if ti.get("duration") else ""
        print(f"    [{ti['task_id']}] {ti['state']}{took}", flush=True)

    print(f"==> {DAG_ID}, logical date {logical} (span {span})", flush=True)
    started = time.time()
    run_id, state = airflow.run(logical.isoformat(), conf,
                                f"retrain demo: span {span}", on_task=show)
    summary = _latest_summary(home, span, since=started) or {}
    logs = airflow.task_logs(run_id)
    summary.update(ok=state == "success" and bool(summary), seconds=round(time.time() - started),
                   log=str(logs), span=span.isoformat(), run_id=run_id)
    if state != "success":
        print(f"!!  run {run_id} ended {state}; task logs: {logs} (or `make ui`)", flush=True)
    return summary


def _latest_summary(home: Path, span: dt.date, since: float) -> dict | None:
    base = run_dir(home, MODEL, span, "x").parent
    found = [p for p in base.glob("*/run_summary.json") if p.stat().st_mtime >= since]
    if not found:
        return None
    return json.loads(max(found, key=lambda p: p.stat().st_mtime).read_text())


def _f(x, nd=4) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _verdict(ev: dict) -> str:
    """The gate's verdict in one line: the rule count, and the failed rules by name (each
    rule's line is in the report and eval.json)."""
    reasons = ev.get("reasons") or []
    rules = None
    try:
        from retrain.common.atomic import read_json
        rules = (read_json(ev["eval_uri"]).get("decision") or {}).get("rules")
    except (KeyError, OSError, ValueError, TypeError):
        pass
    failed = list(ev.get("failed_rules") or [])
    if isinstance(rules, list):
        failed = failed or [r.get("name") for r in rules if not r.get("passed")]
        count = f"{len(rules) - len(failed)} of {len(rules)} rules pass"
    else:   # no eval.json: the gate's own conclusion, its last reason, says it all
        return reasons[-1] if reasons else ("blessed" if ev.get("blessed") else "not blessed")
    verdict = "blessed" if ev.get("blessed") else "not blessed"
    if ev.get("blessed") and failed:
        verdict = "blessed by force"
    return f"{verdict}: {count}" + (f"; failed {', '.join(failed)}" if failed else "")


def _registry_line(s: dict) -> str:
    if s.get("published"):
        return f"published as {MODEL} v{s['published']['version']}"
    if s.get("unchanged"):
        return f"unchanged: identical to {MODEL} v{s['unchanged']['version']}, nothing published"
    if s.get("publish_refused"):
        return f"not published: {s['publish_refused'].get('reason')}"
    if s.get("shadow"):
        return "not published: a shadow run"
    ev = s.get("evaluation") or {}
    return "not published: " + ("not blessed" if not ev.get("blessed") else "see the run's log")


def format_summary(summaries: list[dict], home: Path) -> str:
    """A few lines a run (its data, the model beside the published one and the best
    possible, the verdict, what the registry did) and where to look next; every line at
    most screen.WIDTH characters."""
    from retrain.common.registry import Registry

    width = screen.WIDTH
    lines = ["", "=" * 78, f"retrain demo: {DAG_ID}, {len(summaries)} run(s)", "=" * 78]

    def field(label: str, text: str) -> None:
        lines.extend(screen.fit(text, width, f"  {label:<10}", " " * 12))

    for s in summaries:
        lines.append(f"span {s['span']}  {'ok' if s['ok'] else 'FAILED'} in {s['seconds']} s")
        field("run", str(s.get("run_id") or "-"))
        if not s.get("evaluation"):
            field("logs", f"no run summary; task logs: {s['log']}")
            continue
        v, p, ev = s["validation"], s["preprocess"], s["evaluation"]
        cand, base, bayes = ev["candidate"], ev.get("baseline"), ev.get("bayes_optimal") or {}
        rows = v.get("rows")
        validated = f"{rows:,} rows validated" if isinstance(rows, int) else "validated"
        field("data", f"{validated} ({v.get('n_failed', 0)} failed expectations); "
              f"{p['rows_in']:,} processed over {len(p['window'])} day(s)")
        field("AUC", f"{_f(cand.get('auc'))}, published {_f(base and base.get('auc'))}, "
              f"Bayes-opt. {_f(bayes.get('auc'))}" + ("" if base else " (nothing published yet)"))
        field("log loss", f"{_f(cand.get('log_loss'))}, published "
              f"{_f(base and base.get('log_loss'))}, Bayes-opt. {_f(bayes.get('log_loss'))}")
        field("verdict", _verdict(ev))
        field("registry", _registry_line(s))
    registry = Registry(registry_root(home))
    current = registry.current(MODEL) if MODEL in registry.models() else None
    lines += [""]
    field("registry", (f"{MODEL} v{current['version']} is current "
                       f"({len(registry.list_versions(MODEL))} version(s))" if current
                       else "nothing published yet")
          + f": retrain registry show {MODEL}, retrain lineage {MODEL}")
    field("next", "`make ui`, then http://127.0.0.1:8080 (user admin; the password file's "
          "path is printed at start-up): each run's Retrain tab has its report and Data Docs, every task its "
          f"log; a run's page: http://127.0.0.1:8080{ui_links.run_page(DAG_ID, '')}<run>")
    lines.append("=" * 78)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="retrain-demo")
    sub = parser.add_subparsers(dest="command")
    add_cli(sub)
    args = parser.parse_args(["demo", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
