"""`retrain registry {list,show,rollback,check}`: the operator's view of the model registry.

Kept apart from `retrain.common.registry` (the store both environments import), so the
store carries no argument parsing or table formatting.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from retrain.common import paths
from retrain.common.registry import Registry, default_who


def add_cli(subparsers) -> None:
    """Register `retrain registry {list,show,rollback,check}`."""
    root_help = ("registry root (default: $RETRAIN_HOME/registry, or ./var/registry when "
                 "RETRAIN_HOME is unset)")
    parser = subparsers.add_parser(
        "registry", help="list, inspect, roll back and check published models",
        description="The on-disk model registry (a TF Serving model base path): one "
                    "numbered directory per version, CURRENT naming the published one.")
    parser.add_argument("--root", default=None, help=root_help)
    sub = parser.add_subparsers(dest="registry_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        # Accepted after the action too; SUPPRESS keeps it from overriding an earlier --root.
        p.add_argument("--root", default=argparse.SUPPRESS, help=root_help)
        p.set_defaults(func=func)
        return p

    p = action("list", "table of versions (all models, or one): stage, created, span, "
                       "run id, metrics, gate outcome", _cmd_list)
    p.add_argument("model", nargs="?", metavar="MODEL", help="model name (default: all)")

    p = action("show", "print a version's metadata as JSON (default: the published one)",
               _cmd_show)
    p.add_argument("model", metavar="MODEL", help="model name")
    p.add_argument("version", nargs="?", type=int, metavar="VERSION",
                   help="version number (default: current)")

    p = action("rollback", "re-publish an earlier version and archive the current one; "
                           "who and why are recorded", _cmd_rollback)
    p.add_argument("model", metavar="MODEL", help="model name")
    p.add_argument("--to", type=int, dest="to_version", metavar="VERSION",
                   help="version to publish (default: the newest archived version older "
                        "than the current one)")
    p.add_argument("--why", required=True, metavar="TEXT",
                   help="reason for the rollback (required; kept in the history)")
    p.add_argument("--who", default=None, metavar="NAME",
                   help="who is rolling back (default: $USER or 'unknown')")

    p = action("check", "report consistency problems; exit 1 if any", _cmd_check)
    p.add_argument("model", nargs="?", metavar="MODEL", help="model name (default: all)")


def _registry(args) -> Registry:
    root = getattr(args, "root", None)
    return Registry(root or paths.registry_root(paths.artifact_root()))


def _fmt_metric(metrics: Any, key: str) -> str:
    value = metrics.get(key) if isinstance(metrics, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.4f}"
    return "-"


def _fmt_span(span: Any) -> str:
    if span is None or span == "":
        return "-"
    if isinstance(span, dict):
        start = span.get("start") or span.get("first")
        end = span.get("end") or span.get("last")
        if start or end:
            return f"{start}..{end}" if start != end else str(start)
        return json.dumps(span, sort_keys=True)
    if isinstance(span, (list, tuple)):
        if not span:
            return "-"
        return str(span[0]) if len(span) == 1 else f"{span[0]}..{span[-1]}"
    return str(span)


def _fmt_gate(gate: Any) -> str:
    if not isinstance(gate, dict):
        return "-"
    if gate.get("forced"):
        return "forced"
    return "blessed" if gate.get("blessed") else "not blessed"


def _fmt_created(created: Any) -> str:
    if not created:
        return "-"
    try:
        return dt.datetime.fromisoformat(str(created)).strftime("%Y-%m-%d %H:%M:%SZ")
    except ValueError:
        return str(created)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _model_names(reg: Registry, args) -> list[str]:
    """The model named on the command line, else all of them (saying so if none)."""
    names = [args.model] if args.model else reg.models()
    if not names:
        print(f"registry {reg.root}: no models")
    return names


def _cmd_list(args) -> int:
    reg = _registry(args)
    names = _model_names(reg, args)
    if not names:
        return 0
    for i, name in enumerate(names):
        versions = reg.list_versions(name)
        current = reg.current_version(name)
        if i:
            print()
        print(f"model {name}  (current: {current if current is not None else 'none'}, "
              f"{len(versions)} version(s), {reg.root / name})")
        # The family's headline metrics, as its push recorded them (older entries: AUC and
        # log loss, what every family published then).
        headline = next((m["headline"] for m in reversed(versions)
                         if isinstance(m.get("headline"), list)), ["auc", "log_loss"])
        rows = [["VERSION", "STAGE", "CREATED", "SPAN", "RUN_ID",
                 *(str(h).upper() for h in headline), "GATE"]]
        for m in versions:
            marker = "*" if m.get("version") == current else ""
            rows.append([f"{m.get('version')}{marker}", str(m.get("stage")),
                         _fmt_created(m.get("created_at")), _fmt_span(m.get("data_span")),
                         str(m.get("run_id") or "-"),
                         *(_fmt_metric(m.get("metrics"), h) for h in headline),
                         _fmt_gate(m.get("gate"))])
        print(_table(rows))
    return 0


def _cmd_show(args) -> int:
    reg = _registry(args)
    if args.version is None:
        meta = reg.current(args.model)
        if meta is None:
            reg.list_versions(args.model)  # unknown model -> NotFound
            raise ValueError(f"model {args.model!r} has no published version; pass VERSION")
    else:
        meta = reg.get(args.model, args.version)
    print(json.dumps(meta, indent=2, sort_keys=True))
    return 0


def _cmd_rollback(args) -> int:
    reg = _registry(args)
    previous = reg.current_version(args.model) if args.model in reg.models() else None
    meta = reg.rollback(args.model, args.to_version, who=args.who or default_who(),
                        why=args.why)
    print(f"model {args.model}: version {meta['version']} is now published "
          f"(was {previous}); recorded: {meta['history'][-1]['who']}: "
          f"{meta['history'][-1]['why']}")
    return 0


def _cmd_check(args) -> int:
    reg = _registry(args)
    names = _model_names(reg, args)
    if not names:
        return 0
    bad = False
    for name in names:
        report = reg.check_report(name)
        errors, warnings = report["errors"], report["warnings"]
        bad = bad or bool(errors)
        status = "ok" if not errors else f"{len(errors)} problem(s)"
        print(f"model {name}: {status}")
        for line in errors:
            print(f"  error: {line}")
        for line in warnings:
            print(f"  warning: {line}")
    return 1 if bad else 0

