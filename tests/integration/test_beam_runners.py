"""Every Beam job of the project gives the same output on each runner it may meet.

(a) the in-process FnApiRunner (`beam_jobs.runner.pipeline`, the local default); (b) the
FnApiRunner with two SDK worker processes (`--direct_running_mode=multi_processing`): the
work really split, counters and combiner states merged across processes; (c) the
PortableRunner through Beam's Python job service with an EXTERNAL SDK worker pool
(`beam_services.py`): the boundary Flink, Spark and Dataflow put between a pipeline and
its workers (the pipeline as a proto, options through the job API, DoFns unpickled in a
worker process the pool started, counters reported back over the job API).

Outputs are compared by content, never by file names or order: multisets of parsed
tf.Examples, Parquet rows and JSON lines, vocabularies byte for byte, and the counters
that define each summary. Statistics merged in another order (means, variances) agree
within float rounding, text scores within a unit of their 6th decimal (batches differ). (a) is the session fixture where one exists; (b) and (c) run once
per job, (c) on one job service and worker pool for the whole module. The evaluation
job's own check is in test_evaluation_job.py.
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration

SPAN = "2026-11-03"             # as in conftest.py
EVAL_PERCENT = 25
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
TEXT_SPAN = "2026-11-02"


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """Runner flags of one job service + worker pool, for every job of the module (the
    services' log is kept beside the outputs for a failure's post-mortem)."""
    from beam_services import portable_runner_args
    with open(tmp_path_factory.mktemp("beam-services") / "services.log", "wb") as log, \
            portable_runner_args(log) as args:
        yield args


def _runs(portable):
    """(name, beam args, the runner a summary names) of the two runners besides (a)."""
    return [("multi_processing", MULTI, "FnApiRunner"),
            ("portable", portable, "PortableRunner")]


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _multiset(rows) -> list[str]:
    return sorted(_canonical(r) for r in rows)


def _assert_close(a, b, where: str = "") -> None:
    """Equal JSON values, floats within merge-order rounding."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), where
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, a.keys(), b)
        for k in a:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


# ------------------------------------------------------------------ CTR preprocessing

def _ctr_counts(summary: dict) -> dict:
    """What defines the output: the window, the row counters (every split), the rejects."""
    return {**{k: v for k, v in summary.items()
               if k.startswith("rows_") and k != "rows_per_second"},
            **{k: summary[k] for k in ("window", "input_files", "rejected_by_reason",
                                       "eval_percent", "feature_config")},
            "rows_analysed": summary["analysis"]["rows_analysed"]}


def test_preprocess_ctr_gives_the_same_output_on_every_runner(home, preprocessed, portable,
                                                             tmp_path):
    """(a) is the session's `preprocessed` (the same spec, in-process)."""
    from components.ctr import feature_config
    from components.ctr.preprocess import PreprocessSpec, run
    from test_preprocess_ctr_job import assert_same_rows, read_split

    ref = Path(preprocessed["output_dir"])
    assets = ref / "transform_fn_output" / "transform_fn" / "assets"
    vocabs = {p.name: p.read_bytes() for p in assets.iterdir()}
    assert preprocessed["runner"] == "FnApiRunner" and len(vocabs) >= 2
    splits = sorted(d.name for d in ref.iterdir() if any(d.glob("*.tfrecord.gz")))
    assert {"train", "eval"} <= set(splits)
    rows = {split: read_split(str(ref), split) for split in splits}
    for name, beam_args, runner_name in _runs(portable):
        summary = run(PreprocessSpec(raw_root=str(home / "raw" / "ctr"), span=SPAN,
                                     output_dir=str(tmp_path / name), window_days=2,
                                     eval_percent=EVAL_PERCENT, beam_args=beam_args))
        out = Path(summary["output_dir"])
        assert summary["runner"] == runner_name, name
        assert _ctr_counts(summary) == _ctr_counts(preprocessed), name
        assert {p.name: p.read_bytes() for p in
                (out / "transform_fn_output" / "transform_fn" / "assets").iterdir()} == vocabs
        assert (out / feature_config.FEATURE_CONFIG_FILE).read_bytes() == \
            (ref / feature_config.FEATURE_CONFIG_FILE).read_bytes()
        assert _multiset(_lines(out / "rejected")) == _multiset(_lines(ref / "rejected"))
        for split, expected in rows.items():
            # Means and variances merged in another order: the last float32 bits may differ.
            assert_same_rows(read_split(str(out), split), expected, exact=False)


