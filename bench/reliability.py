"""Reliability campaign: bad inputs and random SIGKILLs against both model families.

Why: "it fails cleanly" is only worth something if anyone can rerun the proof. This script
builds tiny real inputs for both families (generated click logs; a small labelled text
corpus with the bundled MiniLM checkpoint), runs every stage once for real (those runs
measure each step's duration and are the good inputs the cases start from), then:

* bad-input cases (raw data, params and run inputs, configs, registry): each is a small
  declarative entry (name, family, stage, setup, expectation). A case passes only if the
  step refused cleanly (a typed failure: BadData from the step, the run-input check, the
  trigger form's param schema, a CLI error; not a bare exit code or a traceback-only
  crash), the message names the offending file, rule or parameter (checked by substring),
  no partial artifact is visible under the stage's output name, and nothing was published;
* SIGKILLs: a "task" process (what an Airflow task is: it calls `run_step`, or
  `publish_if_blessed` for push) runs a real step on the real inputs and is SIGKILLed after
  a seeded random share of the step's measured duration. After each kill: no process
  started under that task is left (tagged environment, process group, recorded
  descendants; waited up to 10 s), the output is absent or complete, nothing is written
  into it for 2 s more, and the registry checks clean. The kills of one step reuse its
  folders like Airflow retries do; then one rerun must complete, and for preprocess the
  rows in must equal rows out + rejected + dropped duplicates, and the raw row count.

    .venv/bin/python bench/reliability.py [--kills 32] [--seed 0] [--only 'ctr.*']

Prints one table (case, expected, observed, verdict) and the counts; writes
bench/results/reliability.json. Nothing here is hard-coded to pass: the counts are
computed from what was observed. Product bugs show up as FAIL rows with their message.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import fnmatch
import gzip
import json
import logging
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from retrain.common import paths  # noqa: E402  (stdlib-only product modules)
from retrain.common.errors import BAD_DATA  # noqa: E402
from retrain.common.run_context import Built, RunContext  # noqa: E402
from retrain.orchestration.launch import BadDataFailed, StepFailed, run_step  # noqa: E402
from components.text import tickets as tickets_corpus  # noqa: E402

log = logging.getLogger("reliability")
PY = sys.executable
CTR_SPAN, CTR_DAYS = "2026-11-03", ("2026-11-01", "2026-11-02", "2026-11-03")
TEXT_SPAN, TEXT_DAYS = "2026-11-02", ("2026-11-01", "2026-11-02")
TAG_ENV = "RETRAIN_RELIABILITY_TAG"
STAGES = ("validate", "preprocess", "train", "push")

CTR_PARAMS = {"window_days": 2, "eval_percent": 25, "epochs": 1, "min_auc": 0.5,
              "ps_count": 1, "worker_count": 1, "force_bless_reason": None,
              "override_validation_reason": None, "override_validation_rules": None}
TEXT_PARAMS = {"window_days": 2, "eval_percent": 30, "epochs": 1, "batch_size": 16,
               "dev_examples": 0, "warm_start": False, "max_seq_length": None,
               "max_train_examples": None, "max_eval_examples": None, "strategy": "default",
               "min_auc": 0.5, "beat_classical_baseline": False, "force_bless_reason": None,
               # 2 days x 160 tickets, 30 % held out: about 100 eval texts, under the
               # gate's default evidence minimum; the push cases need a blessed fixture
               "min_eval_rows": 40, "min_eval_positives": 5,
               "override_validation_reason": None, "override_validation_rules": None}
PARAMS = {"ctr": CTR_PARAMS, "text": TEXT_PARAMS}
DAG_ID = {"ctr": "ctr_daily_retrain", "text": "text_daily_finetune"}
SPAN = {"ctr": CTR_SPAN, "text": TEXT_SPAN}

TEXT_CONFIG = tickets_corpus.CONFIG


def write_jsonl(span_dir: Path, rows: list[dict], name: str = "part-00000.jsonl.gz",
                marker: bool = True) -> None:
    span_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(span_dir / name, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if marker:
        (span_dir / "_SUCCESS").write_text("")


def read_jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ------------------------------------------------------------------ run context and specs

def ctx_for(family: str, home: Path, run_id: str, raw_root: Path | None = None,
            config: str | None = None) -> RunContext:
    """What the DAG factory's resolve_span task pins (retrain/orchestration/dag_factory.py)."""
    return RunContext.create(
        family, SPAN[family], home, run_id, raw_root=raw_root,
        config=config if config is not None else (FX.text_config if family == "text" else ""))


def build_spec(family: str, stage: str, ctx: dict, upstream: dict,
               params: dict | None = None) -> tuple[str, dict]:
    """(module, spec) through the family's own spec builder, as the DAG task builds it."""
    from retrain.orchestration.families import FAMILIES, resolve
    st = FAMILIES[family].stages[stage]
    built = Built.of(resolve(st.build)(ctx, {**PARAMS[family], **(params or {})}, upstream))
    return st.module, built.spec


OUT_KEY = {"validate": "out_dir", "preprocess": "output_dir", "train": "out_dir",
           "evaluate": "out_dir"}
MARKER = {"validate": "validation.json", "preprocess": "summary.json",
          "evaluate": "eval.json"}


def complete(stage: str, out: Path) -> bool:
    """Is a visible output folder a finished artifact (what a later task would trust)?"""
    if stage == "train":
        return any(out.glob("saved_model.pb")) or any(out.glob("*/saved_model.pb"))
    return (out / MARKER[stage]).is_file()


def partial_visible(stage: str, out: Path | None) -> bool:
    return bool(out) and out.exists() and not complete(stage, out)


# ------------------------------------------------------------------ the fixture

class Fixture:
    """Tiny real inputs of both families and one good run of every stage."""

    def __init__(self, work: Path):
        self.work = work
        self.home = work / "home"
        self.text_config = str(work / "tickets.yaml")
        self.durations: dict[str, float] = {}
        self.results: dict[str, dict] = {}
        self.ctx: dict[str, RunContext] = {}

    def build(self, families: list[str]) -> None:
        os.environ[paths.ENV_HOME] = str(self.home)
        saved = self.work / "fixture.json"
        if saved.exists():     # --workdir of an earlier run: reuse its fixture
            data = json.loads(saved.read_text())
            if set(families) <= set(data["families"]):
                self.durations, self.results = data["durations"], data["results"]
                return
        Path(self.text_config).write_text(TEXT_CONFIG)
        if "ctr" in families:
            t = time.time()
            run_step("components.ctr.generate", {
                "out_root": str(self.home), "start": CTR_DAYS[0], "days": len(CTR_DAYS),
                "rows_per_day": 4000, "n_users": 5000, "n_items": 3000, "n_categories": 50})
            self.durations["ctr.generate"] = time.time() - t
        if "text" in families:
            for i, day in enumerate(TEXT_DAYS, 1):
                write_jsonl(self.home / "raw" / "text" / f"dt={day}", tickets_corpus.tickets(i, 160))
        for fam in families:
            ctx = self.ctx[fam] = ctx_for(fam, self.home, "reliability_base")
            up: dict = {}
            for stage in ("validate", "preprocess", "train", "evaluate"):
                module, spec = build_spec(fam, stage, ctx, self.upstream(fam))
                t = time.time()
                up[stage] = run_step(module, spec)
                self.durations[f"{fam}.{stage}"] = time.time() - t
                self.results[f"{fam}.{stage}"] = up[stage]
                log.info("fixture %s.%s: %.1fs", fam, stage, self.durations[f"{fam}.{stage}"])
            if not up["evaluate"].get("blessed"):
                raise SystemExit(f"fixture: the {fam} candidate was not blessed "
                                 f"({up['evaluate'].get('reasons')}); push cases need one")
            t = time.time()
            push_task(fam, ctx, self.upstream(fam), self.home)
            self.durations[f"{fam}.push"] = time.time() - t
        saved.write_text(json.dumps({"families": families, "durations": self.durations,
                                     "results": self.results}, default=str))

    def upstream(self, fam: str) -> dict:
        r = self.results
        return {"validate": r.get(f"{fam}.validate"), "preprocess": r.get(f"{fam}.preprocess"),
                "train": r.get(f"{fam}.train"), "evaluate": r.get(f"{fam}.evaluate"),
                "published": None}


FX: Fixture = None  # type: ignore[assignment]


def push_kwargs(fam: str, ctx: RunContext, up: dict, home: Path) -> dict:
    """publish_if_blessed's arguments, as the family's push task passes them."""
    from retrain.orchestration.families import FAMILIES
    family = FAMILIES[fam]
    trained = up["train"]
    return dict(model_name=fam, registry_root=f"{home}/registry", run_dir=ctx.run_dir,
                dag_id=DAG_ID[fam], run_id=ctx.run_id, span=ctx.span,
                span_dir=ctx.span_dir, evaluation=up["evaluate"], validation=up["validate"],
                preprocessed=up["preprocess"], trained=trained, shadow=False,
                serving_check_module=family.serving_check,
                headline=tuple(m.name for m in family.headline),
                extra_metadata={k: trained.get(v) for k, v in family.registry_extra.items()})


def push_task(fam: str, ctx: dict, up: dict, home: Path) -> dict:
    from retrain.orchestration.push import publish_if_blessed
    return publish_if_blessed(**push_kwargs(fam, ctx, up, home))


# ------------------------------------------------------------------ outcomes

@dataclasses.dataclass
class Outcome:
    refused: bool
    kind: str          # bad_data | transient | crash | refused | param_schema | cli | <Exc>
    message: str
    out_dir: str | None = None
    stage: str | None = None
    figures: dict | None = None   # what a case measured (peak RSS, race rounds)


def quiet_launch_log() -> None:
    """Step output goes to campaign.log only (airflow's import reroutes the root logger)."""
    lg = logging.getLogger("retrain.launch")
    lg.propagate = False
    lg.setLevel(logging.INFO)
    if not lg.handlers and LOG_FILE:
        h = logging.FileHandler(LOG_FILE)
        h.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        lg.addHandler(h)


LOG_FILE: str | None = None


def run_step_outcome(module: str, spec: dict, stage: str) -> Outcome:
    out = spec.get(OUT_KEY.get(stage, "out_dir"))
    try:
        result = run_step(module, spec)
    except BadDataFailed as e:
        return Outcome(True, BAD_DATA, str(e), out, stage)
    except StepFailed as e:
        crash = re.search(r"failed: exit code -?\d+$", str(e)) is not None
        return Outcome(True, "crash" if crash else "transient", str(e), out, stage)
    return Outcome(False, "accepted", json.dumps(result, default=str)[:300], out, stage)


def cli_outcome(args: list[str], home: Path) -> Outcome:
    p = subprocess.run([PY, "-m", "retrain.cli", *args], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, paths.ENV_HOME: str(home)}, timeout=300)
    text = (p.stderr.strip() or p.stdout.strip())
    if p.returncode == 0:
        return Outcome(False, "accepted", p.stdout.strip()[:300])
    kind = "crash" if "Traceback (most recent call last)" in p.stderr else "cli"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if kind == "crash":   # the exception line, which is what a reader would see last
        return Outcome(True, kind, lines[-1] if lines else "")
    return Outcome(True, kind, text)


