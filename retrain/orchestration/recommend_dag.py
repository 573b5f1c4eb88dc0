"""`ctr_daily_recommendations`: top-K items per active user from the published CTR model.

Scheduled on the CTR model Asset: every publish (the push task's asset event carries the
version and span) starts a run, which scores the users active in the last `active_days`
days against the candidate pool with that version (`components.ctr.recommend`, a Beam
job over user shards), writes `<home>/recommendations/ctr/dt=<span + 1>/` atomically and
records its lineage (model version, raw days read) in its run folder. When the next
day's clicks are delivered, `check_quality` measures the lists against them beside a
popularity baseline (`components.ctr.recommend_eval`); until then it is skipped, saying so.
A manual run without a version scores the registry's current one (after a rollback, say).

Thin on purpose: airflow.sdk + stdlib at import; the steps run in child processes.
"""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

from airflow.sdk import Asset, Param, dag, task

from retrain.common.settings import beam_flags, settings
from retrain.orchestration.dag_defaults import DAILY, home as _home
from retrain.orchestration.families import Family
from retrain.orchestration.timeouts import execution_timeouts

log = logging.getLogger("retrain.recommend")

DAG_ID = "ctr_daily_recommendations"
OUTPUT_ASSET = "ctr_recommendations"


def recommend_params() -> dict[str, Param]:
    return {
        "model_version": Param(None, type=["null", "integer"], minimum=1,
                               description="Registry version to score with. Empty: the "
                                           "version the triggering publish named, else the "
                                           "current one."),
        "active_days": Param(7, type="integer", minimum=1, maximum=60,
                             description="Users seen in these days (ending at the model's "
                                         "span) get recommendations."),
        "pool": Param("window", enum=["window", "top_per_category"],
                      description="Candidates: items seen in those days, or the most "
                                  "clicked items of each category."),
        "pool_size": Param(1000, type="integer", minimum=0,
                           description="window: keep the M most shown items (0: all, "
                                       "which on a large catalogue means every user x every "
                                       "item: hours on one machine); top_per_category: M "
                                       "per category."),
        "exclude_seen": Param(False, type="boolean",
                              description="Never recommend an item the user was shown in "
                                          "those days (or in seen_days)."),
        "seen_days": Param(0, type="integer", minimum=0, maximum=3660,
                           description="With exclude_seen: the days whose items count as "
                                       "seen (0: active_days; e.g. 365: a year's memory)."),
        "seen_max": Param(1000, type="integer", minimum=1, maximum=100000,
                          description="With exclude_seen: seen items kept per user, the "
                                      "newest."),
        "k": Param(10, type="integer", minimum=1, maximum=1000,
                   description="Items recommended per user."),
        "num_shards": Param(8, type="integer", minimum=1, maximum=4096,
                            description="User shards: the unit of parallel work."),
        "beam_workers": Param(1, type="integer", minimum=1, maximum=64,
                              description="Local Beam worker processes (DirectRunner)."),
        "min_users": Param(100, type="integer", minimum=2,
                           description="Users with clicks on the measured day a quality "
                                       "verdict needs (fewer: 'not enough evidence')."),
        "max_users": Param(0, type="integer", minimum=0,
                           description="Score only the N most active users (0: every "
                                       "active user)."),
        "progress_seconds": Param(30, type="number", minimum=0,
                                  description="A progress line (done, rate, ETA) in the task "
                                              "log this often; 0: none."),
        # Empty: derived from the published model's feature config and the window
        # (components/ctr/recommend_roles.py), so a user's own columns need no edit here.
        "user_column": Param(None, type=["null", "string"], minLength=1,
                             description="User id column. Empty: from the model's feature "
                                         "config."),
        "item_column": Param(None, type=["null", "string"], minLength=1,
                             description="Item id column. Empty: from the model's feature "
                                         "config."),
        "item_columns": Param(None, type=["null", "array"], items={"type": "string"},
                              description="Item-side model inputs besides the item id. "
                                          "Empty: the columns the item decides in the "
                                          "window."),
        "category_column": Param(None, type=["null", "string"], minLength=1,
                                 description="Item category (top_per_category pools). "
                                             "Empty: derived."),
        "context": Param(None, type=["null", "object"],
                         description="Inputs every pair gets, e.g. the slot shown in. "
                                     "Empty: each context column's most common value."),
    }


def _days_read(params) -> int:
    """The raw days a run reads: the active days, or the longer seen memory."""
    return max(params["active_days"],
               params.get("seen_days", 0) if params.get("exclude_seen") else 0)


