"""The SIGKILL campaign: a task process killed at a seeded random point of its step, then
checked for orphans, partial or late-written output and registry damage; then one rerun.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

from . import harness as H
import random

from retrain.common import paths

from .harness import (OUT_KEY, PY, REPO, TAG_ENV, _all_pids, _environ_has, _proc_stat, build_spec,
                      complete, ctx_for, parquet_parts, partial_visible, push_kwargs,
                      read_jsonl)
from .runner import first_line


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
        self.ctx = ctx_for(fam, H.FX.home, f"kill_{stage}")
        self.work = work
        self.duration = H.FX.durations[f"{fam}.{stage}"]
        if stage == "push":
            self.kind = "push"
            ctx = self.ctx
            Path(ctx.run_dir).mkdir(parents=True, exist_ok=True)
            # Another run than the fixture's, evaluated against what is current now (the
            # fixture's push published v1): publishing is compare-and-swap on it.
            from retrain.common.registry import Registry
            up = json.loads(json.dumps(H.FX.upstream(fam), default=str))
            up["evaluate"]["baseline_version"] = Registry(H.FX.home / "registry").current_version(fam)
            kw = push_kwargs(fam, ctx, up, H.FX.home)
            kw["headline"] = list(kw["headline"])
            self.job = {"kind": "push", "kwargs": kw}
            self.out = None
        else:
            self.kind = "step"
            module, spec = build_spec(fam, stage, self.ctx, H.FX.upstream(fam))
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
                                     paths.ENV_HOME: str(H.FX.home)})
        logf.close()
        return proc, result


def registry_errors(fam: str) -> list[str]:
    from retrain.common.registry import Registry
    reg = Registry(H.FX.home / "registry")
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
        d = H.FX.home / "raw" / fam / f"dt={day}"
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
        reg = Registry(H.FX.home / "registry")
        mine = [m for m in reg.list_versions(target.fam)
                if m.get("run_id") == target.ctx.run_id]
        cur = reg.current(target.fam)
        unchanged = result.get("unchanged") if isinstance(result, dict) else None
        extra = {"versions_of_this_run": [m["version"] for m in mine],
                 "current": cur and cur["version"],
                 "unchanged": unchanged and unchanged.get("version")}
        if unchanged:   # the fixture's own model again: identical to CURRENT, not republished
            if mine:
                problems.append(f"'unchanged' but {len(mine)} registry versions for the run")
            if not cur or cur["version"] != unchanged.get("version"):
                problems.append("'unchanged' names a version that is not CURRENT")
        else:
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