def call_outcome(fn: Callable[[], Any]) -> Outcome:
    """A product function called in this process (run-input check, publish)."""
    try:
        result = fn()
    except BadDataFailed as e:
        return Outcome(True, BAD_DATA, str(e))
    except StepFailed as e:
        return Outcome(True, "transient", str(e))
    except Exception as e:  # noqa: BLE001 - what the task would see
        return Outcome(True, type(e).__name__, f"{type(e).__name__}: {e}")
    return Outcome(False, "accepted", json.dumps(result, default=str)[:300])


# ------------------------------------------------------------------ case machinery

@dataclasses.dataclass
class Case:
    name: str
    family: str
    stage: str              # validate | preprocess | train | evaluate | push | run_inputs | params | registry
    category: str           # raw_data | params | config | registry | handoff | race |
    #                         secrets | hostile | full_disk | scheduler_kill
    setup: Callable[["CaseEnv"], Outcome]
    names: tuple[str, ...]  # the message must contain each of these
    expect: str = "refused"  # refused | accepted
    kinds: tuple[str, ...] = (BAD_DATA,)   # typed failures accepted as clean ("*": any typed)
    absent: tuple[str, ...] = ()   # must appear in no message, log or artifact (secrets)

    @property
    def expected(self) -> str:
        if self.expect == "accepted":
            return "accepted" + (f", names {'/'.join(self.names)}" if self.names else "")
        return f"refused ({'|'.join(self.kinds)}) naming {' + '.join(self.names)}"


@dataclasses.dataclass
class CaseEnv:
    case: Case
    home: Path           # the case's own artifact root
    reg_before: dict | None = None   # the case's registry just before it publishes

    @property
    def fam(self) -> str:
        return self.case.family

    @property
    def raw_root(self) -> Path:
        return self.home / "raw" / self.fam

    @property
    def span_dir(self) -> Path:
        return self.raw_root / f"dt={SPAN[self.fam]}"

    def copy_raw(self) -> Path:
        """A private copy of the family's good raw days (the case may break it)."""
        src = FX.home / "raw" / self.fam
        shutil.copytree(src, self.raw_root, symlinks=True,
                        ignore=shutil.ignore_patterns("_truth*"))
        return self.span_dir

    def ctx(self, **kw) -> dict:
        return ctx_for(self.fam, self.home, f"case_{self.case.name}", raw_root=self.raw_root,
                       **kw)

    def run_stage(self, stage: str | None = None, params: dict | None = None,
                  spec_update: dict | None = None, ctx: dict | None = None) -> Outcome:
        stage = stage or self.case.stage
        module, spec = build_spec(self.fam, stage, ctx or self.ctx(), FX.upstream(self.fam),
                                  params)
        spec.update(spec_update or {})
        return run_step_outcome(module, spec, stage)


def parquet_parts(span_dir: Path) -> list[Path]:
    return sorted(p for p in span_dir.glob("part-*") if p.is_file())


def edit_parquet(fn: Callable) -> Callable[[Path], None]:
    """A raw-data mutation: table -> table, on every part of the span."""
    def mutate(span_dir: Path) -> None:
        import pyarrow.parquet as pq
        for part in parquet_parts(span_dir):
            table = fn(pq.read_table(part))
            pq.write_table(table, part)
    return mutate


def edit_column(col: str, fn: Callable) -> Callable[[Path], None]:
    import pyarrow as pa

    def change(table):
        values = fn(table.column(col).to_pylist())
        arr = pa.array(values)
        return table.set_column(table.schema.get_field_index(col), col, arr)
    return edit_parquet(change)


def edit_rows(fn: Callable[[list[dict]], list[dict]]) -> Callable[[Path], None]:
    """A text raw-data mutation: rows -> rows, on every JSONL part of the span."""
    def mutate(span_dir: Path) -> None:
        for part in sorted(span_dir.glob("part-*.jsonl.gz")):
            rows = fn(read_jsonl(part))
            with gzip.open(part, "wt", encoding="utf-8") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return mutate


def raw_case(mutate: Callable[[Path], None] | None, stage: str | None = None,
             params: dict | None = None) -> Callable[[CaseEnv], Outcome]:
    def setup(env: CaseEnv) -> Outcome:
        span_dir = env.copy_raw()
        if mutate:
            mutate(span_dir)
        return env.run_stage(stage, params)
    return setup


def spec_case(stage: str, update: Callable[[CaseEnv], dict] | dict,
              params: dict | None = None) -> Callable[[CaseEnv], Outcome]:
    def setup(env: CaseEnv) -> Outcome:
        env.copy_raw()
        upd = update(env) if callable(update) else update
        return env.run_stage(stage, params, spec_update=upd)
    return setup


def config_case(text: str, stage: str = "validate", suffix: str = ".yaml"
                ) -> Callable[[CaseEnv], Outcome]:
    """A bad family config given to the step itself (past the run-input check)."""
    def setup(env: CaseEnv) -> Outcome:
        env.copy_raw()
        cfg = env.home / f"config{suffix}"
        cfg.write_text(text)
        return env.run_stage(stage, ctx=env.ctx(config=str(cfg)))
    return setup


def run_inputs_case(span: str | None = None, raw_root: Callable[[CaseEnv], str] | None = None,
                    config: Callable[[CaseEnv], str] | None = None,
                    roots: Callable[[CaseEnv], str] | None = None
                    ) -> Callable[[CaseEnv], Outcome]:
    """The first task of both DAGs (resolve_span in retrain/orchestration/dag_factory.py): the run-input
    check, then the family's config loader on the config file; any problem refuses the run
    (AirflowFailException: no retry, no sensor wait)."""
    def setup(env: CaseEnv) -> Outcome:
        from retrain.common import run_inputs
        from retrain.orchestration.families import FAMILIES, resolve
        family = FAMILIES[env.fam]
        env.copy_raw()
        day = dt.date.fromisoformat(span or SPAN[env.fam])
        cfg = config(env) if config else ""
        rr = raw_root(env) if raw_root else str(env.raw_root)
        old = os.environ.get("RETRAIN_ALLOWED_DATA_ROOTS")
        old_configs = os.environ.get("RETRAIN_CONFIG_ROOTS")
        os.environ["RETRAIN_CONFIG_ROOTS"] = str(env.home)   # the cases' configs live there
        if roots:
            os.environ["RETRAIN_ALLOWED_DATA_ROOTS"] = roots(env)
        try:
            problems = run_inputs.check(day, raw_root=rr, config=cfg,
                                        config_param=family.config_param)
            if cfg and not problems:
                try:
                    resolve(family.config_loader)(cfg)
                except Exception as e:  # noqa: BLE001 - as resolve_span does
                    problems.append(f"{family.config_param} {cfg}: {e}")
        finally:
            if old_configs is None:
                os.environ.pop("RETRAIN_CONFIG_ROOTS", None)
            else:
                os.environ["RETRAIN_CONFIG_ROOTS"] = old_configs
            if roots:
                if old is None:
                    os.environ.pop("RETRAIN_ALLOWED_DATA_ROOTS", None)
                else:
                    os.environ["RETRAIN_ALLOWED_DATA_ROOTS"] = old
        if problems:
            return Outcome(True, "refused", "refusing the run: " + "; ".join(problems))
        return Outcome(False, "accepted", "run inputs accepted")
    return setup


_PARAMS_CACHE: dict[str, dict] = {}


def params_case(values: dict) -> Callable[[CaseEnv], Outcome]:
    """The DAG's params as the trigger form / REST API validate them (airflow Param schema,
    built by retrain.orchestration.dag_factory.family_params)."""
    def setup(env: CaseEnv) -> Outcome:
        from retrain.orchestration.families import FAMILIES
        if env.fam not in _PARAMS_CACHE:
            from retrain.orchestration.dag_factory import family_params
            _PARAMS_CACHE[env.fam] = family_params(FAMILIES[env.fam])
        from airflow.sdk.definitions.param import ParamsDict
        quiet_launch_log()       # importing airflow reconfigured logging
        params = ParamsDict(dict(_PARAMS_CACHE[env.fam]))
        problems = []
        for key, value in values.items():   # what a run's conf does to the DAG's params
            try:
                params[key] = value
                params.validate()
            except Exception as e:  # noqa: BLE001 - ParamValidationError
                problems.append(f"{type(e).__name__}: {e}")
        if problems:
            return Outcome(True, "param_schema", "; ".join(problems))
        return Outcome(False, "accepted", f"params {values} accepted")
    return setup


# registry cases: a registry with one published version of the family's fixture model

def registry_copy(env: CaseEnv) -> Path:
    src = FX.home / "registry" / env.fam
    dst = env.home / "registry" / env.fam
    shutil.copytree(src, dst)
    return dst


def current_version(mdir: Path) -> int:
    return json.loads((mdir / "CURRENT").read_text())["version"]


def registry_case(breaks: Callable[[Path], None], action: str
                  ) -> Callable[[CaseEnv], Outcome]:
    """Break a copy of the registry, then: `check` | `list` | `show` (the CLI) or
    `publish` (the push task publishing a new blessed candidate into it) or `evaluate`
    (the evaluate step reading the published model as its baseline)."""
    def setup(env: CaseEnv) -> Outcome:
        mdir = registry_copy(env)
        breaks(mdir)
        if action in ("check", "list", "show"):
            return cli_outcome(["registry", action, env.fam], env.home)
        if action == "publish":
            ctx = dataclasses.replace(env.ctx(), run_id="push_run")
            Path(ctx.run_dir).mkdir(parents=True)
            env.reg_before = registry_state(env.home)
            return call_outcome(lambda: push_task(env.fam, ctx, FX.upstream(env.fam),
                                                  env.home))
        if action == "evaluate":
            from retrain.common.registry import Registry
            env.copy_raw()

            def published():   # as the DAG factory's published() helper
                meta = Registry(env.home / "registry").current(env.fam)
                return str(mdir / str(meta["version"])) if meta else None
            try:
                base = published()
            except Exception as e:  # noqa: BLE001
                return Outcome(True, type(e).__name__, f"{type(e).__name__}: {e}")
            up = {**FX.upstream(env.fam), "published": base}
            module, spec = build_spec(env.fam, "evaluate", env.ctx(), up)
            return run_step_outcome(module, spec, "evaluate")
        raise ValueError(action)
    return setup


def push_case(change: Callable[[CaseEnv, dict], None]) -> Callable[[CaseEnv], Outcome]:
    """The push task with a bad candidate (its arguments changed)."""
    def setup(env: CaseEnv) -> Outcome:
        registry_copy(env)
        ctx = dataclasses.replace(env.ctx(), run_id="push_run")
        Path(ctx.run_dir).mkdir(parents=True)
        up = json.loads(json.dumps(FX.upstream(env.fam), default=str))
        change(env, up)
        env.reg_before = registry_state(env.home)
        return call_outcome(lambda: push_task(env.fam, ctx, up, env.home))
    return setup


# ------------------------------------------------------------------ hand-offs and hostile input

SECRET = "RETRAIN-PLANTED-SECRET-7f3a9c"   # planted in files that params name


