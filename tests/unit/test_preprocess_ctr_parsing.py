"""Parsing and dead-letter routing of the CTR preprocessing job's reader (no tf.Transform).

The reader DoFn runs in a real Beam `TestPipeline`; every kind of malformed record must
land in the `rejected` output with its reason, file and line, and every good row in a
train or eval batch, so rows in = rows out + rows rejected.
"""
from __future__ import annotations

import gzip
import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess_ctr as job
from components.ctr import rawformat, rawread
from components.ctr import features as F


def good(i: int, **changes) -> dict:
    row = {"example_id": f"e{i}", "ts": 1_700_000_000 + i, "user_id": f"u{i % 7}",
           "item_id": f"i{i % 5}", "category_id": f"c{i % 3}", "device": "ios", "hour": i % 24,
           "position": 1 + i % 31, "price": 9.5, "user_past_clicks": i % 4,
           "item_age_days": None, "click": i % 2}
    row.update(changes)
    return row


def line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


# (raw line bytes, expected reason or None for a good row)
CASES: list[tuple[bytes, str | None]] = [
    (line(good(0)), None),
    (b'{"example_id": "e1", "user_id": \n', "truncated_record"),
    (b"this is not json\n", "bad_json"),
    (line(good(2, hour="7")), "wrong_type"),
    (line(good(3, price="cheap")), "wrong_type"),
    (line(good(4, user_id=17)), "wrong_type"),
    (line(good(5, position=True)), "wrong_type"),
    (line({k: v for k, v in good(6).items() if k != "device"}), "missing_field"),
    (line(good(7, item_id=None)), "missing_field"),
    (line(good(8, click=3)), "bad_value"),
    (b"[1, 2, 3]\n", "not_an_object"),
    (line(good(9))[:-2] + b"\xff\xfe}\n", "non_utf8"),
    (b"\n", None),                        # blank: not a record at all
    (line(good(10, item_age_days=3, price=None)), None),
    (line(good(11, category_id="x" * 5000)), "oversize_line"),
    (line(good(12, extra_field=[1, 2])), None),   # unknown fields are ignored
]
TAIL = b'{"example_id": "e13", "user_id": "u1", "item_id": "i'   # cut off, no newline
MAX_LINE = 4096


def write_jsonl(path, lines: list[bytes]) -> str:
    with gzip.open(path, "wb") as f:
        f.writelines(lines)
    return str(path)


def test_check_record_reasons():
    assert rawformat.check_record(good(1)) is None
    assert rawformat.check_record(good(1, price=None, item_age_days=2)) is None
    assert rawformat.check_record(good(1, hour=2.0))[0] == "wrong_type"
    assert rawformat.check_record(good(1, hour=2**70))[0] == "wrong_type"
    assert rawformat.check_record("x")[0] == "not_an_object"
    assert rawformat.check_record(good(1, click=None))[0] == "missing_field"
    assert rawformat.check_record(good(1, price=float("inf"))) == (
        "bad_value", "price: inf is not a finite number")


def test_jsonl_reader_rejects_each_malformed_kind_with_its_place(tmp_path):
    path = write_jsonl(tmp_path / "part-0.jsonl.gz", [c[0] for c in CASES] + [TAIL])
    batches = list(rawread.read_jsonl_batches(path, batch_size=5, max_line_bytes=MAX_LINE))
    rows = pa.Table.from_batches([b for b, _ in batches]).to_pylist()
    rejects = [r for _, rs in batches for r in rs]
    assert [r["example_id"] for r in rows] == ["e0", "e10", "e12"]
    assert rows[1]["price"] != rows[1]["price"] and rows[1]["item_age_days"] == 3.0  # NaN
    expected = [(i + 1, reason) for i, (_, reason) in enumerate(CASES) if reason]
    expected.append((len(CASES) + 1, "truncated_record"))
    assert [(r["line"], r["reason"]) for r in rejects] == expected
    offsets = [0]
    for raw, _ in CASES:
        offsets.append(offsets[-1] + len(raw))
    for r in rejects:
        assert r["source"] == path and r["offset"] == offsets[r["line"] - 1]
        assert r["detail"] and len(r["record"]) <= 2048
    # Records counted = lines that are not blank.
    assert len(rows) + len(rejects) == len(CASES) - 1 + 1


