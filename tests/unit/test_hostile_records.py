"""Hostile records are bad data in bounded memory: the CTR reader's part and record limits.

A decompression bomb, a value nested far deeper than a log record ever is, a huge value,
and text with lone surrogates or NUL characters must each end as a counted rejected row
(naming file and line) or a refused part (`PartTooLarge`, bad data: never retried), never
as a RecursionError, a MemoryError or an Arrow error that the launcher would retry.
"""
from __future__ import annotations

import dataclasses
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_jobs import preprocess_ctr as job
from components.ctr import rawread
from retrain.common import record_limits
from retrain.common.errors import kind_of
from components.ctr import feature_config
from test_preprocess_ctr_parsing import good, line  # same-folder test helpers


def layout(**limits):
    base = job.default_layout()
    return dataclasses.replace(base, limits=record_limits.RecordLimits(**limits))


def read(path, lay=None, keep_unknown=False):
    batches = list(rawread.read_jsonl_batches(str(path), batch_size=1000, layout=lay or layout(),
                                          keep_unknown=keep_unknown))
    rows = [r for b, _ in batches for r in b.to_pylist()]
    return rows, [r for _, rs in batches for r in rs]


def test_deep_nesting_huge_values_and_invalid_text_are_counted_rejected_rows(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000          # past the JSON parser's own stack
    lines = [
        line(good(0)),
        f'{{"example_id": "e1", "junk": {deep}}}\n'.encode(),
        line(good(2, extra={"a": [[[[[[1]]]]]]})),   # 8 levels: over max_depth 5
        line(good(3, category_id="x" * 70_000)),     # one value over 64 KiB
        b'{"example_id": "e4\\ud800", ' + line(good(4))[len(b'{"example_id": "e4", '):],
        line(good(5, device="io\u0000s")),
        line(good(6, device="\U0001F600")),          # a real emoji (escaped pair): valid
    ]
    path = tmp_path / "part-00000.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(lines)))
    for keep_unknown in (False, True):      # preprocessing and validation reject alike
        rows, rejects = read(path, layout(max_depth=5), keep_unknown)
        assert [r["example_id"] for r in rows] == ["e0", "e6"]
        assert [(r["line"], r["reason"]) for r in rejects] == [
            (2, "too_deep"), (3, "too_deep"), (4, "oversize_value"), (5, "invalid_text"),
            (6, "invalid_text")]
        assert all(r["source"] == str(path) and len(r["record"]) <= 2048 for r in rejects)
        assert "category_id" in rejects[2]["detail"] and "max_value_bytes" in rejects[2]["detail"]
        assert "U+D800" in rejects[3]["detail"] and "NUL" in rejects[4]["detail"]


def test_a_decompression_bomb_is_refused_as_bad_data_naming_the_file(tmp_path):
    path = tmp_path / "part-00001.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:       # 64 MB from about 70 KB
        for _ in range(64):
            f.write(b" " * (1 << 20))
    assert path.stat().st_size < 200_000
    with pytest.raises(record_limits.PartTooLarge, match="part-00001.jsonl.gz.*max_part_bytes") \
            as e:
        read(path, layout(max_part_bytes=16 << 20))
    assert kind_of(e.value) == "bad_data"


def test_many_long_legal_lines_are_cut_into_bounded_batches(tmp_path):
    path = tmp_path / "part-00002.jsonl"
    with open(path, "wb") as f:
        for i in range(40):
            f.write(line(good(i, category_id="c" * 60_000)))   # under 64 KiB each
    batches = list(rawread.read_jsonl_batches(str(path), batch_size=65536,
                                          layout=layout(), max_line_bytes=1 << 20))
    assert sum(b.num_rows for b, _ in batches) == 40
    old = rawread.MAX_BATCH_BYTES
    try:
        rawread.MAX_BATCH_BYTES = 1 << 20
        batches = list(rawread.read_jsonl_batches(str(path), batch_size=65536, layout=layout()))
    finally:
        rawread.MAX_BATCH_BYTES = old
    assert len(batches) >= 2 and max(b.nbytes for b, _ in batches) < 2 << 20


def test_parquet_parts_and_values_obey_the_same_limits(tmp_path):
    rows = [good(i) for i in range(4)]
    rows[2]["item_id"] = "y" * 100
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    batches = list(rawread.read_parquet_batches(str(path), 10, layout(max_value_bytes=50)))
    assert [r["example_id"] for b, _ in batches for r in b.to_pylist()] == ["e0", "e1", "e3"]
    rejects = [r for _, rs in batches for r in rs]
    assert [(r["line"], r["reason"]) for r in rejects] == [(3, "oversize_value")]
    with pytest.raises(record_limits.PartTooLarge, match="part-00000.parquet"):
        list(rawread.read_parquet_batches(str(path), 10, layout(max_part_bytes=100)))


def test_limits_are_feature_config_thresholds_with_defaults():
    cfg = feature_config.default()
    assert cfg.validation.record_limits() == record_limits.RecordLimits()
    raw = json.loads(json.dumps(_config_dict()))
    raw.setdefault("validation", {}).setdefault("thresholds", {}).update(
        max_part_bytes=1 << 20, max_value_bytes=256, max_depth=4)
    limits = feature_config.from_dict(raw).validation.record_limits()
    assert limits == record_limits.RecordLimits(1 << 20, 256, 4)
    raw["validation"]["thresholds"]["max_depth"] = 0
    with pytest.raises(feature_config.ConfigError, match="max_depth"):
        feature_config.from_dict(raw)


def _config_dict() -> dict:
    import yaml
    from importlib import resources
    text = (resources.files("components.ctr") / "feature_configs" / "generated.yaml").read_text()
    return yaml.safe_load(text)


# --------------------------------------------------------------------------- text family

def _ticket_span(tmp_path, lines: list[bytes], validation: str = "{min_rows: 10}"):
    config = tmp_path / "tickets.yaml"
    config.write_text("example_id: tid\ntext_template: '{subject}: {body}'\n"
                      "tasks:\n  queue: {label_column: team, labels: [billing, outage]}\n"
                      f"validation: {validation}\n")
    span = tmp_path / "raw" / "dt=2026-12-01"
    span.mkdir(parents=True, exist_ok=True)
    (span / "part-0.jsonl.gz").write_bytes(gzip.compress(b"".join(lines)))
    (span / "_SUCCESS").write_text("")
    return config, span


def _ticket(i: int, body: str | None = None) -> bytes:
    body = body if body is not None else f"ticket number {i} about my account"
    return (json.dumps({"tid": i, "subject": "Refund", "body": body,
                        "team": "billing" if i % 2 else "outage"}) + "\n").encode()


def _validate_text(config, span, out, quarantine=None):
    from components.text.validate import TextValidateSpec, run
    return run(TextValidateSpec(span_dir=str(span), out_dir=str(out), text_config=str(config),
                                quarantine_dir=quarantine and str(quarantine), run_id="r1"))


def test_text_with_a_lone_surrogate_is_counted_by_the_encoding_rule_within_its_tolerance(
        tmp_path):
    from retrain.common.errors import ValidationFailed
    lines = [_ticket(i) for i in range(40)]
    lines[7] = lines[7].replace(b"about my", b"about \\ud800my")   # 1 row in 40: 2.5 %
    config, span = _ticket_span(tmp_path, lines)
    with pytest.raises(ValidationFailed) as e:                 # default tolerance 0.1 %
        _validate_text(config, span, tmp_path / "strict")
    assert [f["expectation"] for f in e.value.summary["failed"]] == [
        "expect_column_values_to_not_match_regex"]
    config, span = _ticket_span(tmp_path, lines, "{min_rows: 10, max_bad_encoding_rate: 0.05}")
    assert _validate_text(config, span, tmp_path / "tolerant")["success"]


@pytest.mark.parametrize("bad_line,rule", [
    (b'{"tid": 99, "body": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n", "max_depth"),
    (_ticket(99, "y" * (3 << 20)), "max_value_bytes"),
])
def test_a_hostile_text_record_refuses_the_part_naming_file_and_line_and_quarantines(
        tmp_path, bad_line, rule):
    from retrain.common.errors import BadData
    lines = [_ticket(i) for i in range(20)]
    lines.insert(5, bad_line)
    config, span = _ticket_span(tmp_path, lines)
    with pytest.raises(BadData, match=rf"part-0.jsonl.gz line 6: .*{rule}") as e:
        _validate_text(config, span, tmp_path / "out", tmp_path / "q")
    assert kind_of(e.value) == "bad_data" and "yyyy" not in str(e.value)
    marker = json.loads((tmp_path / "q" / "dt=2026-12-01.json").read_text())
    assert rule in marker["failed"][0] and marker["run_id"] == "r1"


def test_a_text_decompression_bomb_is_refused_at_the_part_limit(tmp_path):
    config, span = _ticket_span(tmp_path, [_ticket(i) for i in range(20)],
                                "{min_rows: 10, max_part_bytes: 1000}")
    with pytest.raises(record_limits.PartTooLarge, match="part-0.jsonl.gz"):
        _validate_text(config, span, tmp_path / "out")


def test_text_preprocessing_drops_badly_encoded_rows_and_counts_them(tmp_path):
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.testing.util import assert_that, equal_to

    from beam_jobs import preprocess_text
    from components.text import task_config as T
    lines = [_ticket(i) for i in range(6)]
    lines[2] = lines[2].replace(b"about my", b"about \\udc80my")
    lines[4] = lines[4].replace(b"about my", b"about \\u0007my")
    config, span = _ticket_span(tmp_path, lines)
    cfg = T.resolved(T.load(config))
    pipeline = beam.Pipeline()
    ids = (pipeline | beam.Create([("2026-12-01", str(span / "part-0.jsonl.gz"))])
           | beam.ParDo(preprocess_text.ReadRecords(cfg)) | beam.Map(lambda r: r["example_id"]))
    assert_that(ids, equal_to(["0", "1", "3", "5"]))
    result = pipeline.run()
    result.wait_until_finish()
    counted = result.metrics().query(MetricsFilter().with_name("rows_invalid_text"))
    assert sum(c.committed for c in counted["counters"]) == 2