def leaked(needles: tuple[str, ...], message: str, home: Path) -> list[str]:
    """Where any needle shows: the message, the campaign log, any file under the case home."""
    if not needles:
        return []
    where = ["message"] if any(n in message for n in needles) else []
    files = [Path(LOG_FILE)] if LOG_FILE else []
    files += [p for p in home.rglob("*") if p.is_file() and p.name != "planted-secret.yaml"]
    for p in files:
        try:
            if p.stat().st_size < 64 << 20 and any(n.encode() in p.read_bytes() for n in needles):
                where.append(str(p.relative_to(home) if home in p.parents else p))
        except OSError:
            continue
    return where


def _rewrite_keeping_size_and_mtime(part: Path) -> None:
    """Flip one byte in the middle of a part: same size, same mtime, other content."""
    st = part.stat()
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = part.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def handoff_case(day: str) -> Callable[[CaseEnv], Outcome]:
    """A day validated, then rewritten (same size and mtime), then handed to preprocess:
    the digest validation recorded (what the validate task stores with its verdict) is
    checked by the same function the DAG's preprocess, train and evaluate tasks call."""
    def setup(env: CaseEnv) -> Outcome:
        from retrain.orchestration import custody
        from retrain.common import quarantine
        env.copy_raw()
        day_dir = env.raw_root / f"dt={day}"
        recorded = custody.content(day_dir)
        _rewrite_keeping_size_and_mtime(sorted(day_dir.glob("part-*"))[0])
        ctx = env.ctx()
        outcome = call_outcome(lambda: custody.verify(
            day, day_dir, recorded, stage="preprocess", quarantine_dir=ctx.quarantine_dir,
            run_id=ctx.run_id))
        if outcome.refused and not quarantine.is_quarantined(ctx.quarantine_dir,
                                                             f"dt={day}"):
            return Outcome(True, "not_quarantined", outcome.message)
        return outcome
    return setup


def split_case(change: dict) -> Callable[[CaseEnv], Outcome]:
    """The published model's recorded split edited (as if trained under another split),
    then the evaluate step compares a candidate against it."""
    def breaks(mdir: Path) -> None:
        meta_file = mdir / str(current_version(mdir)) / "retrain_meta.json"
        meta = json.loads(meta_file.read_text())
        meta["split"] = {**meta["split"], **change}
        meta_file.write_text(json.dumps(meta))
    return registry_case(breaks, "evaluate")


RACE = textwrap.dedent("""
    import json, sys, time
    from retrain.common.registry import Registry, StaleBaseline
    root, action, model, start, expect, who = sys.argv[1:7]
    time.sleep(max(0.0, float(start) - time.time()))
    reg = Registry(root)
    try:
        if action == "rollback":
            meta = reg.rollback("ctr", to_version=int(expect) - 1, who="oncall", why="race")
        else:
            meta = reg.publish(model, "ctr", {"run_id": who}, expect_current=int(expect))
        print(json.dumps({"outcome": "done", "version": meta["version"]}))
    except StaleBaseline as e:
        print(json.dumps({"outcome": "stale", "message": str(e)}))
""")


def race_case(other: str, rounds: int = 20) -> Callable[[CaseEnv], Outcome]:
    """`rounds` times: a push publishing against the current version races `other` (a
    rollback, or a second push evaluated against the same version) in two processes that
    start at the same instant (staggered by round, so both orders happen)."""
    def setup(env: CaseEnv) -> Outcome:
        from retrain.common.registry import Registry
        model = FX.results["ctr.train"]["model_dir"]
        undone = both_won = 0
        lines = []
        for i in range(rounds):
            root = env.home / f"registry-{i}"
            shutil.copytree(FX.home / "registry", root)
            reg = Registry(root)
            reg.publish(model, "ctr", {"run_id": "second"})     # v1 archived, v2 current
            base = reg.current_version("ctr")
            start = time.time() + 1.5
            procs = [subprocess.Popen(
                [PY, "-c", RACE, str(root), action, model, str(start + delay), str(base), who],
                stdout=subprocess.PIPE, text=True, cwd=REPO)
                for action, delay, who in (("push", 0.0, "run-a"),
                                           (other, 0.004 * (i % 4), "run-b"))]
            push, rival = (json.loads(p.communicate(timeout=120)[0]) for p in procs)
            final = reg.current_version("ctr")
            errors = reg.check("ctr")
            if other == "rollback" and rival["outcome"] == "done" and final != base - 1:
                undone += 1
            if push["outcome"] == rival["outcome"] == "done" and other != "rollback":
                both_won += 1
            lines.append(f"{push['outcome']}/{rival['outcome']}->{final}"
                         + (f" errors {errors}" if errors else ""))
            if errors:
                return Outcome(True, "registry_inconsistent", "; ".join(lines))
        message = f"{rounds} rounds: " + ", ".join(lines)
        figures = {"rounds": rounds, "rollbacks_undone": undone, "both_published": both_won}
        if undone or both_won:
            return Outcome(True, "race_lost", message, figures=figures)
        return Outcome(False, "accepted", message, figures=figures)
    return setup


def secret_case(stage: str) -> Callable[[CaseEnv], Outcome]:
    """A file holding a planted secret, inside an allowed config root, named by the
    family's config param: at the run-input check, or given to the step itself."""
    def setup(env: CaseEnv) -> Outcome:
        path = env.home / "planted-secret.yaml"
        path.write_text(f"root:x:0:0:{SECRET}:/root:/bin/bash\napi_key: {SECRET}\n"
                        f"{SECRET}: [1, 2\n")
        if stage == "run_inputs":     # it copies the raw data itself
            return run_inputs_case(config=lambda e: str(path))(env)
        env.copy_raw()
        return env.run_stage(stage, ctx=env.ctx(config=str(path)))
    return setup


def _jsonl_part(rows: list[bytes], name: str = "part-00001.jsonl.gz"):
    def mutate(span_dir: Path) -> None:
        (span_dir / name).write_bytes(gzip.compress(b"".join(rows)))
    return mutate


def _ctr_row(i: int, **changes) -> dict:
    row = {"example_id": f"hostile-{i}", "ts": 1_700_000_000, "user_id": f"u{i}",
           "item_id": "i1", "category_id": "c1", "device": "ios", "hour": 3, "position": 1,
           "price": 1.0, "user_past_clicks": 0.0, "item_age_days": 1.0, "click": 0}
    return {**row, **changes}


def _lines(n: int, make: Callable[[int], str]) -> list[bytes]:
    return [(make(i) + "\n").encode() for i in range(n)]


def bomb_case(expands_to: int, config_limit: int | None = None
              ) -> Callable[[CaseEnv], Outcome]:
    """A gzip part of 512 KB records (legal lines, each value over the value limit)
    expanding to `expands_to` bytes, validated in a fresh process whose peak RSS is
    measured (bench/hostile_bomb.py's child)."""
    def setup(env: CaseEnv) -> Outcome:
        sys.path.insert(0, str(REPO / "bench"))
        import hostile_bomb
        span = env.copy_raw()
        record = (json.dumps(_ctr_row(0, device="d" * (512 << 10))) + "\n").encode()
        hostile_bomb.write_gzip(span / "part-00001.jsonl.gz",
                                hostile_bomb.repeated(record, expands_to))
        config = ""
        if config_limit:
            config = str(cfg_file(_ctr_cfg(_set("validation.thresholds",
                                                {"max_part_bytes": config_limit})),
                                  "limits.yaml")(env))
        out = env.home / "validation"
        r = hostile_bomb.measure(span, out, config)
        figures = {"expanded_bytes": expands_to, "gzip_bytes":
                   (span / "part-00001.jsonl.gz").stat().st_size,
                   "peak_rss_mb": r.get("peak_rss_mb"), "seconds": r.get("seconds")}
        if r["outcome"] in ("passed", "overridden"):
            return Outcome(False, "accepted", json.dumps(r), str(out), "validate", figures)
        return Outcome(True, r.get("error_kind") or r["outcome"],
                       f"{r['outcome']}: {r.get('message', r.get('error', ''))}", str(out),
                       "validate", figures)
    return setup


def full_disk_case(stage: str) -> Callable[[CaseEnv], Outcome]:
    """The case's runs folder is a 1 MB tmpfs filled to its last 24 KB; the stage runs
    into it (needs root for mount)."""
    def setup(env: CaseEnv) -> Outcome:
        env.copy_raw()
        runs = env.home / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(runs)],
                       check=True, capture_output=True)
        try:
            filler = runs / ".filler"
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass
            os.truncate(filler, filler.stat().st_size - (24 << 10))
            t = time.time()
            outcome = env.run_stage(stage)
            outcome.figures = {"seconds_to_fail": round(time.time() - t, 1)}
            return outcome
        finally:
            subprocess.run(["umount", "-l", str(runs)], check=False)
    return setup


def _t_surrogates(span_dir: Path) -> None:
    """One ticket in ten gets a lone surrogate, as a JSON escape (valid JSON, invalid text)."""
    part = _text_part(span_dir)
    rows = read_jsonl(part)
    with gzip.open(part, "wt", encoding="ascii") as f:
        f.writelines(json.dumps({**r, "body": r["body"] + ("\ud800" if i % 10 == 0 else "")})
                     + "\n" for i, r in enumerate(rows))


AIRFLOW_COMPONENT = "source scripts/airflow-env.sh && exec airflow "


