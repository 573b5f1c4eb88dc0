"""The Assets a family's run emits events on: lineage in Airflow's UI.

Each validated raw partition and each transformed window is an asset event (span and
fingerprint in its extra), next to the published model's; the URIs name the family only,
so one family's events never mix with another's. Built once per DAG and handed to the
tasks that emit or read them (validate, preprocess, train, push).

airflow.sdk only: the DAG files import it.
"""
from __future__ import annotations

import dataclasses

from airflow.sdk import Asset

from retrain.orchestration.families import Family


@dataclasses.dataclass(frozen=True)
class RunAssets:
    raw: Asset          # validate's outlet: the span's raw partition
    examples: Asset     # preprocess's outlet, train's inlet: the transformed window
    model: Asset        # push's outlet: the published model (downstream DAGs wait on it)


def run_assets(family: Family) -> RunAssets:
    """The family's three Assets; the model's name is the family's (`<name>_model`), which
    the recommendations DAG schedules on."""
    return RunAssets(
        raw=Asset(name=f"{family.name}_raw_logs", uri=f"file:///retrain/raw/{family.name}"),
        examples=Asset(name=f"{family.name}_transformed_examples",
                       uri=f"file:///retrain/transformed/{family.name}"),
        model=Asset(name=family.model_asset, uri=f"file:///retrain/registry/{family.name}"))
