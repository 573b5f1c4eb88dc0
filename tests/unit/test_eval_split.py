"""The split is pinned with the model (issue "Chain of custody"): a run at eval_percent 30
against a model trained at 20 scored 34 % of "held-out" rows that were the published
model's training rows. Now evaluation scores only rows held out under both splits, says
so, and refuses a baseline whose rows were chosen another way."""
from __future__ import annotations

import json
import types

import pytest

from components.ctr import features as F
from components.ctr.evaluate import common_split, split_of


def _published(tmp_path, split):
    vdir = tmp_path / "ctr" / "1"
    vdir.mkdir(parents=True)
    (vdir / "retrain_meta.json").write_text(json.dumps({"version": 1, "split": split}))
    return str(vdir)


CFG = types.SimpleNamespace(example_id="example_id")


def test_rows_held_out_by_both_splits_only(tmp_path):
    mine = split_of(CFG, 30)
    assert mine == {"id_column": "example_id", "hash": F.EVAL_HASH, "eval_percent": 30}
    percent, notes = common_split(mine, _published(tmp_path, split_of(CFG, 20)))
    assert percent == 20 and "scored only rows held out by both" in notes[0]
    ids = [f"ex-{i}" for i in range(5000)]
    scored = F.eval_mask(ids, percent)
    base_train = ~F.eval_mask(ids, 20)
    assert scored.sum() > 0 and not (scored & base_train).any()   # none of its training rows
    assert common_split(mine, None) == (30, [])


def test_another_id_column_or_hash_is_refused(tmp_path):
    other = {**split_of(CFG, 20), "id_column": "row_key"}
    with pytest.raises(ValueError, match="id_column 'row_key'"):
        common_split(split_of(CFG, 20), _published(tmp_path, other))


def test_a_baseline_without_a_recorded_split_is_said_so(tmp_path):
    vdir = tmp_path / "old"
    vdir.mkdir()
    (vdir / "retrain_meta.json").write_text("{}")
    percent, notes = common_split(split_of(CFG, 20), str(vdir))
    assert percent == 20 and "records no split" in notes[0]