def _component(cmd: str, env: dict, log: Path) -> subprocess.Popen:
    """One Airflow component in its own process group (`make ui` starts them together and
    stops all when one exits; a scheduler crash must leave the others running)."""
    with open(log, "a") as out:
        return subprocess.Popen(["bash", "-c", AIRFLOW_COMPONENT + cmd], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=90)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def scheduler_kill_case(env: CaseEnv) -> Outcome:
    """A real Airflow (API server, dag-processor and scheduler as `make ui` runs them:
    SQLite, the LocalExecutor) runs the CTR DAG; while `train` runs, the scheduler is
    SIGKILLed with its LocalExecutor workers (what a crashed or OOM-killed scheduler host
    leaves) and a new scheduler is started. The run must end in success with exactly one
    version published, the registry consistent, and no step process left behind."""
    from retrain.common.registry import Registry
    from retrain.orchestration.local_airflow import LocalAirflow
    env.copy_raw()
    os.environ["AIRFLOW_HOME"] = str(env.home / "airflow")
    log_dir = env.home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    af = LocalAirflow(env.home, "ctr_daily_retrain", log_dir)
    af_env = {**af.env(), "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60"}
    subprocess.run(["bash", "-c", AIRFLOW_COMPONENT.replace("exec airflow ", "")
                    + 'mkdir -p "$AIRFLOW_HOME" && airflow db migrate >/dev/null && airflow '
                    "pools import scripts/pools.json >/dev/null"], cwd=REPO, env=af_env,
                   check=True, timeout=600)
    procs = {name: _component(cmd, af_env, log_dir / f"{name}.log") for name, cmd in (
        ("api-server", f"api-server --host 127.0.0.1 --port {af.port}"),
        ("dag-processor", "dag-processor"),
        ("scheduler", "scheduler --skip-serve-logs"))}
    notes: list[str] = []
    try:
        af.proc = procs["api-server"]
        af._wait_for_the_dag_without_schedule()
        af.call("PATCH", "/api/v2/dags/ctr_daily_retrain", {"is_paused": False})
        conf = {k: v for k, v in CTR_PARAMS.items() if v is not None}
        run = af.call("POST", "/api/v2/dags/ctr_daily_retrain/dagRuns", {
            "logical_date": f"{CTR_SPAN}T12:00:00Z", "conf": {**conf, "span": CTR_SPAN}})
        path = f"/api/v2/dags/ctr_daily_retrain/dagRuns/{run['dag_run_id']}"

        def tis() -> dict:
            return {t["task_id"]: t for t in
                    af.call("GET", f"{path}/taskInstances")["task_instances"]}
        deadline = time.time() + 900
        while (tis().get("train") or {}).get("state") != "running":
            if time.time() > deadline or af.call("GET", path)["state"] in ("success", "failed"):
                return Outcome(True, "harness_error", f"train never ran: {tis()}")
            time.sleep(1)
        time.sleep(3)                                  # mid-train: the step is running
        os.killpg(procs["scheduler"].pid, signal.SIGKILL)
        procs["scheduler"].wait()
        notes.append("scheduler and its LocalExecutor workers SIGKILLed while train ran")
        time.sleep(2)
        procs["scheduler"] = _component("scheduler --skip-serve-logs", af_env,
                                        log_dir / "scheduler-2.log")
        while af.call("GET", path)["state"] not in ("success", "failed"):
            if time.time() > deadline + 900:
                return Outcome(True, "timeout", f"run still running: {tis()}")
            time.sleep(5)
        final = af.call("GET", path)["state"]
        states = {k: (t["state"], t["try_number"]) for k, t in tis().items()}
    finally:
        for proc in procs.values():
            _stop(proc)
    time.sleep(2)
    left = [pid for pid in _all_pids() if pid != os.getpid()
            and _environ_has(pid, f"RETRAIN_HOME={env.home}".encode())]
    reg = Registry(env.home / "registry")
    versions = reg.list_versions("ctr") if (env.home / "registry" / "ctr").exists() else []
    errors = reg.check("ctr") if versions else []
    message = (f"run {final}; (state, try) {states}; {len(versions)} version(s) published; "
               f"registry errors {errors}; processes left {left}; " + "; ".join(notes))
    ok = final == "success" and len(versions) == 1 and not errors and not left
    return Outcome(not ok, "accepted" if ok else "run_broken", message,
                   figures={"orphans": len(left), "train_try": states.get("train")})


def hand_off_cases(add) -> None:
    for fam, days in (("ctr", CTR_DAYS), ("text", TEXT_DAYS)):
        part = "part-00000.parquet" if fam == "ctr" else "part-00000.jsonl.gz"
        for which, day in (("span", days[-1]), ("window_day", days[-2])):
            add(f"{fam}.handoff.{which}_rewritten_same_size_and_mtime", fam, "preprocess",
                "handoff", handoff_case(day), [f"dt={day}", part, "validat"],
                kinds=("ContentChanged",))
        cp = "feature_config" if fam == "ctr" else "text_config"
        add(f"{fam}.secrets.config_param_names_a_secret_file", fam, "run_inputs", "secrets",
            secret_case("run_inputs"), [cp, "planted-secret.yaml"], kinds=("refused",),
            absent=(SECRET,))
        add(f"{fam}.secrets.step_reads_a_secret_file", fam, "validate", "secrets",
            secret_case("validate"), ["planted-secret.yaml"], absent=(SECRET,))
    add("ctr.handoff.split_other_hash", "ctr", "evaluate", "handoff",
        split_case({"hash": "md5-of-example-id"}), ["hash", "md5-of-example-id"])
    add("ctr.handoff.split_other_id_column", "ctr", "evaluate", "handoff",
        split_case({"id_column": "user_id"}), ["id_column", "user_id"])
    add("ctr.handoff.split_other_eval_share", "ctr", "evaluate", "handoff",
        split_case({"eval_percent": 10}), [], expect="accepted")
    add("ctr.race.publish_vs_publish", "ctr", "registry", "race", race_case("push"), [],
        expect="accepted")
    add("ctr.race.rollback_vs_publish", "ctr", "registry", "race", race_case("rollback"), [],
        expect="accepted")
    add("ctr.scheduler.killed_mid_train", "ctr", "train", "scheduler_kill",
        scheduler_kill_case, [], expect="accepted")


def hostile_cases(add) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    n = 100    # 100 records against the span's 4,000 rows: past the 0.1 % reject budget
    ctr = [
        ("deep_nesting", _lines(n, lambda i: json.dumps(_ctr_row(i))[:-1] + f', "junk": {deep}}}'),
         ["too_deep", "part-00001.jsonl.gz"]),
        ("deep_nesting_in_a_known_field", _lines(n, lambda i: json.dumps(
            _ctr_row(i, device=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]))),
         ["wrong_type", "part-00001.jsonl.gz"]),
        ("huge_values", _lines(n, lambda i: json.dumps(_ctr_row(i, item_id="v" * 200_000))),
         ["oversize_value", "part-00001.jsonl.gz"]),
        ("lone_surrogates", _lines(n, lambda i: json.dumps(_ctr_row(i, user_id="u\ud800"))),
         ["invalid_text", "part-00001.jsonl.gz"]),
        ("nul_in_strings", _lines(n, lambda i: json.dumps(_ctr_row(i, device="io\u0000s"))),
         ["invalid_text"]),
        ("invalid_utf8_bytes", [json.dumps(_ctr_row(i)).encode().replace(b"ios", b"i\xc3\x28s")
                                + b"\n" for i in range(n)], ["non_utf8"]),
    ]
    for name, rows, names in ctr:
        add(f"ctr.hostile.{name}", "ctr", "validate", "hostile", raw_case(_jsonl_part(rows)),
            names)
    add("ctr.hostile.preprocess_deep_nesting", "ctr", "preprocess", "hostile",
        raw_case(_jsonl_part(ctr[0][1])), [], expect="accepted")   # counted rejects
    add("ctr.hostile.gzip_bomb_1gb", "ctr", "validate", "hostile", bomb_case(1 << 30),
        ["oversize_value", "part-00001.jsonl.gz"])
    add("ctr.hostile.gzip_bomb_over_part_limit", "ctr", "validate", "hostile",
        bomb_case(1 << 30, config_limit=64 << 20), ["PartTooLarge", "part-00001.jsonl.gz",
                                                    "max_part_bytes"])

    def text_line(body_json: str) -> bytes:
        return ('{"ticket_id": "T-hostile", "subject": "x", "team": "billing", "body": '
                + body_json + "}\n").encode()
    text = [
        ("deep_nesting", _extra_text_part("part-00001.jsonl", text_line(deep)),
         ["part-00001.jsonl line 1", "max_depth"]),
        ("huge_value", _extra_text_part("part-00001.jsonl", text_line(json.dumps("y" * (3 << 20)))),
         ["part-00001.jsonl line 1", "max_value_bytes"]),
        ("gzip_bomb", lambda span: (span / "part-00001.jsonl.gz").write_bytes(   # 300 MB
            gzip.compress((b" " * 1023 + b"\n") * (300 << 10), 9)),
         ["part-00001.jsonl.gz", "max_part_bytes"]),
        ("lone_surrogates", _t_surrogates, ["expect_column_values_to_not_match_regex"]),
    ]
    for name, mutate, names in text:
        add(f"text.hostile.{name}", "text", "validate", "hostile", raw_case(mutate), names)
    for fam, stage in (("ctr", "validate"), ("ctr", "preprocess"), ("ctr", "train"),
                       ("text", "validate"), ("text", "preprocess")):
        add(f"{fam}.full_disk.{stage}", fam, stage, "full_disk", full_disk_case(stage),
            ["no space left"], kinds=("transient",))


# ------------------------------------------------------------------ the case list

def _truncate(frac: float):
    def mutate(span_dir: Path) -> None:
        part = parquet_parts(span_dir)[0]
        data = part.read_bytes()
        part.write_bytes(data[: int(len(data) * frac)])
    return mutate


def _corrupt(span_dir: Path) -> None:
    part = parquet_parts(span_dir)[0]
    data = bytearray(part.read_bytes())
    mid = len(data) // 2
    data[mid: mid + 4096] = os.urandom(min(4096, len(data) - mid))
    part.write_bytes(bytes(data))


def _zero_byte(span_dir: Path) -> None:
    for part in parquet_parts(span_dir):
        part.write_bytes(b"")


def _empty_span(span_dir: Path) -> None:
    for part in parquet_parts(span_dir):
        part.unlink()


def _no_marker(span_dir: Path) -> None:
    (span_dir / "_SUCCESS").unlink()


def _missing_span(span_dir: Path) -> None:
    shutil.rmtree(span_dir)


def _symlink_passwd(name: str):
    def mutate(span_dir: Path) -> None:
        (span_dir / name).symlink_to("/etc/passwd")
    return mutate


def _extra_text_part(name: str, data: bytes):
    def mutate(span_dir: Path) -> None:
        (span_dir / name).write_bytes(data)
    return mutate


def _dup_part(span_dir: Path) -> None:
    part = parquet_parts(span_dir)[0]
    shutil.copy(part, part.with_name("part-99999" + "".join(part.suffixes)))


def _drop_col(col: str):
    return edit_parquet(lambda t: t.drop([col]))


def _add_col(col: str):
    import pyarrow as pa
    return edit_parquet(lambda t: t.append_column(col, pa.array(["x"] * t.num_rows)))


def _head(n: int):
    return edit_parquet(lambda t: t.slice(0, n))


def _every(k: int, value):
    return lambda vals: [value if i % k == 0 else v for i, v in enumerate(vals)]


def _gz_rows(rows: list[dict], name: str = "part-00000.jsonl.gz"):
    def mutate(span_dir: Path) -> None:
        for p in span_dir.glob("part-*"):
            p.unlink()
        write_jsonl(span_dir, rows, name=name, marker=False)
    return mutate


CHINESE = ["这个商品质量很好，物流也很快", "包装破损，客服态度很差", "价格便宜，下次还会再来",
           "尺寸不合适，申请退货退款", "颜色和图片不一样，很失望"]


def _text_part(span_dir: Path) -> Path:
    return sorted(span_dir.glob("part-*"))[0]


def _t_truncate(span_dir: Path) -> None:
    p = _text_part(span_dir)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _t_bad_json(span_dir: Path) -> None:
    p = _text_part(span_dir)
    with gzip.open(p, "at", encoding="utf-8") as f:
        f.write('{"ticket_id": "T9999", "subject": "broken\n')


def _t_zero(span_dir: Path) -> None:
    _text_part(span_dir).write_bytes(b"")


def _t_not_utf8(span_dir: Path) -> None:
    p = _text_part(span_dir)
    with gzip.open(p, "ab") as f:
        f.write(b'{"ticket_id": "T9998", "subject": "\xff\xfe bad", "body": "x", '
                b'"team": "billing"}\n')


