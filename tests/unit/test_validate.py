"""The raw-span validation gate: a clean span passes; each kind of breakage (missing
column, type change, null-rate jump, click rate zero, 10x fewer rows, drifted categorical,
duplicated partition, re-uploaded previous span, out-of-range values, unknown device)
stops with a message naming the rule and its observed value; warnings do not stop;
quarantine, override and rerun-after-fix work; the report is written pass or fail.

Spans are small generated days (components.ctr.generate), broken by editing the Parquet
part of the second day; the first day is validated once and serves as history.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.ctr import features as F
from components.ctr.generate import GenerateSpec, run as generate
from components.ctr.validate import (SUMMARY_FILE, ValidateSpec, ValidationFailed,
                                 is_quarantined, run, with_thresholds)
from components.ctr.validation_rules import build_suites

PREV, DAY = "2026-11-01", "2026-11-02"
ROWS = 4000


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Two generated days; the first validated once (its stats are the history)."""
    root = tmp_path_factory.mktemp("validate-base")
    generate(GenerateSpec(out_root=str(root), start=PREV, days=2, rows_per_day=ROWS,
                          n_users=5000, n_items=3000, n_categories=50))
    run(ValidateSpec(span_dir=str(root / "raw" / "ctr" / f"dt={PREV}"),
                     out_dir=str(root / "runs" / "ctr" / f"dt={PREV}" / "r0" / "validation"),
                     history_root=str(root / "runs" / "ctr"), data_docs=False))
    return root


@pytest.fixture
def home(base, tmp_path):
    shutil.copytree(base, tmp_path / "home")
    return tmp_path / "home"


def span_of(home, day=DAY):
    return home / "raw" / "ctr" / f"dt={day}"


def read_day(home, day=DAY):
    return pq.read_table(span_of(home, day) / "part-00000.parquet").to_pandas()


def to_arrow(df) -> pa.Table:
    table = pa.Table.from_pandas(df, preserve_index=False)
    return table.cast(pa.schema([f.with_type(pa.string()) if pa.types.is_large_string(f.type)
                                 else f for f in table.schema]))


def write_day(home, df, name="part-00000.parquet"):
    pq.write_table(to_arrow(df), span_of(home) / name)


def spec_for(home, run_id="r1", **kw) -> ValidateSpec:
    kw.setdefault("data_docs", False)
    return ValidateSpec(span_dir=str(span_of(home)),
                        out_dir=str(home / "runs" / "ctr" / f"dt={DAY}" / run_id / "validation"),
                        history_root=str(home / "runs" / "ctr"),
                        quarantine_dir=str(home / "quarantine" / "ctr"), run_id=run_id, **kw)


def expect_failure(home, *rules, **kw) -> tuple[str, dict]:
    spec = spec_for(home, **kw)
    with pytest.raises(ValidationFailed) as exc:
        run(spec)
    msg = str(exc.value)
    assert msg.startswith(f"span dt={DAY} failed "), msg
    for rule in rules:
        assert f"[{rule}] " in msg, f"rule {rule!r} not named in: {msg}"
    summary = json.loads((home / "runs" / "ctr" / f"dt={DAY}" / spec.run_id / "validation"
                          / SUMMARY_FILE).read_text())
    assert summary["success"] is False and summary["gate"] == "failed"
    assert summary["n_failed"] == len(summary["failed"]) >= 1
    assert is_quarantined(home / "quarantine" / "ctr", f"dt={DAY}")
    return msg, summary


