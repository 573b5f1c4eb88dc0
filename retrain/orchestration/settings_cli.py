"""`retrain settings check`: every deployment setting checked before anything starts, each
problem on its own line naming its variable and rule.

Why: a bad value used to fail only where it was read, and not always by name: a bad
RETRAIN_SCHEDULE became DAG import errors, RETRAIN_PUBLISH_DEADLINE_HOURS=1e308 a bare
OverflowError in the DAG processor, a relative RETRAIN_HOME was taken relative to whichever
folder each process started in. scripts/airflow-ui.sh (`make ui`) and `retrain stack up`
run this first and do not start Airflow while it fails.

Also checked: RETRAIN_STEP_PYTHON is an executable file, the families' deployment defaults
(RETRAIN_RAW_ROOT, RETRAIN_FEATURE_CONFIG, ...) are absolute paths, and a RETRAIN_* variable
that nothing reads (a misspelt name) is reported as a warning. Values are
shown by their start only; the variables the scripts keep secret are never shown.

    retrain settings check        # exit 0: all hold; 1: each problem printed on stderr
    python -m retrain.orchestration.settings_cli check   # the same, from Airflow's environment

Stdlib and pydantic only (runs in both environments).
"""
from __future__ import annotations

import argparse
import os
import sys

from retrain.common import settings as S

# RETRAIN_* variables that are not settings fields: the shell scripts' own and the
# launcher's hand-off to its child (tests/unit/test_settings.py keeps the same list).
SCRIPT_VARIABLES = ("RETRAIN_AIRFLOW_HOME", "RETRAIN_ADMIN_PASSWORD", "RETRAIN_OPENLINEAGE_URL",
                    "RETRAIN_STEP_PARENT_PID")


def _family_defaults() -> list[str]:
    from retrain.orchestration.families import FAMILIES
    return sorted({v for f in FAMILIES.values() for v in (f.raw_root_env, f.config_env)})


def check() -> tuple[list[str], list[str]]:
    """(problems, warnings) of this process's settings (its environment)."""
    environ = os.environ
    problems = S.problems()
    if not problems:
        python = S.settings().step_python
        if python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
            problems.append(f"{S.env_name('step_python')}={S.shown(python)}: not an "
                            "executable file (the ML environment's python)")
    family = _family_defaults()
    for name in family:
        value = environ.get(name, "").strip()
        if value and not value.startswith(("gs://", "s3://", "hdfs://", "abfs://", "az://")) \
                and not os.path.isabs(value):
            problems.append(f"{name}={S.shown(value)}: must be an absolute path")
    known = {S.env_name(f) for f in S.Settings.model_fields} | set(family) \
        | set(SCRIPT_VARIABLES)
    warnings = [f"{name}: not a setting of this version, ignored (a misspelling? "
                "docs/configuration.md lists them)"
                for name in sorted(environ) if name.startswith(S.PREFIX) and name not in known]
    return problems, warnings


def _check(args) -> int:
    problems, warnings = check()
    for line in warnings:
        print(f"retrain settings: warning: {line}", file=sys.stderr)
    for line in problems:
        print(f"retrain settings: {line}", file=sys.stderr)
    if problems:
        print(f"retrain settings: {len(problems)} bad setting(s) (docs/configuration.md)",
              file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"retrain settings: ok ({len(S.Settings.model_fields)} settings checked)")
    return 0


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("settings", help="check the deployment settings (RETRAIN_*)",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="settings_command", metavar="ACTION", required=True)
    c = sub.add_parser("check", help="check every RETRAIN_* setting; print each problem "
                                     "naming its variable; exit 1 if any")
    c.add_argument("--quiet", action="store_true", help="print nothing when all hold")
    p.set_defaults(func=_check)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m retrain.orchestration.settings_cli")
    add_cli(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(["settings", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
