"""Registry cases: a copy of the fixture's registry broken, then read by the CLI, the push
task or the evaluate step; bad candidates handed to the push task.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Callable

from . import harness as H
from .harness import (CaseEnv, Outcome, build_spec, call_outcome, cli_outcome, push_task,
                      registry_state, run_step_outcome)


# registry cases: a registry with one published version of the family's fixture model

def registry_copy(env: CaseEnv) -> Path:
    src = H.FX.home / "registry" / env.fam
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
            return call_outcome(lambda: push_task(env.fam, ctx, H.FX.upstream(env.fam),
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
            up = {**H.FX.upstream(env.fam), "published": base}
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
        up = json.loads(json.dumps(H.FX.upstream(env.fam), default=str))
        change(env, up)
        env.reg_before = registry_state(env.home)
        return call_outcome(lambda: push_task(env.fam, ctx, up, env.home))
    return setup


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


def registry_cases(add) -> None:
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
