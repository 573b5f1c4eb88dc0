"""The one-pass span statistics: the CombineFn in a TestPipeline gives the same figures
as numpy/pandas on the whole table, however the rows are split into batches; sketches
stay bounded and within their error; the standalone job writes stats + sample."""
from __future__ import annotations

import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from beam_jobs import span_stats as S
from components.ctr import features as F
from components.ctr.kmv import kmv_overlap


def table(n=3000, seed=0) -> pa.Table:
    rng = np.random.default_rng(seed)
    price = np.round(rng.lognormal(3, 1, n), 2)
    return pa.table({
        F.EXAMPLE_ID_KEY: pa.array([f"2026-11-02-{i:08d}" for i in range(n)], pa.string()),
        "device": pa.array(rng.choice(["ios", "android", "web"], n, p=[.5, .3, .2]), pa.string()),
        "user_id": pa.array([f"u{u}" for u in rng.zipf(1.3, n) % 5000], pa.string()),
        "hour": pa.array(rng.integers(0, 24, n), pa.int64()),
        "price": pa.array(price, pa.float64(), mask=rng.random(n) < 0.1),
        F.LABEL_KEY: pa.array((rng.random(n) < 0.05).astype(np.int64)),
    })


def batches(t: pa.Table, size: int):
    return [("part-00000.parquet", f"b{i}", b, []) for i, b in enumerate(t.to_batches(size))]


CFG = S.StatsConfig(sample_rows=500, quantile_sample=1000, kmv_k=256, topk_capacity=50,
                    top_k=5)


def check_stats(t: pa.Table):
    def check(outputs):
        assert len(outputs) == 1
        stats, sample = S.finalize(outputs[0], CFG, "/x/dt=2026-11-02")
        df = t.to_pandas()
        assert stats["rows"] == len(df)
        price = stats["columns"]["price"]
        assert price["nulls"] == df["price"].isna().sum()
        num = price["numeric"]
        assert num["min"] == df["price"].min() and num["max"] == df["price"].max()
        assert num["mean"] == pytest.approx(df["price"].mean())
        assert num["std"] == pytest.approx(df["price"].std(ddof=0))
        # Quantiles from a 1000-value uniform sample: median within a few rank-%.
        true_rank = (df["price"].dropna() <= num["quantiles"][50]).mean()
        assert abs(true_rank - 0.5) < 0.06
        assert stats["label_rate"] == pytest.approx(df[F.LABEL_KEY].mean())
        device = stats["columns"]["device"]
        assert device["topk_exact"] and device["distinct_exact"] and device["distinct"] == 3
        counts = df["device"].value_counts()
        assert [(v, c) for v, c, _ in device["top"]] == list(counts.items())
        # user_id: more distinct values than counters: bounded, counts underestimated by
        # at most the error bound; more than k distinct: an estimate within ~3/sqrt(k).
        user = stats["columns"]["user_id"]
        true = df["user_id"].value_counts()
        for v, c, _ in user["top"]:
            assert true[v] - user["topk_error_bound"] <= c <= true[v]
        assert user["distinct"] == pytest.approx(df["user_id"].nunique(), rel=0.2)
        assert stats["columns"][F.EXAMPLE_ID_KEY]["distinct"] == pytest.approx(len(df), rel=0.2)
        assert sample.num_rows == CFG.sample_rows
        assert set(sample.column(F.EXAMPLE_ID_KEY).to_pylist()) <= set(df[F.EXAMPLE_ID_KEY])
    return check


@pytest.mark.parametrize("batch_size", [700])
def test_combine_fn_in_test_pipeline(batch_size):
    t = table()
    with TestPipeline() as p:
        out = (p | beam.Create(batches(t, batch_size))
               | beam.CombineGlobally(S.SpanStatsFn(CFG)))
        assert_that(out, check_stats(t))


def test_partials_merge_the_same_whatever_the_split():
    t = table()
    whole = S.batch_partial(t.to_batches()[0], "p", "k", CFG)
    split = S.Partial()
    for i, b in enumerate(t.to_batches(max_chunksize=400)):
        split.merge(S.batch_partial(b, "p", f"k{i}", CFG), CFG)
    a, _ = S.finalize(whole, CFG, "x")
    b, _ = S.finalize(split, CFG, "x")
    for col in ("price", "hour"):
        for key in ("min", "max", "mean", "std", "count"):
            assert a["columns"][col]["numeric"][key] == pytest.approx(
                b["columns"][col]["numeric"][key])
    assert a["fingerprint"] == b["fingerprint"]  # order-free content fingerprint
    assert a["columns"]["device"]["top"] == b["columns"]["device"]["top"]


