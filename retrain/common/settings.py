"""Deployment settings: every `RETRAIN_*` environment variable, named, typed and checked in
one place (pydantic-settings), so a module never parses the environment on its own and
docs/configuration.md has one list to follow.

Read afresh on each call (`settings()`): a test or an operator that changes a variable sees
it at once, and a bad value fails where it is used, naming the variable and the rule (and
never quoting more than the start of its value). `retrain settings check` reports every bad
value at once, before anything starts (the local stack scripts run it first). Every field is
bounded: numbers are finite and within a range a timedelta and a date can hold (an hour
setting of 1e308 once failed with a bare OverflowError), paths are absolute (a relative
RETRAIN_HOME was taken relative to whichever folder a process started in), the schedule is
a cron expression or a preset (a bad one used to surface as DAG import errors naming no
setting), Kubernetes names and URLs have their shapes. The
family-specific defaults of DAG params (`RETRAIN_RAW_ROOT`, `RETRAIN_FEATURE_CONFIG`, ...)
are named by each family's descriptor and read with `family_default`.

pydantic is in both environments (Airflow depends on it), so this stays light on both sides.
"""
from __future__ import annotations

import json
import os
import re
import typing
from typing import Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from retrain.common.errors import ConfigError

PREFIX = "RETRAIN_"
# The longest stretch of a bad value an error shows (a value may be long, or a mistake
# such as a pasted secret: the rule and the variable are what the reader needs).
SHOWN = 60
# Schedules Airflow takes besides a cron expression (airflow.sdk's CRON_PRESETS plus its
# own @once and @continuous); "none": triggered and backfilled runs only.
SCHEDULE_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly",
                    "@once", "@continuous")
MAX_DAYS = 3660            # ten years: any date arithmetic with it stays in range
MAX_HOURS = 24.0 * MAX_DAYS
MIN_CONFIG_BYTES = 64 * 1024   # = run_inputs.MIN_CONFIG_BYTES_LIMIT (a test checks)
MAX_CONFIG_BYTES = 64 * 1024 * 1024
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]{1,253}\Z")
_PATH_FIELDS = ("home", "step_python", "docs_assets")
_PATH_LIST_FIELDS = ("allowed_data_roots", "config_roots")


def _finite(lo: float, hi: float, **kw):
    return Field(allow_inf_nan=False, ge=lo, le=hi, **kw)


