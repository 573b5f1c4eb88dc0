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
