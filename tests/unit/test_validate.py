"""The raw-span validation gate: a good span passes; each kind of breakage fails with a
message that names the broken expectation and column, and the report is still written."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.ctr import features as F
from components.validate import (ALLOWED_DEVICES, SUMMARY_FILE, ValidateSpec,
                                 ValidationFailed, build_suite, run)

N_ROWS = 2000
DAY = "2026-11-02"


def make_frame(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    """A realistic valid day: every column of features.py with the generator's types."""
    rng = np.random.default_rng(seed)
    day_start = 1_793_577_600  # 2026-11-02T00:00:00Z
    hour = np.sort(rng.integers(0, 24, n))

    def with_nulls(values, rate):
        return np.where(rng.random(n) < rate, np.nan, values)

    return pd.DataFrame({
        F.EXAMPLE_ID_KEY: [f"{DAY}-{i:08d}" for i in range(n)],
        F.TIMESTAMP_KEY: (day_start + hour * 3600 + rng.integers(0, 3600, n)).astype("int64"),
        "user_id": [f"u{u}" for u in rng.zipf(1.5, n) % 50_000],
        "item_id": [f"i{i}" for i in rng.zipf(1.5, n) % 20_000],
        "category_id": [f"c{c}" for c in rng.integers(0, 300, n)],
        "device": rng.choice(list(ALLOWED_DEVICES), n, p=[0.38, 0.42, 0.12, 0.05, 0.03]),
        "hour": hour.astype("int64"),
        "position": (rng.integers(0, 31, n) + 1).astype("int64"),
        "price": with_nulls(np.round(rng.lognormal(3.0, 1.0, n), 2), 0.05),
        "user_past_clicks": with_nulls(rng.poisson(3.0, n).astype("float64"), 0.03),
        "item_age_days": with_nulls(rng.uniform(0, 720, n), 0.02),
        F.LABEL_KEY: (rng.random(n) < 0.04).astype("int64"),
    })