def test_clean_span_passes(home):
    result = run(spec_for(home))
    assert result["success"] is True and result["gate"] == "passed"
    assert result["rows"] == ROWS and result["n_failed"] == 0
    summary = json.loads(open(result["report"]).read())
    # Compared with the previous span: drift, overlap and recent-average rules all ran.
    rules = {r["rule"] for r in summary["results"]}
    assert {"drift:device", "drift:category_id", "drift:price", "duplicates:previous_span",
            "row_count:recent_average", "schema:columns", "type:hour", "click_rate",
            "null_rate:price", "allowed_values:device", "duplicates:parts"} <= rules
    assert summary["previous_span"] == f"dt={PREV}" and summary["history_spans"] == [f"dt={PREV}"]
    assert summary["statistics_table"]["rows_vs_recent_average"] == pytest.approx(1.0)
    assert summary["statistics_table"]["duplicated_parts"] == 0
    assert summary["overlap_with_previous"] == 0
    assert not is_quarantined(home / "quarantine" / "ctr", f"dt={DAY}")
    # Severity on every expectation; a stats artifact next to the run.
    assert {r["severity"] for r in summary["results"]} == {"error", "warning"}
    assert (home / "runs" / "ctr" / f"dt={DAY}" / "r1" / "validation" / "stats"
            / "sample.parquet").exists()


def test_missing_column(home):
    write_day(home, read_day(home).drop(columns=["price"]))
    msg, _ = expect_failure(home, "schema:columns")
    assert "missing ['price']" in msg


def test_type_change(home):
    df = read_day(home)
    df["hour"] = df["hour"].astype(str)
    write_day(home, df)
    msg, _ = expect_failure(home, "type:hour")
    assert "observed 'string'" in msg


def test_an_integer_id_column_passes_and_a_float_one_is_a_type_error(home):
    """A producer writing the id as int64 rewrites nothing: the id is read as its decimal
    text, so the type rule takes it and the duplicate rules count the text (the same id
    written as a string in another part is a duplicate). A float id is still refused."""
    df = read_day(home)
    ids = np.arange(len(df), dtype=np.int64) + 10**12
    write_day(home, df.assign(**{F.EXAMPLE_ID_KEY: ids}))
    assert pq.read_schema(span_of(home) / "part-00000.parquet").field(
        F.EXAMPLE_ID_KEY).type == pa.int64()
    result = run(spec_for(home))
    assert result["gate"] == "passed" and result["rows"] == ROWS
    summary = json.loads(open(result["report"]).read())
    assert summary["types"][F.EXAMPLE_ID_KEY] == ["string"]
    assert summary["statistics_table"]["example_id__duplicate_rate"] == 0
    write_day(home, df.assign(**{F.EXAMPLE_ID_KEY: ids.astype(str)}), "part-00001.parquet")
    _, summary = expect_failure(home, "duplicates:example_id", run_id="r2")
    assert summary["statistics_table"]["example_id__duplicate_rate"] == pytest.approx(0.5)
    (span_of(home) / "part-00001.parquet").unlink()
    write_day(home, df.assign(**{F.EXAMPLE_ID_KEY: ids + 0.5}))
    msg, _ = expect_failure(home, f"type:{F.EXAMPLE_ID_KEY}", run_id="r3")
    assert f"Arrow type of {F.EXAMPLE_ID_KEY} is string (or integer) in every part: " \
           "observed 'double'" in msg


