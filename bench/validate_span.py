"""Validation of spans larger than the memory it is given, against the in-memory way.

Builds two spans from generated click logs (1 part and PARTS parts of ROWS rows each,
row groups of 131,072 rows as a producer would write them), then validates each in a
fresh process whose address space is capped with `ulimit -v` (plus `ulimit -s 1024` and
MALLOC_ARENA_MAX=2: thread stacks and malloc arenas otherwise reserve gigabytes of
address space that is never used). Baseline, same run, same spans: reading the whole
span into pandas, which is what validation did before (`pq.read_table().to_pandas()`),
once with no limit (its peak RSS) and once under the same cap.

    .venv/bin/python bench/validate_span.py --rows 1000000 --parts 5 --limit-mb 1024

Prints rows/s and peak RSS per run; writes bench/results/validate_span.json.
"""
from __future__ import annotations

import argparse
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
ROW_GROUP = 131_072


def build_spans(work: Path, rows: int, parts: int) -> dict[int, Path]:
    """{n_parts: span_dir} with spans of 1 and `parts` parts (hard links to shared parts)."""
    import datetime as dt

    import pyarrow.parquet as pq

    from components.ctr.generate import GenerateSpec, run as generate

    gen = work / "gen"
    generate(GenerateSpec(out_root=str(gen), start="2026-10-01", days=parts, rows_per_day=rows))
    cache = work / "parts"
    cache.mkdir(exist_ok=True)
    files = []
    for k in range(parts):
        day = dt.date(2026, 10, 1) + dt.timedelta(days=k)
        out = cache / f"part-{k:05d}.parquet"
        if not out.exists():
            pq.write_table(pq.read_table(gen / "raw" / "ctr" / f"dt={day}" / "part-00000.parquet"),
                           out, row_group_size=ROW_GROUP)
        files.append(out)
    spans = {}
    for n, day in ((1, "2026-10-20"), (parts, "2026-10-21")):
        span = work / "raw" / "ctr" / f"dt={day}"
        if span.exists():
            shutil.rmtree(span)
        span.mkdir(parents=True)
        for f in files[:n]:
            os.link(f, span / f.name)
        (span / "_SUCCESS").write_text("{}")
        spans[n] = span
    return spans


def child(mode: str, span: str, out: str) -> None:
    """Runs in the limited process: validate (or the pandas baseline), print figures."""
    t0 = time.perf_counter()
    if mode == "validate":
        from components.ctr.validate import ValidateSpec, run
        result = run(ValidateSpec(span_dir=span, out_dir=out, compute_previous=False,
                                  data_docs=False))
        rows, extra = result["rows"], {"gate": result["gate"], "n_failed": result["n_failed"],
                                       "stats_seconds": json.load(open(result["report"]))
                                       ["seconds"]["stats"]}
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        df = pa.concat_tables(pq.read_table(p) for p in sorted(Path(span).glob("part-*"))
                              ).to_pandas()
        rows, extra = len(df), {"null_rates": int(df.isna().sum().sum())}
    print("RESULT " + json.dumps({"rows": rows, "seconds": time.perf_counter() - t0,
                                  "peak_rss_mb": peak_rss_mb(), **extra}))


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not getrusage's ru_maxrss: that keeps
    the high-water mark of the forked parent's pages across exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(mode: str, span: Path, out: Path, limit_mb: int | None) -> dict:
    cmd = f"exec {sys.executable} {Path(__file__)} --child {mode} {span} {out}"
    if limit_mb:
        cmd = f"ulimit -v {limit_mb * 1024}; ulimit -s 1024; " + cmd
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env,
                          cwd=REPO)
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"mode": mode, "limit_mb": limit_mb, "ok": False, "exit_code": proc.returncode,
                "error": tail[:300], "wall_seconds": round(wall, 1)}
    r = json.loads(line[len("RESULT "):])
    return {"mode": mode, "limit_mb": limit_mb, "ok": True, "rows": r["rows"],
            "seconds": round(r["seconds"], 1), "wall_seconds": round(wall, 1),
            "rows_per_second": round(r["rows"] / r["seconds"]),
            "peak_rss_mb": round(r["peak_rss_mb"]),
            **{k: v for k, v in r.items() if k not in ("rows", "seconds", "peak_rss_mb")},
            **({"stats_rows_per_second": round(r["rows"] / r["stats_seconds"])}
               if r.get("stats_seconds") else {})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows per part (default 1M)")
    p.add_argument("--parts", type=int, default=5, help="parts of the big span (default 5)")
    p.add_argument("--limit-mb", type=int, default=1024,
                   help="address-space cap of the validating process (ulimit -v), MB")
    p.add_argument("--work-dir", help="keep generated data here (default: a temp dir)")
    p.add_argument("--child", nargs=3, metavar=("MODE", "SPAN", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench-val-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    spans = build_spans(work, args.rows, args.parts)
    print(f"spans ready in {time.perf_counter() - t0:.0f}s: {work}")
    runs = []
    for n, span in spans.items():
        for mode, limit in (("validate", args.limit_mb), ("pandas_read", None),
                            ("pandas_read", args.limit_mb)):
            r = measure(mode, span, work / "out" / f"{n}", limit)
            r.update(parts=n, span_rows=n * args.rows)
            runs.append(r)
            print(json.dumps(r))
    print(f"\n{'run':<40} {'rows':>10} {'rows/s':>9} {'peak RSS':>9}  result")
    for r in runs:
        name = f"{r['mode']} {r['parts']} part(s)" + (f" ulimit -v {r['limit_mb']}MB"
                                                       if r["limit_mb"] else " no limit")
        if r["ok"]:
            stats = (f" (stats pass alone {r['stats_rows_per_second']:,} rows/s)"
                     if r.get("stats_rows_per_second") else "")
            print(f"{name:<40} {r['rows']:>10,} {r['rows_per_second']:>9,} "
                  f"{r['peak_rss_mb']:>7} MB  {r.get('gate', 'read')}{stats}")
        else:
            print(f"{name:<40} {r['span_rows']:>10,} {'-':>9} {'-':>9}     FAILED "
                  f"(exit {r['exit_code']}: {r['error'][:80]})")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"rows_per_part": args.rows, "parts": args.parts, "limit_mb": args.limit_mb,
           "row_group_size": ROW_GROUP, "runs": runs,
           "note": "validate = one Beam pass (span stats + sample) + GX suites on them; "
                   "pandas_read = the whole span read into pandas (the old approach)"}
    (RESULTS / "validate_span.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS / 'validate_span.json'}")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
