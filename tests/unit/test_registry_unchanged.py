"""Issue 46: a candidate identical to the published model is not published again.

Real SavedModels (tiny `tf.Module`s saved by TensorFlow, not stand-ins) and a real registry
on disk. TensorFlow does not write the same bytes twice for one model (fingerprint.pb holds
a random UUID), so "the same model" is `registry.model_digest`, not the folder's bytes:
these tests export one model in two fresh processes (as the trainer does, one save per
process) and check both that the bytes differ and that the registry calls it unchanged.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.gate import Thresholds, decide
from retrain.common import digests
from retrain.common.registry import (ANY, FINGERPRINT_FILE, META_FILE, MODEL_DIGEST_KEY,
                                     Registry, StaleBaseline, model_digest)


_SAVE = """
import sys
import tensorflow as tf

class Scorer(tf.Module):
    def __init__(self, weights, activation):
        super().__init__()
        self.w = tf.Variable(tf.constant(weights, tf.float32))
        self.activation = activation

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        z = tf.linalg.matvec(x, self.w)
        return {"p": tf.sigmoid(z) if self.activation == "sigmoid" else tf.tanh(z)}

for spec in sys.argv[1:]:   # path:w1,w2,w3:activation, each saved once
    path, weights, activation = spec.split(":")
    model = Scorer([float(w) for w in weights.split(",")], activation)
    tf.saved_model.save(model, path,
                        signatures={"serving_default": model.serve.get_concrete_function()})
"""


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """`a` and `a_fresh`: one model exported by two processes; `b`: other weights; `c`:
    a's weights under another graph (tanh for sigmoid)."""
    root = tmp_path_factory.mktemp("exports")
    specs = {"a": "0.5,-1,2:sigmoid", "b": "0.5,-1,2.5:sigmoid", "c": "0.5,-1,2:tanh",
             "a_fresh": "0.5,-1,2:sigmoid"}
    for names in (("a", "b", "c"), ("a_fresh",)):
        subprocess.run([sys.executable, "-c", _SAVE,
                        *(f"{root / n}:{specs[n]}" for n in names)],
                       check=True, capture_output=True, timeout=300)
    return {n: root / n for n in specs}


def _meta(run_id: str) -> dict:
    metrics = {"auc": 0.78, "log_loss": 0.45}
    return {"metrics": metrics, "data_span": "2026-11-03", "run_id": run_id,
            "dag_id": "ctr_daily_retrain", "gate": decide(metrics, None, Thresholds()).to_dict()}


def _versions(reg: Registry) -> list[int]:
    return [m["version"] for m in reg.list_versions("ctr")]


def _sha(path: Path) -> str:
    return digests.file_digest(path)[0]


def test_one_model_exported_twice_has_other_bytes_but_one_model_digest(exports, tmp_path):
    a, again = exports["a"], exports["a_fresh"]
    # TensorFlow wrote other bytes for the same model: a byte digest would call it new.
    assert _sha(a / FINGERPRINT_FILE) != _sha(again / FINGERPRINT_FILE)
    assert digests.manifest(a)["digest"] != digests.manifest(again)["digest"]
    assert model_digest(a) == model_digest(again)
    # Other weights, or the same weights under another graph (TensorFlow's own graph
    # hashes in fingerprint.pb do not tell these two apart): another model.
    assert len({model_digest(exports[k]) for k in ("a", "b", "c")}) == 3
    # Any other file counts: an asset changed is another model.
    changed = shutil.copytree(a, tmp_path / "changed")
    (changed / "assets.extra").mkdir()
    (changed / "assets.extra" / "labels.json").write_text("{}")
    assert model_digest(changed) != model_digest(a)