def test_null_rate_jump(home):
    df = read_day(home)
    df.loc[df.index[: ROWS // 2], "price"] = np.nan
    write_day(home, df)
    msg, _ = expect_failure(home, "null_rate:price", "null_rate_increase:price")
    assert "observed 0.5" in msg


def test_click_rate_zero(home):
    df = read_day(home)
    df[F.LABEL_KEY] = 0
    write_day(home, df)
    msg, _ = expect_failure(home, "click_rate")
    assert "[click_rate] click rate in [0.005, 0.2]: observed 0, expected [0.005, 0.2]" in msg


def test_row_count_ten_times_lower(home):
    write_day(home, read_day(home).iloc[: ROWS // 10])
    msg, summary = expect_failure(home, "row_count:recent_average", min_rows=100)
    assert "observed 0.1, expected [0.3333, 3]" in msg
    # (400 rows against 4000 also make the hour / position histograms noisy enough to
    # fail their drift rules; the row-count rule is the one that must name the cause.)
    assert summary["failed"][-1]["rule"] == "row_count:recent_average"


def test_drifted_categorical_distribution(home):
    df = read_day(home)
    rng = np.random.default_rng(1)
    df["device"] = np.where(rng.random(len(df)) < 0.8, "web", df["device"])
    write_day(home, df)
    msg, summary = expect_failure(home, "drift:device")
    assert [f["rule"] for f in summary["failed"]] == ["drift:device"], msg
    assert summary["statistics_table"]["device__js_previous"] > 0.3


def test_duplicated_partition(home):
    shutil.copy(span_of(home) / "part-00000.parquet", span_of(home) / "part-00001.parquet")
    msg, summary = expect_failure(home, "duplicates:parts", "duplicates:example_id")
    assert summary["statistics_table"]["example_id__duplicate_rate"] == pytest.approx(0.5)


def test_previous_span_uploaded_again(home):
    for f in span_of(home).glob("part-*.parquet"):
        f.unlink()
    shutil.copy(span_of(home, PREV) / "part-00000.parquet", span_of(home) / "part-00000.parquet")
    msg, summary = expect_failure(home, "duplicates:previous_span")
    assert summary["overlap_with_previous"] > 0.95


def test_out_of_range_and_unknown_device(home):
    df = read_day(home)
    df.loc[[5, 17], "hour"] = [25, 99]
    df.loc[3, "device"] = "smart_fridge"
    df.loc[4, "user_id"] = None
    write_day(home, df)
    msg, _ = expect_failure(home, "range:hour", "allowed_values:device", "null_rate:user_id")
    assert "max of hour at most 23: observed 99" in msg
    # the unknown device is counted, not printed (rule 22); the Data Docs list it
    assert "1 of 6 distinct value(s) of device unexpected" in msg and "smart_fridge" not in msg


def test_parts_with_different_schemas(home):
    df = read_day(home)
    write_day(home, df.iloc[:2000])
    write_day(home, df.iloc[2000:].assign(hour=lambda d: d["hour"].astype(str)),
              "part-00001.parquet")
    msg, summary = expect_failure(home, "type:hour")
    assert "observed 'int64|string'" in msg
    assert "parquet parts differ in schema: part-00001.parquet has hour: string " \
           "(part-00000.parquet: int64)" in msg
    assert summary["rows"] == ROWS


def test_warning_does_not_stop_and_string_flavours_agree(home):
    df = read_day(home)
    df.loc[0, "user_id"] = "legacy-7"  # breaks the user_id pattern: a warning rule
    write_day(home, df.iloc[:2000])
    # pandas 3 `str` columns are written as large_string: the same schema to us.
    pq.write_table(pa.Table.from_pandas(df.iloc[2000:], preserve_index=False),
                   span_of(home) / "part-00001.parquet")
    result = run(spec_for(home, sample_rows=ROWS))
    assert result["success"] and result["n_warnings"] == 1
    summary = json.loads(open(result["report"]).read())
    assert summary["warnings"][0]["rule"] == "pattern:user_id"
    # counted, not printed (rule 22): a user id is the user's data
    observed = summary["warnings"][0]["observed"]
    assert "1 of 4000 sampled row(s) of user_id unexpected" in observed
    assert "legacy-7" not in observed


def test_quarantine_override_and_rerun_after_fix(home):
    good = read_day(home)
    raw_before = {p.name: p.read_bytes() for p in span_of(home).iterdir()}
    write_day(home, good.assign(**{F.LABEL_KEY: 0}))
    broken_bytes = (span_of(home) / "part-00000.parquet").read_bytes()
    expect_failure(home, "click_rate", run_id="r1")
    marker = home / "quarantine" / "ctr" / f"dt={DAY}.json"
    info = json.loads(marker.read_text())
    assert info["run_id"] == "r1" and "[click_rate]" in info["failed"][0]
    assert (span_of(home) / "part-00000.parquet").read_bytes() == broken_bytes  # untouched

    # A person passes the span on purpose: recorded, not quarantined any more.
    result = run(spec_for(home, run_id="r2", override_reason="known logging outage, "
                                                              "labels backfilled later"))
    assert result["gate"] == "overridden" and result["success"] is False
    assert result["override_reason"].startswith("known logging outage")
    assert not marker.exists()
    assert list((home / "quarantine" / "ctr").glob(f"dt={DAY}.released-*.json"))

    # Data fixed upstream: a rerun passes.
    write_day(home, good)
    assert run(spec_for(home, run_id="r3"))["gate"] == "passed"
    assert set(raw_before) == {p.name for p in span_of(home).iterdir()}


def test_the_feature_config_sets_the_span_bounds(home, tmp_path):
    """A rating log clicks half the time: its config says so, and the same span that
    passes with the generator's bounds fails with bounds that do not fit it."""
    import yaml

    from components.ctr import feature_config as fc
    data = yaml.safe_load(fc.DEFAULT_CONFIG.read_text())
    data["validation"]["thresholds"].update(min_label_rate=0.4, max_label_rate=0.7)
    config = tmp_path / "ratings.yaml"
    config.write_text(yaml.safe_dump(data))
    msg, _ = expect_failure(home, "click_rate", feature_config=str(config))
    assert "click rate in [0.4, 0.7]" in msg
    assert run(spec_for(home, run_id="r9"))["gate"] == "passed"       # default bounds
    bad = {**data, "validation": {**data["validation"], "thresholds": {
        "min_label_rate": 2, "max_row_ratio": 0.5, "min_rows": 10, "max_rows": 5,
        "colour": 1}}}
    config.write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError) as e:
        fc.load(config)
    for where in ("thresholds.min_label_rate", "thresholds.max_row_ratio",
                  "thresholds.min_rows", "thresholds.colour"):
        assert where in str(e.value), where


def test_a_named_override_lets_only_its_rules_through(home):
    df = read_day(home)
    df[F.LABEL_KEY] = 0
    df.loc[:10, "hour"] = 99
    write_day(home, df)
    msg, summary = expect_failure(home, "click_rate", "range:hour",
                                  override_reason="labels late", override_rules=["click_rate"])
    assert summary["not_overridden"] == ["range:hour"]
    assert "the override names other rules, not ['range:hour']" in msg
    result = run(spec_for(home, run_id="r2", override_reason="labels late; hour bug known",
                          override_rules=["click_rate", "range:hour"]))
    assert result["gate"] == "overridden"


def test_suites_cover_every_column():
    suites = build_suites(with_thresholds(ValidateSpec(span_dir="x", out_dir="y")),
                          previous={"x": 1}, history=[{"rows": 1}])
    sample = suites["ctr_span_sample"].expectations
    typed = {e.column for e in sample if e.expectation_type == "expect_column_values_to_be_of_type"}
    assert typed == set(F.RAW_STRING_COLUMNS + F.RAW_INT_COLUMNS + F.RAW_FLOAT_COLUMNS)
    rules = [e.meta["rule"] for s in suites.values() for e in s.expectations]
    assert all(f"null_rate:{c}" in rules for c in typed)
    assert all(e.meta["severity"] in ("error", "warning")
               for s in suites.values() for e in s.expectations)


def test_bad_inputs_fail_clearly(tmp_path):
    span = tmp_path / "raw" / "ctr" / f"dt={DAY}"
    with pytest.raises(FileNotFoundError, match="span directory does not exist"):
        run(ValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "o")))
    span.mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no _SUCCESS marker"):
        run(ValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "o")))
    (span / "_SUCCESS").write_text("")
    with pytest.raises(FileNotFoundError, match=r"no part-\*\.parquet or part-\*\.jsonl\[\.gz\] files"):
        run(ValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "o")))
    with pytest.raises(ValueError, match="drift_thresholds"):
        run(ValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "o"),
                         drift_thresholds={"device": {"max": 0.1}}))
    with pytest.raises(ValueError, match="override_reason must say why"):
        run(ValidateSpec(span_dir=str(span), out_dir=str(tmp_path / "o"), override_reason=" "))
    assert not (tmp_path / "o").exists()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install "
                                             "-y chromium): Data Docs not rendered")