def _t_parquet_types(span_dir: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = read_jsonl(_text_part(span_dir))
    for p in span_dir.glob("part-*"):
        p.unlink()
    table = pa.table({"ticket_id": [i for i in range(len(rows))],
                      "subject": [1.5] * len(rows), "body": [2] * len(rows),
                      "team": [r["team"] for r in rows]})
    pq.write_table(table, span_dir / "part-00000.parquet")


def _map(fn: Callable[[dict, int], dict]):
    return edit_rows(lambda rows: [fn(dict(r), i) for i, r in enumerate(rows)])


def _drop_key(key: str):
    return _map(lambda r, i: {k: v for k, v in r.items() if k != key})


def _cfg_base(**override) -> str:
    """The CTR feature config of the generated logs, with top-level keys replaced."""
    import yaml
    src = REPO / "components" / "ctr" / "feature_configs" / "generated.yaml"
    data = yaml.safe_load(src.read_text())
    for k, v in override.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    return yaml.safe_dump(data, sort_keys=False)


def _ctr_cfg(fn: Callable[[dict], None]) -> Callable[[], str]:
    def make() -> str:
        import yaml
        src = REPO / "components" / "ctr" / "feature_configs" / "generated.yaml"
        data = yaml.safe_load(src.read_text())
        fn(data)
        return yaml.safe_dump(data, sort_keys=False)
    return make


def _text_cfg(fn: Callable[[dict], None]) -> Callable[[], str]:
    def make() -> str:
        import yaml
        data = yaml.safe_load(TEXT_CONFIG)
        fn(data)
        return yaml.safe_dump(data, sort_keys=False)
    return make


def cfg_file(content: Callable[[], str] | str, name: str = "bad-config.yaml"
             ) -> Callable[[CaseEnv], str]:
    def make(env: CaseEnv) -> str:
        p = env.home / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content() if callable(content) else content)
        return str(p)
    return make


def lazy_config_case(content: Callable[[], str], stage: str = "validate"):
    def setup(env: CaseEnv) -> Outcome:
        return config_case(content(), stage)(env)
    return setup


def _set(path: str, value):
    def fn(data: dict) -> None:
        *head, last = path.split(".")
        d = data
        for k in head:
            d = d.setdefault(k, {})
        if value is _DELETE:
            d.pop(last, None)
        else:
            d[last] = value
    return fn


_DELETE = object()


def _feature_names(data: dict) -> list[str]:
    return [f.get("name") for f in data.get("features", [])]


def _break_meta_current(mdir: Path) -> None:
    (mdir / str(current_version(mdir)) / "retrain_meta.json").unlink()


def _garbage_current(mdir: Path) -> None:
    (mdir / "CURRENT").write_text("not json {{{")


def _current_missing_version(mdir: Path) -> None:
    (mdir / "CURRENT").write_text(json.dumps({"version": 42}))


def _meta_not_json(mdir: Path) -> None:
    (mdir / str(current_version(mdir)) / "retrain_meta.json").write_bytes(b"\x00\xffgarbage")


def _no_pb(mdir: Path) -> None:
    (mdir / str(current_version(mdir)) / "saved_model.pb").unlink()


def _version_is_file(mdir: Path) -> None:
    v = current_version(mdir)
    shutil.rmtree(mdir / str(v))
    (mdir / str(v)).write_text("not a folder")


def _two_published(mdir: Path) -> None:
    v = current_version(mdir)
    shutil.copytree(mdir / str(v), mdir / str(v + 1))
    meta = json.loads((mdir / str(v + 1) / "retrain_meta.json").read_text())
    meta["version"] = v + 1
    (mdir / str(v + 1) / "retrain_meta.json").write_text(json.dumps(meta))