class Settings(BaseSettings):
    # enable_decoding=False: JSON settings are parsed by `_json` below, not by the
    # environment source, so a bad one is one problem among the others (`retrain settings
    # check` lists them all) instead of the end of the reading.
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True,
                                      env_ignore_empty=True, str_strip_whitespace=True,
                                      enable_decoding=False)

    # Where artifacts live (raw logs, runs, registry); "": the checkout's var/.
    home: str = ""
    # The daily DAGs' schedule: a cron expression, a preset, or "none" (trigger only).
    schedule: str = "@daily"
    # The longest window_days a run may ask for.
    max_window_days: int = Field(60, ge=1, le=MAX_DAYS)
    # Runs of one DAG active at once, and the most a backfill from the UI's dialog may ask
    # for (the dialog caps its Max Active Runs at the DAG's). Pools still bound the heavy
    # tasks; overlapping publishing runs are kept consistent by the registry's
    # compare-and-swap.
    max_active_runs: int = Field(3, ge=1, le=1000)
    # How far past today a requested span may lie (clock skew between producers).
    max_future_days: int = Field(1, ge=0, le=MAX_DAYS)
    # Seconds between the span sensor's looks for a day's _SUCCESS marker.
    span_poke_seconds: float = Field(300.0, gt=0, le=86400.0, allow_inf_nan=False)
    # Minutes a task may run before Airflow stops it (its execution_timeout), by stage,
    # JSON, e.g. {"train": 1440}; a stage not named keeps its default. Stages, defaults
    # and bounds: retrain.orchestration.timeouts (docs/configuration.md).
    task_timeout_minutes: dict[str, float] = Field(default_factory=dict)   # JSON
    # Alerts (retrain.orchestration.alerts, docs/alerts.md), 0: off. The serving model's
    # age past which a run that does not publish alerts; how long after a run's logical
    # date it must have finished (the DAG's Deadline Alert).
    model_max_age_hours: float = _finite(0.0, MAX_HOURS, default=0.0)
    publish_deadline_hours: float = _finite(0.0, MAX_HOURS, default=0.0)
    # The largest family config file (feature_config, text_config) read, in bytes; a bigger
    # one is refused before it is parsed (retrain.common.run_inputs).
    max_config_bytes: int = Field(1024 * 1024, ge=MIN_CONFIG_BYTES, le=MAX_CONFIG_BYTES)
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
    def _json(cls, value, info: ValidationInfo):
        """A JSON setting (a field typed as a mapping) from its text."""
        annotation = cls.model_fields[info.field_name].annotation
        if not isinstance(value, str) or typing.get_origin(annotation) is not dict:
            return value
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            raise ValueError("not valid JSON") from None

    @field_validator(*_PATH_FIELDS)
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not os.path.isabs(value):
            raise ValueError("must be an absolute path (a relative one would depend on the "
                             "folder each process starts in)")
        return value

    @field_validator(*_PATH_LIST_FIELDS)
    @classmethod
    def _absolute_list(cls, value: str) -> str:
        relative = [p for p in path_list(value) if not os.path.isabs(p)]
        if relative:
            raise ValueError(f"every folder must be an absolute path; {len(relative)} "
                             f"is not (entries are separated by {os.pathsep!r})")
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        check_schedule(value)
        return value

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if value and not _HOST.match(value):
            raise ValueError("must be a host name or address (letters, digits, '.', '-', "
                             "':', at most 253 characters)")
        return value

    @field_validator("k8s_namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if value and not _DNS_LABEL.match(value):
            raise ValueError("must be a Kubernetes namespace name (lower-case letters, "
                             "digits and '-', at most 63 characters)")
        return value

    @field_validator("artifact_claim")
    @classmethod
    def _claim(cls, value: str) -> str:
        if value and not _DNS_NAME.match(value):
            raise ValueError("must be a Kubernetes object name (lower-case letters, digits, "
                             "'-' and '.', at most 253 characters)")
        return value

    @field_validator("k8s_api")
    @classmethod
    def _api(cls, value: str) -> str:
        if value and (not re.match(r"https?://[^\s/]+(/\S*)?\Z", value)):
            raise ValueError("must be an http(s):// URL of the Kubernetes API")
        return value

    @field_validator("step_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if value and (len(value) > 512 or re.search(r"\s", value)):
            raise ValueError("must be an image reference (no spaces, at most 512 characters)")
        return value

    @model_validator(mode="after")
    def _together(self):
        if self.schedule == "@continuous" and self.max_active_runs != 1:
            raise ValueError(f"{PREFIX}SCHEDULE=@continuous needs {PREFIX}MAX_ACTIVE_RUNS=1 "
                             f"(Airflow's rule), it is {self.max_active_runs}")
        return self

    @field_validator("*", mode="before")
    @classmethod
    def _strip(cls, value):
        return value.strip() if isinstance(value, str) else value


def check_schedule(value: str) -> None:
    """A schedule Airflow takes: "none", a preset, or a five-field cron expression."""
    if value.lower() == "none" or value in SCHEDULE_PRESETS:
        return
    if value.startswith("@"):
        raise ValueError(f"unknown preset (known: {', '.join(SCHEDULE_PRESETS)}, or none)")
    fields = value.split()
    if len(fields) != 5:
        raise ValueError(f"a cron expression has 5 fields (minute hour day month weekday), "
                         f"this has {len(fields)}; or a preset ({', '.join(SCHEDULE_PRESETS)})"
                         " or none")
    from croniter import croniter       # what Airflow validates a cron schedule with
    if not croniter.is_valid(value):
        raise ValueError("not a valid cron expression (minute hour day month weekday)")


def shown(value: str) -> str:
    """A setting's value as an error shows it: its start only."""
    return value if len(value) <= SHOWN else value[:SHOWN] + f"... ({len(value)} characters)"


def problems() -> list[str]:
    """Every bad setting now, one line each naming its variable and rule; [] if all hold."""
    try:
        Settings()
    except SettingsError as e:      # a JSON setting the environment source cannot parse
        field = str(e).partition('field "')[2].partition('"')[0]
        name = PREFIX + field.upper()
        return [f"{name}={shown(os.environ.get(name, '').strip())}: not valid JSON"]
    except ValidationError as e:
        out = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if not err["loc"]:      # a rule between settings: its message names them
                out.append(msg)
                continue
            name = PREFIX + str(err["loc"][0]).upper()
            out.append(f"{name}={shown(os.environ.get(name, '').strip())}: {msg}")
        return out
    return []


def settings() -> Settings:
    """The deployment's settings now; a bad value raises ConfigError naming its variable."""
    try:
        return Settings()
    except (SettingsError, ValidationError):
        raise ConfigError("; ".join(problems())) from None


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
