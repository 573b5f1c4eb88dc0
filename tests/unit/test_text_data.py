"""Text spans: the real reviews and a user's JSONL become daily partitions, and the
great-expectations suite passes a real span and catches broken ones."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from components.text import config as C
from components.text import load
from components.text.validate import TextValidateSpec, ValidationFailed, run as validate


@pytest.fixture(scope="module")
def reviews_home(tmp_path_factory):
    root = tmp_path_factory.mktemp("text-home")
    result = load.run(load.LoadTextSpec(out_root=str(root), start="2026-11-01", days=3,
                                        max_rows_per_day=120))
    return root, result


def test_reviews_become_daily_spans_deterministically(reviews_home, tmp_path):
    root, result = reviews_home
    assert [d["span"] for d in result["days"]] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert all(d["rows"] == 120 for d in result["days"])
    day = root / "raw" / "text" / "dt=2026-11-02"
    assert (day / "_SUCCESS").exists()
    df = pd.read_parquet(day / "part-00000.parquet")
    assert list(df.columns) == list(C.RAW_COLUMNS)
    assert set(df[C.SENTIMENT]) <= set(C.SENTIMENT_LABELS)
    assert set(df[C.TOPIC]) <= set(C.TOPIC_LABELS)
    assert (df[C.TEXT].str.len() > 0).all()
    # Sentiment comes from the rating: <= 2 negative, 3 neutral, >= 4 positive.
    assert (df.loc[df[C.RATING] >= 4, C.SENTIMENT] == "positive").all()
    assert (df.loc[df[C.RATING] <= 2, C.SENTIMENT] == "negative").all()
    # A review's day depends only on its id: loading more days elsewhere agrees.
    again = load.run(load.LoadTextSpec(out_root=str(tmp_path), start="2026-11-01", days=3,
                                       max_rows_per_day=120))
    assert again["days"] == [{**d, "dir": d["dir"].replace(str(root), str(tmp_path))}
                             for d in result["days"]]
    assert all(load.day_of(i, 3) == 1 for i in df[C.EXAMPLE_ID])


def test_user_jsonl_with_rating_column(tmp_path):
    src = tmp_path / "tickets.jsonl"
    rows = [{"body": f"ticket {i} text", "stars": s, "dept": "Tops"}
            for i, s in enumerate([1, 3, 5, 4])]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = load.run(load.LoadTextSpec(out_root=str(tmp_path), start="2026-12-01", days=1,
                                     input_path=str(src), text_column="body",
                                     rating_column="stars", topic_column="dept"))
    df = pd.read_parquet(tmp_path / "raw" / "text" / "dt=2026-12-01" / "part-00000.parquet")
    assert res["rows"] == 4
    assert sorted(df[C.SENTIMENT]) == ["negative", "neutral", "positive", "positive"]
    with pytest.raises(ValueError, match="no column"):
        load.run(load.LoadTextSpec(out_root=str(tmp_path), start="2026-12-01", days=1,
                                   input_path=str(src), text_column="missing"))


def test_validation_passes_real_span_and_catches_broken_ones(reviews_home, tmp_path):
    root, _ = reviews_home
    good = root / "raw" / "text" / "dt=2026-11-01"
    ok = validate(TextValidateSpec(span_dir=str(good), out_dir=str(tmp_path / "ok")))
    assert ok["success"] and ok["n_failed"] == 0 and ok["rows"] == 120

    df = pd.read_parquet(good / "part-00000.parquet")
    bad = df.copy()
    bad.loc[:4, C.TEXT] = ""                           # empty texts
    bad.loc[5:7, C.SENTIMENT] = "furious"              # a label with no head
    bad.loc[8, C.TEXT] = "Lovely fabric caf\ufffd"     # mojibake
    bad = pd.concat([bad, bad.iloc[10:50].assign(      # a producer that re-sent rows
        **{C.EXAMPLE_ID: lambda x: x[C.EXAMPLE_ID] + "-again"})], ignore_index=True)
    span = tmp_path / "raw" / "dt=2026-11-09"
    span.mkdir(parents=True)
    bad.to_parquet(span / "part-00000.parquet")
    (span / "_SUCCESS").write_text("")
    with pytest.raises(ValidationFailed) as e:
        validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "bad")))
    failed = {(f["expectation"], f["column"]) for f in e.value.summary["failed"]}
    assert failed == {("expect_column_values_to_be_between", "_text_chars"),
                      ("expect_column_values_to_be_in_set", C.SENTIMENT),
                      ("expect_column_values_to_not_match_regex", C.TEXT),
                      ("expect_column_mean_to_be_between", "_is_duplicate")}
    assert (tmp_path / "bad" / "validation.json").exists()   # the report survives failure

    one_class = df.assign(**{C.SENTIMENT: "positive"})
    span2 = tmp_path / "raw" / "dt=2026-11-10"
    span2.mkdir(parents=True)
    one_class.to_parquet(span2 / "part-00000.parquet")
    (span2 / "_SUCCESS").write_text("")
    with pytest.raises(ValidationFailed, match="_majority_sentiment"):
        validate(TextValidateSpec(span_dir=str(span2), out_dir=str(tmp_path / "bad2")))
    nomark = tmp_path / "raw" / "dt=2026-11-11"
    nomark.mkdir(parents=True)
    df.to_parquet(nomark / "part-00000.parquet")
    with pytest.raises(FileNotFoundError, match="_SUCCESS"):
        validate(TextValidateSpec(span_dir=str(nomark), out_dir=str(tmp_path / "bad3")))
