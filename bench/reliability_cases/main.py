"""Reliability campaign: bad inputs and random SIGKILLs against both model families.

Why: "it fails cleanly" is only worth something if anyone can rerun the proof. This script
builds tiny real inputs for both families (generated click logs; a small labelled text
corpus with the bundled MiniLM checkpoint), runs every stage once for real (those runs
measure each step's duration and are the good inputs the cases start from), then:

* bad-input cases (raw data, params and run inputs, configs, registry): each is a small
  declarative entry (name, family, stage, setup, expectation). A case passes only if the
  step refused cleanly (a typed failure: BadData from the step, the run-input check, the
  trigger form's param schema, a CLI error; not a bare exit code or a traceback-only
  crash), the message names the offending file, rule or parameter (checked by substring),
  no partial artifact is visible under the stage's output name, and nothing was published;
* SIGKILLs: a "task" process (what an Airflow task is: it calls `run_step`, or
  `publish_if_blessed` for push) runs a real step on the real inputs and is SIGKILLed after
  a seeded random share of the step's measured duration. After each kill: no process
  started under that task is left (tagged environment, process group, recorded
  descendants; waited up to 10 s), the output is absent or complete, nothing is written
  into it for 2 s more, and the registry checks clean. The kills of one step reuse its
  folders like Airflow retries do; then one rerun must complete, and for preprocess the
  rows in must equal rows out + rejected + dropped duplicates, and the raw row count.

    .venv/bin/python bench/reliability.py [--kills 32] [--seed 0] [--only 'ctr.*']

Prints one table (case, expected, observed, verdict) and the counts; writes
bench/results/reliability.json. Nothing here is hard-coded to pass: the counts are
computed from what was observed. Product bugs show up as FAIL rows with their message.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import argparse
import fnmatch
import logging
import platform
import random
import tempfile

from . import harness as H
from .custody import hand_off_cases
from .harness import PY, REPO, STAGES, Case, Fixture, quiet_launch_log
from .hostile import hostile_cases
from .inputs import input_cases
from .kills import KillTarget, kill_once, rerun
from .raw_data import raw_cases
from .registry import registry_cases
from .ops import ops_cases
from .runner import first_line, run_case, unblessed_versions
from .special import special_cases


def cases() -> list[Case]:
    """Every bad-input case, in the campaign's order (names and expectations are the
    contract with earlier runs' results)."""
    C: list[Case] = []

    def add(name, family, stage, category, setup, names, **kw):
        C.append(Case(name, family, stage, category, setup, tuple(names), **kw))

    raw_cases(add)
    input_cases(add)
    registry_cases(add)
    hand_off_cases(add)
    hostile_cases(add)
    special_cases(add)      # hostile use, round 2
    ops_cases(add)
    for c in C:
        # Step specs are built by code from checked params: any typed failure with a
        # message naming the field is clean there (the DAG never sends these).
        if ".spec." in c.name:
            c.kinds = ("*",)
    return C


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def print_table(rows: list[dict]) -> None:
    w = [44, 44, 70, 7]
    head = ("case", "expected", "observed", "verdict")
    print(" | ".join(h.ljust(n) for h, n in zip(head, w)))
    print("-+-".join("-" * n for n in w))
    for r in rows:
        cells = (r["name"], r["expected"], first_line(r["observed"], 400), r["verdict"])
        cut = [c if len(c) <= n else c[: n - 1] + "…" for c, n in zip(cells, w)]
        print(" | ".join(c.ljust(n) for c, n in zip(cut, w)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=textwrap.dedent(__doc__.split("\n\n", 1)[1]))
    ap.add_argument("--kills", type=int, default=32,
                    help="random SIGKILLs, spread over validate/preprocess/train/push of "
                         "both families (default 32)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill delays (default 0)")
    ap.add_argument("--results", default=str(REPO / "bench" / "results" / "reliability.json"),
                    help="results JSON (default bench/results/reliability.json)")
    ap.add_argument("--only", default=None,
                    help="run only the cases whose name matches this glob (fnmatch) or "
                         "substring, e.g. 'ctr.raw.*', 'registry', 'kill.text.*'; several "
                         "comma-separated")
    ap.add_argument("--workdir", default=None,
                    help="scratch folder (default: a new temp dir, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--list", action="store_true", help="list the case names and exit")
    args = ap.parse_args(argv)

    all_cases = cases()

    def wanted(name: str) -> bool:
        if not args.only:
            return True
        return any(fnmatch.fnmatch(name, pat) or pat in name
                   for pat in args.only.split(","))

    if args.list:
        for c in all_cases:
            print(f"{c.name:55s} {c.expected}")
        for fam in ("ctr", "text"):
            for stage in STAGES:
                print(f"kill.{fam}.{stage}.<n>")
        return 0

    work = Path(args.workdir or tempfile.mkdtemp(prefix="retrain-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, filename=str(work / "campaign.log"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    H.LOG_FILE = str(work / "campaign.log")
    quiet_launch_log()
    print(f"scratch folder: {work} (step logs in campaign.log)", flush=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t_start = time.time()

    selected = [c for c in all_cases if wanted(c.name)]
    # kills: round-robin over the 8 (family, step) pairs, each pair's kills in a row
    pairs = [(fam, stage) for fam in ("ctr", "text") for stage in STAGES]
    per_pair = {p: 0 for p in pairs}
    for i in range(args.kills):
        per_pair[pairs[i % len(pairs)]] += 1
    per_pair = {p: n for p, n in per_pair.items()
                if n and wanted(f"kill.{p[0]}.{p[1]}.0")}
    families = sorted({c.family for c in selected} | {p[0] for p in per_pair})

    H.FX = Fixture(work)
    print(f"building the fixture for {families} (real runs of every stage)...", flush=True)
    H.FX.build(families)
    print("measured step durations (s): " + ", ".join(
        f"{k} {v:.0f}" for k, v in H.FX.durations.items()), flush=True)

    rows: list[dict] = []
    for i, case in enumerate(selected, 1):
        row = run_case(case, work)
        rows.append(row)
        print(f"[{i}/{len(selected)}] {row['verdict']} {case.name} ({row['seconds']}s): "
              f"{first_line(row['observed'], 160)}", flush=True)

    rng = random.Random(args.seed)
    killdir = work / "kills"
    killdir.mkdir(exist_ok=True)
    for (fam, stage), n in per_pair.items():
        target = KillTarget(fam, stage, killdir)
        done = attempt = 0
        # A task that finishes before its kill time is recorded (and checked) but is not a
        # kill: try again, with the step's duration re-estimated from that finished run
        # (the fixture's first runs pay cold caches), up to n + 4 attempts.
        while done < n and attempt < n + 4:
            row = kill_once(target, attempt, rng)
            rows.append(row)
            attempt += 1
            if row["finished_before_kill"]:
                target.duration = min(target.duration, row["kill_delay_s"])
            else:
                done += 1
            print(f"[kill] {row['verdict']} {row['name']}: {row['observed']}", flush=True)
        row = rerun(target, attempt)
        rows.append(row)
        print(f"[rerun] {row['verdict']} {row['name']}: {first_line(row['observed'], 200)}",
              flush=True)

    kills = [r for r in rows if r["type"] == "kill"]
    bad = [r for r in rows if r["type"] == "bad_input"]
    counts = {
        "cases_tried": len(rows),
        "bad_input_cases": len(bad),
        "bad_input_by_category": {cat: sum(r["category"] == cat for r in bad)
                                  for cat in ("raw_data", "params", "config", "registry",
                                              "handoff", "race", "secrets", "hostile",
                                              "full_disk", "scheduler_kill",
                                              "special_files", "many_parts", "big_config",
                                              "empty_data", "settings", "published_files",
                                              "served_pages", "window_policy", "listeners",
                                              "encoding")},
        "sigkills": sum(not r["finished_before_kill"] for r in kills),
        "kill_attempts": len(kills),
        "kills_by_step": {f"{f}.{s}": sum(r["family"] == f and r["stage"] == s
                                          and not r["finished_before_kill"] for r in kills)
                          for f in ("ctr", "text") for s in STAGES},
        "failed_cleanly": sum(r["verdict"] == "PASS" and r.get("refused") for r in bad),
        "passed": sum(r["verdict"] == "PASS" for r in rows),
        "failed": sum(r["verdict"] == "FAIL" for r in rows),
        "rows_lost": sum(r.get("rows_lost", 0) for r in rows),
        "partial_artifacts_visible": sum(bool(r.get("partial_artifact")) for r in rows),
        "bad_models_published": sum(r.get("bad_models_published", 0) for r in rows)
        + unblessed_versions(H.FX.home, "ctr") + unblessed_versions(H.FX.home, "text"),
        "published_over_broken_registry": sum(r.get("published_over_broken_registry", 0)
                                              for r in rows),
        "orphan_processes": sum(r.get("orphans", 0) for r in rows),
        "leaks": sum(r.get("leaks", 0) for r in rows),
        "rollbacks_undone": sum(r.get("rollbacks_undone", 0) for r in rows),
        "hostile_records_retried": sum(r.get("hostile_retried", 0) for r in rows),
        # hostile use, round 2: each counted from what the cases observed
        "secrets_or_record_text_in_logs": sum(r.get("leaks", 0) for r in rows),
        "hangs_past_timeout": sum(r.get("hangs", 0) for r in rows),
        "silent_drops": sum(r.get("silent_drops", 0) for r in rows),
        "served_script": sum(r.get("served_script", 0) for r in rows),
        "bomb_peak_rss_mb": {r["name"]: r["figures"]["peak_rss_mb"] for r in rows
                             if "peak_rss_mb" in (r.get("figures") or {})},
    }
    seconds = time.time() - t_start
    print()
    print_table(rows)
    print()
    for k, v in counts.items():
        print(f"{k:28s} {v}")
    print(f"{'runtime':28s} {seconds / 60:.1f} min")
    results = {
        "command": " ".join([os.path.relpath(PY, REPO) if PY.startswith(str(REPO)) else PY,
                             "bench/reliability.py", *(argv or sys.argv[1:])]),
        "git_commit": git_commit(), "date": dt.datetime.now(dt.timezone.utc).isoformat(
            timespec="seconds"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "python": platform.python_version()},
        "seed": args.seed, "kills_asked": args.kills, "only": args.only,
        "runtime_s": round(seconds, 1), "step_durations_s": {k: round(v, 1) for k, v in
                                                             H.FX.durations.items()},
        "counts": counts, "cases": rows}
    if not args.only or args.results != ap.get_default("results"):
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results: {args.results}")
    else:
        print("(--only: the default results file is left alone; pass --results to write one)")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