def cases() -> list[Case]:
    C: list[Case] = []

    def add(name, family, stage, category, setup, names, **kw):
        C.append(Case(name, family, stage, category, setup, tuple(names), **kw))

    ANY_TYPED = (BAD_DATA, "transient")   # a missing span may still arrive: retry is fine
    part = "part-00000.parquet"
    # -------------------------------------------------- CTR raw data (validate step)
    ctr_raw = [
        ("missing_span", _missing_span, [f"dt={CTR_SPAN}"], ANY_TYPED),
        ("no_success_marker", _no_marker, ["_SUCCESS"], ANY_TYPED),
        ("span_without_parts", _empty_span, [f"dt={CTR_SPAN}"], (BAD_DATA,)),
        ("zero_byte_part", _zero_byte, [part], (BAD_DATA,)),
        ("truncated_parquet", _truncate(0.5), [part], (BAD_DATA,)),
        ("corrupt_parquet", _corrupt, [part], (BAD_DATA,)),
        ("text_file_as_part", _extra_text_part("part-00001.parquet", b"hello,world\n1,2\n"),
         ["part-00001.parquet"], (BAD_DATA,)),
        ("symlink_to_etc_passwd", _symlink_passwd("part-00009.parquet"),
         ["part-00009.parquet"], (BAD_DATA,)),
        ("missing_column_device", _drop_col("device"), ["schema:columns", "device"], (BAD_DATA,)),
        ("extra_column", _add_col("surprise_col"), ["schema:columns", "surprise_col"], (BAD_DATA,)),
        ("label_as_strings", edit_column("click", lambda v: ["yes" if x else "no" for x in v]),
         ["type:click"], (BAD_DATA,)),
        ("label_out_of_domain", edit_column("click", _every(3, 2)),
         ["allowed_values:click"], (BAD_DATA,)),
        ("nan_price", edit_column("price", _every(2, float("nan"))), ["price"], (BAD_DATA,)),
        ("inf_price", edit_column("price", _every(10, float("inf"))), ["price"], (BAD_DATA,)),
        ("negative_price", edit_column("price", lambda v: [-abs(x or 1) for x in v]),
         ["range:price"], (BAD_DATA,)),
        ("hour_out_of_range", edit_column("hour", _every(4, 25)), ["range:hour"], (BAD_DATA,)),
        ("hour_as_string", edit_column("hour", lambda v: [str(x) for x in v]), ["type:hour"],
         (BAD_DATA,)),
        ("null_user_ids", edit_column("user_id", _every(2, None)), ["null_rate:user_id"],
         (BAD_DATA,)),
        ("all_clicks", edit_column("click", lambda v: [1] * len(v)), ["click_rate"], (BAD_DATA,)),
        ("no_clicks", edit_column("click", lambda v: [0] * len(v)), ["click_rate"], (BAD_DATA,)),
        ("too_few_rows", _head(100), ["row_count"], (BAD_DATA,)),
        ("zero_rows_with_schema", _head(0), ["row_count"], (BAD_DATA,)),
        ("duplicate_parts", _dup_part, ["duplicates:parts"], (BAD_DATA,)),
        ("duplicate_example_ids", edit_column("example_id", lambda v: ["same"] * len(v)),
         ["duplicates:example_id"], (BAD_DATA,)),
        ("unknown_device", edit_column("device", lambda v: ["toaster"] * len(v)),
         ["allowed_values:device"], (BAD_DATA,)),
    ]
    for name, mutate, names, kinds in ctr_raw:
        add(f"ctr.raw.{name}", "ctr", "validate", "raw_data", raw_case(mutate), names,
            kinds=kinds)
    # Past a gate (an override, or a rule the config does not have): the preprocess step
    # itself must still refuse what it cannot read, naming the file.
    add("ctr.raw.preprocess_corrupt_parquet", "ctr", "preprocess", "raw_data",
        raw_case(_corrupt), [part])
    add("ctr.raw.preprocess_missing_column", "ctr", "preprocess", "raw_data",
        raw_case(_drop_col("price")), ["price"])
    add("ctr.raw.preprocess_label_strings", "ctr", "preprocess", "raw_data",
        raw_case(edit_column("click", lambda v: ["yes" if x else "no" for x in v])), ["click"])
    add("ctr.raw.preprocess_symlink_passwd", "ctr", "preprocess", "raw_data",
        raw_case(_symlink_passwd("part-00009.parquet")), ["part-00009.parquet"])

    # -------------------------------------------------- text raw data (validate step)
    tp = "part-00000.jsonl.gz"
    text_raw = [
        ("missing_span", _missing_span, [f"dt={TEXT_SPAN}"], ANY_TYPED),
        ("no_success_marker", _no_marker, ["_SUCCESS"], ANY_TYPED),
        ("zero_byte_part", _t_zero, [tp], (BAD_DATA,)),
        ("truncated_gzip", _t_truncate, [tp], (BAD_DATA,)),
        ("bad_json_line", _t_bad_json, [tp], (BAD_DATA,)),
        ("not_utf8", _t_not_utf8, [tp], (BAD_DATA,)),
        ("symlink_to_etc_passwd", _symlink_passwd("part-00009.jsonl"), ["part-00009.jsonl"],
         (BAD_DATA,)),
        ("missing_example_id", _drop_key("ticket_id"), ["ticket_id"], (BAD_DATA,)),
        ("missing_template_column", _drop_key("body"), ["body"], (BAD_DATA,)),
        ("missing_label_column", _drop_key("team"), ["team"], (BAD_DATA,)),
        ("unknown_labels", _map(lambda r, i: {**r, "team": "sales" if i % 2 else r["team"]}),
         ["sales"], (BAD_DATA,)),
        ("labels_as_numbers", _map(lambda r, i: {**r, "team": i % 2}),
         ["expect_column_values_to_be_in_set(queue)"], (BAD_DATA,)),
        ("all_empty_texts", _map(lambda r, i: {**r, "subject": "", "body": ""}), ["text"],
         (BAD_DATA,)),
        ("chinese_text_english_checkpoint",
         _map(lambda r, i: {**r, "subject": "订单问题", "body": f"{CHINESE[i % 5]}（{i}）"}),
         ["unknown_token_rate"], (BAD_DATA,)),
        ("one_class_only", _map(lambda r, i: {**r, "team": "billing"}), ["_majority_queue"],
         (BAD_DATA,)),
        ("all_duplicates", _map(lambda r, i: {**r, "subject": "same", "body": "same text"}),
         ["duplicate"], (BAD_DATA,)),
        ("too_few_rows", edit_rows(lambda rows: rows[:5]),
         ["expect_table_row_count_to_be_between"], (BAD_DATA,)),
        ("mostly_unlabelled", _map(lambda r, i: {**r, "team": None if i % 4 else r["team"]}),
         ["expect_column_values_to_not_be_null(queue)"], (BAD_DATA,)),
        ("parquet_wrong_types", _t_parquet_types, ["subject"], (BAD_DATA,)),
        ("duplicate_example_ids", _map(lambda r, i: {**r, "ticket_id": "T1"}),
         ["expect_column_values_to_be_unique(example_id)"], (BAD_DATA,)),
    ]
    for name, mutate, names, kinds in text_raw:
        add(f"text.raw.{name}", "text", "validate", "raw_data", raw_case(mutate), names,
            kinds=kinds)
    add("text.raw.extra_columns_accepted", "text", "validate", "raw_data",
        raw_case(_map(lambda r, i: {**r, "extra_field": "x"})), [], expect="accepted")
    add("text.raw.preprocess_bad_json_line", "text", "preprocess", "raw_data",
        raw_case(_t_bad_json), [tp])
    add("text.raw.preprocess_unknown_labels", "text", "preprocess", "raw_data",
        raw_case(_map(lambda r, i: {**r, "team": "sales" if i % 2 else r["team"]})), ["sales"])

    # -------------------------------------------------- run inputs (resolve_span), both
    for fam in ("ctr", "text"):
        cp = "feature_config" if fam == "ctr" else "text_config"
        ri = [
            ("future_span", dict(span="2099-01-01"), ["2099-01-01", "RETRAIN_MAX_FUTURE_DAYS"]),
            ("relative_raw_root", dict(raw_root=lambda e: "../raw"), ["raw_root", "../raw"]),
            ("raw_root_outside_allowed", dict(raw_root=lambda e: "/etc",
                                              roots=lambda e: str(e.home)),
             ["raw_root", "/etc", "RETRAIN_ALLOWED_DATA_ROOTS"]),
            ("raw_root_traversal", dict(raw_root=lambda e: f"{e.home}/../../etc",
                                        roots=lambda e: str(e.home)),
             ["raw_root", "RETRAIN_ALLOWED_DATA_ROOTS"]),
            ("raw_root_is_a_file", dict(raw_root=lambda e: "/etc/passwd"), ["raw_root",
                                                                            "/etc/passwd"]),
            ("relative_config", dict(config=lambda e: "configs/x.yaml"), [cp, "configs/x.yaml"]),
            ("config_missing", dict(config=lambda e: f"{e.home}/nope.yaml"), [cp, "nope.yaml"]),
            ("config_is_a_folder", dict(config=lambda e: str(e.home)), [cp]),
            ("config_is_etc_passwd", dict(config=lambda e: "/etc/passwd"), [cp, "/etc/passwd"]),
            ("config_bad_yaml", dict(config=cfg_file("a: [1, 2\nb: {")), [cp, "bad-config.yaml"]),
            ("config_not_a_mapping", dict(config=cfg_file("- 1\n- 2\n")), [cp, "mapping"]),
        ]
        for name, kw, names in ri:
            add(f"{fam}.inputs.{name}", fam, "run_inputs", "params", run_inputs_case(**kw),
                names, kinds=("refused",))
        # DAG params, as the trigger form / REST API check them
        pr = [
            ("window_days_0", {"window_days": 0}, ["window_days"]),
            ("eval_percent_0", {"eval_percent": 0}, ["eval_percent"]),
            ("eval_percent_150", {"eval_percent": 150}, ["eval_percent"]),
            ("empty_force_reason", {"force_bless_reason": ""}, ["force_bless_reason"]),
            ("epochs_0", {"epochs": 0}, ["epochs"]),
            ("min_auc_2", {"min_auc": 2}, ["min_auc"]),
            ("span_not_a_date", {"span": "2026-13-45"}, ["span"]),
        ]
        if fam == "ctr":
            pr += [("ps_count_0", {"ps_count": 0}, ["ps_count"]),
                   ("worker_count_string", {"worker_count": "many"}, ["worker_count"])]
        else:
            pr += [("batch_size_0", {"batch_size": 0}, ["batch_size"]),
                   ("strategy_unknown", {"strategy": "tpu_magic"}, ["strategy"]),
                   ("max_seq_length_4", {"max_seq_length": 4}, ["max_seq_length"])]
        for name, values, names in pr:
            add(f"{fam}.params.{name}", fam, "params", "params", params_case(values), names,
                kinds=("param_schema",))

    # -------------------------------------------------- step specs (past the DAG's checks)
    add("ctr.spec.preprocess_eval_percent_0", "ctr", "preprocess", "params",
        spec_case("preprocess", {"eval_percent": 0}), ["eval_percent"])
    add("ctr.spec.preprocess_window_days_0", "ctr", "preprocess", "params",
        spec_case("preprocess", {"window_days": 0}), ["window_days"])
    add("ctr.spec.train_missing_preprocess_dir", "ctr", "train", "params",
        spec_case("train", lambda e: {"preprocess_dir": str(e.home / "no-such-pre")}),
        ["no-such-pre"])
    add("ctr.spec.evaluate_not_a_model", "ctr", "evaluate", "params",
        spec_case("evaluate", lambda e: {"candidate_model_dir": str(e.raw_root)}),
        ["{raw}"])
    add("text.spec.train_batch_size_0", "text", "train", "params",
        spec_case("train", {"batch_size": 0}), ["batch_size"])
    add("text.spec.train_strategy_unknown", "text", "train", "params",
        spec_case("train", {"strategy": "tpu_magic"}), ["strategy"])
    add("text.spec.train_checkpoint_missing", "text", "train", "params",
        spec_case("train", lambda e: {"checkpoint_dir": str(e.home / "no-ckpt")}), ["no-ckpt"])
    add("text.spec.preprocess_eval_percent_100", "text", "preprocess", "params",
        spec_case("preprocess", {"eval_percent": 100}), ["eval_percent"])

    # -------------------------------------------------- family configs
    ctr_cfgs = [
        ("unknown_key", _ctr_cfg(_set("surprise_key", 1)), ["surprise_key"]),
        ("missing_label", _ctr_cfg(_set("label", _DELETE)), ["label"]),
        ("label_not_a_column", _ctr_cfg(_set("label", "no_such_column")), ["no_such_column"],
         "accepted"),   # a column name the loader cannot check without the data
        ("thresholds_inverted", _ctr_cfg(_set("validation.thresholds",
                                              {"min_label_rate": 0.5, "max_label_rate": 0.1})),
         ["min_label_rate"]),
        ("threshold_not_a_number", _ctr_cfg(_set("validation.thresholds",
                                                 {"min_rows": "lots"})), ["min_rows"]),
        ("threshold_unknown", _ctr_cfg(_set("validation.thresholds", {"min_rowz": 5})),
         ["min_rowz"]),
        ("bad_yaml", lambda: "features: [\n  - name: x\n    type: {int\n", ["config.yaml"]),
    ]
    for name, content, names, *resolve_ok in ctr_cfgs:
        add(f"ctr.config.{name}", "ctr", "validate", "config", lazy_config_case(content),
            names)
        add(f"ctr.config.resolve_{name}", "ctr", "run_inputs", "config",
            run_inputs_case(config=cfg_file(content)),
            [] if resolve_ok else ["feature_config", *names[:1]]
            if names != ["config.yaml"] else ["feature_config", "bad-config.yaml"],
            kinds=("refused",), expect="accepted" if resolve_ok else "refused")
    text_cfgs = [
        ("unknown_key", _text_cfg(_set("surprise_key", 1)), ["surprise_key"]),
        ("missing_label_column", _text_cfg(_set("tasks.queue.label_column", _DELETE)),
         ["queue"], "accepted"),   # label_column defaults to the task name
        ("one_label", _text_cfg(_set("tasks.queue.labels", ["billing"])), ["labels"]),
        ("positive_not_a_label", _text_cfg(_set("tasks.queue.positive", "sales")), ["sales"]),
        ("max_class_share_2", _text_cfg(_set("validation.max_class_share", 2)),
         ["max_class_share"]),
        ("min_rows_negative", _text_cfg(_set("validation.min_rows", -5)), ["min_rows"]),
        # the path is a value of the file: named by its key, never echoed (rule 22)
        ("checkpoint_missing", _text_cfg(_set("checkpoint", "/nonexistent/ckpt")),
         ["checkpoint"]),
        ("bad_yaml", lambda: "tasks: {queue: [\n", ["config.yaml"]),
    ]
    for name, content, names, *resolve_ok in text_cfgs:
        add(f"text.config.{name}", "text", "validate", "config", lazy_config_case(content),
            names)
        add(f"text.config.resolve_{name}", "text", "run_inputs", "config",
            run_inputs_case(config=cfg_file(content)),
            [] if resolve_ok else ["text_config", *names[:1]]
            if names != ["config.yaml"] else ["text_config", "bad-config.yaml"],
            kinds=("refused",), expect="accepted" if resolve_ok else "refused")

    # -------------------------------------------------- registry
    for fam in ("ctr", "text"):
        reg = [
            ("garbage_current_check", _garbage_current, "check", ["CURRENT"], ("cli",)),
            ("garbage_current_publish", _garbage_current, "publish", ["CURRENT"], ("*",)),
            ("garbage_current_evaluate", _garbage_current, "evaluate", ["CURRENT"], ("*",)),
            ("current_names_missing_version_check", _current_missing_version, "check",
             ["CURRENT", "42"], ("cli",)),
            ("current_names_missing_version_publish", _current_missing_version, "publish",
             ["CURRENT", "42"], ("*",)),
            ("deleted_meta_check", _break_meta_current, "check", ["retrain_meta.json"],
             ("cli",)),
            ("deleted_meta_show", _break_meta_current, "show", ["CURRENT", "registry check"],
             ("cli",)),
            ("deleted_meta_publish", _break_meta_current, "publish", ["retrain_meta.json"],
             ("*",)),
            ("unreadable_meta_check", _meta_not_json, "check", ["retrain_meta.json"], ("cli",)),
            ("unreadable_meta_evaluate", _meta_not_json, "evaluate", ["CURRENT"], ("*",)),
            ("deleted_saved_model_check", _no_pb, "check", ["saved_model.pb"], ("cli",)),
            ("version_dir_is_a_file_check", _version_is_file, "check", ["CURRENT"], ("cli",)),
            ("two_published_check", _two_published, "check", ["more than one published"],
             ("cli",)),
        ]
        for name, breaks, action, names, kinds in reg:
            add(f"{fam}.registry.{name}", fam, "push" if action == "publish" else "registry",
                "registry", registry_case(breaks, action), names, kinds=kinds)
        add(f"{fam}.registry.push_not_a_savedmodel", fam, "push", "registry",
            push_case(lambda e, up: up["train"].update(model_dir=str(e.home))),
            ["saved_model.pb"], kinds=("*",))
        add(f"{fam}.registry.push_unblessed", fam, "push", "registry",
            push_case(lambda e, up: up["evaluate"].update(blessed=False)), [],
            expect="accepted")
        add(f"{fam}.registry.rollback_without_reason", fam, "registry", "registry",
            registry_case(lambda m: None, "check") if False else
            (lambda env: (registry_copy(env), cli_outcome(
                ["registry", "rollback", env.fam, "--to", "1", "--why", " "], env.home))[1]),
            ["why"], kinds=("cli",))
    hand_off_cases(add)
    hostile_cases(add)
    for c in C:
        # Step specs are built by code from checked params: any typed failure with a
        # message naming the field is clean there (the DAG never sends these).
        if ".spec." in c.name:
            c.kinds = ("*",)
    return C


# ------------------------------------------------------------------ running the cases

def registry_state(home: Path) -> dict:
    """{model: (CURRENT text, sorted version names)}: what publishing would change."""
    out = {}
    root = home / "registry"
    if root.is_dir():
        for mdir in sorted(p for p in root.iterdir() if p.is_dir()):
            cur = mdir / "CURRENT"
            out[mdir.name] = (cur.read_text() if cur.is_file() else None,
                              sorted(p.name for p in mdir.iterdir() if p.name.isdigit()))
    return out


def first_line(text: str, n: int = 110) -> str:
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= n else line[: n - 1] + "…"


def unblessed_versions(home: Path, fam: str) -> int:
    """Versions in a registry that should never have been published: not blessed by the
    gate (nor forced with a reason), or without a passed serving check."""
    from retrain.common.registry import Registry
    n = 0
    reg = Registry(home / "registry")
    if fam not in reg.models():
        return 0
    for meta in reg.list_versions(fam):
        gate = meta.get("gate") or {}
        if not gate.get("blessed") or not (meta.get("serving_check") or {}).get("passed"):
            n += 1
    return n


