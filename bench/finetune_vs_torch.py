"""Fine-tuning start-up and speed: the product's Keras path vs Hugging Face PyTorch.

Both sides fine-tune the same checkpoint (the bundled all-MiniLM-L6-v2) + one softmax head
per task on the same ~304 reviews, in the SAME batches: the parent process makes them once
with the product's encoder and length bucketing (`components.text.model.make_dataset`,
batch size 16, balanced class weights) and hands them to both sides in an .npz file, so
token ids and shapes are identical. Each side runs in its own process with 2 threads; the
sides alternate (keras, torch, keras, ...) `--rounds` times so the machine's noise hits
both. Per side and round: import seconds, model ready (load the checkpoint, build, compile),
first step seconds, steady examples/s (every step after the first), whole-pass seconds;
the report takes each figure's median over rounds and records the load average.

The Keras side is the product's code: `components.text.model.build_model` and
`components.text.train.compile_model` (optimizer, losses, metrics), `model.fit` over the
batches, the product's learning-rate schedule (`train._learning_rate`). The PyTorch side
is the usual transformers loop with the same arithmetic: mean pooling over the padding
mask, dropout 0.1, AdamW (weight decay 0.01, each gradient clipped to norm 1 as Keras's
clipnorm, the same warm-up + cosine schedule), class-weighted cross-entropy summed over
tasks. PyTorch lives in a bench-only venv (never in requirements.lock or pyproject):

    python3.11 -m venv .venv-bench-torch
    .venv-bench-torch/bin/pip install -r bench/requirements-torch.txt
    .venv/bin/python bench/finetune_vs_torch.py --rounds 3

With `--baseline-root DIR` (say a git worktree of an earlier commit) every round also runs
that checkout's Keras side, so a change to the product's training code is measured
against its own past in the same run (side "baseline").

Writes bench/results/finetune_vs_torch.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TORCH_PYTHON = ROOT / ".venv-bench-torch" / "bin" / "python"
FIGURES = ("import_seconds", "model_ready_seconds", "first_step_seconds",
           "steady_examples_per_second", "pass_seconds")


# ---------------------------------------------------------------- the batches (parent)

def make_batches(path: Path, examples: int, batch_size: int, max_len: int) -> dict:
    """The product's bucketed batches of `examples` reviews, saved to `path` (.npz)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from components.text import config as C
    from components.text import model as M
    from components.text import task_config as T
    from components.text.load import reviews_frame

    import tensorflow as tf

    cfg = T.default()
    df, _ = reviews_frame()
    rows = df.sample(n=examples, random_state=0).to_dict("records")
    cols = {"text": [cfg.text_of(r) for r in rows],
            "example_id": [str(r[cfg.example_id]) for r in rows],
            **{t.name: [t.index_of(r.get(t.label_column)) for r in rows] for t in cfg.tasks}}
    counts = {t: np.bincount([y for y in cols[t] if y >= 0], minlength=len(labels)).tolist()
              for t, labels in cfg.task_labels.items()}
    weights = C.class_weights_for(counts, "balanced")
    encoder = M.Encoder(C.default_checkpoint_dir(), max_len)
    ds = M.make_dataset(tf.data.Dataset.from_tensor_slices(cols), encoder, batch_size,
                        "bucket", weights, tasks=tuple(cfg.task_labels),
                        boundaries=cfg.bucket_boundaries)
    arrays, shapes = {}, []
    for i, (x, y, w) in enumerate(ds):
        arrays[f"ids_{i}"] = x["token_ids"].numpy()
        shapes.append(list(arrays[f"ids_{i}"].shape))
        for t in cfg.task_labels:
            arrays[f"y_{t}_{i}"] = y[t].numpy()
            arrays[f"w_{t}_{i}"] = w[t].numpy()
    np.savez(path, **arrays)
    return {"tasks": cfg.task_labels, "pad_id": encoder.pad, "shapes": shapes,
            "checkpoint": C.default_checkpoint_dir(), "batch_size": batch_size,
            "examples": sum(s[0] for s in shapes)}


def load_batches(path: str, tasks, n: int) -> list:
    import numpy as np

    z = np.load(path)
    return [(z[f"ids_{i}"], {t: z[f"y_{t}_{i}"] for t in tasks},
             {t: z[f"w_{t}_{i}"] for t in tasks}) for i in range(n)]


