"""`retrain`: one console script, one subcommand per capability.

Each capability module exposes `add_cli(subparsers)` that registers its subcommand and
sets `func`; heavy imports happen inside the handlers, so `retrain --help` is instant.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from retrain.common.errors import BadData

# (module, attribute) pairs; each module's add_cli registers one subcommand.
COMMANDS = [
    "components.ctr.generate",
    "retrain.orchestration.registry_cli",
    "retrain.orchestration.lineage_query",
    "retrain.orchestration.demo",
    "components.text.load",
    "components.text.quality",
    "retrain.orchestration.stack",
    "retrain.orchestration.settings_cli",
    "retrain.plan",
    "retrain.config_suggest",
    "components.ctr.recommend_cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retrain",
        description="Continuous training on Airflow 3: generate data, inspect the model "
                    "registry, summarise runs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        importlib.import_module(module).add_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError, KeyError, BadData) as e:   # named, never a traceback
        print(f"retrain {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