def test_truncated_gzip_fails_naming_the_file(tmp_path):
    whole = gzip.compress(b"".join(line(good(i)) for i in range(2000)))
    path = tmp_path / "part-7.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(IOError, match="part-7.jsonl.gz.*truncated"):
        list(rawread.read_jsonl_batches(str(path), batch_size=100))


def test_parquet_rows_with_null_required_fields_are_rejected(tmp_path):
    rows = [good(i) for i in range(6)]
    rows[2]["user_id"] = None
    rows[4]["hour"] = None
    rows[5]["price"] = None                       # numeric null is allowed (NaN)
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    batches = list(rawread.read_parquet_batches(str(path), batch_size=4))
    good_ids = [r["example_id"] for b, _ in batches for r in b.to_pylist()]
    rejects = [r for _, rs in batches for r in rs]
    assert good_ids == ["e0", "e1", "e3", "e5"]
    assert [(r["line"], r["reason"]) for r in rejects] == [(3, "missing_field"),
                                                           (5, "missing_field")]
    assert "user_id" in rejects[0]["detail"] and "e2" in rejects[0]["record"]


def test_parquet_infinite_numbers_are_rejected_rows(tmp_path):
    rows = [good(i) for i in range(4)]
    rows[1]["price"] = float("inf")
    rows[3]["user_past_clicks"] = float("-inf")
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    batches = list(rawread.read_parquet_batches(str(path), batch_size=10))
    assert [r["example_id"] for b, _ in batches for r in b.to_pylist()] == ["e0", "e2"]
    rejects = [r for _, rs in batches for r in rs]
    assert [(r["line"], r["reason"], r["detail"]) for r in rejects] == [
        (2, "bad_value", "price: inf is not a finite number"),
        (4, "bad_value", "user_past_clicks: -inf is not a finite number")]


@pytest.mark.parametrize("column,value", [("hour", "7"), ("user_id", 17), ("price", "9.5")])
def test_a_parquet_column_of_the_wrong_type_fails_naming_file_and_column(tmp_path, column,
                                                                        value):
    """Text is never parsed into numbers, nor numbers into text: the job fails as its
    README says (Arrow's cast would turn "7" into 7 silently)."""
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist([good(i, **{column: value}) for i in range(3)]), path)
    with pytest.raises(ValueError, match=rf"part-00000.parquet: column\(s\) of the wrong type, "
                                         rf"not cast: '{column}' is "):
        list(rawread.read_parquet_batches(str(path), batch_size=10))


def test_jsonl_reader_can_keep_the_fields_the_config_does_not_name(tmp_path):
    """For validation: unknown fields come back as JSON text, null where a record lacks one."""
    path = write_jsonl(tmp_path / "part-0.jsonl.gz", [line(good(0)), line(good(1, coupon=[1])),
                                                     line(good(2))])
    (batch, _), = rawread.read_jsonl_batches(path, batch_size=10, keep_unknown=True)
    assert batch.column("coupon").to_pylist() == [None, "[1]", None]
    (plain, _), = rawread.read_jsonl_batches(path, batch_size=10)
    assert "coupon" not in plain.schema.names


def test_a_large_integer_in_a_float_column_is_read_not_refused(tmp_path):
    """Epoch seconds as a numeric feature: Arrow refused 893210187 as float32 (not exactly
    representable), failing the whole span; it is read as the nearest float32."""
    path = write_jsonl(tmp_path / "part-0.jsonl.gz", [line(good(0, price=893_210_187)),
                                                     line(good(1, price=2 ** 60))])
    (batch, rejects), = rawread.read_jsonl_batches(path, batch_size=10)
    assert not rejects
    assert batch.column("price").type == pa.float32()
    assert batch.column("price").to_pylist() == pytest.approx([893_210_187, 2.0 ** 60], rel=1e-7)


