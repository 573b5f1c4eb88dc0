"""`retrain registry {list,show,rollback,check,doctor}`: the operator's view of the model
registry: versions (damaged ones listed as damaged, never hidden), rollback, the
consistency check that hashes every published file, and the doctor that repairs a damaged
CURRENT.

Kept apart from `retrain.common.registry` (the store both environments import), so the
store carries no argument parsing or table formatting.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from retrain.common import paths, screen
from retrain.common.registry import Registry, default_who
from retrain.orchestration import registry_view


def add_cli(subparsers) -> None:
    """Register `retrain registry {list,show,rollback,check,doctor}`."""
    root_help = ("registry root (default: $RETRAIN_HOME/registry, or ./var/registry when "
                 "RETRAIN_HOME is unset)")
    parser = subparsers.add_parser(
        "registry", help="list, inspect, roll back, check and repair published models",
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
                       "run id, metrics, gate outcome; a damaged version (unreadable "
                       "metadata, files missing or of another size than published) is listed "
                       "as DAMAGED; exit 1 if anything is damaged", _cmd_list)
    p.add_argument("model", nargs="?", metavar="MODEL", help="model name (default: all)")

    p = action("show", "one version (default: the published one) on a screen: when, span, "
                       "run, code, digest, headline metrics, the gate's verdict with its rule "
                       "count and any failed rule, approval, history and paths; --json prints "
                       "the whole metadata record", _cmd_show)
    p.add_argument("model", metavar="MODEL", help="model name")
    p.add_argument("version", nargs="?", type=int, metavar="VERSION",
                   help="version number (default: current)")
    p.add_argument("--json", action="store_true",
                   help="print the version's whole metadata record as JSON (lineage copy, "
                        "file digests, thresholds) instead of the screen")

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

    p = action("check", "report consistency problems, hashing every version's files "
                        "against the digests recorded when it was published; exit 1 if any",
               _cmd_check)
    p.add_argument("model", nargs="?", metavar="MODEL", help="model name (default: all)")

    p = action("doctor", "list damaged versions (unreadable metadata, missing, added or "
                         "changed files) and a damaged CURRENT; with --repair, point CURRENT "
                         "at the newest intact published version (the damaged file is kept "
                         "beside it) and mark damaged versions; nothing is deleted. Exit 1 "
                         "while anything is damaged and not repaired", _cmd_doctor)
    p.add_argument("model", nargs="?", metavar="MODEL", help="model name (default: all)")
    p.add_argument("--repair", action="store_true",
                   help="repair CURRENT and mark damaged versions (default: report only)")
    p.add_argument("--why", default=None, metavar="TEXT",
                   help="reason kept in CURRENT and the history (default: 'registry doctor "
                        "--repair')")
    p.add_argument("--who", default=None, metavar="NAME",
                   help="who is repairing (default: $USER or 'unknown')")


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
    damaged_any = False
    for i, name in enumerate(names):
        entries = reg.inventory(name, quick=True)
        try:
            current, pointer_problem = reg.current_version(name), None
        except ValueError as e:   # a damaged CURRENT: the versions are still listed
            current, pointer_problem = None, str(e)
        if i:
            print()
        shown = "DAMAGED" if pointer_problem else (current if current is not None else "none")
        print(f"model {name}  (current: {shown}, {len(entries)} version(s), {reg.root / name})")
        metas = [e["meta"] for e in entries if e["meta"] is not None]
        # The family's headline metrics, as its push recorded them (older entries: AUC and
        # log loss, what every family published then).
        headline = next((m["headline"] for m in reversed(metas)
                         if isinstance(m.get("headline"), list)), ["auc", "log_loss"])
        rows = [["VERSION", "STAGE", "CREATED", "SPAN", "RUN_ID",
                 *(str(h).upper() for h in headline), "GATE"]]
        notes = [f"CURRENT: {pointer_problem}"] if pointer_problem else []
        for e in entries:
            m = e["meta"] or {}
            marker = "*" if e["version"] == current else ""
            damaged = e["state"] == "damaged"
            stage = "DAMAGED" if damaged else str(m.get("stage"))
            rows.append([f"{e['version']}{marker}", stage,
                         _fmt_created(m.get("created_at")), _fmt_span(m.get("data_span")),
                         str(m.get("run_id") or "-"),
                         *(_fmt_metric(m.get("metrics"), h) for h in headline),
                         _fmt_gate(m.get("gate"))])
            if damaged:
                was = f" (was {m['stage']})" if m.get("stage") else ""
                notes += [f"version {e['version']}{was}: {p}" for p in e["problems"]]
        print(_table(rows))
        for line in notes:
            print(f"  damaged: {line}")
        if notes:
            print(f"  `retrain registry doctor {name}` checks every file; `--repair` "
                  f"restores a consistent CURRENT")
        # Damage doctor has marked is known and out of use; anything else needs a person.
        damaged_any = damaged_any or bool(pointer_problem) or any(
            e["state"] == "damaged" and not e["marked"] for e in entries)
    return 1 if damaged_any else 0


def _cmd_show(args) -> int:
    reg = _registry(args)
    if args.version is None:
        meta = reg.current(args.model)
        if meta is None:
            reg.list_versions(args.model)  # unknown model -> NotFound
            raise ValueError(f"model {args.model!r} has no published version; pass VERSION")
    else:
        meta = reg.get(args.model, args.version)
    if args.json:
        print(json.dumps(meta, indent=2, sort_keys=True))
        return 0
    try:
        current = reg.current_version(args.model)
    except ValueError:   # a damaged CURRENT: the version is still shown
        current = None
    print(registry_view.show_text(meta, str(reg.model_path(args.model, meta["version"])),
                                  current, min(screen.width(), screen.WIDTH)))
    return 0


def _cmd_rollback(args) -> int:
    reg = _registry(args)
    try:
        previous = reg.current_version(args.model) if args.model in reg.models() else None
    except ValueError:   # a damaged CURRENT: `--to VERSION` repairs it
        previous = "a damaged CURRENT"
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



def _cmd_doctor(args) -> int:
    reg = _registry(args)
    names = _model_names(reg, args)
    bad = False
    for name in names:
        report = reg.doctor(name, repair=args.repair, who=args.who or default_who(),
                            why=args.why)
        pointer = report["current"]
        damaged = [v for v in report["versions"] if v["state"] == "damaged"]
        state = {"ok": f"CURRENT names version {pointer['version']}",
                 "none": "nothing published"}.get(pointer["state"],
                                                   f"CURRENT {pointer['problem']}")
        print(f"model {name}: {state}; {len(report['versions'])} version(s), "
              f"{len(damaged)} damaged")
        for v in report["versions"]:
            if v["state"] == "damaged":
                mark = ", marked" if v["marked"] else ""
                print(f"  damaged: version {v['version']} ({v['stage'] or 'no stage'}{mark})")
                for problem in v["problems"]:
                    print(f"    {problem}")
            elif v["state"] == "unrecorded":
                print(f"  unverified: version {v['version']}: no digests recorded (published "
                      f"before they were kept)")
        for line in report["actions"]:
            print(f"  repaired: {line}")
        for line in report["unresolved"]:
            print(f"  unresolved: {line}")
        if not args.repair and pointer["state"] not in ("ok", "none"):
            target = report["target"]
            print("  `--repair` " + (f"points CURRENT at version {target}" if target else
                                     "finds no intact version to point CURRENT at"))
        unmarked = [v for v in damaged if not v["marked"]]
        bad = bad or pointer["state"] not in ("ok", "none") or bool(unmarked) \
            or bool(report["unresolved"])
    return 1 if bad else 0
