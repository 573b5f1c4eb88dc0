"""Hostile use, round 2, on the data side: special files in a day folder, a day of too many
parts, a config file too big to read, empty and one-class data, and the window policy.

Each case attacks the real product through the same entry points as the earlier
categories (the validate / preprocess / train steps, the run-input check, the window
screen and policy the DAG factory's preprocess task applies) and states what a correct
product must do: refuse typed (bad data, not retried), name the file, day, rule or setting,
never hang, and never drop a day without saying so.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from retrain.common.errors import BAD_DATA
from retrain.orchestration.launch import BadDataFailed, StepFailed, run_step

from . import harness as H
from .harness import (CTR_DAYS, PARAMS, SPAN, TEXT_DAYS, CaseEnv, Outcome, build_spec,
                      parquet_parts, read_jsonl, run_step_outcome, write_jsonl)
from .inputs import _ctr_cfg, _set, _text_cfg, cfg_file, run_inputs_case

# A step that has not refused a FIFO part by then is hanging on it (a validate step
# starts, imports and refuses in about 5-10 s here).
HANG_S = 60.0
PART = {"ctr": "part-00000.parquet", "text": "part-00000.jsonl.gz"}
FIFO_NAME = {"ctr": "part-00001.parquet", "text": "part-00001.jsonl.gz"}
DAYS = {"ctr": CTR_DAYS, "text": TEXT_DAYS}


def with_env(setup: Callable[[CaseEnv], Outcome], **env: str
             ) -> Callable[[CaseEnv], Outcome]:
    """Run a case with deployment settings set (the step's child inherits them)."""
    def run(e: CaseEnv) -> Outcome:
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return setup(e)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return run


def config_for(fam: str, fn: Callable[[dict], None], name: str) -> Callable[[CaseEnv], str]:
    return cfg_file((_ctr_cfg if fam == "ctr" else _text_cfg)(fn), name)


# ------------------------------------------------------------------ special files

def _release_fifo(fifo: Path, stop: threading.Event, fired: list) -> None:
    """After HANG_S, open the FIFO for writing until the step ends: a reader blocked in
    open() is released (and reads EOF), so a hanging product costs the campaign one
    minute, recorded as a hang, instead of the rest of the run."""
    if stop.wait(HANG_S):
        return
    while not stop.is_set():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:            # ENXIO: no reader blocked on it (yet)
            stop.wait(0.5)
            continue
        fired.append(time.time())
        os.close(fd)
        stop.wait(0.5)


def fifo_case(stage: str) -> Callable[[CaseEnv], Outcome]:
    """A FIFO named like a part in the span's folder: refused from its stat within
    seconds, naming the file (never opened: opening a FIFO waits for a writer)."""
    def setup(env: CaseEnv) -> Outcome:
        span = env.copy_raw()
        fifo = span / FIFO_NAME[env.fam]
        os.mkfifo(fifo)
        stop, fired = threading.Event(), []
        watch = threading.Thread(target=_release_fifo, args=(fifo, stop, fired), daemon=True)
        watch.start()
        t = time.time()
        try:
            outcome = env.run_stage(stage)
        finally:
            stop.set()
            watch.join(5)
        seconds = time.time() - t
        hang = int(bool(fired) or seconds > HANG_S)
        outcome.figures = {"seconds": round(seconds, 1), "hang": hang}
        if hang:
            return Outcome(True, "hang", f"blocked on the FIFO for {seconds:.0f} s (released "
                           f"by the campaign): {outcome.message}", outcome.out_dir, stage,
                           outcome.figures)
        return outcome
    return setup


def day_symlink_case(env: CaseEnv) -> Outcome:
    """The span's day folder is a symlink to a folder outside the data root (holding the
    good day's own files): refused, naming the day."""
    span = env.copy_raw()
    outside = env.home / "outside" / span.name
    outside.parent.mkdir(parents=True)
    shutil.move(str(span), outside)
    span.symlink_to(outside, target_is_directory=True)
    return env.run_stage()


def part_symlink_case(env: CaseEnv) -> Outcome:
    """The span's part is a symlink to the same good part moved outside the data root:
    the bytes are fine, the link is what is refused, naming the part."""
    span = env.copy_raw()
    part = span / PART[env.fam]
    outside = env.home / "outside" / part.name
    outside.parent.mkdir(parents=True)
    shutil.move(str(part), outside)
    part.symlink_to(outside)
    return env.run_stage()


# ------------------------------------------------------------------ many parts

def split_day(fam: str, span: Path, n: int) -> None:
    """The span's rows, unchanged, re-cut into `n` parts (only the count of files changes)."""
    if fam == "ctr":
        import pyarrow.parquet as pq
        table = pq.read_table(parquet_parts(span)[0])
        for p in parquet_parts(span):
            p.unlink()
        step = -(-table.num_rows // n)
        for i in range(n):
            pq.write_table(table.slice(i * step, step), span / f"part-{i:05d}.parquet")
    else:
        rows = [r for p in sorted(span.glob("part-*.jsonl.gz")) for r in read_jsonl(p)]
        for p in span.glob("part-*"):
            p.unlink()
        step = -(-len(rows) // n)
        for i in range(n):
            write_jsonl(span, rows[i * step:(i + 1) * step], name=f"part-{i:05d}.jsonl.gz",
                        marker=False)


def many_parts_case(n: int, limit: int = 20) -> Callable[[CaseEnv], Outcome]:
    """The good day re-cut into `n` parts, validated under a config whose
    `max_parts_per_day` is `limit`."""
    def setup(env: CaseEnv) -> Outcome:
        span = env.copy_raw()
        split_day(env.fam, span, n)
        key = ("validation.thresholds.max_parts_per_day" if env.fam == "ctr"
               else "validation.max_parts_per_day")
        cfg = config_for(env.fam, _set(key, limit), "parts-limit.yaml")(env)
        return env.run_stage(ctx=env.ctx(config=cfg))
    return setup


# ------------------------------------------------------------------ a config too big

BIG_LIMIT = str(64 * 1024)     # RETRAIN_MAX_CONFIG_BYTES at its lowest allowed value


def big_config(fam: str) -> Callable[[], str]:
    """The family's good config padded past 64 KiB with comments, ending in broken YAML:
    a refusal that names YAML parsed it; one before parsing names the size setting."""
    base = (_ctr_cfg if fam == "ctr" else _text_cfg)(lambda d: None)

    def make() -> str:
        pad = "".join(f"# padding line {i:05d} " + "x" * 90 + "\n" for i in range(800))
        return base() + pad + "broken: [unclosed, {\n"
    return make


def big_config_case(stage: str) -> Callable[[CaseEnv], Outcome]:
    def setup(env: CaseEnv) -> Outcome:
        make = cfg_file(big_config(env.fam), "big-config.yaml")
        if stage == "run_inputs":
            return run_inputs_case(config=make)(env)
        env.copy_raw()
        return env.run_stage(stage, ctx=env.ctx(config=make(env)))
    return with_env(setup, RETRAIN_MAX_CONFIG_BYTES=BIG_LIMIT)


# ------------------------------------------------------------------ empty, one class

def _empty_day(fam: str, span: Path) -> None:
    """_SUCCESS and parts holding 0 rows (CTR: the schema kept; text: an empty gzip)."""
    if fam == "ctr":
        import pyarrow.parquet as pq
        for p in parquet_parts(span):
            pq.write_table(pq.read_table(p).slice(0, 0), p)
    else:
        for p in span.glob("part-*"):
            p.unlink()
        (span / PART["text"]).write_bytes(gzip.compress(b""))


def quarantined(setup: Callable[[CaseEnv], Outcome], day: str
                ) -> Callable[[CaseEnv], Outcome]:
    """A refusal counts only if the day is quarantined too (later windows skip it)."""
    def run(env: CaseEnv) -> Outcome:
        from retrain.common import quarantine
        outcome = setup(env)
        if outcome.refused and not quarantine.is_quarantined(env.ctx().quarantine_dir,
                                                             f"dt={day}"):
            return Outcome(True, "not_quarantined", outcome.message, outcome.out_dir,
                           outcome.stage)
        return outcome
    return run


def empty_day_case(env: CaseEnv) -> Outcome:
    _empty_day(env.fam, env.copy_raw())
    return env.run_stage()


def one_class_window_case(env: CaseEnv) -> Outcome:
    """Every day of the CTR window without a click, past the validation gate (an override
    can let such a day through): preprocess, then train, must refuse typed."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    env.copy_raw()
    for day in DAYS[env.fam]:
        for p in parquet_parts(env.raw_root / f"dt={day}"):
            t = pq.read_table(p)
            i = t.schema.get_field_index("click")
            pq.write_table(t.set_column(i, "click", pa.array([0] * t.num_rows,
                                                              t.schema.field(i).type)), p)
    ctx = env.ctx()
    module, spec = build_spec(env.fam, "preprocess", ctx, H.FX.upstream(env.fam))
    try:
        pre = run_step(module, spec)
    except BadDataFailed as e:
        return Outcome(True, BAD_DATA, str(e), spec["output_dir"], "preprocess")
    except StepFailed as e:
        return Outcome(True, "transient", str(e), spec["output_dir"], "preprocess")
    module, spec = build_spec(env.fam, "train", ctx, {**H.FX.upstream(env.fam),
                                                      "preprocess": pre})
    return run_step_outcome(module, spec, "train")


# ------------------------------------------------------------------ the window policy

def _break_day(fam: str, day_dir: Path) -> None:
    """A day that fails validation on a value rule (not unreadable): CTR devices nobody
    knows, text labels outside the task's set."""
    if fam == "ctr":
        import pyarrow as pa
        import pyarrow.parquet as pq
        for p in parquet_parts(day_dir):
            t = pq.read_table(p)
            i = t.schema.get_field_index("device")
            pq.write_table(t.set_column(i, "device", pa.array(["toaster"] * t.num_rows)), p)
    else:
        for p in sorted(day_dir.glob("part-*.jsonl.gz")):
            rows = read_jsonl(p)
            with gzip.open(p, "wt", encoding="utf-8") as f:
                f.writelines(json.dumps({**r, "team": "sales"}) + "\n" for r in rows)


def window_case(max_left_out_percent: float) -> Callable[[CaseEnv], Outcome]:
    """The window's older day fails validation when this run validates it (no run has);
    the window screen and policy the DAG's preprocess task applies
    (retrain.common.window.screen / policy / enforce, the older day validated by the
    family's real validate step, which quarantines it) then either refuse the run
    (WindowTooShort, naming the day and max_left_out_percent) or let it train, and then
    the real preprocess step must train on the other days only, every dropped day listed
    with its reason (a day missing from the trained window and from the list is a
    silent drop)."""
    def setup(env: CaseEnv) -> Outcome:
        import datetime as dt

        from retrain.common import window
        from retrain.common.spans import window as days_of
        fam = env.fam
        env.copy_raw()
        span = SPAN[fam]
        params = {"max_left_out_percent": max_left_out_percent}
        days = [d.isoformat() for d in days_of(dt.date.fromisoformat(span),
                                               PARAMS[fam]["window_days"])]
        older = days[0]
        _break_day(fam, env.raw_root / f"dt={older}")
        ctx = env.ctx()
        validated = []

        def validate_days(pending: list[str]) -> dict[str, bool]:
            out = {}
            for day in pending:     # as the DAG's validate_day: the day's own step
                module, spec = build_spec(fam, "validate", ctx.for_day(day), {},
                                          {"override_validation_reason": None})
                try:
                    run_step(module, spec)
                    out[day] = True
                except (BadDataFailed, StepFailed):
                    out[day] = False
                validated.append(day)
            return out
        screened = window.screen(days, span, history_root=ctx.history_root,
                                 quarantine_dir=ctx.quarantine_dir, include=None,
                                 validate_days=validate_days, raw_root=ctx.raw_root)
        verdict = window.policy(screened, span, raw_root=ctx.raw_root,
                                max_left_out_percent=max_left_out_percent)
        listed = {i["span"]: i["reason"] for i in verdict["left_out"]}
        figures = {"validated_now": validated, "left_out": listed, "allowed":
                   verdict["allowed"], "silent_drops": 0}
        try:
            window.enforce(verdict, span)
        except window.WindowTooShort as e:
            return Outcome(True, "WindowTooShort", str(e), figures=figures)
        up = {**H.FX.upstream(fam), "window": screened}
        module, spec = build_spec(fam, "preprocess", ctx, up, params)
        outcome = run_step_outcome(module, spec, "preprocess")
        if outcome.refused:
            outcome.figures = figures
            return outcome
        out = Path(spec["output_dir"])
        summary = json.loads((out / "summary.json").read_text())
        trained = [str(d) for d in summary.get("window") or []]
        silent = [d for d in days if d not in trained and d not in listed]
        used_anyway = [d for d in listed if d in trained]
        figures["silent_drops"] = len(silent) + len(used_anyway)
        figures["trained_on"] = trained
        message = (f"window {days}: trained on {trained}; left out and listed: "
                   + "; ".join(f"{d} ({r})" for d, r in listed.items())
                   + f"; policy: {verdict['rule']}")
        if silent or used_anyway or not listed:
            return Outcome(True, "window_broken", message + f"; silently dropped {silent}, "
                           f"listed but trained on {used_anyway}", str(out), "preprocess",
                           figures)
        return Outcome(False, "accepted", message, str(out), "preprocess", figures)
    return setup


def special_cases(add) -> None:
    for fam in ("ctr", "text"):
        span = SPAN[fam]
        add(f"{fam}.special.fifo_part", fam, "validate", "special_files", fifo_case("validate"),
            [FIFO_NAME[fam], "FIFO"])
        add(f"{fam}.special.day_folder_symlink_out_of_root", fam, "validate", "special_files",
            day_symlink_case, [f"dt={span}", "outside the raw root"])
        add(f"{fam}.special.part_symlink_out_of_root", fam, "validate", "special_files",
            part_symlink_case, [PART[fam]])
        add(f"{fam}.many_parts.at_max_parts_per_day", fam, "validate", "many_parts",
            many_parts_case(20), [], expect="accepted")
        add(f"{fam}.many_parts.over_max_parts_per_day", fam, "validate", "many_parts",
            many_parts_case(21), ["max_parts_per_day", "21", f"dt={span}"])
        cp = "feature_config" if fam == "ctr" else "text_config"
        add(f"{fam}.big_config.run_inputs", fam, "run_inputs", "big_config",
            big_config_case("run_inputs"), [cp, "big-config.yaml", "RETRAIN_MAX_CONFIG_BYTES"],
            kinds=("refused",))
        add(f"{fam}.big_config.step", fam, "validate", "big_config", big_config_case("validate"),
            ["big-config.yaml", "RETRAIN_MAX_CONFIG_BYTES"])
        add(f"{fam}.empty.zero_rows_day_quarantined", fam, "validate", "empty_data",
            quarantined(empty_day_case, span),
            ["row_count"] if fam == "ctr" else ["expect_table_row_count_to_be_between"])
        older = DAYS[fam][-PARAMS[fam]["window_days"]]
        add(f"{fam}.window.past_policy_refused", fam, "preprocess", "window_policy",
            window_case(10), [older, "max_left_out_percent"], kinds=("WindowTooShort",))
        add(f"{fam}.window.within_policy_listed", fam, "preprocess", "window_policy",
            window_case(50), [older], expect="accepted")
    add("ctr.special.fifo_part_preprocess", "ctr", "preprocess", "special_files",
        fifo_case("preprocess"), [FIFO_NAME["ctr"], "FIFO"])
    add("ctr.one_class.window_without_clicks", "ctr", "train", "empty_data",
        one_class_window_case, ["one class"], kinds=(BAD_DATA,))