def test_read_split_dofn_routes_rows_and_dead_letters_in_a_pipeline(tmp_path):
    day = tmp_path / "dt=2026-11-03"
    day.mkdir()
    jsonl = write_jsonl(day / "part-00001.jsonl.gz", [c[0] for c in CASES] + [TAIL])
    parquet = day / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist([good(i) for i in range(100, 140)]), parquet)
    n_bad = sum(1 for _, r in CASES if r) + 1
    n_eval = sum(F.is_eval(f"e{i}", 50) for i in [0, 10, 12, *range(100, 140)])

    with test_pipeline.TestPipeline() as p:
        out = (p | beam.Create([jsonl, str(parquet)])
               | beam.ParDo(job.ReadSplitBatches("2026-11-03", 50, 16, MAX_LINE))
               .with_outputs(job.TRAIN_DIR, job.EVAL_DIR, job.REJECTED_DIR))
        counts = {split: (out[split] | f"n{split}" >> beam.Map(lambda b: b.num_rows)
                          | f"sum{split}" >> beam.CombineGlobally(sum))
                  for split in (job.TRAIN_DIR, job.EVAL_DIR)}
        assert_that(counts[job.TRAIN_DIR], equal_to([43 - n_eval]), label="train")
        assert_that(counts[job.EVAL_DIR], equal_to([n_eval]), label="eval")
        reasons = (out[job.REJECTED_DIR] | beam.Map(json.loads)
                   | beam.Map(lambda r: (r["reason"], r["source"].endswith(".jsonl.gz"))))
        assert_that(reasons, equal_to([(r, True) for _, r in CASES if r]
                                      + [("truncated_record", True)]), label="rejected")
    counters = {c.key.metric.name: c.committed
                for c in p.result.metrics().query()["counters"]}
    assert counters["rows_in"] == 43 + n_bad
    assert counters["rows_rejected"] == n_bad
    assert counters["rejected_wrong_type"] == 4
    assert counters["rows_train"] + counters["rows_eval"] == 43


def test_identity_values_out_of_range_are_counted_per_field(tmp_path):
    """The transform clips an identity value into [0, size): the read counts each such
    value per field (issue 44: never silent), whichever split its row goes to."""
    day = tmp_path / "dt=2026-11-03"
    day.mkdir()
    rows = [good(i) for i in range(40)]
    rows[3]["hour"], rows[7]["hour"], rows[9]["hour"] = 24, -1, 99      # size 24
    rows[5]["position"] = 32                                            # size 32
    path = write_jsonl(day / "part-00000.jsonl.gz", [line(r) for r in rows])
    sizes = {"hour": 24, "position": 32}
    with test_pipeline.TestPipeline() as p:
        _ = (p | beam.Create([path])
             | beam.ParDo(job.ReadSplitBatches("2026-11-03", 50, 16, MAX_LINE,
                                               identity_sizes=sizes))
             .with_outputs(job.TRAIN_DIR, job.EVAL_DIR, job.REJECTED_DIR))
    counters = {c.key.metric.name: c.committed
                for c in p.result.metrics().query()["counters"]}
    assert counters[f"{job.OUT_OF_RANGE}hour"] == 3
    assert counters[f"{job.OUT_OF_RANGE}position"] == 1
    assert counters["rows_in"] == 40


