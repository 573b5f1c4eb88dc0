"""How long each task of the DAGs may run before Airflow stops it: its `execution_timeout`.

Why: a step that hangs (a FIFO named like a part, a stalled mount, a peer that never
answers) held its worker slot and its run forever, since no task had a timeout. Airflow
raises AirflowTaskTimeout in the task process when the time is up; the launcher then ends
the step's whole process group (retrain.orchestration.launch), and the task is retried
once, as any failure that is not bad data (a stall may pass), then fails and alerts.

Each stage has a default sized for its work at the capacity plan's production case
(docs/planning.md: the seed's 10^11-row day, preprocess 6.9 h, train 13.2 h, evaluate
2.9 h within a 24 h day), with room to spare: a timeout is there to end a hang, not to
race a slow day. A deployment changes any of them with RETRAIN_TASK_TIMEOUT_MINUTES
(JSON, e.g. `{"train": 1440, "validate": 30}`), read when a DAG is parsed; a stage it
does not name keeps its default, an unknown stage or a value out of bounds fails the
parse naming the variable. The sensors' waits keep their own limits (the span's
`span_timeout_minutes`, the publishing turn's day): `sensor_poke` bounds one look.

Stdlib + the settings object: the DAG files import it.
"""
from __future__ import annotations

import datetime as dt
import math

from retrain.common.errors import ConfigError
from retrain.common.settings import env_name, settings

FIELD = "task_timeout_minutes"

# Minutes, by stage (the text family's `finetune` task is its `train` stage).
DEFAULT_MINUTES: dict[str, float] = {
    "resolve_span": 15,     # checks the run's inputs, parses the family config once
    "sensor_poke": 10,      # one look of wait_for_span / wait_for_turn
    "validate": 180,        # one day's statistics pass and expectations
    "preprocess": 600,      # older days' validation once, then Beam over the window (6.9 h)
    "train": 960,           # the parameter-server cluster or the fine-tune (13.2 h)
    "evaluate": 300,        # both models over the held-out rows (2.9 h)
    "approve": 15,          # asking; the wait for an answer is approval_timeout_hours
    "push": 60,             # the serving check and the registry's publish
    "which_model": 15,      # recommendations: the version to score with
    "recommend": 360,       # recommendations: a Beam job over user shards
    "check_quality": 60,    # recommendations: the lists against the next day's clicks
}
# Above this a timeout ends no hang anyone waits for (and 1e308 minutes overflows).
MAX_MINUTES = 30 * 24 * 60


def minutes() -> dict[str, float]:
    """Every stage's limit now: the defaults, with the deployment's overrides checked."""
    variable = env_name(FIELD)
    given = getattr(settings(), FIELD)
    unknown = sorted(set(given) - set(DEFAULT_MINUTES))
    if unknown:
        raise ConfigError(f"{variable}: unknown stage {', '.join(map(repr, unknown))} "
                          f"(stages: {', '.join(DEFAULT_MINUTES)})")
    for stage, value in given.items():
        if not (math.isfinite(value) and 0 < value <= MAX_MINUTES):
            raise ConfigError(f"{variable}: {stage}={value!r} minutes: must be more than 0 "
                              f"and at most {MAX_MINUTES} (30 days)")
    return {**DEFAULT_MINUTES, **given}


def execution_timeouts() -> dict[str, dt.timedelta]:
    """The `execution_timeout` of a task of each stage (the keys of DEFAULT_MINUTES)."""
    return {stage: dt.timedelta(minutes=m) for stage, m in minutes().items()}
