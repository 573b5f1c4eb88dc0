"""Fine-tuning throughput: every batch padded to 128 tokens vs. length-bucketed batches.

Same model (the real all-MiniLM-L6-v2 checkpoint + two heads), same real reviews, same
batch size, one run, so the machine's noise hits both. Each mode first runs a short
warm-up fit (graph tracing is not counted), then a timed fit over the same examples.
Prints training examples/s and the padded tokens per example of each mode, and writes
bench/results/finetune_text.json.

    .venv/bin/python bench/finetune_text.py --examples 256 --batch-size 16
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=256, help="reviews per timed fit")
    p.add_argument("--warmup-examples", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--out", default=str(RESULTS / "finetune_text.json"))
    args = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    from components.text import model as M
    from components.text import task_config as T
    from components.text.config import default_checkpoint_dir
    from components.text.load import reviews_frame

    df, _ = reviews_frame()
    df = df.sample(n=args.examples + args.warmup_examples, random_state=0)
    cfg = T.default()
    rows = df.to_dict("records")
    cols = {"text": [cfg.text_of(r) for r in rows], "example_id": df[cfg.example_id].tolist(),
            **{t.name: [t.index_of(r.get(t.label_column)) for r in rows] for t in cfg.tasks}}
    records = tf.data.Dataset.from_tensor_slices(cols).cache()
    warm, timed = records.take(args.warmup_examples), records.skip(args.warmup_examples)

    ckpt = default_checkpoint_dir()
    encoder = M.Encoder(ckpt, args.max_seq_length)
    keras.utils.set_random_seed(0)
    model = M.build_model(ckpt, cfg.task_labels)
    model.compile(optimizer=keras.optimizers.AdamW(5e-5),
                  loss={t: "sparse_categorical_crossentropy" for t in cfg.task_labels})
    modes = {"fixed_128": "fixed", "bucketed": "bucket"}
    out = {}
    for name, padding in modes.items():
        ds = M.make_dataset(timed, encoder, args.batch_size, padding,
                            tasks=tuple(cfg.task_labels))
        tokens = [int(np.prod(x["token_ids"].shape)) for x, _, _ in ds]
        model.fit(M.make_dataset(warm, encoder, args.batch_size, padding,
                                 tasks=tuple(cfg.task_labels)), epochs=1, verbose=0)
        t0 = time.perf_counter()
        model.fit(ds, epochs=1, verbose=0)
        seconds = time.perf_counter() - t0
        out[name] = {"examples_per_second": round(args.examples / seconds, 2),
                     "seconds": round(seconds, 2),
                     "padded_tokens_per_example": round(sum(tokens) / args.examples, 1)}
        print(f"{name:10} {out[name]['examples_per_second']:8.2f} examples/s  "
              f"({seconds:.1f} s, {out[name]['padded_tokens_per_example']} padded tokens/example)")
    speedup = out["bucketed"]["examples_per_second"] / out["fixed_128"]["examples_per_second"]
    print(f"bucketed / fixed-128: {speedup:.2f}x")
    result = {"benchmark": "finetune_text", "examples": args.examples,
              "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
              "modes": out, "speedup_bucketed_vs_fixed": round(speedup, 2),
              "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version(),
                          "tensorflow": tf.__version__, "keras": keras.__version__,
                          "load_average": list(__import__("os").getloadavg())},
              "command": "python bench/finetune_text.py " + " ".join(argv or []),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