def make_recommend_dag(family: Family):
    model_asset = Asset(name=family.model_asset, uri=f"file:///retrain/registry/{family.name}")
    output_asset = Asset(name=OUTPUT_ASSET, uri=f"file:///retrain/recommendations/{family.name}")
    limit = execution_timeouts()     # retrain.orchestration.timeouts

    @dag(dag_id=DAG_ID, schedule=[model_asset], start_date=DAILY["start_date"],
         catchup=False, max_active_runs=1, default_args=DAILY["default_args"],
         # Active from its first parse: asset-scheduled, it cannot run before a publish.
         is_paused_upon_creation=False,
         tags=[family.name, "recommendations"], doc_md=__doc__, params=recommend_params())
    def recommendations():
        @task(execution_timeout=limit["which_model"])
        def which_model(params=None, triggering_asset_events=None, dag_run=None) -> dict:
            """The version to score with and its span: the param, the publish that
            triggered the run, or the registry's current version."""
            from airflow.sdk.exceptions import AirflowFailException

            from retrain.common import paths
            from retrain.common.registry import Registry

            home = str(_home())
            registry = Registry(Path(home) / "registry")
            version = params.get("model_version")
            if not version:
                events = [e for evs in (triggering_asset_events or {}).values() for e in evs]
                version = next((e.extra.get("version") for e in reversed(events)
                                if (e.extra or {}).get("version")), None)
            version = version or registry.current_version(family.name)
            if not version:
                raise AirflowFailException(f"model {family.name!r} has no published version "
                                           f"in {Path(home) / 'registry'}: nothing to "
                                           f"score with")
            meta = registry.get(family.name, int(version))
            # The logs the model was trained on (a run's raw_root param may name the user's
            # own folder); versions published before that was recorded: the default one.
            span_dir = (meta.get("inputs") or {}).get("raw_span")
            raw_root = (str(Path(span_dir).parent) if span_dir and "://" not in span_dir
                        else str(paths.default_raw_root(home, family.name)))
            return {"home": home, "raw_root": raw_root, "version": int(version), "span": meta["data_span"],
                    "model_dir": str(registry.model_path(family.name, int(version))),
                    "fingerprint": meta.get("fingerprint") or str(version),
                    "run_dir": str(paths.run_dir(Path(home), OUTPUT_ASSET, meta["data_span"],
                                                 dag_run.run_id))}

        @task(outlets=[output_asset], execution_timeout=limit["recommend"])
        def recommend(model: dict, params=None, outlet_events=None) -> dict:
            """Score every active user against the pool; commit the dated partition."""
            from airflow.sdk.exceptions import AirflowFailException

            from retrain.common.errors import BadData
            from retrain.common.paths import partition
            from retrain.orchestration.lineage import raw_span_refs, run_tracked

            raw_root = model["raw_root"]
            day = (dt.date.fromisoformat(model["span"]) + dt.timedelta(days=1)).isoformat()
            spec = {"raw_root": raw_root, "span": model["span"],
                    "output_dir": partition(Path(model["home"]) / "recommendations"
                                            / family.name, day),
                    "registry_root": str(Path(model["home"]) / "registry"),
                    "model_name": family.name, "model_version": model["version"],
                    **{k: params[k] for k in ("active_days", "pool", "pool_size", "k",
                                              "num_shards", "user_column", "item_column",
                                              "item_columns", "category_column", "context",
                                              "exclude_seen", "seen_days", "seen_max",
                                              "beam_workers", "max_users",
                                              "progress_seconds")}}
            flags = beam_flags(settings().beam_args)
            if flags:
                spec["beam_args"] = list(flags)
            model_ref = {"name": f"{family.name}-v{model['version']}", "type": "published_model",
                         "uri": model["model_dir"], "fingerprint": model["fingerprint"],
                         "version": model["version"]}
            try:
                result = run_tracked(
                    "recommend", "components.ctr.recommend", spec, home=model["home"],
                    family=DAG_ID, run_dir=model["run_dir"],
                    inputs=[model_ref, *raw_span_refs(raw_root, model["span"],
                                                      _days_read(params))],
                    uri_key="output_dir", artifact_type="recommendations",
                    figures=("users", "pool_items", "pairs_scored", "model_version"),
                    reuse=False)
            except BadData as e:
                raise AirflowFailException(str(e)) from None
            outlet_events[output_asset].extra = {
                "day": day, "model_version": model["version"], "users": result["users"],
                "fingerprint": result["artifact"]["fingerprint"]}
            return {"output_dir": result["output_dir"], "day": day, "raw_root": raw_root}

        @task(execution_timeout=limit["check_quality"])
        def check_quality(model: dict, recs: dict, params=None) -> dict:
            """Precision/recall@K against the clicks of the day the lists were for."""
            from airflow.sdk.exceptions import AirflowSkipException

            from retrain.common.paths import partition
            from retrain.orchestration.launch import run_step

            truth = Path(partition(recs["raw_root"], recs["day"]))
            if not (truth / "_SUCCESS").is_file():
                raise AirflowSkipException(f"{recs['day']} is not delivered yet ({truth}/"
                                           f"_SUCCESS): quality is measured once it is")
            quality = run_step("components.ctr.recommend_eval", {
                "recommendations_dir": recs["output_dir"], "raw_root": recs["raw_root"],
                "day": recs["day"], "out_file": str(Path(model["run_dir"]) / "quality.json"),
                "min_users": params["min_users"]})
            log.info("quality: %s", quality.get("headline"))
            return quality

        model = which_model()
        check_quality(model, recommend(model))

    recommendations.__name__ = DAG_ID
    return recommendations
