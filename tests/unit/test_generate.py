"""The synthetic click-log generator on tiny sizes: schema, determinism, plausibility,
atomic day partitions, skip/overwrite and the CLI."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components import metrics
from retrain.common import atomic
from retrain.common.paths import raw_span_dir
from components.ctr.rawdata import read_truth
from components.ctr import features as F
from components.ctr import generate as G

SMALL = dict(rows_per_day=2000, n_users=20_000, n_items=10_000, n_categories=100)


def spec(root, **kw) -> G.GenerateSpec:
    return G.GenerateSpec(out_root=str(root), **{"start": "2026-11-01", "days": 2, **SMALL, **kw})


def day_dir(root, day="2026-11-01"):
    return raw_span_dir(root, "ctr", dt.date.fromisoformat(day))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    result = G.run(spec(root))
    return root, result


def test_schema_and_dtypes_match_features(generated):
    root, _ = generated
    table = pq.read_table(day_dir(root) / G.DATA_FILE)
    assert table.column_names == G.COLUMNS
    assert set(table.column_names) == set(
        F.RAW_STRING_COLUMNS + F.RAW_INT_COLUMNS + F.RAW_FLOAT_COLUMNS)
    for col in F.RAW_STRING_COLUMNS:
        assert table.schema.field(col).type == pa.string(), col
    for col in F.RAW_INT_COLUMNS:
        assert table.schema.field(col).type == pa.int64(), col
    for col in F.RAW_FLOAT_COLUMNS:
        assert table.schema.field(col).type == pa.float64(), col
    df = table.to_pandas()
    assert df[F.EXAMPLE_ID_KEY].is_unique
    assert df["hour"].between(0, F.IDENTITY_FEATURES["hour"] - 1).all()
    assert df["position"].between(1, 31).all() and df["position"].max() < F.IDENTITY_FEATURES[
        "position"]
    assert (df["position"] == 1).mean() > (df["position"] == 10).mean()  # top slots common
    assert set(df["device"]) <= {"ios", "android", "web", "tablet", "other"}
    assert set(df[F.LABEL_KEY]) <= {0, 1}
    assert df["user_id"].str.match(r"^u\d+$").all()
    assert df["item_id"].str.match(r"^i\d+$").all()
    assert df["category_id"].str.match(r"^c\d+$").all()
    start = int(dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc).timestamp())
    assert df[F.TIMESTAMP_KEY].between(start, start + 86399).all()
    assert ((df[F.TIMESTAMP_KEY] - start) // 3600 == df["hour"]).all()
    assert df[F.TIMESTAMP_KEY].is_monotonic_increasing
    assert (df["price"].dropna() > 0).all() and (df["item_age_days"].dropna() >= 0).all()


def test_plausible_rates_nulls_and_ids(generated):
    root, result = generated
    df = pq.read_table(day_dir(root) / G.DATA_FILE).to_pandas()
    assert 0.015 < df[F.LABEL_KEY].mean() < 0.08
    for col, rate in (("price", 0.05), ("user_past_clicks", 0.03), ("item_age_days", 0.02)):
        null_rate = df[col].isna().mean()
        assert 0 < null_rate < 3 * rate, (col, null_rate)
    assert df["user_id"].nunique() > 500
    assert df["item_id"].nunique() > 500
    # Each item has a single category, whatever day it shows up on.
    both = pa.concat_tables([pq.read_table(day_dir(root, d) / G.DATA_FILE,
                                           columns=["item_id", "category_id"])
                             for d in ("2026-11-01", "2026-11-02")]).to_pandas()
    assert (both.groupby("item_id")["category_id"].nunique() == 1).all()
    assert result["distinct_users"] > df["user_id"].nunique()


def test_success_marker_and_truth(generated):
    root, result = generated
    for row in result["days"]:
        d = day_dir(root, row["day"])
        info = json.loads((d / G.SUCCESS_FILE).read_text())
        assert info["rows"] == 2000 and info["seed"] == 7
        assert info["generator_version"] == G.GENERATOR_VERSION
        truth = read_truth(d).to_pandas()
        data = pq.read_table(d / G.DATA_FILE).to_pandas()
        assert list(truth.columns) == [F.EXAMPLE_ID_KEY, F.TRUE_PROB_KEY]
        assert truth[F.EXAMPLE_ID_KEY].tolist() == data[F.EXAMPLE_ID_KEY].tolist()
        assert truth[F.TRUE_PROB_KEY].between(0, 1).all()
        bayes_auc = metrics.auc(data[F.LABEL_KEY], truth[F.TRUE_PROB_KEY])
        assert info["bayes_auc"] == pytest.approx(bayes_auc)
        assert row["bayes_auc"] == pytest.approx(bayes_auc)
        assert 0.6 < bayes_auc < 0.95
        # No temp or leftover directories next to the day partitions.
        assert not [p for p in d.parent.iterdir() if p.name.startswith(".")]
    assert [r["status"] for r in result["days"]] == ["written", "written"]


def test_deterministic_for_a_seed_and_different_for_another(tmp_path):
    a = G.run(spec(tmp_path / "a", days=1))
    b = G.run(spec(tmp_path / "b", days=1))
    c = G.run(spec(tmp_path / "c", days=1, seed=8))
    read = lambda root, name: pq.read_table(day_dir(root) / name)  # noqa: E731
    for name in (G.DATA_FILE, G.TRUTH_FILE):
        assert read(tmp_path / "a", name).equals(read(tmp_path / "b", name))
        assert ((day_dir(tmp_path / "a") / name).read_bytes()
                == (day_dir(tmp_path / "b") / name).read_bytes())
    assert not read(tmp_path / "a", G.DATA_FILE).equals(read(tmp_path / "c", G.DATA_FILE))
    assert a["days"][0]["bayes_auc"] == b["days"][0]["bayes_auc"]
    assert a["days"][0]["bayes_auc"] != c["days"][0]["bayes_auc"]


def test_day_content_independent_of_requested_range(tmp_path, generated):
    root, _ = generated
    # 2026-11-02 as the second day of a 2-day run vs alone vs inside a longer run.
    G.run(spec(tmp_path / "alone", start="2026-11-02", days=1))
    G.run(spec(tmp_path / "longer", start="2026-10-31", days=3))
    ref = pq.read_table(day_dir(root, "2026-11-02") / G.DATA_FILE)
    for other in ("alone", "longer"):
        assert pq.read_table(day_dir(tmp_path / other, "2026-11-02") / G.DATA_FILE).equals(ref)


def test_days_differ_and_popularity_drifts(generated):
    root, _ = generated
    d1 = pq.read_table(day_dir(root, "2026-11-01") / G.DATA_FILE).to_pandas()
    d2 = pq.read_table(day_dir(root, "2026-11-02") / G.DATA_FILE).to_pandas()
    assert not d1["user_id"].equals(d2["user_id"])
    world = G._world_for(spec(root), G.WorldConfig())
    # The sampling distribution of items is not the same on two days.
    cfg = world.cfg
    pops = [world.item_logpop + cfg.popularity_drift * np.sin(
        2 * np.pi * dt.date(2026, 11, k).toordinal() / world.item_pop_period
        + world.item_pop_phase) for k in (1, 8)]
    assert not np.allclose(pops[0], pops[1])
    assert np.corrcoef(pops[0], pops[1])[0, 1] > 0.5  # drift, not reshuffle


def test_skip_existing_then_overwrite(tmp_path, caplog):
    first = G.run(spec(tmp_path, days=1))
    marker = day_dir(tmp_path) / G.SUCCESS_FILE
    before = marker.stat().st_mtime_ns
    again = G.run(spec(tmp_path, days=2))
    assert [d["status"] for d in again["days"]] == ["skipped", "written"]
    assert again["days"][0]["bayes_auc"] == first["days"][0]["bayes_auc"]
    assert again["days"][0]["rows"] == 2000
    assert marker.stat().st_mtime_ns == before
    # Kept despite a different seed, but the difference is reported.
    with caplog.at_level("WARNING"):
        other = G.run(spec(tmp_path, days=1, seed=9))
    assert other["days"][0]["status"] == "skipped"
    assert other["days"][0]["differs"] == ["seed"]
    assert "different seed" in caplog.text
    over = G.run(spec(tmp_path, days=1, seed=9, overwrite=True))
    assert over["days"][0]["status"] == "written"
    assert json.loads(marker.read_text())["seed"] == 9


def test_incomplete_day_is_regenerated(tmp_path):
    d = day_dir(tmp_path)
    d.mkdir(parents=True)
    (d / "part-00000.parquet").write_bytes(b"half")  # no _SUCCESS: not a complete day
    atomic.mark(d)                                   # ... of retrain's own writing
    result = G.run(spec(tmp_path, days=1))
    assert result["days"][0]["status"] == "written"
    assert pq.read_table(d / G.DATA_FILE).num_rows == 2000


def test_an_incomplete_day_retrain_did_not_write_is_left_alone(tmp_path):
    """Someone else's half-delivered day (no _SUCCESS, no marker) is not deleted to make
    room: refused, naming the folder, and left as it was."""
    d = day_dir(tmp_path)
    d.mkdir(parents=True)
    (d / "part-00000.parquet").write_bytes(b"their upload, in progress")
    with pytest.raises(FileExistsError, match=f"{d} is a folder that retrain did not write"):
        G.run(spec(tmp_path, days=1))
    assert [p.name for p in d.iterdir()] == ["part-00000.parquet"]
    assert (d / "part-00000.parquet").read_bytes() == b"their upload, in progress"


@pytest.mark.parametrize("kw, match", [
    (dict(days=0), "days"),
    (dict(rows_per_day=0), "rows_per_day"),
    (dict(start="2026-13-01"), "YYYY-MM-DD"),
    (dict(start="yesterday"), "YYYY-MM-DD"),
    (dict(seed=-1), "seed"),
])
def test_bad_input(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        G.run(spec(tmp_path, **kw))
    assert not (tmp_path / "raw").exists()


def test_spec_is_json_friendly():
    s = G.GenerateSpec(out_root="/x", start="2026-11-01")
    assert json.loads(json.dumps(dataclasses.asdict(s))) == dataclasses.asdict(s)
    assert G.WorldConfig().fingerprint() == G.WorldConfig().fingerprint()
    assert G.WorldConfig(target_ctr=0.05).fingerprint() != G.WorldConfig().fingerprint()


@pytest.fixture
def cli(monkeypatch):
    from retrain import cli as cli_mod

    # Only this module's subcommand: the CLI must not depend on the other capabilities.
    monkeypatch.setattr(cli_mod, "COMMANDS", ["components.ctr.generate"])
    return cli_mod


def test_cli_generate_prints_table(cli, tmp_path, capsys):
    code = cli.main(["generate", "--out-root", str(tmp_path), "--start", "2026-11-01",
                     "--days", "2", "--rows-per-day", "500", "--n-users", "5000",
                     "--n-items", "3000", "--n-categories", "50"])
    out = capsys.readouterr().out
    assert code == 0
    assert "2026-11-01" in out and "2026-11-02" in out and "bayes_auc" in out
    assert f"output: {tmp_path / 'raw' / 'ctr'}" in out
    assert (day_dir(tmp_path, "2026-11-02") / G.SUCCESS_FILE).exists()


def test_cli_help_describes_every_option(cli, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--out-root", "--start", "--days", "--rows-per-day", "--seed",
                   "--n-users", "--n-items", "--n-categories", "--overwrite"):
        assert option in out


@pytest.mark.parametrize("args", [["--days", "0"], ["--rows-per-day", "0"],
                                  ["--start", "2026-02-30"]])
def test_cli_bad_input_exits_2(cli, tmp_path, capsys, args):
    argv = ["generate", "--out-root", str(tmp_path), "--start", "2026-11-01", *args]
    assert cli.main(argv) == 2
    assert "retrain generate: error:" in capsys.readouterr().err
