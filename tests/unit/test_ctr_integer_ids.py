"""Click logs whose id column holds integers: every reader takes the id as its decimal
text (42 and "42" are one id), so the eval split, the rows evaluation reads back and the
uniqueness checks are the same as for the same logs with string ids; a float id column
is refused naming the column. (Validation: tests/unit/test_validate.py; the Beam job's
split: tests/integration/test_preprocess_ctr_job.py.)"""
from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_jobs import preprocess_ctr as job
from components.ctr import features as F
from components.ctr import rawdata
from components.ctr.generate import GenerateSpec, generate_day

DAY = dt.date(2026, 11, 2)
ROWS = 600
EVAL_PERCENT = 25


@pytest.fixture(scope="module")
def day() -> pa.Table:
    """A small generated day whose ids are numbers written as text ("1000000", ...)."""
    data, _ = generate_day(GenerateSpec(out_root="unused", start=DAY.isoformat(),
                                        rows_per_day=ROWS, n_users=500, n_items=300,
                                        n_categories=20), DAY)
    ids = pa.array([str(1_000_000 + 7 * i) for i in range(ROWS)], pa.string())
    return data.set_column(0, F.EXAMPLE_ID_KEY, ids)


def with_ids(table: pa.Table, ids: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(F.EXAMPLE_ID_KEY),
                            F.EXAMPLE_ID_KEY, ids)


def write_span(folder, table: pa.Table | list[dict]):
    """A day folder: a Parquet part of `table`, or a JSONL part of these rows."""
    folder.mkdir(parents=True)
    if isinstance(table, list):
        (folder / "part-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table))
    else:
        pq.write_table(table, folder / "part-00000.parquet")
    (folder / "_SUCCESS").touch()
    return folder


def int_ids(table: pa.Table, arrow_type: pa.DataType) -> pa.Array:
    return pa.array([int(i) for i in table.column(F.EXAMPLE_ID_KEY).to_pylist()], arrow_type)


@pytest.mark.parametrize("arrow_type", [pa.int64(), pa.int32(), pa.uint64()])
def test_a_parquet_integer_id_column_reads_as_the_same_rows_and_split(day, tmp_path,
                                                                      arrow_type):
    text = write_span(tmp_path / "text", day)
    ints = write_span(tmp_path / "ints", with_ids(day, int_ids(day, arrow_type)))
    a, b = rawdata.read_span(text), rawdata.read_span(ints)
    assert b.schema == a.schema and b.equals(a)
    held_out = rawdata.read_eval_rows(ints, EVAL_PERCENT)
    assert held_out.equals(rawdata.read_eval_rows(text, EVAL_PERCENT))
    assert 0 < held_out.num_rows < ROWS
    # What evaluation samples (text ids) reads the rows back from the integer day.
    wanted = held_out.column(F.EXAMPLE_ID_KEY).to_pylist()[:5][::-1]
    assert rawdata.read_rows_by_id(ints, wanted).column(F.EXAMPLE_ID_KEY).to_pylist() == wanted


def test_jsonl_integer_ids_read_as_text_and_a_float_or_bool_is_a_rejected_record(day,
                                                                                  tmp_path):
    rows = day.slice(0, 6).to_pylist()
    rows[0][F.EXAMPLE_ID_KEY] = 42
    rows[1][F.EXAMPLE_ID_KEY] = "42x"
    rows[2][F.EXAMPLE_ID_KEY] = -7
    rows[3][F.EXAMPLE_ID_KEY] = 42.0           # a float never becomes an id
    rows[4][F.EXAMPLE_ID_KEY] = 1.5
    rows[5][F.EXAMPLE_ID_KEY] = True
    span = write_span(tmp_path / "span", rows)
    (batch, rejects), = job.read_batches(str(span / "part-00000.jsonl"), 100,
                                         layout=job.default_layout())
    assert batch.column(F.EXAMPLE_ID_KEY).to_pylist() == ["42", "42x", "-7"]
    assert [(r["line"], r["reason"]) for r in rejects] == [(4, "wrong_type"), (5, "wrong_type"),
                                                           (6, "wrong_type")]
    assert all(r["detail"].startswith(f"{F.EXAMPLE_ID_KEY}: expected str or int")
               for r in rejects)
    # The held-out rows of an id are the same as of its text.
    assert F.eval_mask(batch.column(F.EXAMPLE_ID_KEY), 50).tolist() == \
        [F.is_eval(i, 50) for i in ("42", "42x", "-7")]


def test_a_parquet_float_id_column_fails_naming_file_and_column(day, tmp_path):
    floats = pa.array(np.arange(ROWS, dtype=np.float64) + 0.5)
    span = write_span(tmp_path / "span", with_ids(day, floats))
    with pytest.raises(ValueError, match=rf"part-00000.parquet: column\(s\) of the wrong "
                                         rf"type, not cast: '{F.EXAMPLE_ID_KEY}' is double"):
        rawdata.read_span(span)
