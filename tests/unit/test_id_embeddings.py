"""Per-field embeddings set in the feature config (issue 44.1: a config, not code): the
field joins the MLP with its own width, initializer and prior strength; a train spec's
override still wins, and configs without the section keep their fingerprints."""
from __future__ import annotations

import numpy as np

from components.ctr import feature_config as fc
from components.ctr.ps_train import PsTrainSpec, _config
from components.ctr.train_input import prior_weights


def _with_embeddings(**model) -> fc.FeatureConfig:
    d = fc.default().to_dict()
    d["model"].update(model)
    return fc.from_dict(d)


def test_the_configs_embeddings_reach_the_network_and_its_priors():
    cfg = _with_embeddings(embeddings={"user_id": {"dim": 8, "init": "zeros", "l2": 2.5},
                                       "item_id": {"dim": 6}})
    assert fc.from_dict(cfg.to_dict()) == cfg                      # round trip
    spec = PsTrainSpec(preprocess_dir="/p", out_dir="/o")
    net = _config(spec, cfg)
    assert net["dims"]["user_id"] == 8 and net["dims"]["item_id"] == 6
    assert net["dims"]["category_id"] == spec.embedding_dim        # the config's deep fields
    assert net["embedding_inits"]["user_id"] == "zeros"
    assert net["embedding_inits"]["item_id"] == spec.embedding_init
    assert net["embedding_l2"] == {**{k: spec.embedding_l2 for k in net["dims"]},
                                   "user_id": 2.5}
    counts = {k: np.full(rows, 4.0) for k, rows in net["rows"].items()}
    priors = prior_weights(spec, net, counts)
    assert priors["__prior_emb_user_id"][1][0] == np.float32(2.5 / 4)
    assert priors["__prior_emb_item_id"][1][0] == np.float32(spec.embedding_l2 / 4)


def test_a_train_spec_override_wins():
    cfg = _with_embeddings(embeddings={"user_id": {"dim": 8}})
    net = _config(PsTrainSpec(preprocess_dir="/p", out_dir="/o",
                              embedding_dims={"user_id": 16}), cfg)
    assert net["dims"]["user_id"] == 16
    only = _config(PsTrainSpec(preprocess_dir="/p", out_dir="/o", deep_fields=["device"]), cfg)
    assert list(only["dims"]) == ["device"]                        # the spec's list, whole


def test_without_the_section_nothing_changes():
    cfg = fc.default()
    assert "embeddings" not in cfg.to_dict()["model"]               # the fingerprint's input
    net = _config(PsTrainSpec(preprocess_dir="/p", out_dir="/o"), cfg)
    assert list(net["dims"]) == list(cfg.model.deep_fields)