def _lines(folder: Path) -> list:
    return [json.loads(x) for p in sorted(folder.glob("*.jsonl"))
            for x in p.read_text().splitlines()]


# ------------------------------------------------------------------ span statistics

@pytest.fixture(scope="module")
def jsonl_span(home, tmp_path_factory):
    """Day 2026-11-01 of the session logs as two JSONL parts (one gzip), with 7 records
    the reader rejects spread over both: the rejected counters and examples are merged
    across batches too."""
    rows = pq.read_table(home / "raw" / "ctr" / "dt=2026-11-01" / "part-00000.parquet")
    lines = [_canonical(r) + "\n" for r in rows.to_pylist()]
    for i, bad in enumerate(['{"example_id": "x",, }\n', '"a string"\n', "[1, 2]\n",
                             '{"example_id": "y"\n', "{not json}\n", '{"a": }\n', "nan\n"]):
        lines.insert(300 + i * 550, bad)
    day = tmp_path_factory.mktemp("jsonl-raw") / "dt=2026-11-04"
    day.mkdir()
    half = len(lines) // 2
    (day / "part-00000.jsonl").write_text("".join(lines[:half]))
    with gzip.open(day / "part-00001.jsonl.gz", "wt") as f:
        f.writelines(lines[half:])
    (day / "_SUCCESS").touch()
    return day


def _span_stats(spans, out: Path, beam_args) -> tuple[dict, dict]:
    from beam_jobs import span_stats
    argv = [a for d in spans for a in ("--span-dir", str(d))]
    # 500-row batches: every part is several combiner inputs. Top-value counters for every
    # distinct value (4,000 rows): exact, so independent of the merge order (past
    # --topk-capacity Misra-Gries counters depend on it, within topk_error_bound).
    summary = span_stats.run([*argv, "--output-dir", str(out), "--batch-size", "500",
                              "--sample-rows", "300", "--topk-capacity", "5000", *beam_args])
    outputs = {}
    for d in spans:
        stats = json.loads((out / d.name / span_stats.STATS_FILE).read_text())
        sample = pq.read_table(out / d.name / span_stats.SAMPLE_FILE).to_pylist()
        outputs[d.name] = (stats, _multiset(sample))
    return summary, outputs


def test_span_stats_gives_the_same_statistics_on_every_runner(home, jsonl_span, portable,
                                                             tmp_path):
    spans = [home / "raw" / "ctr" / "dt=2026-11-02", home / "raw" / "ctr" / f"dt={SPAN}",
             jsonl_span]
    summary, ref = _span_stats(spans, tmp_path / "in_process", [])
    assert summary["runner"] == "FnApiRunner" and summary["rows"] > 8000
    stats, sample = ref[jsonl_span.name]
    assert stats["rejected_rows"] == 7 and len(sample) == 300
    examples = stats["rejected_examples"]
    assert len(examples) == 5 and examples == sorted(    # the first five in the files
        examples, key=lambda e: (e["source"], e["line"]))
    assert all(s["columns"]["user_id"]["topk_exact"] for s, _ in ref.values())
    for name, beam_args, runner_name in _runs(portable):
        summary, got = _span_stats(spans, tmp_path / name, beam_args)
        assert summary["runner"] == runner_name
        assert got.keys() == ref.keys()
        for span, (stats, sample) in got.items():
            _assert_close(stats, ref[span][0], f"{name}:{span}")
            assert sample == ref[span][1], (name, span)