def to_arrow(df: pd.DataFrame) -> pa.Table:
    """Like the generator: pandas 3 `str` columns become large_string in Arrow; use string."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_large_string(f.type) else f
                        for f in table.schema])
    return table.cast(schema)


def write_span(root, df: pd.DataFrame, marker: bool = True, parts: int = 1):
    span = root / "raw" / "ctr" / f"dt={DAY}"
    span.mkdir(parents=True)
    for k, chunk in enumerate(np.array_split(np.arange(len(df)), parts)):
        pq.write_table(to_arrow(df.iloc[chunk]), span / f"part-{k:05d}.parquet")
    # Ignored by validation: a different schema must not matter.
    pq.write_table(pa.table({"example_id": ["x"], "p_click": [0.1]}), span / "_truth.parquet")
    if marker:
        (span / "_SUCCESS").write_text(json.dumps({"rows": len(df)}))
    return span


def spec_for(tmp_path, span, **kw) -> ValidateSpec:
    return ValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "out" / "validation"), **kw)


def expect_failure(tmp_path, df, *needles, **spec_kw) -> str:
    span = write_span(tmp_path, df)
    spec = spec_for(tmp_path, span, **spec_kw)
    with pytest.raises(ValidationFailed) as exc:
        run(spec)
    msg = str(exc.value)
    assert msg.startswith(f"span dt={DAY} failed "), msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in: {msg}"
    # The report is written even though the step fails.
    summary = json.loads((tmp_path / "out" / "validation" / SUMMARY_FILE).read_text())
    assert summary["success"] is False
    assert summary["n_failed"] == len(summary["failed"]) >= 1
    return msg


def test_valid_span_passes(tmp_path):
    df = make_frame()
    span = write_span(tmp_path, df, parts=2)
    spec = spec_for(tmp_path, span)
    result = run(spec)
    assert result["success"] is True
    assert result["rows"] == N_ROWS
    assert result["n_failed"] == 0
    assert result["click_rate"] == pytest.approx(df[F.LABEL_KEY].mean())
    summary = json.loads(open(result["report"]).read())
    assert summary["success"] is True
    assert summary["n_expectations"] == len(build_suite(spec).expectations)
    assert summary["failed"] == []
    assert summary["parts"] == ["part-00000.parquet", "part-00001.parquet"]
    assert set(summary["null_rates"]) == set(df.columns)
    assert 0 < summary["null_rates"]["price"] < 0.2
    assert summary["null_rates"]["user_id"] == 0
    assert all(r["success"] for r in summary["results"])
    # No leftover temp dirs beside the artifact.
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["validation"]


def test_suite_covers_every_column():
    suite = build_suite(ValidateSpec(span_dir="x", out_dir="y"))
    typed = {e.column for e in suite.expectations
             if e.expectation_type == "expect_column_values_to_be_of_type"}
    assert typed == set(F.RAW_STRING_COLUMNS + F.RAW_INT_COLUMNS + F.RAW_FLOAT_COLUMNS)
    null_checked = {e.column for e in suite.expectations
                    if e.expectation_type == "expect_column_values_to_not_be_null"}
    assert null_checked == typed


def test_missing_column_fails(tmp_path):
    msg = expect_failure(tmp_path, make_frame().drop(columns=["price"]),
                         "expect_table_columns_to_match_set(table): missing ['price']",
                         "expect_column_values_to_be_of_type(price): column missing")
    assert "list index out of range" not in msg


def test_hour_as_string_fails(tmp_path):
    df = make_frame()
    df["hour"] = df["hour"].astype(str)
    expect_failure(tmp_path, df, "expect_column_values_to_be_of_type(hour): observed type str, "
                                 "expected int64",
                   "expect_column_values_to_be_between(hour)")


def test_hour_out_of_range_fails(tmp_path):
    df = make_frame()
    df.loc[[5, 17], "hour"] = [25, 99]
    msg = expect_failure(tmp_path, df, "expect_column_values_to_be_between(hour): "
                                       "2 unexpected values (0.1% of rows; e.g. ", "25", "99")
    assert "failed 1 of" in msg


def test_click_rate_zero_fails(tmp_path):
    df = make_frame()
    df[F.LABEL_KEY] = 0
    expect_failure(tmp_path, df, "expect_column_mean_to_be_between(click): observed 0, "
                                 "expected [0.005, 0.2]")


def test_too_few_rows_fails(tmp_path):
    expect_failure(tmp_path, make_frame(n=500),
                   "expect_table_row_count_to_be_between(table): observed 500, "
                   "expected [1000, 50000000]")


def test_null_user_id_fails(tmp_path):
    df = make_frame()
    df.loc[3, "user_id"] = None
    expect_failure(tmp_path, df, "expect_column_values_to_not_be_null(user_id): 1 null (")


def test_too_many_numeric_nulls_fails(tmp_path):
    df = make_frame()
    df.loc[df.index[: N_ROWS // 2], "item_age_days"] = np.nan
    expect_failure(tmp_path, df, "expect_column_values_to_not_be_null(item_age_days)",
                   "allowed 20%")


def test_unknown_device_and_duplicate_ids_fail(tmp_path):
    df = make_frame()
    df.loc[0, "device"] = "smart_fridge"
    df.loc[1, F.EXAMPLE_ID_KEY] = df.loc[2, F.EXAMPLE_ID_KEY]
    expect_failure(tmp_path, df, "expect_column_values_to_be_in_set(device)", "'smart_fridge'",
                   "expect_column_values_to_be_unique(example_id)")


def test_parts_with_different_schemas_fail(tmp_path):
    df = make_frame()
    span = write_span(tmp_path, df.iloc[:1000])
    bad = df.iloc[1000:].assign(hour=lambda d: d["hour"].astype(str))
    pq.write_table(to_arrow(bad), span / "part-00001.parquet")
    with pytest.raises(ValidationFailed) as exc:
        run(spec_for(tmp_path, span))
    msg = str(exc.value)
    assert "expect_column_values_to_be_of_type(hour): 2000 value(s) not of type int64 " \
           "(column dtype object;" in msg, msg
    assert "parquet parts differ in schema: part-00001.parquet has hour: string " \
           "(part-00000.parquet: int64)" in msg, msg
    summary = json.loads((tmp_path / "out" / "validation" / SUMMARY_FILE).read_text())
    assert summary["rows"] == N_ROWS
    assert summary["dtypes"]["hour"] == "object"


def test_string_and_large_string_parts_are_the_same_schema(tmp_path):
    df = make_frame()
    span = write_span(tmp_path, df.iloc[:1000])  # string columns
    raw = pa.Table.from_pandas(df.iloc[1000:], preserve_index=False)  # large_string (pandas 3)
    pq.write_table(raw, span / "part-00001.parquet")
    result = run(spec_for(tmp_path, span))
    assert result["success"] and result["rows"] == N_ROWS


def test_missing_success_marker_fails(tmp_path):
    span = write_span(tmp_path, make_frame(), marker=False)
    with pytest.raises(FileNotFoundError, match="no _SUCCESS marker"):
        run(spec_for(tmp_path, span))
    assert not (tmp_path / "out").exists()
    # ... unless the caller says the marker is not required.
    assert run(spec_for(tmp_path, span, require_success_marker=False))["success"]


def test_missing_dir_fails(tmp_path):
    with pytest.raises(FileNotFoundError, match="span directory does not exist"):
        run(spec_for(tmp_path, tmp_path / "raw" / "ctr" / f"dt={DAY}"))


def test_no_parts_fails(tmp_path):
    span = tmp_path / "raw" / "ctr" / f"dt={DAY}"
    span.mkdir(parents=True)
    (span / "_SUCCESS").write_text("")
    with pytest.raises(FileNotFoundError, match=r"no part-\*\.parquet files"):
        run(spec_for(tmp_path, span))
