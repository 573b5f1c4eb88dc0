"""Deployment settings: every `RETRAIN_*` environment variable, named, typed and checked in
one place (pydantic-settings), so a module never parses the environment on its own and
docs/configuration.md has one list to follow.

Read afresh on each call (`settings()`): a test or an operator that changes a variable sees
it at once, and a bad value fails where it is used, naming the variable and the rule. The
family-specific defaults of DAG params (`RETRAIN_RAW_ROOT`, `RETRAIN_FEATURE_CONFIG`, ...)
are named by each family's descriptor and read with `family_default`.

pydantic is in both environments (Airflow depends on it), so this stays light on both sides.
"""
from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from retrain.common.errors import ConfigError

PREFIX = "RETRAIN_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True,
                                      env_ignore_empty=True, str_strip_whitespace=True)

    # Where artifacts live (raw logs, runs, registry); "": the checkout's var/.
    home: str = ""
    # The daily DAGs' schedule: a cron expression, a preset, or "none" (trigger only).
    schedule: str = "@daily"
    # The longest window_days a run may ask for.
    max_window_days: int = Field(60, ge=1)
    # Runs of one DAG active at once, and the most a backfill from the UI's dialog may ask
    # for (the dialog caps its Max Active Runs at the DAG's). Pools still bound the heavy
    # tasks; overlapping publishing runs are kept consistent by the registry's
    # compare-and-swap.
    max_active_runs: int = Field(3, ge=1)
    # How far past today a requested span may lie (clock skew between producers).
    max_future_days: int = Field(1, ge=0)
    # Seconds between the span sensor's looks for a day's _SUCCESS marker.
    span_poke_seconds: float = Field(300.0, gt=0)
    # Alerts (retrain.orchestration.alerts, docs/alerts.md), 0: off. The serving model's
    # age past which a run that does not publish alerts; how long after a run's logical
    # date it must have finished (the DAG's Deadline Alert).
    model_max_age_hours: float = Field(0.0, ge=0)
    publish_deadline_hours: float = Field(0.0, ge=0)
    # Folders (os.pathsep-separated) a run's raw_root and config may lie in; "": anywhere.
    allowed_data_roots: str = ""
    # Extra folders a family config may lie in (beside the data roots and bundled configs).
    config_roots: str = ""
    # Runner flags for every Beam job the DAGs start (validation statistics, preprocessing,
    # evaluation, recommendations), shell-quoted, e.g. "--runner=PortableRunner
    # --job_endpoint=host:8099 --environment_type=EXTERNAL ..." (docs/production.md);
    # "": the in-process DirectRunner. Pinned per run (RunContext).
    beam_args: str = ""
    # The interpreter of the ML environment that runs steps; "": the task's own.
    step_python: str = ""
    # How a task runs its step: a child process here, or a pod of the ML image.
    step_launcher: Literal["subprocess", "kubernetes"] = "subprocess"
    # The name this worker gives in task logs' URLs; "": its fully qualified host name.
    hostname: str = ""
    # Where the Data Docs' JavaScript assets are kept; "": <environment>/share/retrain.
    docs_assets: str = ""
    # Steps as pods (step_launcher=kubernetes; retrain.orchestration.pod_launch): "" keeps
    # the launcher's own default (the ML image, the service account's namespace, ...).
    step_image: str = ""
    k8s_namespace: str = ""
    artifact_claim: str = ""
    k8s_api: str = ""
    step_node_selector: dict[str, str] = Field(default_factory=dict)   # JSON
    step_resources: dict[str, dict[str, str | int | float]] = Field(default_factory=dict)  # JSON

    @field_validator("beam_args")
    @classmethod
    def _flags(cls, value: str) -> str:
        beam_flags(value)
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _strip(cls, value):
        return value.strip() if isinstance(value, str) else value


def settings() -> Settings:
    """The deployment's settings now; a bad value raises ConfigError naming its variable."""
    try:
        return Settings()
    except SettingsError as e:      # a JSON setting that does not parse
        field = str(e).partition('field "')[2].partition('"')[0]
        name = PREFIX + field.upper()
        raise ConfigError(f"{name}={os.environ.get(name, '')}: not valid JSON") from None
    except ValidationError as e:
        problems = []
        for err in e.errors():
            name = PREFIX + str(err["loc"][0]).upper() if err["loc"] else PREFIX
            raw = os.environ.get(name, "")
            problems.append(f"{name}={raw}: {err['msg']}")
        raise ConfigError("; ".join(problems)) from None


def env_name(field: str) -> str:
    """The variable that sets a field (`max_window_days` -> RETRAIN_MAX_WINDOW_DAYS)."""
    if field not in Settings.model_fields:
        raise KeyError(field)
    return PREFIX + field.upper()


def beam_flags(value: str) -> tuple[str, ...]:
    """The flags of a RETRAIN_BEAM_ARGS value; each must be a `--flag[=value]`."""
    import shlex
    try:
        flags = tuple(shlex.split(value))
    except ValueError as e:
        raise ValueError(f"not shell-quoted flags ({e})") from None
    bad = [f for f in flags if not f.startswith("--") or len(f) < 3]
    if bad:
        raise ValueError(f"every entry must be a --flag[=value]; {len(bad)} is not "
                         f"(the first: {bad[0][:40]!r})")
    return flags


def path_list(value: str) -> list[str]:
    """An os.pathsep-separated setting as its non-empty entries."""
    return [p for p in value.split(os.pathsep) if p]


def family_default(variable: str) -> str | None:
    """A family's deployment default of a DAG param (the descriptor names the variable)."""
    return os.environ.get(variable) or None
