"""What a step process pays before its work: the imports two kinds of step need, each the
way the step does it now against the way it did before, in fresh processes.

- A CTR step that only loads a SavedModel (evaluate, serving check, recommend, the
  recommendation quality check): importing TensorFlow and Beam and loading a model, with
  TF_USE_LEGACY_KERAS=1 (`retrain.common.tf_keras_env.use_keras2`, set by those steps'
  entry points: TensorFlow then loads Keras 2's optimizers instead of all of Keras 3)
  against without it.
- The text preprocessing job (and each of its Beam worker processes): encoding 2,000
  records as tf.Examples with tfx_bsl's batch encoder (`beam_jobs.preprocess_text.
  to_examples`, no TensorFlow import) against one `tf.train.Example` per record, which
  imported TensorFlow.

Each pair runs `--rounds` times, alternating, and keeps the fastest run of each (other jobs
on a shared machine only add time). CPU seconds (user + system) of the child process are
the figure: it is what a task costs on a busy node; wall seconds beside them.

    .venv/bin/python bench/step_startup.py --rounds 3

Prints the figures; writes bench/results/step_startup.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

RECORDS = ("recs = [{'example_id': f'id-{i}', 'text': 'fits well ' * (i % 40), "
           "'span': '2026-11-02', 'sentiment': i % 3, 'topic': i % 6} for i in range(2000)]\n")
CASES = {
    "ctr_saved_model_step": {
        "code": "import tensorflow as tf, apache_beam\ntf.saved_model.load(sys.argv[1])\n",
        "now": {"TF_USE_LEGACY_KERAS": "1"}, "before": {}},
    "text_encode_2000_records": {
        "now": RECORDS + "from beam_jobs.preprocess_text import to_examples\n"
                         "out = to_examples(recs, ('sentiment', 'topic'))\n",
        "before": RECORDS + (
            "import beam_jobs.preprocess_text\n"      # the job's own imports, as on the left
            "import tensorflow as tf\n"
            "def b(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))\n"
            "def i(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))\n"
            "out = [tf.train.Example(features=tf.train.Features(feature={\n"
            "    'example_id': b(r['example_id']), 'text': b(r['text']), 'span': b(r['span']),\n"
            "    'sentiment': i(r['sentiment']), 'topic': i(r['topic'])})).SerializeToString()\n"
            "    for r in recs]\n")},
}


def child(code: str, env: dict, args: list[str]) -> dict:
    """Run `code` in a fresh interpreter; its CPU and wall seconds."""
    base = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys\n" + code, *args], check=True, cwd=REPO,
                   env={**base, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO), **env},
                   capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}


def saved_model(work: Path) -> str:
    """A small SavedModel (a Keras-free tf.Module), as the steps load a trained one."""
    code = ("import tensorflow as tf\n"
            "class M(tf.Module):\n"
            "    def __init__(self):\n"
            "        self.w = tf.Variable(tf.random.normal([4096, 16]))\n"
            "    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])\n"
            "    def __call__(self, ids):\n"
            "        return tf.reduce_sum(tf.gather(self.w, ids), axis=1)\n"
            "tf.saved_model.save(M(), sys.argv[1])\n")
    path = work / "model"
    child(code, {}, [str(path)])
    return str(path)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = saved_model(Path(tmp))
        runs = {case: {"now": [], "before": []} for case in CASES}
        for _ in range(args.rounds):
            for case, c in CASES.items():
                for side in ("before", "now"):
                    if "code" in c:
                        code, env = c["code"], c[side]
                    else:
                        code, env = c[side], {}
                    runs[case][side].append(child(code, env, [model]))
    out = {"cases": {}, "rounds": args.rounds, "python": platform.python_version(),
           "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    for case, sides in runs.items():
        best = {side: min(r, key=lambda x: x["cpu_s"]) for side, r in sides.items()}
        saved = round(best["before"]["cpu_s"] - best["now"]["cpu_s"], 2)
        out["cases"][case] = {**{f"{s}_fastest": best[s] for s in best}, "runs": sides,
                              "cpu_saved_s": saved}
        print(f"{case}: before {best['before']['cpu_s']} s CPU ({best['before']['wall_s']} s "
              f"wall), now {best['now']['cpu_s']} s CPU ({best['now']['wall_s']} s wall): "
              f"{saved} s CPU less per process")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "step_startup.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