def test_same_model_again_is_unchanged_and_the_registry_keeps_one_version(tmp_path, exports):
    reg = Registry(tmp_path / "registry")
    first = reg.publish_if_changed(exports["a"], "ctr", _meta("run-1"), expect_current=None)
    assert (first["outcome"], first["version"]) == ("published", 1)
    assert first["meta"][MODEL_DIGEST_KEY] == model_digest(exports["a"]) == first["model_digest"]

    for run_id, export in (("run-2", exports["a"]), ("run-3", exports["a_fresh"])):
        again = reg.publish_if_changed(export, "ctr", _meta(run_id), expect_current=1)
        assert (again["outcome"], again["version"]) == ("unchanged", 1)
        assert again["model_digest"] == first["model_digest"]
        assert again["meta"]["run_id"] == "run-1"   # the published version, untouched
    assert _versions(reg) == [1] and reg.current_version("ctr") == 1
    assert reg.find_run("ctr", "run-2", "ctr_daily_retrain") is None
    assert not [p for p in (tmp_path / "registry" / "ctr").iterdir()
                if p.name.startswith(".tmp-")]       # the copy made to compare is gone
    assert reg.check_report("ctr") == {"errors": [], "warnings": []}

    # A different model is a new version.
    other = reg.publish_if_changed(exports["b"], "ctr", _meta("run-4"), expect_current=1)
    assert (other["outcome"], other["version"]) == ("published", 2)
    assert _versions(reg) == [1, 2] and reg.current_version("ctr") == 2
    graph = reg.publish_if_changed(exports["c"], "ctr", _meta("run-5"), expect_current=2)
    assert (graph["outcome"], graph["version"]) == ("published", 3)


def test_a_model_equal_to_a_version_rolled_back_from_is_published(tmp_path, exports):
    """Current is v1 after a rollback; the candidate equals v2, which is not current: it is
    a change from what is served, so it is published (as v3)."""
    reg = Registry(tmp_path / "registry")
    reg.publish_if_changed(exports["a"], "ctr", _meta("run-1"), expect_current=None)
    reg.publish_if_changed(exports["b"], "ctr", _meta("run-2"), expect_current=1)
    reg.rollback("ctr", 1, who="oncall", why="v2 regressed online")
    out = reg.publish_if_changed(exports["b"], "ctr", _meta("run-3"), expect_current=1)
    assert (out["outcome"], out["version"]) == ("published", 3)
    assert reg.current_version("ctr") == 3 and _versions(reg) == [1, 2, 3]
    # ... and one equal to the current version after the rollback is unchanged.
    reg.rollback("ctr", 1, who="oncall", why="back again")
    out = reg.publish_if_changed(exports["a_fresh"], "ctr", _meta("run-4"), expect_current=1)
    assert (out["outcome"], out["version"]) == ("unchanged", 1)
    assert _versions(reg) == [1, 2, 3]


def test_a_stale_decision_is_refused_even_for_the_current_model(tmp_path, exports):
    """Design rule 20 first: evaluation named v2; CURRENT is v1 (a rollback), even though the
    candidate is v1's model: refused, as every decision made on stale facts."""
    reg = Registry(tmp_path / "registry")
    reg.publish_if_changed(exports["a"], "ctr", _meta("run-1"), expect_current=None)
    reg.publish_if_changed(exports["b"], "ctr", _meta("run-2"), expect_current=1)
    reg.rollback("ctr", 1, who="oncall", why="v2 regressed online")
    with pytest.raises(StaleBaseline):
        reg.publish_if_changed(exports["a"], "ctr", _meta("run-3"), expect_current=2)
    assert _versions(reg) == [1, 2] and reg.current_version("ctr") == 1


def test_plain_publish_still_makes_a_version_and_old_versions_compare(tmp_path, exports):
    """`publish` (the CLI's and tools' call) is unchanged; a version published before model
    digests were kept (no `model_digest` in its meta) is compared by its files."""
    reg = Registry(tmp_path / "registry")
    reg.publish(exports["a"], "ctr", _meta("run-1"))
    reg.publish(exports["a"], "ctr", _meta("run-2"))
    assert _versions(reg) == [1, 2]
    meta_path = tmp_path / "registry" / "ctr" / "2" / META_FILE
    meta = json.loads(meta_path.read_text())
    del meta[MODEL_DIGEST_KEY]
    meta_path.write_text(json.dumps(meta))
    out = reg.publish_if_changed(exports["a_fresh"], "ctr", _meta("run-3"), expect_current=2)
    assert (out["outcome"], out["version"]) == ("unchanged", 2)


