"""What the conversion scripts share: the command line and the writer of daily
`dt=YYYY-MM-DD/part-*.jsonl.gz` partitions with their `_SUCCESS` markers."""
import argparse
import datetime as dt
import gzip
import json
import pathlib
import random


def parser(doc: str, src_help: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--src", required=True, help=src_help)
    p.add_argument("--out", required=True, help="raw root to write dt= partitions into")
    p.add_argument("--start", default="2025-03-01", help="first day")
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--rows-per-day", type=int, default=300)
    p.add_argument("--parts", type=int, default=1, help="part files per day")
    p.add_argument("--seed", type=int, default=7, help="shuffle before cutting days")
    return p


def write_days(rows: list[dict], a: argparse.Namespace) -> None:
    random.Random(a.seed).shuffle(rows)
    start = dt.date.fromisoformat(a.start)
    for d in range(a.days):
        day = rows[d * a.rows_per_day:(d + 1) * a.rows_per_day]
        write_partition(pathlib.Path(a.out) / f"dt={start + dt.timedelta(days=d)}", day,
                        a.parts)
        print(pathlib.Path(a.out) / f"dt={start + dt.timedelta(days=d)}", len(day))
    print("total available", len(rows))


def write_partition(folder: pathlib.Path, rows: list[dict], parts: int = 1) -> None:
    """One day: `parts` gzipped JSONL files, then the `_SUCCESS` marker."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(parts):
        with gzip.open(folder / f"part-{k:05d}.jsonl.gz", "wt", encoding="utf-8") as f:
            for r in rows[k::parts]:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    (folder / "_SUCCESS").touch()
