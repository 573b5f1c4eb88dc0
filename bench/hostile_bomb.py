"""Decompression bombs against CTR validation: refused as bad data, in bounded memory.

A 7 MB gzip part that expands to 6 GB once drove validation to 6.96 GB RSS and an
ArrowMemoryError that was retried. This builds one real span (generated click logs as
JSONL.gz, ROWS rows) and three copies of it with one extra part each:

- `one_line`: SIZE bytes of one repeated byte, no newline (an oversize line, skipped in
  1 MB reads);
- `long_lines`: SIZE bytes of records whose one value is 512 KB (legal lines under
  --max-line-bytes; each record rejected as `oversize_value`);
- `over_part_limit`: the `long_lines` part under a config with `max_part_bytes` 1 GiB
  (refused as `PartTooLarge` once 1 GiB has been read).

Each span is validated in a fresh process (`components.ctr.validate.run`); the baseline,
same run, is the span without the extra part. Prints outcome, seconds and peak RSS (VmHWM);
writes bench/results/hostile_bomb.json.

    .venv/bin/python bench/hostile_bomb.py --size-gb 6
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from validate_span import peak_rss_mb  # noqa: E402  (same folder)

RESULTS = REPO / "bench" / "results" / "hostile_bomb.json"
SPAN = "2026-10-05"
CHUNK = 1 << 24


def write_gzip(path: Path, chunks) -> int:
    """Stream `chunks` into a gzip file (zlib level 9, gzip framing); its size."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for c in chunks:
            f.write(comp.compress(c))
        f.write(comp.flush())
    return path.stat().st_size


def repeated(block: bytes, total: int):
    reps = max(1, CHUNK // len(block))
    chunk = block * reps
    for _ in range(total // len(chunk)):
        yield chunk


def build(work: Path, rows: int, size: int) -> tuple[dict[str, Path], dict[str, int]]:
    import pyarrow.parquet as pq

    from components.ctr.generate import GenerateSpec, run as generate

    generate(GenerateSpec(out_root=str(work / "gen"), start=SPAN, days=1, rows_per_day=rows))
    table = pq.read_table(work / "gen" / "raw" / "ctr" / f"dt={SPAN}" / "part-00000.parquet")
    good = "".join(json.dumps(r) + "\n" for r in table.to_pylist()).encode()
    record = dict(table.slice(0, 1).to_pylist()[0], device="d" * (512 << 10))
    spans = {}
    for name in ("baseline", "one_line", "long_lines"):
        span = work / name / "raw" / f"dt={SPAN}"
        span.mkdir(parents=True)
        write_gzip(span / "part-00000.jsonl.gz", [good])
        (span / "_SUCCESS").write_text("")
        spans[name] = span
    sizes = {"one_line": write_gzip(spans["one_line"] / "part-00001.jsonl.gz",
                                    repeated(b"x", size)),
             "long_lines": write_gzip(spans["long_lines"] / "part-00001.jsonl.gz",
                                      repeated((json.dumps(record) + "\n").encode(), size))}
    limited = work / "over_part_limit" / "raw"
    shutil.copytree(spans["long_lines"].parent, limited)
    spans["over_part_limit"] = limited / f"dt={SPAN}"
    return spans, sizes


def limited_config(work: Path) -> Path:
    import yaml
    from importlib import resources
    data = yaml.safe_load((resources.files("components.ctr") / "feature_configs"
                           / "generated.yaml").read_text())
    data.setdefault("validation", {}).setdefault("thresholds", {})["max_part_bytes"] = 1 << 30
    path = work / "limited.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def child(span: str, out: str, config: str) -> None:
    from retrain.common.errors import kind_of
    from components.ctr.validate import ValidateSpec, run
    t0 = time.perf_counter()
    try:
        r = run(ValidateSpec(span_dir=span, out_dir=out, compute_previous=False,
                             data_docs=False, feature_config=config,
                             quarantine_dir=str(Path(out).parent / "quarantine")))
        outcome = {"outcome": r["gate"], "rows": r["rows"]}
    except Exception as e:  # noqa: BLE001 - the outcome is what is measured
        outcome = {"outcome": type(e).__name__, "error_kind": kind_of(e),
                   "message": str(e)[:300]}
    print("RESULT " + json.dumps({**outcome, "seconds": round(time.perf_counter() - t0, 1),
                                  "peak_rss_mb": round(peak_rss_mb())}))


def measure(span: Path, out: Path, config: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RETRAIN_CONFIG_ROOTS": str(out.parent)}
    proc = subprocess.run([sys.executable, __file__, "--child", str(span), str(out), config],
                          capture_output=True, text=True, env=env, cwd=REPO)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"outcome": "crash", "exit_code": proc.returncode,
                "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(line[len("RESULT "):])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-gb", type=float, default=6.0, help="bytes each bomb expands to")
    p.add_argument("--rows", type=int, default=20_000, help="rows of the real part")
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bomb-"))
    try:
        t0 = time.perf_counter()
        spans, sizes = build(work, args.rows, int(args.size_gb * (1 << 30)))
        build_s = time.perf_counter() - t0
        config = str(limited_config(work))
        runs = {}
        for name, span in spans.items():
            cfg = config if name == "over_part_limit" else ""
            runs[name] = {"gzip_bytes": sizes.get("long_lines" if name == "over_part_limit"
                                                  else name),
                          **measure(span, work / name / "out", cfg)}
            print(f"{name:16s} {runs[name].get('gzip_bytes') or '-':>12}  "
                  f"{runs[name]['outcome']:>22s}  {runs[name].get('seconds', '-'):>7}s  "
                  f"peak {runs[name].get('peak_rss_mb', '-')} MB", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"command": f".venv/bin/python bench/hostile_bomb.py --size-gb {args.size_gb:g}",
           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": {
               "cpus": os.cpu_count(), "platform": platform.platform()},
           "expanded_bytes": int(args.size_gb * (1 << 30)), "build_seconds": round(build_s, 1),
           "runs": runs}
    Path(args.results).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