def test_a_damaged_current_version_is_not_the_same_model(tmp_path, exports):
    """The current version's files were replaced after publishing: it is not what was
    published, so an identical candidate is published (a fresh, intact copy)."""
    reg = Registry(tmp_path / "registry")
    reg.publish_if_changed(exports["a"], "ctr", _meta("run-1"), expect_current=None)
    shutil.copy(exports["b"] / "variables" / "variables.data-00000-of-00001",
                tmp_path / "registry" / "ctr" / "1" / "variables" /
                "variables.data-00000-of-00001")
    out = reg.publish_if_changed(exports["a_fresh"], "ctr", _meta("run-2"), expect_current=1)
    assert (out["outcome"], out["version"]) == ("published", 2)


def _push_same(root, model, barrier, out, i, expect):
    try:
        barrier.wait(30)
        res = Registry(root).publish_if_changed(model, "ctr", _meta(f"run-{i}"),
                                                expect_current=expect)
        Path(out).write_text(f"{res['outcome']} {res['version']}")
    except StaleBaseline as e:
        Path(out).write_text(f"stale {e.current}")


@pytest.mark.parametrize("case", ["current", "new", "new-no-check"])
def test_two_pushes_of_one_candidate_at_once_leave_one_version(tmp_path, exports, case):
    """Two processes push the same candidate at once. The compare and the publish are one
    critical section: one version at most is made. Both evaluated against v1: a candidate
    that is v1's model is unchanged for both; a new one is published as v2 by one, and the
    other finds v2 current (its decision named v1: refused as stale, nothing published).
    With no compare-and-swap (ANY), the second finds its own model current: unchanged."""
    expect = ANY if case == "new-no-check" else 1
    current_is_candidate = case == "current"
    ctx = mp.get_context("fork")
    for round_ in range(4):
        root = tmp_path / f"r{round_}" / "registry"
        reg = Registry(root)
        reg.publish_if_changed(exports["a"], "ctr", _meta("run-0"), expect_current=None)
        candidate = exports["a_fresh" if current_is_candidate else "b"]
        barrier = ctx.Barrier(2)
        outs = [tmp_path / f"r{round_}" / f"out{i}" for i in (1, 2)]
        procs = [ctx.Process(target=_push_same, args=(root, candidate, barrier, str(o), i, expect))
                 for i, o in zip((1, 2), outs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        results = sorted(o.read_text() for o in outs)
        if current_is_candidate:
            assert results == ["unchanged 1", "unchanged 1"]
            assert _versions(reg) == [1]
        else:
            assert results == ["published 2", "stale 2" if expect == 1 else "unchanged 2"]
            assert _versions(reg) == [1, 2]
        assert reg.check_report("ctr") == {"errors": [], "warnings": []}


def test_the_retrain_tab_says_unchanged_and_links_the_version(tmp_path):
    """The run page (Airflow's Retrain tab) reads run_summary.json as push writes it."""
    from retrain.orchestration.airflow_views import run_page
    folder = tmp_path / "runs" / "ctr" / "dt=2026-11-03" / "run-2"
    folder.mkdir(parents=True)
    (folder / "run_summary.json").write_text(json.dumps({
        "span": "2026-11-03", "shadow": False, "published": None,
        "unchanged": {"model": "ctr", "version": 1, "model_digest": "<b>d</b>",
                      "message": "unchanged: ..."},
        "evaluation": {"blessed": True, "reasons": ["+0.0000"]}}))
    page = run_page("ctr_daily_retrain", "run-2", folder)
    assert "nothing: unchanged, identical to" in page and "not blessed" not in page
    assert 'href="/retrain/lineage/ctr/1"' in page and "ctr version 1" in page
    assert "&lt;b&gt;d&lt;/b&gt;" in page and "<b>d</b>" not in page