def test_truncated_gzip_fails_the_pipeline_naming_the_file(tmp_path):
    """The read step of the job (same DoFn) fails the Beam pipeline, never a partial read."""
    whole = gzip.compress(b"".join(line(good(i)) for i in range(2000)))
    path = tmp_path / "dt=2026-11-03" / "part-00003.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(Exception, match=r"part-00003\.jsonl\.gz: truncated or corrupt"):
        with test_pipeline.TestPipeline() as p:
            _ = (p | beam.Create([str(path)])
                 | beam.ParDo(job.ReadSplitBatches("2026-11-03", 20, 256))
                 .with_outputs(job.TRAIN_DIR, job.EVAL_DIR, job.REJECTED_DIR))


def test_a_user_config_sets_the_columns_types_and_label_of_the_reader(tmp_path):
    """With example_user_logs.yaml: its label and id, list columns (null or absent = no
    values; a string or a list of numbers is a wrong type), the Parquet path alike."""
    from components.ctr import feature_config as fc
    layout = job.RawLayout.of(fc.load(fc.PACKAGED_DIR / "example_user_logs.yaml"))
    row = {"event_id": "e1", "clicked": 1, "dwell_time": 2.5, "age": 30.0, "country": "DE",
           "device": "ios", "ad_id": "a9", "slot": 3, "tags": ["x", "y"], "query": "red shoes"}
    assert rawformat.check_record(row, layout) is None
    assert rawformat.check_record({**row, "tags": None, "age": None}, layout) is None
    assert rawformat.check_record({**row, "tags": "x"}, layout)[0] == "wrong_type"
    assert rawformat.check_record({**row, "tags": [1]}, layout)[0] == "wrong_type"
    assert rawformat.check_record({**row, "clicked": 2}, layout)[0] == "bad_value"
    assert rawformat.check_record({k: v for k, v in row.items() if k != "query"}, layout)[0] == \
        "missing_field"
    path = write_jsonl(tmp_path / "part-0.jsonl.gz",
                       [line(row), line({**row, "event_id": "e2", "tags": None}),
                        line({**row, "event_id": "e3", "slot": "3"})])
    (batch, rejects), = rawread.read_jsonl_batches(path, 10, layout=layout)
    assert batch.column("tags").to_pylist() == [["x", "y"], []]
    assert [r["reason"] for r in rejects] == ["wrong_type"] and rejects[0]["line"] == 3
    pq.write_table(pa.Table.from_batches([batch]), tmp_path / "part-0.parquet")
    (pbatch, prejects), = rawread.read_parquet_batches(str(tmp_path / "part-0.parquet"), 10,
                                                   layout=layout)
    assert pbatch.to_pylist() == batch.to_pylist() and prejects == []
    model = job.to_model_batch(batch, job.arrow_schema(layout))
    assert model.column("tags").to_pylist() == [[b"x", b"y"], []]
    assert model.column("slot").to_pylist() == [[3], [3]]
    assert "event_id" not in model.schema.names


def test_a_corrupt_parquet_part_fails_naming_the_file(tmp_path):
    """Arrow says only "Corrupt snappy compressed data" (an OSError, so it would be
    retried as transient): the reader names the file and raises bad data."""
    from retrain.common.errors import BAD_DATA, kind_of
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist([good(i) for i in range(200)]), path)
    data = bytearray(path.read_bytes())
    for i in range(200, len(data) // 2, 7):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"part-00000.parquet: corrupt or unreadable Parquet") as e:
        list(rawread.read_parquet_batches(str(path), batch_size=50))
    assert kind_of(e.value) == BAD_DATA


@pytest.mark.parametrize("flag, value, name", [("--gzip-level", "0", "gzip_level"),
                                               ("--gzip-level", "10", "gzip_level"),
                                               ("--batch-size", "0", "batch_size")])
def test_a_job_option_out_of_range_is_refused_naming_it(tmp_path, flag, value, name):
    with pytest.raises(ValueError, match=rf"{name} \({flag}\) must be"):
        job.run(["--raw-root", str(tmp_path), "--span", "2026-11-01",
                 "--output-dir", str(tmp_path / "out"), flag, value])
    assert not (tmp_path / "out").exists()
