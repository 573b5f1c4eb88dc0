"""Preprocessing of the test family: the window's rows, split by a stable id hash."""
import dataclasses
import datetime as dt
import hashlib
import sys
from pathlib import Path

from retrain.common.atomic import atomic_dir, write_json
from retrain.common.step import main
from minifamily.validate import rows_of


@dataclasses.dataclass
class Spec:
    raw_root: str
    span: str
    output_dir: str
    window_days: int = 1
    exclude_spans: list = dataclasses.field(default_factory=list)


def run(spec: Spec) -> dict:
    end = dt.date.fromisoformat(spec.span)
    days = [(end - dt.timedelta(days=back)).isoformat() for back in range(spec.window_days)]
    rows = [r for day in days if day not in spec.exclude_spans
            for r in rows_of(Path(spec.raw_root) / f"dt={day}")]
    split = {"train": [], "eval": []}
    for r in rows:
        h = int(hashlib.sha256(str(r["id"]).encode()).hexdigest(), 16) % 5
        split["eval" if h == 0 else "train"].append(r)
    with atomic_dir(Path(spec.output_dir)) as tmp:
        for name, part in split.items():
            write_json(tmp / f"{name}.json", part)
    return {"output_dir": spec.output_dir, "window": [d for d in days
                                                      if d not in spec.exclude_spans],
            "rows_train": len(split["train"]),
            "rows_eval": len(split["eval"])}


if __name__ == "__main__":
    sys.exit(main(Spec, run))
