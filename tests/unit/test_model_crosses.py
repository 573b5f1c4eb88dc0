"""The factorization crosses of the CTR network (`components.ctr.model`), computed by hand:
a multi-valued field crosses the mean of its present values' factors, so a user's recent
items against the candidate item is an item-to-item term (issue 44)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from components.ctr import feature_config as fc
from components.ctr.model import build_net
from components.ctr.ps_train import PsTrainSpec, _config

tf = pytest.importorskip("tensorflow")

BASE = 0.04
MOVIELENS = Path(__file__).resolve().parents[2] / "bench" / "outside_data" / "movielens.yaml"


def _net(fields=("user", "item", "recent")):
    cfg = {"rows": {"user": 4, "item": 6, "recent": 6}, "dims": {}, "hidden": [],
           "dropout": 0.0, "count_features": [], "id_l2": {}, "seed": 3,
           "fm": list(fields), "fm_dim": 3, "embedding_init": "normal",
           "embedding_inits": {}, "embedding_l2": {}, "multi": {"recent": 3}, "dense": [],
           "label": "y"}
    return build_net(cfg, base_rate=BASE)


def _feats(user, item, recent):
    return {"user_xf": tf.constant(user, tf.int64), "item_xf": tf.constant(item, tf.int64),
            "recent_xf": tf.constant(recent, tf.int64)}


def _logit(p):
    p = np.asarray(p, np.float64)
    return np.log(p / (1 - p)) - np.log(BASE / (1 - BASE))


def test_a_multi_valued_field_crosses_the_mean_of_its_present_values():
    net = _net()
    fm = {k: v.numpy() for k, v in net.params.fm.items()}
    user, item = [0, 1, 2, 3], [5, 4, 3, 2]
    recent = [[1, 2, -1], [3, -1, -1], [-1, -1, -1], [0, 1, 5]]
    got = _logit(net.forward(_feats(user, item, recent))[0].numpy())
    for row in range(4):
        u, i = fm["user"][user[row]], fm["item"][item[row]]
        present = [v for v in recent[row] if v >= 0]
        r = fm["recent"][present].mean(axis=0) if present else np.zeros(3)
        want = u @ i + u @ r + i @ r
        assert got[row] == pytest.approx(want, abs=1e-5)


def test_padding_and_repeats_of_the_same_history_score_alike():
    net = _net()
    a = net.forward(_feats([1, 1], [2, 2], [[4, -1, -1], [4, 4, 4]]))[0].numpy()
    assert a[0] == pytest.approx(a[1], abs=1e-6)


def test_the_prior_weighs_every_present_value_of_a_multi_valued_cross():
    net = _net()
    table = net.params.fm["recent"].numpy()
    inv = np.array([[0.5, 2.0, 7.0], [1.0, 9.0, 9.0]], np.float32)
    feats = _feats([0, 1], [0, 1], [[1, 2, -1], [3, -1, -1]])
    feats["__prior_fm_recent"] = tf.constant(inv)
    _, penalty = net.forward(feats)
    sq = (table ** 2).sum(axis=1)
    want = np.mean([0.5 * sq[1] + 2.0 * sq[2], 1.0 * sq[3]])
    assert float(penalty) == pytest.approx(want, rel=1e-5)


def test_a_config_may_cross_a_multi_valued_field_but_not_count_it(tmp_path):
    cfg = fc.load(MOVIELENS)                     # genres: multi_categorical
    paths = {"preprocess_dir": str(tmp_path), "out_dir": str(tmp_path)}
    shape = _config(PsTrainSpec(**paths, fm_fields=["genres", "user_id"]), cfg)
    assert shape["fm"] == ["genres", "user_id"] and "genres" in shape["multi"]
    with pytest.raises(ValueError, match=r"count_features: \['genres'\] are multi-valued"):
        _config(PsTrainSpec(**paths, count_features=["genres"]), cfg)