def _summary(step_ends: list[float], start: float, sizes: list[int]) -> dict:
    steady = step_ends[-1] - step_ends[0]
    return {"first_step_seconds": round(step_ends[0] - start, 3),
            "steady_examples_per_second": round(sum(sizes[1:]) / steady, 2) if steady else None,
            "pass_seconds": round(step_ends[-1] - start, 2)}


# ---------------------------------------------------------------- the Keras side

def keras_side(meta: dict, batches_path: str, threads: int) -> dict:
    t_import = time.perf_counter()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    sys.path.insert(0, str(ROOT))
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    import keras

    from components.text import model as M
    from components.text import train
    t0 = time.perf_counter()

    tasks = meta["tasks"]
    batches = load_batches(batches_path, tasks, len(meta["shapes"]))
    keras.utils.set_random_seed(7)
    t_ready0 = time.perf_counter()
    model = M.build_model(meta["checkpoint"], tasks)
    train.compile_model(model, tasks, train._learning_rate(
        train.FinetuneSpec("", ""), len(batches)))
    t_ready = time.perf_counter()

    pad = meta["pad_id"]
    spec = ({"token_ids": tf.TensorSpec([None, None], tf.int32),
             "padding_mask": tf.TensorSpec([None, None], tf.bool)},
            {t: tf.TensorSpec([None], tf.int32) for t in tasks},
            {t: tf.TensorSpec([None], tf.float32) for t in tasks})
    ds = tf.data.Dataset.from_generator(
        lambda: (({"token_ids": ids, "padding_mask": ids != pad}, y, w)
                 for ids, y, w in batches), output_signature=spec)

    ends, losses = [], []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())
            losses.append(float(logs["loss"]))

    start = time.perf_counter()
    model.fit(ds, epochs=1, verbose=0, callbacks=[Clock()])
    return {"import_seconds": round(t0 - t_import, 2),
            "model_ready_seconds": round(t_ready - t_ready0, 2),
            **_summary(ends, start, [s[0] for s in meta["shapes"]]),
            "mean_loss": round(losses[-1], 4),   # Keras's running mean over the pass
            "steps": len(ends), "versions": {"tensorflow": tf.__version__, "keras": keras.__version__}}


# ---------------------------------------------------------------- the PyTorch side

