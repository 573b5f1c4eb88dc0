"""What binding validation to a span's bytes costs: the content digest against validating
the same span, in the same run.

Builds a span of PARTS parts of ROWS generated rows (bench/validate_span.py's builder),
validates it once in a fresh process (the baseline: what validation costs anyway), then
takes its content digest (`retrain.orchestration.custody.content`, what the validate task
adds) REPEATS times, the first right after the data was written (page cache warm, as on
a worker that just received the span) and again after dropping this span's pages from
the cache (posix_fadvise DONTNEED: a cold read from disk), each hashing every byte (an
empty digest cache); then the later checks a run makes of the same unchanged span (the
cache the first check filled: one stat per file, no byte read).

    .venv/bin/python bench/content_digest.py --rows 1000000 --parts 5

Prints seconds and the digest's share of validation time; writes
bench/results/content_digest.json. Target (issue "Chain of custody"): at most 10 % at 5M rows.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from validate_span import RESULTS, build_spans, measure  # noqa: E402


def drop_cache(span: Path) -> None:
    from retrain.orchestration.custody import data_files
    for f in data_files(span):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_digest(span: Path, cold: bool, cache: Path | None = None) -> float:
    """Seconds of one content digest: every byte hashed (a fresh, empty digest cache), or
    with `cache` the check of an unchanged span (a digest cache it filled before)."""
    from retrain.orchestration.custody import content
    if cold:
        drop_cache(span)
    with tempfile.TemporaryDirectory() as empty:
        t0 = time.perf_counter()
        content(span, cache or empty)
        return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows per part (default 1M)")
    p.add_argument("--parts", type=int, default=5, help="parts of the span (default 5)")
    p.add_argument("--repeats", type=int, default=3, help="digest timings of each kind")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-digest-"))
    try:
        span = build_spans(work, args.rows, args.parts)[args.parts]
        size = sum(f.stat().st_size for f in span.glob("part-*"))
        validation = measure("validate", span, work / "out", None)
        if not validation["ok"]:
            print(json.dumps(validation))
            return 1
        warm = [time_digest(span, cold=False) for _ in range(args.repeats)]
        cold = [time_digest(span, cold=True) for _ in range(args.repeats)]
        from retrain.orchestration.custody import content
        content(span, work / "digests")               # the first check fills the cache
        again = [time_digest(span, cold=True, cache=work / "digests")
                 for _ in range(args.repeats)]
        v = validation["seconds"]
        out = {"rows": args.rows * args.parts, "parts": args.parts, "bytes": size,
               "validate_seconds": v, "digest_warm_seconds": [round(x, 3) for x in warm],
               "digest_cold_seconds": [round(x, 3) for x in cold],
               "digest_share_warm": round(min(warm) / v, 4),
               "digest_share_cold": round(min(cold) / v, 4),
               "digest_mb_per_second": round(size / 1e6 / min(warm)),
               "digest_cold_mb_per_second": round(size / 1e6 / min(cold)),
               "bytes_per_row": round(size / (args.rows * args.parts), 2),
               # the later checks of an unchanged span (cache filled by the first): no
               # byte read, one stat per file
               "recheck_unchanged_seconds": [round(x, 4) for x in again],
               "threads": min(8, os.cpu_count() or 1)}
        print(f"span: {out['rows']:,} rows in {args.parts} part(s), {size / 1e6:.0f} MB")
        print(f"validate (baseline, same run): {v:.1f} s")
        print(f"content digest warm: min {min(warm):.3f} s ({out['digest_share_warm']:.1%} of "
              f"validation), cold: min {min(cold):.3f} s ({out['digest_share_cold']:.1%}); "
              f"a later check of the unchanged span: {min(again):.4f} s")
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "content_digest.json").write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {RESULTS / 'content_digest.json'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
