"""The text preprocessing Beam job's logic: normalization, duplicate counting across the
window, and a train/eval split that never moves a text between splits.

Run with Beam's TestPipeline + assert_that on the real transforms (DirectRunner).
"""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess_text as P
from components.text import task_config as T


def _rec(i, text, span="2026-11-02", sentiment=2, topic=0):
    return {"example_id": f"id-{i}", "text": P.normalize(text), "span": span,
            "sentiment": sentiment, "topic": topic}


def test_normalize_and_near_key():
    assert P.normalize("  Love\u200b it!\n\tGreat \x07 fit  ") == "Love it! Great fit"
    assert P.near_key(P.normalize("LOVE it!!!")) == P.near_key(P.normalize("love  it"))
    assert P.near_key("love it") != P.near_key("loved it")


def test_to_record_maps_labels_and_drops_empty_text():
    cfg = T.default()
    row = {"example_id": "a", "text": " Nice ", "sentiment": "neutral", "topic": "Tops",
           "rating": 3}
    rec = P.to_record(row, "2026-11-01", cfg)
    assert rec == {"example_id": "a", "text": "Nice", "span": "2026-11-01",
                   "sentiment": 1, "topic": 4}
    assert P.to_record({**row, "text": "  \n"}, "2026-11-01", cfg) is None
    assert P.to_record({**row, "sentiment": None}, "d", cfg)["sentiment"] == T.UNLABELLED
    with pytest.raises(ValueError, match="not one of"):
        P.to_record({**row, "topic": "Shoes"}, "d", cfg)


def test_to_record_follows_the_config_template_and_derived_labels():
    cfg = T.from_dict({"example_id": "tid", "text_template": "{subject}. {body}",
                       "tasks": {"urgent": {"label_column": "priority", "labels": ["no", "yes"],
                                            "thresholds": [2]}}})
    rec = P.to_record({"tid": 7, "subject": "Refund", "body": " card  charged twice",
                       "priority": 4}, "d", cfg)
    assert rec == {"example_id": "7", "text": "Refund. card charged twice", "span": "d",
                   "urgent": 1}
    assert P.to_record({"tid": 8, "subject": "Hi", "body": "x", "priority": 2}, "d",
                       cfg)["urgent"] == 0


def test_dedup_counts_exact_and_near_duplicates_across_days():
    records = [
        _rec(1, "Love this dress!", span="2026-11-01"),
        _rec(2, "Love this dress!", span="2026-11-02"),      # exact copy, newer day
        _rec(3, "love this dress", span="2026-11-01"),       # near copy
        _rec(4, "LOVE   this dress!!", span="2026-11-02"),   # near copy
        _rec(5, "Runs small, size up."),
        _rec(6, "Runs small, size up."),                     # exact copy, same day
        _rec(7, "The fabric pilled after one wash."),
    ]
    with TestPipeline() as p:
        out = p | beam.Create(records) | P.DedupAndSplit(eval_percent=50)
        kept_ids = out["records"] | "Ids" >> beam.Map(lambda r: r["example_id"])
        counts = out["dups"] | beam.CombinePerKey(sum)
        # Newest span wins; within a span the smallest id.
        assert_that(kept_ids, equal_to(["id-2", "id-5", "id-7"]), label="kept")
        assert_that(counts, equal_to([("exact", 2), ("near", 2)]), label="counts")


def test_split_is_a_stable_function_of_the_text():
    texts = [f"review number {i}, quite nice" for i in range(400)]
    splits = [P.split_of(P.near_key(t), 20) for t in texts]
    assert splits == [P.split_of(P.near_key(t), 20) for t in texts]   # same every day
    share = splits.count("eval") / len(splits)
    assert 0.12 < share < 0.28
    # Copies of a text (any case/punctuation) land in the same split as the original.
    assert {P.split_of(P.near_key(P.normalize(v)), 20)
            for v in ("Great fit!", "great fit", "GREAT   FIT!!")} \
        == {P.split_of(P.near_key("Great fit!"), 20)}
    # Growing the window by a day does not move any earlier text: the split depends
    # on the text alone, so pipeline runs over different windows agree.
    with TestPipeline() as p:
        recs = [_rec(i, t) for i, t in enumerate(texts[:50])]
        out = p | beam.Create(recs) | P.DedupAndSplit(eval_percent=20)
        pairs = out["records"] | beam.Map(lambda r: (r["text"], r["split"]))
        assert_that(pairs, equal_to([(t, P.split_of(P.near_key(t), 20)) for t in texts[:50]]))


def test_class_counts_merge_partial_counts_of_every_worker():
    labels = {"sentiment": ["negative", "neutral", "positive"], "topic": ["Tops", "Dresses"]}
    recs = [_rec(0, "a", sentiment=2, topic=0), _rec(1, "b", sentiment=T.UNLABELLED, topic=1),
            _rec(2, "c", sentiment=0, topic=1), _rec(3, "d", sentiment=2, topic=T.UNLABELLED)]
    want = {"rows": 4, "class_counts": {"sentiment": [1, 0, 2], "topic": [1, 2]},
            "unlabelled": {"sentiment": 1, "topic": 1}}
    fn = P.ClassCounts(labels)
    halves = [fn.create_accumulator(), fn.create_accumulator()]
    for i, r in enumerate(recs):      # two workers' bundles, merged as the runner merges them
        halves[i % 2] = fn.add_input(halves[i % 2], r)
    assert fn.extract_output(fn.merge_accumulators(halves)) == want
    with TestPipeline() as p:
        out = p | beam.Create(recs) | beam.CombineGlobally(P.ClassCounts(labels))
        assert_that(out, equal_to([want]))


def test_examples_are_the_records_as_tf_examples():
    import tensorflow as tf
    recs = [_rec(0, "Läuft gut", topic=1), _rec(1, "fine", sentiment=T.UNLABELLED)]
    examples = [tf.train.Example.FromString(b)
                for b in P.to_examples(recs, ("sentiment", "topic"))]
    got = [{k: list(f.bytes_list.value or f.int64_list.value)
            for k, f in ex.features.feature.items()} for ex in examples]
    assert got == [{"example_id": [b"id-0"], "text": ["Läuft gut".encode()],
                    "span": [b"2026-11-02"], "sentiment": [2], "topic": [1]},
                   {"example_id": [b"id-1"], "text": [b"fine"], "span": [b"2026-11-02"],
                    "sentiment": [T.UNLABELLED], "topic": [0]}]


def test_the_job_process_never_imports_tensorflow(tmp_path):
    """As a task runs it (a fresh process): the job writes its tf.Examples without
    TensorFlow, whose import cost every job and worker process about 4 s of CPU."""
    import subprocess
    import sys

    from components.text.load import LoadTextSpec, run as load_text
    load_text(LoadTextSpec(out_root=str(tmp_path), start="2026-11-01", days=1,
                           max_rows_per_day=60))
    code = ("import sys\n"
            "from components.text.preprocess import TextPreprocessSpec, run\n"
            f"s = run(TextPreprocessSpec(raw_root={str(tmp_path / 'raw' / 'text')!r}, "
            f"span='2026-11-01', output_dir={str(tmp_path / 'out')!r}, window_days=1))\n"
            "print(s['rows_train'] + s['rows_eval'], 'tensorflow' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    rows, tf_loaded = out.stdout.split()[-2:]
    assert int(rows) > 0 and tf_loaded == "False"
    assert list((tmp_path / "out" / "train").glob("*.tfrecord.gz"))
