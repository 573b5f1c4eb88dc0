"""Validation of the test family: at least `min_rows` rows, every `y` a number."""
import dataclasses
import json
import sys
from pathlib import Path

from retrain.common.atomic import atomic_dir, write_json
from retrain.common.errors import ValidationFailed
from retrain.common.step import main


@dataclasses.dataclass
class Spec:
    span_dir: str
    out_dir: str
    min_rows: int = 10


def rows_of(span_dir) -> list[dict]:
    return [json.loads(line) for p in sorted(Path(span_dir).glob("part-*.jsonl"))
            for line in p.read_text().splitlines() if line.strip()]


def run(spec: Spec) -> dict:
    rows = rows_of(spec.span_dir)
    bad = sum(not isinstance(r.get("y"), (int, float)) for r in rows)
    with atomic_dir(Path(spec.out_dir)) as tmp:
        write_json(tmp / "validation.json", {"rows": len(rows), "bad_y": bad})
    if len(rows) < spec.min_rows or bad:
        raise ValidationFailed(f"{len(rows)} rows, {bad} without a numeric y")
    return {"uri": spec.out_dir, "rows": len(rows), "gate": "passed", "n_failed": 0}


if __name__ == "__main__":
    sys.exit(main(Spec, run))