def test_kmv_overlap_estimates_shared_ids():
    ids = [f"id{i}" for i in range(20000)]
    cfg = S.StatsConfig(kmv_k=1024)
    a = S.batch_partial(pa.table({F.EXAMPLE_ID_KEY: ids[:10000]}).to_batches()[0], "a", "a", cfg)
    b = S.batch_partial(pa.table({F.EXAMPLE_ID_KEY: ids[5000:15000]}).to_batches()[0], "b", "b", cfg)
    sa, _ = S.finalize(a, cfg, "a")
    sb, _ = S.finalize(b, cfg, "b")
    assert sa["columns"][F.EXAMPLE_ID_KEY]["distinct"] == pytest.approx(10000, rel=0.1)
    assert kmv_overlap(sa["example_id_kmv"], sb["example_id_kmv"], 1024) == \
        pytest.approx(0.5, abs=0.1)
    assert kmv_overlap(sa["example_id_kmv"], sa["example_id_kmv"], 1024) == pytest.approx(1.0)


def test_standalone_job_writes_stats_and_sample(tmp_path):
    span = tmp_path / "dt=2026-11-02"
    span.mkdir()
    t = table(5000)
    pq.write_table(t.slice(0, 2500), span / "part-00000.parquet", row_group_size=1000)
    pq.write_table(t.slice(2500), span / "part-00001.parquet", row_group_size=1000)
    out = tmp_path / "stats"
    summary = S.run([f"--span-dir={span}", f"--output-dir={out}", "--sample-rows=100",
                     "--batch-size=512", "--runner=DirectRunner"])
    assert summary["rows"] == 5000
    stats = json.loads((out / S.STATS_FILE).read_text())
    assert [p["rows"] for p in stats["parts"]] == [2500, 2500]
    assert pq.read_table(out / S.SAMPLE_FILE).num_rows == 100
    with pytest.raises(FileNotFoundError, match="no part-"):
        S.run([f"--span-dir={tmp_path}", f"--output-dir={out}"])


def test_a_jsonl_span_has_the_same_statistics_as_its_parquet_twin(tmp_path):
    """The same rows as part-*.jsonl.gz and as part-*.parquet: equal counts, nulls, types,
    numeric summaries and top values (JSON numbers summarised as doubles, like Parquet)."""
    import gzip

    from components.ctr.generate import GenerateSpec, run as generate
    generate(GenerateSpec(out_root=str(tmp_path), start="2026-11-01", days=1,
                          rows_per_day=2000, n_users=500, n_items=300, n_categories=20))
    parquet_span = tmp_path / "raw" / "ctr" / "dt=2026-11-01"
    jsonl_span = tmp_path / "jsonl" / "dt=2026-11-01"
    jsonl_span.mkdir(parents=True)
    rows = pq.read_table(parquet_span / "part-00000.parquet").to_pylist()
    with gzip.open(jsonl_span / "part-00000.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    stats = {}
    for name, span in (("parquet", parquet_span), ("jsonl", jsonl_span)):
        S.run([f"--span-dir={span}", f"--output-dir={tmp_path / 'stats' / name}"])
        stats[name] = json.loads((tmp_path / "stats" / name / S.STATS_FILE).read_text())
    a, b = stats["parquet"], stats["jsonl"]
    assert a["rows"] == b["rows"] == 2000 and a["label_rate"] == b["label_rate"]
    # The JSONL reader sees every column (the config's extra column `ts` included), and
    # summarises each as the Parquet reader does.
    assert set(b["columns"]) == set(a["columns"])
    for col, sb in b["columns"].items():
        sa = a["columns"][col]
        assert (sa["types"], sa["nulls"]) == (sb["types"], sb["nulls"]), col
        if "numeric" in sa:
            assert sb["numeric"]["mean"] == pytest.approx(sa["numeric"]["mean"], rel=1e-6), col
        if "top" in sa:
            assert [v for v, _, _ in sa["top"]] == [v for v, _, _ in sb["top"]], col
