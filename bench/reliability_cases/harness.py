"""The campaign's harness: the fixture (tiny real inputs of both families and one good run
of every stage), the run context and specs as the DAG builds them, the typed outcome of a
product call (step, CLI, in-process function), a case's declaration (`Case`) and its private
scratch world (`CaseEnv`), and the small raw-data editors the case modules share.

Why one module: every category module builds on these, and `FX` / `LOG_FILE` (set by
`main`) must have one home, read as `H.FX` / `H.LOG_FILE` by the others.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import logging

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
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


def cli_outcome(args: list[str], home: Path, env: dict | None = None) -> Outcome:
    """`retrain <args>` as an operator runs it (`env`: settings over the campaign's)."""
    p = subprocess.run([PY, "-m", "retrain.cli", *args], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, paths.ENV_HOME: str(home), **(env or {})},
                       timeout=300)
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
    absent_in: str = "all"         # "logs": only the message and the campaign log

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


# ------------------------------------------------------------------ hand-offs and hostile input

SECRET = "RETRAIN-PLANTED-SECRET-7f3a9c"   # planted in files that params name


# Files whose job is to hold a secret: where it belongs, never a leak.
SECRET_HOMES = ("planted-secret.yaml", "admin_password",
                "simple_auth_manager_passwords.json.generated")


def leaked(needles: tuple[str, ...], message: str, home: Path, scope: str = "all"
           ) -> list[str]:
    """Where any needle shows: the message, the campaign log, and (scope "all") any file
    under the case home; scope "logs": the message and the campaign log only (record
    text belongs in the data and its dead letters, never in what is printed)."""
    if not needles:
        return []
    where = ["message"] if any(n in message for n in needles) else []
    files = [Path(LOG_FILE)] if LOG_FILE else []
    if scope == "all":
        files += [p for p in home.rglob("*") if p.is_file() and p.name not in SECRET_HOMES]
    for p in files:
        try:
            if p.stat().st_size < 64 << 20 and any(n.encode() in p.read_bytes() for n in needles):
                where.append(str(p.relative_to(home) if home in p.parents else p))
        except OSError:
            continue
    return where


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
