"""The boundary between Airflow's environment and the step environment, and the lint that
keeps the tree clean, are checks that can fail: each is run here on a copy of the tree with
a violation planted, and on the tree itself.

The contracts live in pyproject.toml ([tool.importlinter]); `make lint` (part of `make test`
and of .ci/run) runs them with ruff.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("retrain", "components", "beam_jobs", "dags")
BIN = Path(sys.executable).parent


def _copy_tree(dst: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dst / pkg, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "*.yaml", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def _lint_imports(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


def _plant(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_import_contract_and_passes_ruff():
    contracts = _lint_imports(ROOT)
    assert contracts.returncode == 0, contracts.stdout[-4000:]
    assert "0 broken" in contracts.stdout
    lint = subprocess.run([str(BIN / "ruff"), "check", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout[-4000:]


@pytest.mark.parametrize("module, line, contract", [
    ("retrain.orchestration.push", "import tensorflow",
     "Airflow's side never imports step code or a heavy library"),
    ("dags.ctr_daily_retrain", "from components.ctr import evaluate",
     "Airflow's side never imports step code or a heavy library"),
    ("components.gate", "from retrain.orchestration import launch",
     "Step code never imports orchestration or Airflow"),
    ("beam_jobs.runner", "import airflow.sdk",
     "Step code never imports orchestration or Airflow"),
    ("retrain.common.paths", "from retrain.orchestration import families",
     "The shared contracts import neither side nor Airflow"),
    ("components.text.stages", "import numpy",
     "What a family descriptor names for Airflow's side stays light"),
    # a step other than the launcher reaching into a job for its reader (issue 47.1)
    ("components.ctr.rawdata", "from beam_jobs.preprocess_ctr import read_batches",
     "Only the step that launches a Beam job imports it"),
    # a launcher reaching into another job than the one it launches
    ("components.ctr.validate", "from beam_jobs.preprocess_ctr import window_files",
     "Only the step that launches a Beam job imports it"),
    ("beam_jobs.score_text", "from beam_jobs.preprocess_text import normalize",
     "Beam jobs never import one another"),
    ("retrain.plan.tables", "from components.ctr import ps_train",
     "The capacity plan knows the steps only through components.ctr.plan_facts"),
])
def test_a_planted_import_breaks_its_contract(tmp_path, module, line, contract):
    tree = _copy_tree(tmp_path)
    assert _lint_imports(tree).returncode == 0       # the copy is as clean as the tree
    _plant(tree, module, line)
    broken = _lint_imports(tree)
    assert broken.returncode != 0
    assert f"{contract} BROKEN" in broken.stdout, broken.stdout[-3000:]
    assert module in broken.stdout                    # it names the importer


def test_ruff_fails_on_a_planted_unused_import(tmp_path):
    tree = _copy_tree(tmp_path)
    _plant(tree, "components.gate", "import json as _unused_json")
    lint = subprocess.run([str(BIN / "ruff"), "check", "."], cwd=tree, capture_output=True,
                          text=True, timeout=300)
    assert lint.returncode != 0
    assert "components/gate.py" in lint.stdout and "F401" in lint.stdout


def _file_circles(graph) -> list[tuple[str, str]]:
    """Pairs of modules that import each other (design rule 23: the contract they share
    belongs in one of them, or in a small third module)."""
    pairs = set()
    for a in graph.modules:
        for b in graph.find_modules_directly_imported_by(a):
            if a != b and graph.direct_import_exists(importer=b, imported=a):
                pairs.add(tuple(sorted((a, b))))
    return sorted(pairs)


def _graph(tree: Path):
    sys.path.insert(0, str(tree))
    try:
        return grimp.build_graph(*PACKAGES, cache_dir=None)
    finally:
        sys.path.remove(str(tree))


def test_no_two_modules_import_each_other():
    assert _file_circles(_graph(ROOT)) == []


def test_a_planted_file_circle_is_found(tmp_path, monkeypatch):
    tree = _copy_tree(tmp_path)
    _plant(tree, "retrain.common.paths", "from retrain.common import spans as _spans")
    _plant(tree, "retrain.common.spans", "from retrain.common import paths as _paths")
    for pkg in PACKAGES:     # build the copy's graph, not the installed tree's
        for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
            monkeypatch.delitem(sys.modules, name)
    assert _file_circles(_graph(tree)) == [("retrain.common.paths", "retrain.common.spans")]
