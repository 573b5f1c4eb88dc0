"""The registry's on-disk layout is a TensorFlow Serving model base path.

TF Serving is pointed at `<registry root>/<model>` and expects nothing there but numeric
version directories, each a complete SavedModel; it serves the highest version by
default. This publishes the real trained model (session fixture `trained`) twice and
checks that a server would find exactly that: numeric versions (plus the registry's
CURRENT and .lock, which TF Serving ignores), no leftover temp dirs, the SavedModel files
copied as exported, CURRENT agreeing with TF Serving's "latest" policy, and a
`serving_default` signature that takes raw log columns and returns `p_click`.
"""
from __future__ import annotations

import filecmp
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from components.ctr import features as F
from retrain.common.registry import CURRENT_FILE, LOCK_FILE, META_FILE, Registry

pytestmark = pytest.mark.integration

# Fixtures home, span_dir, preprocessed, trained: tests/integration/conftest.py.
MODEL = "ctr"
SCORED_ROWS = 32


def _integration_conftest():
    # Not `from conftest import ...`: the module named `conftest` may be tests/conftest.py.
    spec = importlib.util.spec_from_file_location(
        "_retrain_integration_conftest", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def registry(tmp_path_factory, trained):
    reg = Registry(tmp_path_factory.mktemp("serving-registry"))
    for i in (1, 2):
        reg.publish(trained["model_dir"], MODEL, {
            "run_id": f"run-{i}", "dag_id": "ctr_daily_retrain",
            "data_span": f"2026-11-0{i}", "metrics": {"auc": 0.6 + i / 100, "log_loss": 0.2},
            "gate": {"blessed": True, "reasons": ["test"]}})
    return reg


def test_model_dir_holds_only_numeric_versions(registry):
    mdir = registry.root / MODEL
    names = {p.name for p in mdir.iterdir()}
    versions = {n for n in names if re.fullmatch(r"[1-9][0-9]*", n)}
    assert versions == {"1", "2"}
    assert names - versions == {CURRENT_FILE, LOCK_FILE}, "no temp dirs or other entries"
    assert all((mdir / v).is_dir() for v in versions)
    # TF Serving's default version policy serves the highest number: CURRENT must agree.
    assert registry.current_version(MODEL) == max(int(v) for v in versions) == 2
    assert registry.get(MODEL, 1)["stage"] == "archived"
    assert registry.get(MODEL, 2)["stage"] == "published"


def test_each_version_is_the_exported_savedmodel(registry, trained):
    exported = Path(trained["model_dir"])
    exported_files = _files(exported)
    assert {"saved_model.pb", "variables/variables.index"} <= exported_files
    assert (exported / "assets").is_dir()
    for version in (1, 2):
        vdir = registry.model_path(MODEL, version)
        assert (vdir / "saved_model.pb").is_file()
        assert (vdir / "variables" / "variables.index").is_file()
        assert (vdir / "assets").is_dir()
        # Exactly the exported files (vocabularies in assets/ included), byte for byte,
        # plus the registry's meta file.
        assert _files(vdir) == exported_files | {META_FILE}
        _, mismatch, errors = filecmp.cmpfiles(exported, vdir, sorted(exported_files),
                                               shallow=False)
        assert not mismatch and not errors, (mismatch, errors)


def test_current_version_serves_raw_features(registry, span_dir):
    import tensorflow as tf

    from components.ctr import rawdata
    from components.ctr.transform import raw_feature_spec

    current = registry.root / MODEL / str(registry.current_version(MODEL))
    serve = tf.saved_model.load(str(current)).signatures["serving_default"]

    raw_spec = raw_feature_spec()
    inputs = serve.structured_input_signature[1]
    assert set(inputs) == set(raw_spec)
    assert {k: v.dtype for k, v in inputs.items()} == {k: v.dtype for k, v in raw_spec.items()}
    assert {v.dtype for v in inputs.values()} == {tf.string, tf.int64, tf.float32}
    assert all(v.shape.as_list() == [None] for v in inputs.values()), "one value per row"
    assert set(serve.structured_outputs) == {"p_click"}

    eval_percent = _integration_conftest().EVAL_PERCENT
    rows = rawdata.read_eval_rows(span_dir, eval_percent).slice(0, SCORED_ROWS)
    assert rows.num_rows == SCORED_ROWS
    raw = rawdata.to_raw_features(rows)
    assert set(raw) == set(raw_spec)
    out = serve(**{k: tf.constant(v) for k, v in raw.items()})["p_click"].numpy().reshape(-1)
    assert out.shape == (SCORED_ROWS,)
    assert np.all(np.isfinite(out)) and np.all((out > 0) & (out < 1)), out
    assert F.LABEL_KEY not in inputs