def run_case(case: Case, work: Path) -> dict:
    home = work / "cases" / case.name
    shutil.rmtree(home, ignore_errors=True)    # a reused --workdir
    home.mkdir(parents=True)
    env = CaseEnv(case, home)
    t = time.time()
    try:
        before = None
        outcome: Outcome | None = None
        # The registry's state before the case, taken after the setup copied it in:
        # registry cases copy inside setup, so compare against the fixture's registry.
        before = registry_state(FX.home)
        outcome = case.setup(env)
    except Exception as e:  # noqa: BLE001 - a broken case, not a product verdict
        import traceback
        outcome = Outcome(True, "harness_error", f"harness error: {type(e).__name__}: {e}")
        log.error("case %s: %s", case.name, traceback.format_exc())
    seconds = time.time() - t
    problems = []
    if case.expect == "refused":
        if not outcome.refused:
            problems.append("accepted")
        elif "*" not in case.kinds and outcome.kind not in case.kinds:
            problems.append(f"kind {outcome.kind}")
        elif outcome.kind in ("crash", "harness_error"):
            problems.append(outcome.kind)
    elif outcome.refused:
        problems.append("refused")
    names = [n.format(home=home, raw=home / "raw" / case.family) for n in case.names]
    missing = [n for n in names if n not in outcome.message]
    if missing:
        problems.append(f"message lacks {missing}")
    leaks = leaked(case.absent, outcome.message, home)
    if leaks:
        problems.append(f"leaked into {leaks}")
    if case.category == "hostile" and outcome.kind == "transient":
        problems.append("a hostile record was taken as transient (it would be retried)")
    out = Path(outcome.out_dir) if outcome.out_dir else None
    partial = partial_visible(outcome.stage, out) if out and outcome.stage in OUT_KEY else False
    if partial:
        problems.append(f"partial artifact {out}")
    # Publishing: a push case that should have been refused but changed the registry.
    # A bad candidate (not a SavedModel, not blessed) is a bad model published; a good one
    # published over a broken registry is counted apart (the registry was the bad input).
    bad_published = over_broken = 0
    reg_errors_after: list[str] = []
    if env.reg_before is not None:
        changed = registry_state(home) != env.reg_before
        if changed:     # no case here may publish
            if case.name.endswith(("push_not_a_savedmodel", "push_unblessed")):
                bad_published = 1
                problems.append("a bad candidate was published")
            else:
                over_broken = 1
                problems.append("published over the broken registry")
        from retrain.common.registry import Registry
        try:
            reg_errors_after = Registry(home / "registry").check(case.family)
        except Exception as e:  # noqa: BLE001
            reg_errors_after = [f"{type(e).__name__}: {e}"]
        bad_published += unblessed_versions(home, case.family)
    if registry_state(FX.home) != before:
        bad_published += 1
        problems.append("the fixture's registry changed")
    return {"name": case.name, "family": case.family, "stage": case.stage,
            "category": case.category, "type": "bad_input", "expected": case.expected,
            "observed": f"{outcome.kind}: {first_line(outcome.message, 400)}",
            "message": outcome.message[:4000], "kind": outcome.kind,
            "refused": outcome.refused, "names_missing": missing,
            "partial_artifact": partial, "bad_models_published": bad_published,
            "published_over_broken_registry": over_broken,
            "registry_errors_after": reg_errors_after,
            "rows_lost": 0, "orphans": (outcome.figures or {}).get("orphans", 0),
            "leaks": len(leaks),
            "hostile_retried": int(case.category == "hostile" and outcome.kind == "transient"),
            "rollbacks_undone": (outcome.figures or {}).get("rollbacks_undone", 0),
            **({"figures": outcome.figures} if outcome.figures else {}),
            "verdict": "FAIL" if problems else "PASS",
            "problems": problems, "seconds": round(seconds, 1)}


# ------------------------------------------------------------------ kills

TASK = textwrap.dedent("""
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    job = json.load(open(sys.argv[1]))
    if job["kind"] == "step":
        from retrain.orchestration.launch import run_step
        result = run_step(job["module"], job["spec"])
    else:
        from retrain.orchestration.push import publish_if_blessed
        kw = job["kwargs"]; kw["headline"] = tuple(kw["headline"])
        result = publish_if_blessed(**kw)
    json.dump(result, open(job["result"], "w"), default=str)
""")


