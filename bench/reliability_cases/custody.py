"""Hand-offs, races, secrets, a full disk and a killed scheduler: the chain-of-custody
categories.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Callable

from . import harness as H
from .harness import (CTR_DAYS, CTR_PARAMS, CTR_SPAN, PY, REPO, SECRET, TEXT_DAYS, CaseEnv,
                      Outcome, _all_pids, _environ_has, call_outcome)
from .inputs import run_inputs_case
from .registry import current_version, registry_case


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
        model = H.FX.results["ctr.train"]["model_dir"]
        undone = both_won = 0
        lines = []
        for i in range(rounds):
            root = env.home / f"registry-{i}"
            shutil.copytree(H.FX.home / "registry", root)
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
        af._wait_for_the_dag_with_its_schedule()   # schedule "none": triggered runs
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
