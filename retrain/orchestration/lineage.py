"""Artifact lineage records and fingerprint-keyed reuse of step outputs.

Every tracked step leaves one record per artifact in `<run_dir>/lineage/<name>.json`:
uri, type, producer (dag_id, run_id, task_id, try), the artifacts it read (with their
fingerprints), its own fingerprint and key figures. The fingerprint hashes what
decides the output: the step, its parameters (minus the run's own output paths), the
inputs' fingerprints and the code version. A rerun whose fingerprint matches a
finished artifact reuses it instead of recomputing, and says so in the log.

Stdlib only: DAG tasks call this directly; the heavy work stays in the child step.
Raw partitions are fingerprinted by the digest of their data bytes
(`retrain.orchestration.custody`), never by names, sizes or mtimes, which can stay the same
while the bytes change: reuse keys and the validation hand-off both rest on that digest.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from retrain.orchestration import custody
from retrain.common.atomic import read_json, write_json
from retrain.common.version import code_fingerprint, code_version
from retrain.common import paths, rawfiles

log = logging.getLogger("retrain.lineage")

LINEAGE_DIR = "lineage"
CACHE_DIR = "cache"
SUCCESS_MARKER = "_SUCCESS"


def fingerprint(obj: Any) -> str:
    """Stable short hash of JSON-able data (key order does not matter)."""
    blob = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def raw_span_refs(raw_root: str | os.PathLike, span: str, window_days: int) -> list[dict]:
    """Input references for the raw partitions under `raw_root` of a window ending at
    `span` (oldest first); days with no partition are left out (the step itself decides
    whether that is fatal)."""
    end = dt.date.fromisoformat(span)
    refs = []
    for back in range(window_days - 1, -1, -1):
        day_dir = Path(paths.partition(raw_root, end - dt.timedelta(days=back)))
        if day_dir.is_dir():
            refs.append(raw_span_ref(day_dir))
    return refs


def config_refs(path: str | os.PathLike | None, kind: str = "feature_config") -> list[dict]:
    """The family's config file as an input (its content is part of the fingerprint, so a
    changed config is never served a cached artifact); [] for the built-in default."""
    if not path:
        return []
    p = Path(path).resolve()
    return [{"name": p.name, "type": kind, "uri": f"file://{p}",
             "fingerprint": hashlib.sha256(p.read_bytes()).hexdigest()[:16], "figures": {},
             "complete": True}]


def raw_span_ref(day_dir: str | os.PathLike) -> dict:
    day_dir = Path(day_dir)
    marker = day_dir / SUCCESS_MARKER
    figures = {}
    if marker.is_file():
        try:
            info = json.loads(marker.read_text() or "{}")
            figures = {k: info[k] for k in ("rows", "click_rate", "created_at") if k in info}
        except ValueError:
            pass
    # Before any byte is hashed: a day folder linked out of the raw root (its parent), or
    # a file in it that is no regular file (a FIFO would make the hash wait forever) or
    # links out of the root, is refused from its stat, unopened (UnsafeInput).
    if day_dir.exists():
        rawfiles.check_day(day_dir)
        rawfiles.check_files(custody.data_files(day_dir), day_dir.parent)
    data = custody.content(day_dir)
    return {"name": day_dir.name, "type": "raw_span", "uri": f"file://{day_dir.resolve()}",
            "fingerprint": data["digest"], "content": data, "figures": figures,
            "complete": marker.is_file()}


def producer() -> dict:
    """The Airflow task instance running this code (Airflow exports AIRFLOW_CTX_* to the
    task's environment), or the local user outside Airflow."""
    env = os.environ
    if env.get("AIRFLOW_CTX_DAG_RUN_ID"):
        return {"dag_id": env.get("AIRFLOW_CTX_DAG_ID"), "run_id": env.get("AIRFLOW_CTX_DAG_RUN_ID"),
                "task_id": env.get("AIRFLOW_CTX_TASK_ID"),
                "try": int(env.get("AIRFLOW_CTX_TRY_NUMBER") or 0) or None}
    return {"dag_id": None, "run_id": None, "task_id": None, "try": None,
            "user": env.get("USER") or env.get("LOGNAME")}


def ref(record: dict) -> dict:
    """How a downstream record names this artifact as one of its inputs (raw partitions,
    which have no record of their own, keep their figures)."""
    raw = record.get("type") == "raw_span"
    keys = ("name", "type", "uri", "fingerprint") + (
        tuple(k for k in ("figures", "content") if k in record) if raw else ())
    return {k: record.get(k) for k in keys}


def step_fingerprint(module: str, spec: dict, inputs: list[dict], run_dir: str) -> str:
    """What decides a step's output. Left out: spec values inside this run's own folder
    (output locations, which differ per run by design) and the locations of its inputs
    (they count through their fingerprints, wherever an earlier run left them)."""
    located = [str(run_dir)] + [str(i["uri"]).removeprefix("file://") for i in inputs if i.get("uri")]
    stable = {k: v for k, v in spec.items()
              if not (isinstance(v, str) and any(v.startswith(p) for p in located))}
    return fingerprint({"step": module, "spec": stable, "code": code_fingerprint(),
                        "inputs": sorted(i["fingerprint"] for i in inputs)})


def record(run_dir: str | os.PathLike, rec: dict) -> Path:
    return write_json(Path(run_dir) / LINEAGE_DIR / f"{rec['name']}.json", rec)


def read_records(run_dir: str | os.PathLike) -> dict[str, dict]:
    folder = Path(run_dir) / LINEAGE_DIR
    if not folder.is_dir():
        return {}
    return {p.stem: read_json(p) for p in sorted(folder.glob("*.json"))}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _cache_entry(home: str | os.PathLike, family: str, name: str, fp: str) -> Path:
    return Path(home) / CACHE_DIR / family / name / f"{fp}.json"


def _reusable(entry: Path) -> dict | None:
    if not entry.is_file():
        return None
    hit = read_json(entry)
    uri = hit.get("uri")
    # Artifacts appear by atomic rename, so one that exists is complete; one deleted
    # since (retention, a manual clean-up) simply means: compute again.
    return hit if uri and Path(uri).exists() else None


def run_tracked(name: str, module: str, spec: dict, *, home: str, family: str, run_dir: str,
                inputs: list[dict], uri_key: str, artifact_type: str,
                figures: Iterable[str] = (), reuse: bool = True,
                runner: Callable[[str, dict], dict] | None = None,
                check: Callable[[dict], Any] | None = None,
                extra_figures: dict | None = None) -> dict:
    """Run (or reuse) a step and record the artifact it produced.

    `extra_figures`: more figures for the record that the caller knows and the step does
    not (for example which days of the window were left out and why).
    `check(result)` (the stage's typed contract) runs on a fresh result before anything is
    recorded or cached, so a result that breaks it leaves no lineage and no cache entry.
    Returns the step's result plus `artifact` (a reference for downstream inputs) and
    `reused_from` (the producer of the reused artifact, or None).
    """
    if runner is None:
        from retrain.orchestration.launch import run_step as runner
    fp = step_fingerprint(module, spec, inputs, run_dir)
    entry = _cache_entry(home, family, name, fp)
    for i in inputs:
        log.info("%s: reads %s %s (fingerprint %s)", name, i.get("type"), i.get("uri"),
                 i.get("fingerprint"))
    hit = _reusable(entry) if reuse else None
    if hit:
        log.info("%s: reusing %s (fingerprint %s, made by %s); inputs, code and parameters "
                 "are unchanged, so the step is not run again", name, hit["uri"], fp,
                 _who(hit["producer"]))
        result, made_by = dict(hit["result"]), hit["producer"]
    else:
        if reuse:
            log.info("%s: fingerprint %s has no finished artifact; running %s", name, fp, module)
        result, made_by = runner(module, spec), producer()
        if check is not None:
            check(result)
    rec = _record(name, fp, result, made_by, hit, run_dir=run_dir, inputs=inputs,
                  uri_key=uri_key, artifact_type=artifact_type, figures=figures,
                  extra_figures=extra_figures)
    if not hit:
        write_json(entry, {"uri": rec["uri"], "result": result, "producer": made_by,
                           "code_version": rec["code_version"], "created_at": rec["recorded_at"]})
    return {**result, "artifact": ref(rec), "reused_from": made_by if hit else None}


def record_fresh(name: str, module: str, spec: dict, result: dict, *, run_dir: str,
                 inputs: list[dict], uri_key: str, artifact_type: str,
                 figures: Iterable[str] = (), extra_figures: dict | None = None) -> dict:
    """Record an artifact a step made inside a larger pass (one day of a window
    validation), exactly as `run_tracked` would have recorded it had the step run on its
    own: same fingerprint, same record, in that day's run folder. Never cached."""
    fp = step_fingerprint(module, spec, inputs, run_dir)
    return ref(_record(name, fp, result, producer(), None, run_dir=run_dir, inputs=inputs,
                       uri_key=uri_key, artifact_type=artifact_type, figures=figures,
                       extra_figures=extra_figures))


def _record(name: str, fp: str, result: dict, made_by: dict, hit: dict | None, *,
            run_dir: str, inputs: list[dict], uri_key: str, artifact_type: str,
            figures: Iterable[str], extra_figures: dict | None) -> dict:
    uri = result[uri_key]
    rec = {"name": name, "type": artifact_type, "uri": uri, "fingerprint": fp,
           "producer": made_by, "recorded_by": producer(), "reused": bool(hit),
           "inputs": [ref(i) for i in inputs],
           "figures": {**{k: result[k] for k in figures if k in result},
                       **(extra_figures or {})},
           "code_version": code_version() if not hit else hit.get("code_version"),
           "recorded_at": _now()}
    record(run_dir, rec)
    report_to_airflow([i["uri"] for i in inputs], [uri])
    log.info("%s: %s artifact %s fingerprint %s", name,
             "reused" if hit else "wrote", uri, fp)
    return rec


def report_to_airflow(inputs: Iterable[str], outputs: Iterable[str]) -> None:
    """Hand a task's artifacts to Airflow's hook-lineage collector; the OpenLineage provider
    puts them into the task's COMPLETE event as input and output datasets (file transport
    by default, Marquez by configuration). A no-op outside an Airflow task."""
    if "airflow.sdk" not in sys.modules or not os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"):
        return
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.lineage import get_hook_lineage_collector

    collector = get_hook_lineage_collector()
    for uri in inputs:
        uri = _as_uri(uri)
        collector.add_input_asset(context=ObjectStoragePath(uri), uri=uri)
    for uri in outputs:
        uri = _as_uri(uri)
        collector.add_output_asset(context=ObjectStoragePath(uri), uri=uri)


def _as_uri(location: str) -> str:
    return location if "://" in location else f"file://{Path(location).resolve()}"


def _who(prod: dict) -> str:
    if prod.get("run_id"):
        return f"{prod['dag_id']} run {prod['run_id']} task {prod['task_id']} try {prod['try']}"
    return f"a local run by {prod.get('user') or 'unknown'}"
