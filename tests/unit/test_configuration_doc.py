"""docs/configuration.md is the one place for the deployment settings: every RETRAIN_*
variable the code reads is listed there."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("components", "retrain", "beam_jobs", "dags", "scripts")


def test_every_environment_variable_the_code_reads_is_documented():
    used = set()
    for folder in SOURCES:
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and path.is_file():
                used |= set(re.findall(r"\bRETRAIN_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    assert {"RETRAIN_HOME", "RETRAIN_STEP_PYTHON"} <= used     # the scan finds them
    documented = set(re.findall(r"`(RETRAIN_[A-Z_]+)`",
                                (REPO / "docs" / "configuration.md").read_text()))
    assert not used - documented, f"not in docs/configuration.md: {sorted(used - documented)}"