# ------------------------------------------------------------------ text preprocessing

@pytest.fixture(scope="module")
def text_raw(tmp_path_factory):
    """Two days of the bundled reviews (100 each), and on the second day a JSONL part with
    exact and near copies of first-day texts and empty texts."""
    from components.text.load import LoadTextSpec, run as load_text
    root = tmp_path_factory.mktemp("text-home")
    load_text(LoadTextSpec(out_root=str(root), start="2026-11-01", days=2,
                           max_rows_per_day=100))
    raw = root / "raw" / "text"
    first = pq.read_table(raw / "dt=2026-11-01" / "part-00000.parquet").to_pylist()
    extra = ([{**r, "example_id": f"copy-{i}"} for i, r in enumerate(first[:6])]
             + [{**r, "example_id": f"near-{i}", "text": r["text"].upper() + " !!"}
                for i, r in enumerate(first[6:12])]
             + [{**first[12], "example_id": "blank", "text": "   "},
                {**first[13], "example_id": "empty", "text": ""}])
    (raw / f"dt={TEXT_SPAN}" / "part-00001.jsonl").write_text(
        "".join(_canonical(r) + "\n" for r in extra))
    return raw


def _examples(folder: Path) -> list[str]:
    import tensorflow as tf
    rows = []
    for record in tf.data.TFRecordDataset(sorted(str(p) for p in folder.glob("*.tfrecord.gz")),
                                          compression_type="GZIP"):
        ex = tf.train.Example.FromString(record.numpy())
        rows.append({k: [v.decode() if isinstance(v, bytes) else v for v in
                         (f.bytes_list.value or f.int64_list.value)]
                     for k, f in ex.features.feature.items()})
    return _multiset(rows)


def _text_output(raw: Path, out: Path, beam_args) -> tuple[dict, dict]:
    from components.text.formats import EVAL_DIR, TRAIN_DIR
    from components.text.preprocess import TextPreprocessSpec, run
    summary = run(TextPreprocessSpec(raw_root=str(raw), span=TEXT_SPAN, output_dir=str(out),
                                     window_days=2, eval_percent=EVAL_PERCENT,
                                     beam_args=beam_args))
    return summary, {split: _examples(out / split) for split in (TRAIN_DIR, EVAL_DIR)}


def test_preprocess_text_gives_the_same_output_on_every_runner(text_raw, portable, tmp_path):
    from components.text import task_config as T
    summary, ref = _text_output(text_raw, tmp_path / "in_process", ["--runner=DirectRunner"])
    assert summary["runner"] == "FnApiRunner"
    assert summary["rows_in"] == 214 and summary["rows_empty_text"] == 2
    assert summary["exact_duplicates"] >= 6 and summary["near_duplicates"] >= 6
    assert all(ref.values()) and sum(map(len, ref.values())) == \
        summary["rows_train"] + summary["rows_eval"]
    defining = {k: v for k, v in summary.items()
                if k not in ("seconds", "runner", "output_dir")}
    for name, beam_args, runner_name in _runs(portable):
        got, examples = _text_output(text_raw, tmp_path / name, beam_args)
        assert got["runner"] == runner_name
        assert {k: v for k, v in got.items() if k in defining} == defining, name
        assert examples == ref, name
        assert (tmp_path / name / T.CONFIG_FILE).read_bytes() == \
            (tmp_path / "in_process" / T.CONFIG_FILE).read_bytes()


# ------------------------------------------------------------------ text scoring

@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    from components.text import task_config as T
    from savedmodels import save_text_model
    cfg = T.default()
    return save_text_model(tmp_path_factory.mktemp("text-model") / "model", cfg.task_labels,
                           T.resolved(cfg))


