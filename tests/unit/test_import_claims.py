"""A module whose docstring says "stdlib only" imports nothing else, itself or through the
project modules it imports (issue 47: such comments had gone untrue as code moved).

Each claim is checked in a fresh interpreter: everything the import loads beyond the
standard library and the project's own packages is a third-party package the claim denies.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = ("retrain", "components", "beam_jobs", "dags")
CLAIM = re.compile(r"\bstdlib[ -]only\b", re.IGNORECASE)

_PROBE = """
import importlib, sys
before = set(sys.modules)
importlib.import_module(sys.argv[1])
loaded = {m.split('.')[0] for m in set(sys.modules) - before}
print(' '.join(sorted(m for m in loaded if m not in sys.stdlib_module_names
                      and not m.startswith('_') and m not in sys.argv[2:])))
"""


def claiming_modules() -> list[str]:
    out = []
    for package in PROJECT:
        for path in sorted((REPO / package).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            if CLAIM.search(doc):
                name = ".".join(path.relative_to(REPO).with_suffix("").parts)
                out.append(name.removesuffix(".__init__"))
    return out


def test_the_claims_are_found():
    # The probe below is only as good as the list it gets: the known claims are in it.
    assert {"retrain.common.errors", "components.ctr.formats"} <= set(claiming_modules())


@pytest.mark.parametrize("module", claiming_modules())
def test_a_stdlib_only_module_loads_no_third_party_package(module):
    probe = subprocess.run([sys.executable, "-c", _PROBE, module, *PROJECT], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.strip() == "", (
        f"{module} says 'stdlib only' but importing it loads: {probe.stdout.strip()}")