def test_data_docs_render_the_failed_expectations_in_headless_chromium(home, tmp_path):
    import subprocess

    from PIL import Image

    df = read_day(home)
    df[F.LABEL_KEY] = 0
    df.loc[3, "device"] = "smart_fridge"
    write_day(home, df)
    _, summary = expect_failure(home, "click_rate", "allowed_values:device", data_docs=True)
    index = Path(summary["data_docs"])
    assert index.name == "index.html" and index.exists()
    page = Path(summary["data_docs_pages"]["ctr_span_stats"])
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--no-first-run",
               # Data Docs link Bootstrap etc. from CDNs: fail those at once (offline here).
               "--host-resolver-rules=MAP * ~NOTFOUND"]
    dom = subprocess.run([*browser, "--dump-dom", page.as_uri()], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    # The page as the browser built it names the failed rule, its severity and the
    # observed value (GX shows the expectation's description and the observed value).
    assert "[error] click_rate: click rate in [0.005, 0.2]" in dom
    assert "Failed" in dom
    domains = Path(summary["data_docs_pages"]["ctr_span_domains"]).read_text()
    assert "[error] allowed_values:device" in domains and "smart_fridge" in domains
    shot = tmp_path / "data_docs.png"
    subprocess.run([*browser, f"--screenshot={shot}", "--window-size=1200,3000", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    image = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert image.shape == (3000, 1200) and (image < 128).mean() > 0.005


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install "
                                             "-y chromium): Data Docs not rendered")
def test_data_docs_index_lists_the_validations_with_the_network_off(home, tmp_path):
    """GX's index builds its list of validations in JavaScript from CDN libraries: the
    pages are pointed at local copies (retrain.common.docs_assets), so with every
    host unresolvable the index still lists the three suites' results."""
    import subprocess

    from retrain.common import docs_assets

    assert not docs_assets.missing(), "run `python -m retrain.common.docs_assets fetch`"
    df = read_day(home)
    df[F.LABEL_KEY] = 0
    write_day(home, df)
    _, summary = expect_failure(home, "click_rate", data_docs=True)
    docs = Path(summary["data_docs"]).parent
    pages = list(docs.rglob("*.html"))
    assert len(pages) >= 4
    for page in pages:
        text = page.read_text()
        assert not [u for u in docs_assets.CDN_URLS if u in text], page
        # Nothing a page loads (scripts, styles, images) comes from another host; plain
        # <a> links (GX's newsletter) are not loads.
        assert not re.findall(r'(?:\ssrc=|<link[^>]*href=)"https?://', text), page
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-background-networking", "--disable-component-update",
                          "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND",
                          "--virtual-time-budget=10000", "--dump-dom",
                          (docs / "index.html").as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    assert "Showing 1 to 3 of 3 rows" in dom
    for suite in ("ctr_span_stats", "ctr_span_domains", "ctr_span_sample"):
        assert f"{summary['span']}-{suite}" in dom      # its row's batch id


# --------------------------------------------------------------------------- hostile inputs
# Findings of the fault campaign (README "Reliability campaign"): each has its own test here.


def write_jsonl_day(home, rows, day=DAY, name="part-00000.jsonl.gz"):
    """The day's rows as gzip JSONL instead of its Parquet part."""
    import gzip
    for p in span_of(home, day).glob("part-*"):
        p.unlink()
    with gzip.open(span_of(home, day) / name, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def day_rows(home, day=DAY) -> list[dict]:
    return pq.read_table(span_of(home, day) / "part-00000.parquet").to_pylist()


def test_the_stock_config_accepts_a_valid_jsonl_span(home):
    """JSONL statistics read the config's extra columns too (`ts`): a valid span passes."""
    write_jsonl_day(home, day_rows(home))
    result = run(spec_for(home))
    assert result["gate"] == "passed" and result["rows"] == ROWS


def test_an_extra_jsonl_column_is_a_schema_error(home):
    write_jsonl_day(home, [{**r, "coupon_code": "X1"} for r in day_rows(home)])
    msg, _ = expect_failure(home, "schema:columns")
    assert "unexpected ['coupon_code']" in msg


def test_infinite_numbers_fail_validation_in_parquet_and_jsonl(home):
    df = read_day(home)
    df.loc[df.index % 20 == 0, "price"] = np.inf
    write_day(home, df)
    msg, _ = expect_failure(home, "finite:price")
    assert "[finite:price] price has no infinite values: observed 200" in msg
    rows = [{**r, "price": float("inf")} if i % 20 == 0 else r
            for i, r in enumerate(day_rows(home))]
    write_jsonl_day(home, rows)
    msg, summary = expect_failure(home, "parse:rejected", run_id="r2")
    assert "price: inf is not a finite number" in msg
    assert summary["rejected"]["by_reason"] == {"bad_value": 200}


def test_a_span_with_no_usable_rows_fails_cleanly_and_is_quarantined(home):
    """Every record lacks its example id: a ValidationFailed naming why (no TypeError, no
    retry), with the report and the quarantine marker written."""
    write_jsonl_day(home, [{k: v for k, v in r.items() if k != F.EXAMPLE_ID_KEY}
                           for r in day_rows(home)])
    with pytest.raises(ValidationFailed) as exc:
        run(spec_for(home))
    msg = str(exc.value)
    assert msg.startswith(f"span dt={DAY} has no usable rows: {ROWS} record(s) the reader "
                          f"cannot use (missing_field {ROWS}; e.g. part-00000.jsonl.gz line 1: "
                          f"{F.EXAMPLE_ID_KEY} is missing or null)"), msg
    assert "[row_count]" in msg and "column missing" not in msg
    assert is_quarantined(home / "quarantine" / "ctr", f"dt={DAY}")


def test_a_previous_span_with_no_usable_rows_is_no_crash(home):
    """The previous day's statistics are computed from a day whose labels are strings."""
    shutil.rmtree(home / "runs" / "ctr" / f"dt={PREV}")
    write_jsonl_day(home, [{**r, F.LABEL_KEY: "yes"} for r in day_rows(home, PREV)], day=PREV)
    result = run(spec_for(home))
    assert result["gate"] == "passed"


def test_symlinks_out_of_the_root_and_empty_parts_are_refused(home):
    from retrain.common.rawfiles import UnsafeInput
    link = span_of(home) / "part-00001.jsonl"
    link.symlink_to("/etc/passwd")
    with pytest.raises(UnsafeInput, match=r"part-00001.jsonl is a symlink to /etc/passwd, "
                                          r"outside the raw root"):
        run(spec_for(home))
    link.unlink()
    (span_of(home) / "part-00001.jsonl.gz").write_bytes(b"")
    with pytest.raises(UnsafeInput, match=r"part-00001.jsonl.gz is empty \(0 bytes\)"):
        run(spec_for(home))
    assert not (home / "runs" / "ctr" / f"dt={DAY}").exists()


def test_suites_refuse_a_spec_whose_thresholds_were_never_resolved():
    with pytest.raises(ValueError, match="resolved thresholds"):
        build_suites(ValidateSpec(span_dir="x", out_dir="y"), previous=None, history=[])
