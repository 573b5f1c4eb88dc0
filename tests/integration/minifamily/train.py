"""Training of the test family: least squares, exported as a real SavedModel (x -> y)."""
import dataclasses
import json
import sys
from pathlib import Path

from retrain.common.atomic import atomic_dir
from retrain.common.step import main


@dataclasses.dataclass
class Spec:
    preprocess_dir: str
    out_dir: str


def run(spec: Spec) -> dict:
    import numpy as np
    import tensorflow as tf

    rows = json.loads((Path(spec.preprocess_dir) / "train.json").read_text())
    x = np.array([[r["x"], 1.0] for r in rows])
    slope, intercept = np.linalg.lstsq(x, np.array([r["y"] for r in rows]), rcond=None)[0]

    class Linear(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x):
            return {"y": x * float(slope) + float(intercept)}

    module = Linear()
    with atomic_dir(Path(spec.out_dir)) as tmp:
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
    return {"model_dir": spec.out_dir, "slope": float(slope), "intercept": float(intercept)}


if __name__ == "__main__":
    sys.exit(main(Spec, run))
