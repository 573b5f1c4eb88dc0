"""Serving check of the test family: a fresh process reproduces evaluation's predictions."""
import dataclasses
import json
import sys
import time
from pathlib import Path

from retrain.common.step import main
from minifamily.evaluate import predict


@dataclasses.dataclass
class Spec:
    model_dir: str
    eval_dir: str
    out_dir: str | None = None


def run(spec: Spec) -> dict:
    sample = json.loads((Path(spec.eval_dir) / "eval.json").read_text())["sample"]
    t0 = time.perf_counter()
    got = predict(spec.model_dir, sample["x"])
    diff = max(abs(float(a) - b) for a, b in zip(got, sample["y"]))
    if diff > 1e-5:
        raise RuntimeError(f"served predictions differ from evaluation's by {diff}")
    return {"latency": {"seconds": round(time.perf_counter() - t0, 4)}, "max_abs_diff": diff}


if __name__ == "__main__":
    sys.exit(main(Spec, run))