def _scores(raw: Path, model: str, out: Path, beam_args) -> tuple[dict, dict]:
    from beam_jobs import score_text
    summary = score_text.run(["--raw-root", str(raw), "--span", TEXT_SPAN, "--window-days",
                              "2", "--model-dir", model, "--output-dir", str(out),
                              "--batch-size", "16", *beam_args])
    rows = [json.loads(x) for p in sorted(out.glob("scores*.jsonl"))
            for x in p.read_text().splitlines()]
    by_id = {r["example_id"]: r for r in rows}
    assert len(by_id) == len(rows)
    return summary, by_id


def _assert_same_scores(got: dict, ref: dict, where: str) -> None:
    """The same rows and labels; probabilities within a unit of their 6th decimal. A row's
    probabilities depend on the batch it was scored in by float rounding (TensorFlow's
    vectorized kernels), and BatchElements batches by bundle, which the runner decides:
    rounded to 6 decimals, 2 rows of 200 differed in the last digit between batches of 16
    and of 1 on one runner."""
    assert got.keys() == ref.keys(), where
    for key, r in ref.items():
        g = got[key]
        assert g.keys() == r.keys(), (where, key)
        for field, value in r.items():
            if field.endswith("_probs"):
                assert g[field].keys() == value.keys(), (where, key, field)
                for label, p in value.items():
                    assert abs(g[field][label] - p) <= 2e-6, (where, key, field, label)
            else:
                assert g[field] == value, (where, key, field)


def test_score_text_gives_the_same_scores_on_every_runner(text_raw, text_model, portable,
                                                         tmp_path):
    summary, ref = _scores(text_raw, text_model, tmp_path / "in_process", [])
    assert summary["runner"] == "FnApiRunner"
    assert summary["rows_scored"] == len(ref) == 212 and summary["rows_empty_text"] == 2
    for name, beam_args, runner_name in _runs(portable):
        got, rows = _scores(text_raw, text_model, tmp_path / name, beam_args)
        assert got["runner"] == runner_name
        assert (got["rows_scored"], got["rows_empty_text"]) == \
            (summary["rows_scored"], summary["rows_empty_text"]), name
        _assert_same_scores(rows, ref, name)


# ------------------------------------------------------------------ recommendations

def _recommendations(home, model_dir: str, out: Path, workers: int = 1, beam_args=()):
    from components.ctr.recommend import RecommendSpec, run
    summary = run(RecommendSpec(raw_root=str(home / "raw" / "ctr"), span=SPAN,
                                output_dir=str(out), model_dir=model_dir, active_days=1,
                                pool_size=40, k=5, num_shards=4, beam_workers=workers,
                                beam_args=list(beam_args)))
    rows = pq.read_table(sorted(str(p) for p in out.glob("part-*.parquet"))).to_pylist()
    return summary, _multiset(rows)


REC_COUNTS = ("users", "rows", "pool_items", "shards", "users_scored", "pairs_scored", "k")


def test_recommend_ctr_gives_the_same_recommendations_on_every_runner(home, trained,
                                                                     portable, tmp_path):
    """The step launches the job with its own worker flags: one process, two
    (`beam_workers=2`: (b)), or the runner's options (`beam_args`: (c))."""
    model = trained["model_dir"]
    summary, ref = _recommendations(home, model, tmp_path / "in_process")
    assert summary["runner"] == "FnApiRunner" and summary["users"] > 100
    assert summary["pairs_scored"] == summary["users"] * summary["pool_items"]
    for name, launch, runner_name in (("multi_processing", {"workers": 2}, "FnApiRunner"),
                                      ("portable", {"beam_args": portable}, "PortableRunner")):
        got, rows = _recommendations(home, model, tmp_path / name, **launch)
        assert got["runner"] == runner_name
        assert {k: got[k] for k in REC_COUNTS} == {k: summary[k] for k in REC_COUNTS}, name
        assert rows == ref, name
