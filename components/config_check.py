"""Check a family config file in a step process, not in the Airflow task that asked.

The DAG's first task (`resolve_span`) refuses a broken config before the sensor waits; it
called the family's config loader inside the Airflow task process, so whatever that file
cost to parse (a valid 71 MB YAML: over 400 s and 1.9 GB) was paid by a worker of Airflow.
The file is bounded before it is parsed (RETRAIN_MAX_CONFIG_BYTES, retrain.common.run_inputs);
this step moves the parse itself out: launched like every step (`launch.run_step`, a child
process in RETRAIN_STEP_PYTHON or a pod), it dies with the task, and a refusal comes back as
bad data naming the file and the rule, never its content.

Reads: the config file. Writes: nothing (its result: the loader's name and the file).
"""
from __future__ import annotations

import dataclasses
import importlib
import sys

from retrain.common.step import main


@dataclasses.dataclass
class ConfigCheckSpec:
    loader: str           # "<module>:<function>" path -> parsed config (a family's config_loader)
    path: str             # the config file, absolute


def run(spec: ConfigCheckSpec) -> dict:
    """Load the config with the family's loader; its ConfigError (bad data) if it is wrong."""
    module, _, function = spec.loader.partition(":")
    if not all(part.isidentifier() for part in (*module.split("."), function)):
        raise ValueError(f"loader {spec.loader!r}: expected <module>:<function>")
    getattr(importlib.import_module(module), function)(spec.path)
    return {"loader": spec.loader, "path": spec.path, "ok": True}


if __name__ == "__main__":
    sys.exit(main(ConfigCheckSpec, run, description="check a family config file"))
