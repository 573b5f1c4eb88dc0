"""Serving check: prove an exported model serves raw requests before it is published.

Evaluation scored the model in the process that trained or loaded it; publishing puts it
in front of TF Serving, which loads only the SavedModel. So, in a fresh process (the
`python -m` entry point the push task launches), this step loads the SavedModel, sends
raw, untransformed eval rows through its serving signature one request at a time (batch
of 1) and in batches (256), and checks: the signature takes raw feature columns, the
output has one score per row, every score is finite and inside (0, 1), the p99 latency
per request is under a limit, and the scores equal the ones evaluation computed for the
same rows (`scores_sample.json` in the evaluation dir). Any failure raises
`ServingCheckFailed` naming every failed check, so the push task fails and nothing is
published. Writes `serving_check.json` (passed or not) into `out_dir` when given.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

from retrain.common import tf_keras_env
from retrain.common.step import main

log = logging.getLogger(__name__)

RESULT_FILE = "serving_check.json"
WARMUP_REQUESTS = 3


class ServingCheckFailed(RuntimeError):
    """The model must not be published: it cannot serve raw requests correctly."""


@dataclasses.dataclass
class ServingCheckSpec:
    model_dir: str                 # the exported SavedModel (what would be published)
    eval_dir: str                  # evaluation output holding scores_sample.json
    out_dir: str | None = None     # serving_check.json goes here when set
    span_dir: str | None = None    # raw rows to send; default: the span evaluation read
    signature: str = "serving_default"
    output_key: str = "p_click"    # used when the signature has several outputs
    max_abs_diff: float = 1e-4     # |serving score - evaluation score|, per row
    batch_size: int = 256
    latency_requests: int = 100    # timed requests per batch size (after a warm-up)
    # Generous limits: they catch a pathological model (a Python loop, a giant graph),
    # not a slow CI machine. Tune per deployment.
    max_p99_ms_single: float = 250.0
    max_p99_ms_batch: float = 2000.0


def _percentiles(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"requests": int(a.size), "p50_ms": round(float(np.percentile(a, 50)), 3),
            "p99_ms": round(float(np.percentile(a, 99)), 3),
            "mean_ms": round(float(a.mean()), 3), "max_ms": round(float(a.max()), 3)}


def run(spec: ServingCheckSpec) -> dict:
    """Load the SavedModel, send raw requests, check outputs and latency; raise on failure."""
    from retrain.common.atomic import read_json, write_json
    from components.ctr import rawdata
    from components.ctr.evaluate import SCORES_SAMPLE_FILE

    sample_path = Path(spec.eval_dir) / SCORES_SAMPLE_FILE
    if not sample_path.is_file():
        raise FileNotFoundError(f"no {SCORES_SAMPLE_FILE} in {spec.eval_dir}: the evaluation "
                                f"step writes it; run evaluation first")
    sample = read_json(sample_path)
    ids, expected = sample["example_ids"], np.asarray(sample["scores"], dtype=np.float64)
    if not ids:
        raise ValueError(f"{sample_path} holds no rows to send")
    span_dir = spec.span_dir or sample["span_dir"]
    if os.path.realpath(sample.get("model_dir") or "") != os.path.realpath(spec.model_dir):
        log.warning("evaluation scored %s; checking %s (scores must still match)",
                    sample.get("model_dir"), spec.model_dir)
    from components.ctr import feature_config
    cfg = feature_config.for_model_dir(spec.model_dir)
    raw = rawdata.to_raw_features(rawdata.read_rows_by_id(span_dir, ids, cfg), cfg)
    n = len(ids)

    result: dict = {"model_dir": spec.model_dir, "signature": spec.signature, "rows": n,
                    "span_dir": span_dir, "pid": os.getpid(), "checks": []}

    def fail_now(message: str) -> ServingCheckFailed:
        result.update(passed=False, error=message)
        if spec.out_dir:
            write_json(Path(spec.out_dir) / RESULT_FILE, result)
        return ServingCheckFailed(f"serving check failed for {spec.model_dir}: {message}; "
                                  f"not publishing")

    import tensorflow as tf
    started = time.perf_counter()
    try:
        loaded = tf.saved_model.load(spec.model_dir)
    except Exception as e:  # noqa: BLE001 - any load error means "cannot serve"
        raise fail_now(f"cannot load the SavedModel ({type(e).__name__}: {e})") from e
    result["load_seconds"] = round(time.perf_counter() - started, 3)
    if spec.signature not in loaded.signatures:
        raise fail_now(f"no signature {spec.signature!r} (has {sorted(loaded.signatures)})")
    serve = loaded.signatures[spec.signature]

    # The signature must take raw columns, with the raw dtypes: TF Serving clients send
    # log rows, not transformed features.
    inputs = serve.structured_input_signature[1]
    result["inputs"] = {k: v.dtype.name for k, v in sorted(inputs.items())}
    unknown = sorted(set(inputs) - set(raw))
    if unknown:
        raise fail_now(f"signature inputs {unknown} are not raw feature columns (raw: "
                       f"{sorted(raw)}); is it a transformed-feature signature?")
    wrong = {k: (v.dtype.name, tf.constant(raw[k][:1]).dtype.name) for k, v in inputs.items()
             if tf.constant(raw[k][:1]).dtype != v.dtype}
    if wrong:
        raise fail_now("signature input dtypes differ from the raw columns' "
                       + ", ".join(f"{k}: wants {a}, raw is {b}" for k, (a, b) in wrong.items()))
    unused = sorted(set(raw) - set(inputs))
    if unused:
        log.warning("signature ignores raw columns %s", unused)

    def request(index: np.ndarray) -> tuple[np.ndarray, float]:
        t0 = time.perf_counter()
        outputs = serve(**{k: tf.constant(raw[k][index]) for k in inputs})
        if spec.output_key in outputs:
            out = outputs[spec.output_key]
        elif len(outputs) == 1:
            out = next(iter(outputs.values()))
        else:
            raise fail_now(f"signature outputs {sorted(outputs)} include no "
                           f"{spec.output_key!r}")
        values = out.numpy()
        return values, (time.perf_counter() - t0) * 1000.0

    checks: list[dict] = result["checks"]

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append({"name": name, "passed": bool(passed), "detail": detail})
        (log.info if passed else log.error)("serving check %s: %s (%s)", name,
                                            "pass" if passed else "FAIL", detail)

    # Every sample row once, in batches; shapes must be (batch,) or (batch, 1).
    pieces, shapes = [], []
    try:
        for start in range(0, n, spec.batch_size):
            index = np.arange(start, min(start + spec.batch_size, n))
            values, _ = request(index)
            shapes.append((len(index), tuple(values.shape)))
            pieces.append(values)
        single, _ = request(np.arange(1))
        shapes.append((1, tuple(single.shape)))
    except ServingCheckFailed:
        raise
    except Exception as e:  # noqa: BLE001 - a signature that raises cannot serve
        raise fail_now(f"a raw request raised {type(e).__name__}: {e}") from e
    bad_shapes = [(b, s) for b, s in shapes if s not in ((b,), (b, 1))]
    check("output_shape", not bad_shapes,
          "one score per row" if not bad_shapes else
          "; ".join(f"batch of {b} returned shape {s}, expected ({b},)" for b, s in
                    bad_shapes[:3]))
    scores = np.concatenate([p.reshape(-1) for p in pieces]).astype(np.float64)
    finite = np.isfinite(scores)
    check("finite", bool(finite.all()),
          "no NaN or inf" if finite.all() else
          f"{int((~finite).sum())} of {scores.size} scores are NaN or inf")
    inside = finite & (scores > 0.0) & (scores < 1.0)
    check("range", bool(inside.all()),
          f"all in (0, 1): min {scores.min():.3g}, max {scores.max():.3g}" if inside.all()
          else f"{int((~inside).sum())} of {scores.size} scores outside (0, 1)"
               + (f" (min {np.nanmin(scores):.3g}, max {np.nanmax(scores):.3g})"
                  if finite.any() else ""))
    if not bad_shapes:
        diff = np.abs(scores - expected)
        worst = int(np.nanargmax(diff)) if np.isfinite(diff).any() else 0
        max_diff = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
        ok = bool(np.isfinite(diff).all() and max_diff <= spec.max_abs_diff)
        result["max_abs_diff"] = max_diff
        check("matches_evaluation", ok,
              f"max |serving - evaluation| = {max_diff:.3g} over {n} rows "
              f"(tolerance {spec.max_abs_diff:g})" + ("" if ok else
              f"; e.g. {ids[worst]}: serving {scores[worst]:.6g}, "
              f"evaluation {expected[worst]:.6g}"))
    else:
        check("matches_evaluation", False, "not compared: wrong output shape")

    # Latency per request, after a warm-up (the first calls trace and allocate).
    result["latency"] = {}
    rng = np.random.default_rng(0)
    for batch, limit, name in ((1, spec.max_p99_ms_single, "latency_single"),
                               (spec.batch_size, spec.max_p99_ms_batch, "latency_batch")):
        times = []
        for i in range(WARMUP_REQUESTS + spec.latency_requests):
            index = rng.integers(0, n, size=batch)  # rows repeat when n < batch
            _, ms = request(index)
            if i >= WARMUP_REQUESTS:
                times.append(ms)
        stats = _percentiles(times)
        result["latency"][str(batch)] = stats
        check(name, stats["p99_ms"] <= limit,
              f"batch of {batch}: p50 {stats['p50_ms']:.2f} ms, p99 {stats['p99_ms']:.2f} ms "
              f"(limit {limit:g} ms) over {stats['requests']} requests")

    failed = [c for c in checks if not c["passed"]]
    result["passed"] = not failed
    if spec.out_dir:
        result["result_uri"] = str(write_json(Path(spec.out_dir) / RESULT_FILE, result))
    if failed:
        raise ServingCheckFailed(
            f"serving check failed for {spec.model_dir}: "
            + "; ".join(f"{c['name']}: {c['detail']}" for c in failed) + "; not publishing")
    return result


if __name__ == "__main__":
    tf_keras_env.use_keras2()   # loads a SavedModel only: TensorFlow skips Keras 3
    sys.exit(main(ServingCheckSpec, run))
