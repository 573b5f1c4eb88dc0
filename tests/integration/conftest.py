"""Tiny generated CTR data, preprocessed and trained once per test session.

Preprocessing (Beam + tf.Transform) and training take most of the integration suite's
time, so every module that needs raw spans, transformed shards or an exported
SavedModel shares these session fixtures instead of rebuilding them.
Tests must treat them as read-only and write their own outputs under `tmp_path`.
"""
from __future__ import annotations

import datetime as dt

import pytest

from components.ctr.generate import GenerateSpec, run as generate

SPAN = dt.date(2026, 11, 3)
EVAL_PERCENT = 25


@pytest.fixture(scope="session")
def home(tmp_path_factory):
    """Artifact root with three generated days (2026-11-01..03) of 4000 rows each."""
    root = tmp_path_factory.mktemp("retrain-home")
    generate(GenerateSpec(out_root=str(root), start="2026-11-01", days=3, rows_per_day=4000,
                          n_users=5000, n_items=3000, n_categories=50))
    return root


@pytest.fixture(scope="session")
def span_dir(home):
    return home / "raw" / "ctr" / f"dt={SPAN}"


@pytest.fixture(scope="session")
def preprocessed(home):
    from components.ctr.preprocess import PreprocessSpec, run
    return run(PreprocessSpec(raw_root=str(home / "raw" / "ctr"), span=SPAN.isoformat(),
                              output_dir=str(home / "pre"), window_days=2,
                              eval_percent=EVAL_PERCENT))


@pytest.fixture(scope="session")
def trained(home, preprocessed):
    # The trainer production runs (components.ctr.cluster launches it on a cluster); with no
    # TF_CONFIG it trains the same model and loop in this process.
    from components.ctr.ps_train import PsTrainSpec, run
    return run(PsTrainSpec(preprocess_dir=preprocessed["output_dir"], out_dir=str(home / "model")))
