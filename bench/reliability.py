"""Reliability campaign: bad inputs and random SIGKILLs against both model families.

The entry point of `make reliability`; the campaign lives in bench/reliability_cases/ (one
module per category, its layout in that package's docstring, the method in
docs/reliability.md).

    .venv/bin/python bench/reliability.py [--kills 32] [--seed 0] [--only 'ctr.*'] [--list]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reliability_cases.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
