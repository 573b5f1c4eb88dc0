"""How a DAG task runs one of its family's stages: through the tracked launcher, with the
step's failures typed for Airflow.

Why here and not in each task: every stage of every family gets the same child process,
lineage record, fingerprint reuse and result-contract check
(`retrain.orchestration.lineage.run_tracked`), and the same rule for failures: bad data,
a broken contract or an unreadable day fails the task without retry (AirflowFailException:
a retry cannot help), anything else is left to Airflow's retry. Also the published model
as a lineage input, which train (warm start) and evaluate (the baseline) both read.

Stdlib + airflow.sdk's exceptions at import; the launcher, the registry and the results
contracts are imported inside the functions, which run inside tasks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from airflow.sdk.exceptions import AirflowFailException

from retrain.common.run_context import Built, RunContext
from retrain.orchestration.families import Family, resolve


def raw_ref_or_fail(day_dir) -> dict:
    """The day's lineage reference; a day whose files cannot be read as data (a FIFO, a
    link out of the root: UnsafeInput) fails the task at once: a retry cannot help."""
    from retrain.common.errors import BadData
    from retrain.orchestration.lineage import raw_span_ref

    try:
        return raw_span_ref(day_dir)
    except BadData as e:
        raise AirflowFailException(str(e)) from None


def run_stage(family: Family, name: str, ctx: RunContext, params: dict, upstream: dict,
              inputs: list[dict], spec: dict | None = None,
              extra_figures: dict | None = None,
              after: Callable[[], object] | None = None) -> dict:
    """Run the family's stage `name` (its spec built from the run, the params and the
    upstream results unless `spec` is given) and record its artifact with `inputs` as its
    lineage. `after()`: a hand-off check run once the step has finished and before its
    artifact is recorded (a BadData from it fails the task without retry)."""
    from retrain.common import results
    from retrain.common.errors import BadData
    from retrain.common.errors import BadDataFailed
    from retrain.orchestration.lineage import run_tracked

    def check(r: dict) -> None:
        results.read(name, r, stage.module)
        if after is not None:
            after()

    stage = family.stages[name]
    if spec is None:
        spec = Built.of(resolve(stage.build)(ctx, params, upstream)).spec
    try:
        result = run_tracked(name, stage.module, spec, home=ctx.home,
                             family=family.name, run_dir=ctx.run_dir,
                             inputs=inputs, uri_key=results.URI_FIELD[name],
                             artifact_type=stage.artifact_type,
                             figures=(*stage.figures,
                                      *results.RECORDED.get(name, ())),
                             reuse=stage.reuse,
                             check=check, extra_figures=extra_figures)
    except (BadDataFailed, BadData, results.ContractError) as e:   # a retry cannot help
        raise AirflowFailException(str(e)) from None
    return result


def published(family: Family, ctx: RunContext) -> tuple[str | None, list[dict]]:
    """The serving model's folder and its lineage reference (none yet: None, [])."""
    from retrain.common.registry import Registry

    registry = Registry(Path(ctx.home) / "registry")
    current = registry.current(family.name)
    if not current:
        return None, []
    path = str(registry.model_path(family.name, current["version"]))
    return path, [{"name": f"{family.name}-v{current['version']}",
                   "type": "published_model", "uri": path,
                   "fingerprint": current.get("fingerprint") or path,
                   "version": current["version"]}]