def _proc_stat(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, starttime, state) or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return int(rest[1]), int(rest[2]), int(rest[19]), rest[0]


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> dict[int, int]:
    """{pid: starttime} of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    stats = {}
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st:
            stats[pid] = st
            children.setdefault(st[0], []).append(pid)
    out, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out and stats[c][3] != "Z":
                out[c] = stats[c][2]
                todo.append(c)
    return out


def leftovers(tag: str, task_pid: int, seen: dict[int, int], groups: set[int]) -> list[int]:
    """Live (non-zombie) processes that belong to the killed task."""
    needle = f"{TAG_ENV}={tag}".encode()
    parent = f"RETRAIN_STEP_PARENT_PID={task_pid}\0".encode()
    me = os.getpid()
    out = []
    for pid in _all_pids():
        if pid == me:
            continue
        st = _proc_stat(pid)
        if not st or st[3] == "Z":
            continue
        if (seen.get(pid) == st[2] or st[1] in groups or _environ_has(pid, needle)
                or _environ_has(pid, parent)):
            out.append(pid)
    return out


def tree_snapshot(root: Path) -> dict[str, tuple[int, int]]:
    snap = {}
    if root.exists():
        for p in root.rglob("*"):
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue
            snap[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return snap


class KillTarget:
    """One step of one family, on the fixture's real inputs, in its own run folder (the
    kills and the final rerun share it, like the tries of one Airflow task)."""

    def __init__(self, fam: str, stage: str, work: Path):
        self.fam, self.stage = fam, stage
        self.ctx = ctx_for(fam, FX.home, f"kill_{stage}")
        self.work = work
        self.duration = FX.durations[f"{fam}.{stage}"]
        if stage == "push":
            self.kind = "push"
            ctx = self.ctx
            Path(ctx.run_dir).mkdir(parents=True, exist_ok=True)
            # Another run than the fixture's, evaluated against what is current now (the
            # fixture's push published v1): publishing is compare-and-swap on it.
            from retrain.common.registry import Registry
            up = json.loads(json.dumps(FX.upstream(fam), default=str))
            up["evaluate"]["baseline_version"] = Registry(FX.home / "registry").current_version(fam)
            kw = push_kwargs(fam, ctx, up, FX.home)
            kw["headline"] = list(kw["headline"])
            self.job = {"kind": "push", "kwargs": kw}
            self.out = None
        else:
            self.kind = "step"
            module, spec = build_spec(fam, stage, self.ctx, FX.upstream(fam))
            self.job = {"kind": "step", "module": module, "spec": spec}
            self.out = Path(spec[OUT_KEY[stage]])

    def start(self, tag: str, n: int) -> tuple[subprocess.Popen, Path]:
        jobfile = self.work / f"{self.fam}-{self.stage}-{n}.json"
        result = jobfile.with_suffix(".result.json")
        result.unlink(missing_ok=True)
        jobfile.write_text(json.dumps({**self.job, "result": str(result)}, default=str))
        logf = open(jobfile.with_suffix(".log"), "w")
        proc = subprocess.Popen([PY, "-c", TASK, str(jobfile)], cwd=REPO, stdout=logf,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, TAG_ENV: tag,
                                     paths.ENV_HOME: str(FX.home)})
        logf.close()
        return proc, result


def registry_errors(fam: str) -> list[str]:
    from retrain.common.registry import Registry
    reg = Registry(FX.home / "registry")
    if fam not in reg.models():
        return []
    errors = reg.check(fam)
    try:
        cur = reg.current(fam)
    except Exception as e:  # noqa: BLE001
        errors.append(str(e))
    else:
        if cur is not None:
            vdir = reg.model_path(fam, cur["version"])
            if not (vdir / "saved_model.pb").is_file():
                errors.append(f"CURRENT version {cur['version']} has no saved_model.pb")
    return errors


def kill_once(target: KillTarget, n: int, rng: random.Random) -> dict:
    tag = f"{target.fam}-{target.stage}-{n}-{os.getpid()}"
    frac = rng.uniform(0.05, 0.95)
    delay = frac * target.duration
    proc, result_file = target.start(tag, n)
    seen: dict[int, int] = {}
    groups: set[int] = set()
    t0 = time.time()
    while time.time() - t0 < delay and proc.poll() is None:
        for pid, start in descendants(proc.pid).items():
            seen[pid] = start
            st = _proc_stat(pid)
            if st and st[1] == pid:         # a group leader (the step): its group
                groups.add(pid)
        time.sleep(0.1)
    finished_first = proc.poll() is not None
    killed_at = time.time() - t0
    if not finished_first:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    left = leftovers(tag, proc.pid, seen, groups)
    while left and time.time() < deadline:
        time.sleep(0.25)
        left = leftovers(tag, proc.pid, seen, groups)
    for pid in left:      # ours: end them so the next case starts clean
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    problems = []
    if left:
        problems.append(f"{len(left)} orphan process(es) alive 10 s after the kill: {left}")
    partial = False
    late_writes = []
    if target.out is not None:
        snap = tree_snapshot(target.out)
        time.sleep(2.0)
        snap2 = tree_snapshot(target.out)
        late_writes = sorted(k for k in set(snap) | set(snap2) if snap.get(k) != snap2.get(k))
        partial = partial_visible(target.stage, target.out)
        # what a killed writer leaves next to the final name (hidden; readers ignore it)
        if partial:
            problems.append(f"partial artifact visible at {target.out}")
        if late_writes:
            problems.append(f"{len(late_writes)} path(s) written after the kill: "
                            f"{late_writes[:3]}")
    reg_errors = registry_errors(target.fam)
    if reg_errors:
        problems.append(f"registry check: {reg_errors}")
    temps = sorted(p.name for p in (target.out.parent.glob(f".{target.out.name}.tmp-*")
                                    if target.out is not None else []))
    return {"name": f"kill.{target.fam}.{target.stage}.{n}", "family": target.fam,
            "stage": target.stage, "category": "kill", "type": "kill",
            "expected": "no orphans, no partial artifact, registry consistent",
            "observed": ("finished before the kill; " if finished_first else
                         f"SIGKILL at {killed_at:.1f}s of ~{target.duration:.0f}s; ")
            + (f"{'; '.join(problems)}" if problems else
               f"clean (0 orphans of {len(seen)} processes seen, " + (
                   "registry consistent)" if target.out is None else
                   f"{'complete' if target.out.exists() else 'absent'} output, "
                   f"{len(temps)} hidden temp dir(s))")),
            "kill_delay_s": round(killed_at, 2), "finished_before_kill": finished_first,
            "processes_seen": len(seen), "orphans": len(left), "partial_artifact": partial,
            "late_writes": late_writes[:20], "hidden_temp_dirs": temps,
            "registry_errors": reg_errors, "rows_lost": 0, "bad_models_published": 0,
            "verdict": "FAIL" if problems else "PASS", "problems": problems}


def raw_rows(fam: str, spans: list[str]) -> int:
    total = 0
    for day in spans:
        d = FX.home / "raw" / fam / f"dt={day}"
        if fam == "ctr":
            import pyarrow.parquet as pq
            total += sum(pq.ParquetFile(p).metadata.num_rows for p in parquet_parts(d))
        else:
            total += sum(len(read_jsonl(p)) for p in sorted(d.glob("part-*.jsonl.gz")))
    return total


def rows_accounting(fam: str, summary: dict) -> tuple[int, dict]:
    """rows lost = raw rows of the window - (train + eval + every row the job reports it
    set aside: rejected / dead-lettered / dropped duplicates)."""
    window = summary.get("window") or []
    raw = raw_rows(fam, window)
    aside_keys = [k for k in ("rows_rejected", "rows_held_out", "rows_empty_text",
                              "exact_duplicates", "near_duplicates") if k in summary]
    aside = sum(int(summary[k] or 0) for k in aside_keys)
    out = sum(int(summary.get(k, 0)) for k in ("rows_train", "rows_validation", "rows_eval"))
    rows_in = int(summary.get("rows_in", raw))
    lost = max(raw - rows_in, 0) + max(rows_in - out - aside, 0)
    return lost, {"raw_rows": raw, "rows_in": rows_in, "rows_out": out,
                  "set_aside": {k: summary[k] for k in aside_keys}}


def rerun(target: KillTarget, n: int) -> dict:
    """After the kills: the same step in the same folders must now complete."""
    tag = f"{target.fam}-{target.stage}-rerun-{os.getpid()}"
    proc, result_file = target.start(tag, n)
    t0 = time.time()
    code = proc.wait(timeout=1800)
    seconds = time.time() - t0
    problems, extra = [], {}
    rows_lost = 0
    bad = 0
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    if code != 0 or not result:
        log_tail = Path(str(result_file).replace(".result.json", ".log")).read_text()[-600:]
        problems.append(f"rerun failed (exit {code}): {first_line(log_tail[-300:])}")
    if target.out is not None and not complete(target.stage, target.out):
        problems.append(f"no complete artifact at {target.out} after the rerun")
    if target.stage == "preprocess" and result:
        summary_path = target.out / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else result
        rows_lost, extra = rows_accounting(target.fam, summary)
        if rows_lost:
            problems.append(f"{rows_lost} row(s) lost: {extra}")
    if target.stage == "push":
        from retrain.common.registry import Registry
        reg = Registry(FX.home / "registry")
        mine = [m for m in reg.list_versions(target.fam)
                if m.get("run_id") == target.ctx.run_id]
        cur = reg.current(target.fam)
        extra = {"versions_of_this_run": [m["version"] for m in mine],
                 "current": cur and cur["version"]}
        if len(mine) != 1:
            problems.append(f"{len(mine)} registry versions for the killed-and-retried run")
        if not cur or cur.get("run_id") != target.ctx.run_id:
            problems.append("CURRENT is not the retried run's version")
        for m in reg.list_versions(target.fam):
            if not (m.get("gate") or {}).get("blessed"):
                bad += 1
                problems.append(f"version {m['version']} is not blessed")
    reg_errors = registry_errors(target.fam)
    if reg_errors:
        problems.append(f"registry check: {reg_errors}")
    left = leftovers(tag, proc.pid, {}, set())
    return {"name": f"rerun.{target.fam}.{target.stage}", "family": target.fam,
            "stage": target.stage, "category": "kill", "type": "rerun",
            "expected": "completes after the kills; rows in = out + set aside",
            "observed": "; ".join(problems) if problems else
            f"completed in {seconds:.0f}s" + (f", rows {extra}" if target.stage == "preprocess"
                                              else (f", {extra}" if extra else "")),
            "rows_lost": rows_lost, "rows": extra, "bad_models_published": bad,
            "partial_artifact": False, "orphans": len(left), "seconds": round(seconds, 1),
            "verdict": "FAIL" if problems or left else "PASS", "problems": problems}


# ------------------------------------------------------------------ main

def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def print_table(rows: list[dict]) -> None:
    w = [44, 44, 70, 7]
    head = ("case", "expected", "observed", "verdict")
    print(" | ".join(h.ljust(n) for h, n in zip(head, w)))
    print("-+-".join("-" * n for n in w))
    for r in rows:
        cells = (r["name"], r["expected"], first_line(r["observed"], 400), r["verdict"])
        cut = [c if len(c) <= n else c[: n - 1] + "…" for c, n in zip(cells, w)]
        print(" | ".join(c.ljust(n) for c, n in zip(cut, w)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=textwrap.dedent(__doc__.split("\n\n", 1)[1]))
    ap.add_argument("--kills", type=int, default=32,
                    help="random SIGKILLs, spread over validate/preprocess/train/push of "
                         "both families (default 32)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill delays (default 0)")
    ap.add_argument("--results", default=str(REPO / "bench" / "results" / "reliability.json"),
                    help="results JSON (default bench/results/reliability.json)")
    ap.add_argument("--only", default=None,
                    help="run only the cases whose name matches this glob (fnmatch) or "
                         "substring, e.g. 'ctr.raw.*', 'registry', 'kill.text.*'; several "
                         "comma-separated")
    ap.add_argument("--workdir", default=None,
                    help="scratch folder (default: a new temp dir, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--list", action="store_true", help="list the case names and exit")
    args = ap.parse_args(argv)

    all_cases = cases()

    def wanted(name: str) -> bool:
        if not args.only:
            return True
        return any(fnmatch.fnmatch(name, pat) or pat in name
                   for pat in args.only.split(","))

    if args.list:
        for c in all_cases:
            print(f"{c.name:55s} {c.expected}")
        for fam in ("ctr", "text"):
            for stage in STAGES:
                print(f"kill.{fam}.{stage}.<n>")
        return 0

    work = Path(args.workdir or tempfile.mkdtemp(prefix="retrain-reliability-"))
    work.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, filename=str(work / "campaign.log"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    global LOG_FILE
    LOG_FILE = str(work / "campaign.log")
    quiet_launch_log()
    print(f"scratch folder: {work} (step logs in campaign.log)", flush=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t_start = time.time()

    selected = [c for c in all_cases if wanted(c.name)]
    # kills: round-robin over the 8 (family, step) pairs, each pair's kills in a row
    pairs = [(fam, stage) for fam in ("ctr", "text") for stage in STAGES]
    per_pair = {p: 0 for p in pairs}
    for i in range(args.kills):
        per_pair[pairs[i % len(pairs)]] += 1
    per_pair = {p: n for p, n in per_pair.items()
                if n and wanted(f"kill.{p[0]}.{p[1]}.0")}
    families = sorted({c.family for c in selected} | {p[0] for p in per_pair})

    global FX
    FX = Fixture(work)
    print(f"building the fixture for {families} (real runs of every stage)...", flush=True)
    FX.build(families)
    print("measured step durations (s): " + ", ".join(
        f"{k} {v:.0f}" for k, v in FX.durations.items()), flush=True)

    rows: list[dict] = []
    for i, case in enumerate(selected, 1):
        row = run_case(case, work)
        rows.append(row)
        print(f"[{i}/{len(selected)}] {row['verdict']} {case.name} ({row['seconds']}s): "
              f"{first_line(row['observed'], 160)}", flush=True)

    rng = random.Random(args.seed)
    killdir = work / "kills"
    killdir.mkdir(exist_ok=True)
    for (fam, stage), n in per_pair.items():
        target = KillTarget(fam, stage, killdir)
        done = attempt = 0
        # A task that finishes before its kill time is recorded (and checked) but is not a
        # kill: try again, with the step's duration re-estimated from that finished run
        # (the fixture's first runs pay cold caches), up to n + 4 attempts.
        while done < n and attempt < n + 4:
            row = kill_once(target, attempt, rng)
            rows.append(row)
            attempt += 1
            if row["finished_before_kill"]:
                target.duration = min(target.duration, row["kill_delay_s"])
            else:
                done += 1
            print(f"[kill] {row['verdict']} {row['name']}: {row['observed']}", flush=True)
        row = rerun(target, attempt)
        rows.append(row)
        print(f"[rerun] {row['verdict']} {row['name']}: {first_line(row['observed'], 200)}",
              flush=True)

    kills = [r for r in rows if r["type"] == "kill"]
    bad = [r for r in rows if r["type"] == "bad_input"]
    counts = {
        "cases_tried": len(rows),
        "bad_input_cases": len(bad),
        "bad_input_by_category": {cat: sum(r["category"] == cat for r in bad)
                                  for cat in ("raw_data", "params", "config", "registry",
                                              "handoff", "race", "secrets", "hostile",
                                              "full_disk", "scheduler_kill")},
        "sigkills": sum(not r["finished_before_kill"] for r in kills),
        "kill_attempts": len(kills),
        "kills_by_step": {f"{f}.{s}": sum(r["family"] == f and r["stage"] == s
                                          and not r["finished_before_kill"] for r in kills)
                          for f in ("ctr", "text") for s in STAGES},
        "failed_cleanly": sum(r["verdict"] == "PASS" and r.get("refused") for r in bad),
        "passed": sum(r["verdict"] == "PASS" for r in rows),
        "failed": sum(r["verdict"] == "FAIL" for r in rows),
        "rows_lost": sum(r.get("rows_lost", 0) for r in rows),
        "partial_artifacts_visible": sum(bool(r.get("partial_artifact")) for r in rows),
        "bad_models_published": sum(r.get("bad_models_published", 0) for r in rows)
        + unblessed_versions(FX.home, "ctr") + unblessed_versions(FX.home, "text"),
        "published_over_broken_registry": sum(r.get("published_over_broken_registry", 0)
                                              for r in rows),
        "orphan_processes": sum(r.get("orphans", 0) for r in rows),
        "leaks": sum(r.get("leaks", 0) for r in rows),
        "rollbacks_undone": sum(r.get("rollbacks_undone", 0) for r in rows),
        "hostile_records_retried": sum(r.get("hostile_retried", 0) for r in rows),
        "bomb_peak_rss_mb": {r["name"]: r["figures"]["peak_rss_mb"] for r in rows
                             if "peak_rss_mb" in (r.get("figures") or {})},
    }
    seconds = time.time() - t_start
    print()
    print_table(rows)
    print()
    for k, v in counts.items():
        print(f"{k:28s} {v}")
    print(f"{'runtime':28s} {seconds / 60:.1f} min")
    results = {
        "command": " ".join([os.path.relpath(PY, REPO) if PY.startswith(str(REPO)) else PY,
                             "bench/reliability.py", *(argv or sys.argv[1:])]),
        "git_commit": git_commit(), "date": dt.datetime.now(dt.timezone.utc).isoformat(
            timespec="seconds"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "python": platform.python_version()},
        "seed": args.seed, "kills_asked": args.kills, "only": args.only,
        "runtime_s": round(seconds, 1), "step_durations_s": {k: round(v, 1) for k, v in
                                                             FX.durations.items()},
        "counts": counts, "cases": rows}
    if not args.only or args.results != ap.get_default("results"):
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"results: {args.results}")
    else:
        print("(--only: the default results file is left alone; pass --results to write one)")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
