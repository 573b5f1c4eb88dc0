"""One list of part suffixes per family (design rule 26, issue 47.1): every reader of a
span folder accepts exactly its family's list, read here from the reader itself, not
from a constant it says it uses. A folder holding one part of every suffix either family
knows (and a few decoys) is listed by each consumer: CTR validation, its statistics job,
preprocessing and evaluation; text validation, preprocessing, batch scoring and the
loader; `retrain config suggest`. And an `.ndjson` text span, the suffix a second copy of
the list once missed, passes text validation and preprocessing.
"""
from __future__ import annotations

import ast
import datetime as dt
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.ctr import rawformat as ctr_format
from components.text import rawdata as text_format

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 12, 1)
CTR = set(ctr_format.PART_SUFFIXES)
TEXT = set(text_format.PART_SUFFIXES)
PARQUET = set(ctr_format.PARQUET_SUFFIXES) | set(text_format.PARQUET_SUFFIXES)
DECOYS = (".txt", ".csv", ".jsonl.bak", ".parquet.tmp")


def _write(path: Path, suffix: str, i: int) -> None:
    row = {"example_id": f"e{i}", "text": f"part {i} says hello", "source": suffix}
    if suffix in PARQUET:
        pq.write_table(pa.table({k: [v] for k, v in row.items()}), path,
                       compression="brotli" if suffix.endswith(".brotli") else "snappy")
        return
    data = (json.dumps(row) + "\n").encode()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)


@pytest.fixture
def every_suffix(tmp_path) -> tuple[Path, dict[str, str]]:
    """raw/dt=DAY/ with `part-<i><suffix>` for every suffix of both families and the
    decoys, and a _SUCCESS marker; returns (span folder, {file name: suffix})."""
    span = tmp_path / "raw" / f"dt={DAY.isoformat()}"
    span.mkdir(parents=True)
    names = {}
    for i, suffix in enumerate(sorted(CTR | TEXT) + list(DECOYS)):
        name = f"part-{i:05d}{suffix}"
        _write(span / name, suffix, i)
        names[name] = suffix
    (span / "_SUCCESS").write_text("")
    return span, names


def _suffixes(paths, names: dict[str, str]) -> set[str]:
    return {names[Path(str(p)).name] for p in paths}


def test_the_families_lists_are_what_the_bundled_formats_are():
    assert ctr_format.PART_SUFFIXES == ctr_format.PARQUET_SUFFIXES + ctr_format.JSONL_SUFFIXES
    assert text_format.PART_SUFFIXES == (text_format.PARQUET_SUFFIXES
                                         + text_format.JSONL_SUFFIXES)
    assert {".ndjson", ".ndjson.gz", ".pq", ".parquet.brotli"} <= TEXT
    assert {".parquet", ".jsonl", ".jsonl.gz", ".json", ".json.gz"} <= CTR & TEXT


def test_every_ctr_reader_accepts_the_ctr_list(every_suffix):
    from beam_jobs import preprocess_ctr, span_stats
    from components.ctr import rawdata, rawread, validate

    span, names = every_suffix
    listed = {
        "validation": validate._find_parts(span, True),
        "validation statistics job": [p for p, _ in span_stats.work_items(span)],
        "preprocessing": preprocess_ctr.window_files(span.parent, DAY, 1)[DAY],
        "evaluation": rawdata.span_parts(span),
    }
    for consumer, parts in listed.items():
        assert _suffixes(parts, names) == CTR, consumer
    # The reader behind all of them takes a part by the same list, and nothing else.
    for name, suffix in names.items():
        if suffix not in CTR:
            with pytest.raises(ValueError, match="unknown input format"):
                rawread.read_batches(str(span / name), 10)


def test_every_text_reader_accepts_the_text_list(every_suffix):
    from beam_jobs import preprocess_text, score_text
    from components.text import load

    span, names = every_suffix
    listed = {
        "validation": text_format.span_parts(span),
        "preprocessing": [p for _, p in preprocess_text.window_files(span.parent, DAY, 1)],
        "batch scoring": [p for _, p in score_text.window_files(span.parent, DAY, 1)],
    }
    for consumer, parts in listed.items():
        assert _suffixes(parts, names) == TEXT, consumer
    # The loader reads a folder of a user's files: every part it read says its suffix.
    assert set(load.read_input(span)["source"]) == TEXT


def test_config_suggest_reads_the_families_lists(every_suffix):
    from retrain import config_suggest

    span, names = every_suffix
    assert config_suggest.family_module("ctr").PART_SUFFIXES == ctr_format.PART_SUFFIXES
    assert config_suggest.family_module("text").PART_SUFFIXES == text_format.PART_SUFFIXES
    assert _suffixes(config_suggest._parts(span), names) == CTR | TEXT


def _suffix_tuples(path: Path) -> list[int]:
    """Lines of tuples of string literals that name a part suffix (".json" alone is a
    config file's too: retrain.common.run_inputs.CONFIG_SUFFIXES)."""
    known = (CTR | TEXT) - {".json"}
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Tuple) and node.elts
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
            and any(e.value in known for e in node.elts)]


def test_a_suffix_list_is_written_once_per_family():
    homes = {ROOT / "components" / "ctr" / "rawformat.py",
             ROOT / "components" / "text" / "rawdata.py"}
    copies = {str(p.relative_to(ROOT)): lines
              for pkg in ("components", "beam_jobs", "retrain", "dags", "bench")
              for p in sorted((ROOT / pkg).rglob("*.py"))
              if p not in homes and (lines := _suffix_tuples(p))}
    assert copies == {}, f"a second copy of a part suffix list: {copies}"
    assert all(_suffix_tuples(home) for home in homes)


def test_an_ndjson_text_span_passes_validation_and_preprocessing(tmp_path):
    """The `.ndjson` suffix a copied list once lacked: a span of one `part-0.ndjson`."""
    from components.text.preprocess import TextPreprocessSpec, run as preprocess
    from components.text.validate import TextValidateSpec, run as validate

    config = tmp_path / "tickets.yaml"
    config.write_text("example_id: tid\ntext_template: '{subject}: {body}'\n"
                      "tasks:\n  queue: {label_column: team, labels: [billing, outage]}\n"
                      "validation: {min_rows: 10}\n")
    span = tmp_path / "raw" / f"dt={DAY.isoformat()}"
    span.mkdir(parents=True)
    rows = [{"tid": i, "subject": "Refund" if i % 2 else "Down",
             "body": f"ticket number {i} about my account", "team": "billing" if i % 2
             else "outage"} for i in range(40)]
    (span / "part-0.ndjson").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (span / "_SUCCESS").write_text("")

    checked = validate(TextValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "val"),
                                        text_config=str(config)))
    assert checked["success"] and checked["rows"] == 40

    out = tmp_path / "pre"
    summary = preprocess(TextPreprocessSpec(raw_root=str(tmp_path / "raw"),
                                            span=DAY.isoformat(), output_dir=str(out),
                                            window_days=1, text_config=str(config)))
    assert summary["input_files"] == 1 and summary["rows_in"] == 40
    assert summary["rows_train"] + summary["rows_eval"] == 40
    assert sorted(p.name for p in (out / "train").glob("part-*.tfrecord.gz"))
