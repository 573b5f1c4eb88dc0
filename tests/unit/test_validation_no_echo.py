"""Validation refusals name, never echo (rule 22), and the text encoding tolerance is the
dataset's own (issue 45, item 11).

A tester's text feed with 0.24 % replacement characters was quarantined every day: one
record in Latin-1 made the whole part unreadable before the encoding rule could count it,
and the refusal printed whole review texts (great-expectations' unexpected values) into
the task log. Here a day with 0.3 % mis-encoded rows fails at the default tolerance and
passes when the dataset's YAML config raises `validation.max_bad_encoding_rate`; and a
planted string in records that break rules (text, label, id; a CTR categorical value and
a field of the wrong type) appears nowhere in what the task shows: the launcher's log of
the step (its stdout and stderr), the exception, the quarantine marker and the summary.
The report's raw result (gx_result.json, Data Docs) is where values may be read.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import logging

import pytest

from retrain.common.errors import ValidationFailed
from retrain.orchestration import launch

PLANTED = "PLANTED-REVIEW-TEXT-4b1e"
DAY = "dt=2026-12-01"


def _text_day(tmp_path, n_rows: int, validation: str, edit=None):
    """A ticket config file as a user writes it (YAML) and a JSONL day of `n_rows`
    tickets; `edit(i, record) -> bytes | None` replaces a record's line."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "tickets.yaml"
    config.write_text("# the user's text config\nexample_id: tid\ntext: body\n"
                      "tasks:\n  queue:\n    label_column: team\n"
                      "    labels: [billing, outage]\n"
                      f"validation:\n  min_rows: 10\n{validation}")
    span = tmp_path / "raw" / DAY
    span.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n_rows):
        record = {"tid": i, "body": f"ticket number {i} about my account and refund {i * 7}",
                  "team": "billing" if i % 2 else "outage"}
        line = edit(i, record) if edit else None
        lines.append(line if line is not None else (json.dumps(record) + "\n").encode())
    (span / "part-0.jsonl").write_bytes(b"".join(lines))
    (span / "_SUCCESS").write_text("")
    return config, span


def _mis_encoded(i, record):
    """Rows 100 and 400 written in Latin-1 (not UTF-8), row 800 holding U+FFFD: 0.3 %."""
    if i in (100, 400):
        record["body"] = record["body"].replace("about", "caf\u00e9 about")
        return json.dumps(record, ensure_ascii=False).encode("latin-1") + b"\n"
    if i == 800:
        record["body"] = record["body"].replace("about", "ab\ufffdout")
    return None


def _validate_text(config, span, out):
    from components.text.validate import TextValidateSpec, run
    return run(TextValidateSpec(span_dir=str(span), out_dir=str(out), text_config=str(config),
                                run_id="r1"))


def test_the_encoding_tolerance_is_set_in_the_datasets_yaml_config(tmp_path):
    config, span = _text_day(tmp_path / "strict", 1000, "", _mis_encoded)
    with pytest.raises(ValidationFailed) as e:           # default tolerance: 0.1 %
        _validate_text(config, span, tmp_path / "strict" / "out")
    assert [f["rule"] for f in e.value.summary["failed"]] == [
        "expect_column_values_to_not_match_regex:text"]
    msg = str(e.value)
    assert "3 of 1000 row(s) (0.30%) hold control characters or U+FFFD" in msg, msg
    assert "tolerance 0.10% (validation.max_bad_encoding_rate)" in msg, msg
    assert "first at part-0.jsonl line 101, 401, 801" in msg, msg
    assert f"text config {config}" in msg, msg
    assert "about my account" not in msg                   # no record text

    config, span = _text_day(tmp_path / "tolerant", 1000,
                             "  max_bad_encoding_rate: 0.005   # a scrape: a few are broken\n",
                             _mis_encoded)
    from components.text import task_config as T
    assert T.load(config).validation.max_bad_encoding_rate == 0.005
    result = _validate_text(config, span, tmp_path / "tolerant" / "out")
    assert result["success"] and result["rows"] == 1000


def test_an_exponent_in_the_yaml_config_is_a_number():
    """PyYAML reads `5e-3` as text (YAML 1.1 wants a dot): the config takes the number
    the user meant instead of refusing it as 'a string'."""
    from components.text import task_config as T
    cfg = T.from_dict({"text": "body", "tasks": {"q": {"labels": ["a", "b"]}},
                       "validation": {"max_bad_encoding_rate": "5e-3"}})
    assert cfg.validation.max_bad_encoding_rate == 0.005


