"""Write the JSON schema of each family's config file into the manual, from its pydantic
model, so the reference cannot drift from what the loaders accept:

    docs/reference/feature-config.schema.json   components.ctr.feature_config_model.FeatureConfigFile
    docs/reference/text-config.schema.json      components.text.task_config.TextConfigFile

    .venv/bin/python scripts/gen_config_schema.py            # (re)write both files
    .venv/bin/python scripts/gen_config_schema.py --check    # exit 1 if one is out of date

tests/unit/test_config_models.py fails when a committed file differs from what this
writes now. An editor that reads JSON schema (e.g. YAML language servers, with a
`# yaml-language-server: $schema=...` line) checks a config as it is typed. The schema
states types, bounds, choices and unknown keys; rules between keys (a cross names a
categorical feature, a text task's thresholds fit its labels) are the loader's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT_DIR = REPO / "docs" / "reference"


def schemas() -> dict[Path, str]:
    """{output file: its text} for every family config model."""
    sys.path.insert(0, str(REPO))
    from components.ctr.feature_config_model import FeatureConfigFile
    from components.text.task_config import TextConfigFile
    out = {}
    for name, model in (("feature-config", FeatureConfigFile),
                        ("text-config", TextConfigFile)):
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                  **model.model_json_schema()}
        out[OUTPUT_DIR / f"{name}.schema.json"] = json.dumps(schema, indent=2,
                                                             sort_keys=True) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed schema differs from the models'")
    args = parser.parse_args(argv)
    stale = []
    for path, text in schemas().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.relative_to(REPO))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(map(str, stale))} (run scripts/gen_config_schema.py)")
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
