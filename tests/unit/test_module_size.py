"""No module of the product is over 600 lines (issue 47).

A module that long holds more than one idea (design rule 26: one home per idea), and a
reader has to page through all of it to change one. Split it into modules named for what
they hold, re-exporting the names others import. Tests and benches are not counted.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("retrain", "components", "beam_jobs", "dags")
MAX_LINES = 600


def _line_count(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_no_module_is_over_600_lines():
    sizes = {path.relative_to(ROOT).as_posix(): _line_count(path)
             for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
             if "__pycache__" not in path.parts}
    assert len(sizes) > 50, f"found only {len(sizes)} modules under {PACKAGES}: wrong root?"
    over = {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}
    assert not over, (f"{len(over)} module(s) over {MAX_LINES} lines (split each into "
                      "modules named for what they hold): "
                      + "; ".join(f"{name}: {n} lines" for name, n in over.items()))
