"""CTR slice assignment from raw eval rows: top categories + other, device, new vs returning."""
from __future__ import annotations

import pyarrow as pa
import pytest

from components.ctr import slices


def table(categories, devices, clicks) -> pa.Table:
    return pa.table({"category_id": pa.array(categories, pa.string()),
                     "device": pa.array(devices, pa.string()),
                     "user_past_clicks": pa.array(clicks, pa.float64())})


def test_assign_top_categories_device_and_user_type():
    t = table(["c1", "c2", "c2", "c3", "c3", "c3", None],
              ["ios", "web", None, "ios", "ios", "android", "web"],
              [0.0, 3.0, None, 1.0, 0.0, 12.0, 0.5])
    s = slices.assign(t, top_categories=2)
    assert list(s) == ["category", "device", "user_type"]
    # c3 (3 rows) and c2 (2 rows) are the top 2; c1 and the missing one are "other".
    assert s["category"].tolist() == ["other", "c2", "c2", "c3", "c3", "c3", "other"]
    assert s["device"].tolist() == ["ios", "web", "unknown", "ios", "ios", "android", "web"]
    assert s["user_type"].tolist() == ["new", "returning", "unknown", "returning", "new",
                                       "returning", "returning"]


def test_assign_a_subset_and_reject_unknown_slices():
    t = table(["c1"], ["ios"], [1.0])
    assert list(slices.assign(t, ["device"])) == ["device"]
    with pytest.raises(ValueError, match="unknown slice"):
        slices.assign(t, ["country"])


def test_assign_on_generated_rows_feeds_slice_metrics():
    import datetime as dt
    from components.ctr.generate import GenerateSpec, generate_day
    from components.metrics import slice_metrics
    spec = GenerateSpec(out_root="unused", start="2026-11-01", rows_per_day=3000,
                        n_users=2000, n_items=1000, n_categories=40)
    data, truth = generate_day(spec, dt.date(2026, 11, 1))
    values = slices.assign(data, top_categories=5)
    out = slice_metrics(data.column("click").to_numpy(), truth.column("p_click").to_numpy(),
                        values)
    assert len(out["category"]) == 6 and "other" in out["category"]
    assert set(out["device"]) <= {"ios", "android", "web", "tablet", "other"}
    assert set(out["user_type"]) <= {"new", "returning", "unknown"}
    assert "returning" in out["user_type"] and "new" in out["user_type"]
    for name, per_value in out.items():
        assert sum(v["n"] for v in per_value.values()) == 3000, name