def torch_side(meta: dict, batches_path: str, threads: int) -> dict:
    t_import = time.perf_counter()
    import math

    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    t0 = time.perf_counter()

    tasks = meta["tasks"]
    batches = load_batches(batches_path, tasks, len(meta["shapes"]))
    torch.manual_seed(7)
    t_ready0 = time.perf_counter()
    encoder = transformers.AutoModel.from_pretrained(meta["checkpoint"], add_pooling_layer=False)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.dropout = torch.nn.Dropout(0.1)
            self.heads = torch.nn.ModuleDict(
                {t: torch.nn.Linear(encoder.config.hidden_size, len(labels))
                 for t, labels in tasks.items()})

        def forward(self, ids, mask):
            seq = self.encoder(input_ids=ids, attention_mask=mask,
                               token_type_ids=torch.zeros_like(ids)).last_hidden_state
            m = mask.unsqueeze(-1).to(seq.dtype)
            pooled = self.dropout((seq * m).sum(1) / m.sum(1).clamp(min=1.0))
            return {t: head(pooled) for t, head in self.heads.items()}

    model = Classifier()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, eps=1e-7)
    n, warmup = len(batches), max(1, int(0.06 * len(batches)))

    def lr_at(step):   # Keras CosineDecay(0, n - warmup, warmup_target, warmup) shape
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * min(step - warmup, n - warmup) / (n - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    t_ready = time.perf_counter()

    ends, loss_sum = [], 0.0
    start = time.perf_counter()
    for ids, y, w in batches:
        ids_t = torch.from_numpy(ids.astype("int64"))
        mask = (ids_t != meta["pad_id"]).long()
        out = model(ids_t, mask)
        loss = sum((torch.nn.functional.cross_entropy(out[t], torch.from_numpy(y[t]).long(),
                                                      reduction="none")
                    * torch.from_numpy(w[t])).sum() / len(ids) for t in tasks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in params:                                   # per-tensor, as Keras clipnorm
            torch.nn.utils.clip_grad_norm_([p], 1.0)
        opt.step()
        sched.step()
        loss_sum += float(loss) * len(ids)
        ends.append(time.perf_counter())
    return {"import_seconds": round(t0 - t_import, 2),
            "model_ready_seconds": round(t_ready - t_ready0, 2),
            **_summary(ends, start, [s[0] for s in meta["shapes"]]),
            "mean_loss": round(loss_sum / sum(len(b[0]) for b in batches), 4),
            "steps": len(ends),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}


# ---------------------------------------------------------------- the driver

def run_side(side: str, meta_path: Path, batches_path: Path, threads: int,
             baseline_root: Path | None = None) -> dict:
    """One side's pass in a fresh process. "baseline": the Keras side of the checkout at
    `baseline_root` (its own components/), for an A/B of two versions of the product."""
    python = str(TORCH_PYTHON) if side == "torch" else sys.executable
    root = baseline_root if side == "baseline" else ROOT
    load_before = os.getloadavg()[0]
    proc = subprocess.run([python, str(root / "bench" / Path(__file__).name),
                           "--side", "torch" if side == "torch" else "keras",
                           "--meta", str(meta_path),
                           "--batches", str(batches_path), "--threads", str(threads)],
                          capture_output=True, text=True, cwd=root,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                               "OMP_NUM_THREADS": str(threads)})
    if proc.returncode != 0:
        raise RuntimeError(f"{side} side failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["load_average_before"] = round(load_before, 2)
    out["load_average_after"] = round(os.getloadavg()[0], 2)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=304)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(RESULTS / "finetune_vs_torch.json"))
    p.add_argument("--baseline-root", type=Path,
                   help="also run the Keras side of this checkout (e.g. a git worktree of "
                        "an earlier commit) in every round, as side 'baseline'")
    p.add_argument("--side", choices=("keras", "torch"), help=argparse.SUPPRESS)
    p.add_argument("--meta", help=argparse.SUPPRESS)
    p.add_argument("--batches", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.side:                        # a child process: one side, one pass
        meta = json.loads(Path(args.meta).read_text())
        fn = keras_side if args.side == "keras" else torch_side
        print(json.dumps(fn(meta, args.batches, args.threads)))
        return {}

    from retrain.common.version import git_commit   # the parent only (the torch venv has no retrain)

    if not TORCH_PYTHON.exists():
        sys.exit(f"no {TORCH_PYTHON}: see this file's docstring for the bench-only venv")
    with tempfile.TemporaryDirectory(prefix="finetune_vs_torch-") as tmp:
        batches_path, meta_path = Path(tmp) / "batches.npz", Path(tmp) / "meta.json"
        meta = make_batches(batches_path, args.examples, args.batch_size, args.max_seq_length)
        meta_path.write_text(json.dumps(meta))
        print(f"{meta['examples']} reviews in {len(meta['shapes'])} batches, lengths "
              f"{sorted({s[1] for s in meta['shapes']})}", flush=True)
        sides = ("keras", "torch", *(("baseline",) if args.baseline_root else ()))
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for r in range(args.rounds):
            for side in sides if r % 2 == 0 else sides[::-1]:
                res = run_side(side, meta_path, batches_path, args.threads, args.baseline_root)
                runs[side].append(res)
                print(f"round {r + 1} {side:5}: " + ", ".join(
                    f"{k} {res[k]}" for k in FIGURES) + f" (load {res['load_average_before']})",
                    flush=True)

    median = {side: {k: round(statistics.median(r[k] for r in rs), 2) for k in FIGURES}
              for side, rs in runs.items()}
    print(f"\nmedian of {args.rounds} rounds, {args.threads} threads, batch {args.batch_size}:")
    print(f"{'':8}" + "".join(f"{k.replace('_', ' '):>28}" for k in FIGURES))
    for side in runs:
        print(f"{side:8}" + "".join(f"{median[side][k]:>28}" for k in FIGURES))
    result = {"benchmark": "finetune_vs_torch", "examples": meta["examples"],
              "batches": len(meta["shapes"]), "batch_shapes": meta["shapes"],
              "batch_size": args.batch_size, "threads": args.threads,
              "median": median, "runs": runs,
              "baseline": args.baseline_root and {"root": str(args.baseline_root),
                                                  "commit": git_commit(args.baseline_root)},
              "commit": git_commit(ROOT),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_average_end": [round(x, 2) for x in os.getloadavg()]},
              "command": "python bench/finetune_vs_torch.py " + " ".join(argv or sys.argv[1:]),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
