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


def test_load_text_reads_a_folder_and_keeps_the_users_dates(tmp_path):
    import gzip

    src = tmp_path / "export"
    (src / "dt=2026-10-03").mkdir(parents=True)
    (src / "dt=2026-10-05").mkdir(parents=True)
    with gzip.open(src / "dt=2026-10-03" / "a.jsonl.gz", "wt") as f:
        f.write(json.dumps({"body": "late parcel", "stars": 1}) + "\n")
    (src / "dt=2026-10-05" / "b.jsonl").write_text(
        json.dumps({"body": "great fit", "stars": 5}) + "\n"
        + json.dumps({"body": "ok I guess", "stars": 3}) + "\n")
    res = load.run(load.LoadTextSpec(out_root=str(tmp_path / "home"), input_path=str(src),
                                     text_column="body", rating_column="stars"))
    assert [(d["span"], d["rows"]) for d in res["days"]] == [("2026-10-03", 1),
                                                             ("2026-10-05", 2)]
    rows = tmp_path / "timed.jsonl"
    rows.write_text("\n".join(json.dumps({"body": f"t{i}", "stars": 4,
                                          "created": f"2026-09-0{i}T23:10:00Z"})
                              for i in (1, 1, 4)) + "\n")
    res = load.run(load.LoadTextSpec(out_root=str(tmp_path / "home2"), input_path=str(rows),
                                     text_column="body", rating_column="stars",
                                     date_column="created"))
    assert [(d["span"], d["rows"]) for d in res["days"]] == [("2026-09-01", 2),
                                                             ("2026-09-04", 1)]
    with pytest.raises(ValueError, match="give start"):
        load.run(load.LoadTextSpec(out_root=str(tmp_path / "h3"), input_path=str(rows),
                                   text_column="body"))


def _tickets_config_and_span(tmp_path):
    """A ticket config (text from a template over two columns) and an empty span folder."""
    config = tmp_path / "tickets.yaml"
    config.write_text("example_id: tid\ntext_template: '{subject}: {body}'\n"
                      "tasks:\n  queue: {label_column: team, labels: [billing, outage]}\n"
                      "validation: {min_rows: 10}\n")
    span = tmp_path / "raw" / "dt=2026-12-01"
    span.mkdir(parents=True)
    return config, span


def test_validation_follows_the_users_config_quarantines_and_can_be_overridden(tmp_path):
    import gzip

    config, span = _tickets_config_and_span(tmp_path)
    rows = [{"tid": i, "subject": "Refund" if i % 2 else "Down",
             "body": f"ticket number {i} about my account", "team": "billing" if i % 2
             else "outage"} for i in range(30)]
    with gzip.open(span / "part-0.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (span / "_SUCCESS").write_text("")
    quarantine = tmp_path / "quarantine"
    ok = validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "ok"),
                                   text_config=str(config), quarantine_dir=str(quarantine)))
    assert ok["success"] and ok["rows"] == 30 and ok["label_counts"]["queue"] == {
        "billing": 15, "outage": 15}
    assert ok["unknown_token_rate"] < 0.05

    rows[3]["team"] = "sales"                        # a queue the config does not declare
    for r in rows:
        r.pop("subject")                             # a column the template needs
    with gzip.open(span / "part-0.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with pytest.raises(ValidationFailed) as e:
        validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "bad"),
                                  text_config=str(config), quarantine_dir=str(quarantine),
                                  run_id="run-1"))
    failed = {(f["expectation"], f["column"]) for f in e.value.summary["failed"]}
    assert failed == {("required_columns", None), ("expect_column_values_to_be_in_set", "queue")}
    assert "subject" in e.value.summary["failed"][0]["observed"]
    marker = quarantine / "dt=2026-12-01.json"
    assert json.loads(marker.read_text())["run_id"] == "run-1"
    with pytest.raises(ValidationFailed, match=r"override names other rules, not "
                                               r"\['required_columns'\]"):
        validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "named"),
                                  text_config=str(config), quarantine_dir=str(quarantine),
                                  override_reason="sales queue opens tomorrow",
                                  override_rules=["expect_column_values_to_be_in_set:queue"]))
    assert marker.exists()                           # still quarantined
    passed = validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "over"),
                                       text_config=str(config), quarantine_dir=str(quarantine),
                                       override_reason="sales queue opens tomorrow"))
    assert passed["gate"] == "overridden" and not marker.exists()
    assert passed["override_reason"] == "sales queue opens tomorrow"


def test_text_spans_refuse_symlinks_out_of_the_root_and_empty_parts(tmp_path):
    from retrain.common.rawfiles import UnsafeInput
    from components.text import rawdata
    day = tmp_path / "raw" / "dt=2026-11-01"
    day.mkdir(parents=True)
    (day / "part-0.jsonl").write_text('{"text": "fine", "label": "pos"}\n')
    (day / "_SUCCESS").touch()
    assert rawdata.span_parts(day) == [day / "part-0.jsonl"]
    (day / "part-1.jsonl").symlink_to("/etc/passwd")
    with pytest.raises(UnsafeInput, match="part-1.jsonl is a symlink to /etc/passwd, outside"):
        rawdata.span_parts(day)
    (day / "part-1.jsonl").unlink()
    (day / "part-1.jsonl.gz").write_bytes(b"")
    with pytest.raises(UnsafeInput, match=r"part-1.jsonl.gz is empty \(0 bytes\)"):
        rawdata.span_parts(day)


def test_a_number_in_a_text_column_is_named_not_read_as_text(tmp_path):
    """Parquet with numbers where the template expects text: the rule names the column
    (a campaign finding: it failed only on the median length, naming no column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    config, span = _tickets_config_and_span(tmp_path)
    pq.write_table(pa.table({"tid": list(range(30)), "subject": [1.5] * 30,
                             "body": [f"ticket number {i} about my account" for i in range(30)],
                             "team": ["billing", "outage"] * 15}), span / "part-0.parquet")
    (span / "_SUCCESS").write_text("")
    with pytest.raises(ValidationFailed) as e:
        validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "bad"),
                                  text_config=str(config)))
    first = e.value.summary["failed"][0]
    assert (first["rule"], first["observed"]) == (
        "text_type:subject", "30 value(s) are not text but float, first at part-0.parquet "
                             "line 1")
    assert "text_type(subject): 30 value(s) are not text" in str(e.value)


def test_a_float_id_refuses_the_part_naming_the_file_and_column(tmp_path):
    """Integer ids are read as their text; a float id is never an id (1.0 and 1 would be
    one id): the part is refused, as the CTR readers refuse it, and quarantined."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from retrain.common.errors import BadData

    config, span = _tickets_config_and_span(tmp_path)
    body = [f"ticket number {i} about my account" for i in range(30)]
    table = {"subject": ["Refund"] * 30, "body": body, "team": ["billing", "outage"] * 15}
    pq.write_table(pa.table({"tid": list(range(30)), **table}), span / "part-0.parquet")
    (span / "_SUCCESS").write_text("")
    result = validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "ok"),
                                       text_config=str(config)))
    assert result["gate"] == "passed"                    # int64 ids, read as "0".."29"
    pq.write_table(pa.table({"tid": [i + 0.5 for i in range(30)], **table}),
                   span / "part-0.parquet")
    with pytest.raises(BadData) as e:
        validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "bad"),
                                  text_config=str(config),
                                  quarantine_dir=str(tmp_path / "quarantine")))
    assert "part-0.parquet" in str(e.value) and "'tid' holds a float" in str(e.value)
    assert "0.5" not in str(e.value)                     # no value of the file echoed