def _planted_text(i, record):
    if i == 3:
        record["body"] = f"{PLANTED} the whole review \ufffd text"      # encoding rule
    elif i == 5:
        record["team"] = PLANTED                                        # label not in set
    elif i == 7:
        record["body"] = PLANTED * 2000                                 # over max_chars
    elif i in (8, 9):
        record["tid"] = PLANTED                                         # repeated id
    elif i == 11:
        record[f"{PLANTED} as a key"] = "an extra field"     # a key that is no short name
    return None


def _run_as_a_task(module: str, spec: dict, caplog, capfd) -> tuple[str, str]:
    """The step through the task's launcher; (its exception's message, everything the
    task log and the process's stdout/stderr got)."""
    with caplog.at_level(logging.DEBUG), pytest.raises(launch.BadDataFailed) as e:
        launch.run_step(module, spec)
    out, err = capfd.readouterr()
    return str(e.value), "\n".join([caplog.text, out, err])


def test_a_text_refusal_names_file_line_and_rule_and_never_the_records(
        tmp_path, caplog, capfd):
    from components.text.validate import TextValidateSpec
    config, span = _text_day(tmp_path, 40, "  max_chars: 5000\n", _planted_text)
    out, quarantine = tmp_path / "out", tmp_path / "quarantine"
    spec = dataclasses.asdict(TextValidateSpec(
        span_dir=str(span), out_dir=str(out), text_config=str(config), run_id="r1",
        quarantine_dir=str(quarantine)))
    message, logs = _run_as_a_task("components.text.validate", spec, caplog, capfd)
    assert "running" in logs and "failed" in logs              # the log was captured
    for rule in ("expect_column_values_to_not_match_regex(text)",
                 "expect_column_values_to_be_in_set(queue)",
                 "expect_column_values_to_be_between(_text_chars)",
                 "expect_column_values_to_be_unique(example_id)"):
        assert rule in message, message
    assert "part-0.jsonl line 4" in message and "part-0.jsonl line 6" in message, message
    assert "part-0.jsonl line 8" in message and "line 9, 10" in message, message
    marker = (quarantine / f"{DAY}.json").read_text()
    summary = (out / "validation.json").read_text()
    for shown in (message, logs, marker, summary):
        assert PLANTED not in shown
    # the report's raw result keeps the values, for a person to read
    assert PLANTED in (out / "gx_result.json").read_text()


def test_a_text_part_that_is_not_json_is_refused_by_line_without_its_content(
        tmp_path, caplog, capfd):
    from components.text.validate import TextValidateSpec

    def broken(i, record):
        return f'{{"tid": {i}, "body": "{PLANTED} and then" no closing\n'.encode() \
            if i == 6 else None
    config, span = _text_day(tmp_path, 20, "", broken)
    spec = dataclasses.asdict(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "o"),
                                               text_config=str(config)))
    message, logs = _run_as_a_task("components.text.validate", spec, caplog, capfd)
    assert "part-0.jsonl line 7: not a JSON record" in message, message
    assert PLANTED not in message and PLANTED not in logs


def test_a_ctr_refusal_counts_unexpected_values_and_never_prints_them(
        tmp_path, caplog, capfd):
    import pyarrow.parquet as pq

    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.validate import ValidateSpec
    generate(GenerateSpec(out_root=str(tmp_path), start="2026-11-01", days=1,
                          rows_per_day=2000, n_users=2000, n_items=1000, n_categories=30))
    span = tmp_path / "raw" / "ctr" / "dt=2026-11-01"
    rows = pq.read_table(span / "part-00000.parquet").to_pylist()
    for r in rows[:3]:
        r["device"] = PLANTED                              # outside the allowed devices
    rows[10]["price"] = PLANTED                            # a string where a number goes
    rows[11][f"{PLANTED} as a key"] = 1         # a field of no column, no short name
    for part in span.glob("part-*"):
        part.unlink()
    with gzip.open(span / "part-00000.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r, default=str) + "\n" for r in rows)
    out, quarantine = tmp_path / "out", tmp_path / "quarantine"
    spec = dataclasses.asdict(ValidateSpec(span_dir=str(span), out_dir=str(out),
                                           quarantine_dir=str(quarantine), run_id="r1",
                                           data_docs=False))
    message, logs = _run_as_a_task("components.ctr.validate", spec, caplog, capfd)
    assert "[allowed_values:device]" in message, message
    assert "distinct value(s) of device unexpected" in message, message
    assert "price: expected" in message and "got str" in message, message
    marker = (quarantine / "dt=2026-11-01.json").read_text()
    # the summary's rules (what messages are made of); its `rejected.examples` keep the
    # records the reader refused, for a person reading the report, as gx_result.json does
    summary = json.loads((out / "validation.json").read_text())
    rules = json.dumps([summary["failed"], summary["warnings"], summary["results"],
                        summary["parts_schema_diffs"]])
    for shown in (message, logs, marker, rules):
        assert PLANTED not in shown
    assert "<a key that is not a short name, not shown>" in message, message
