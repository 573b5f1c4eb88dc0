"""`retrain lineage MODEL [--version N]`: from a published model back to the raw partitions.

Answers "which data and which code made the model that is serving now?" from what the
runs recorded: the registry version's metadata (a copy of its run's lineage records is
kept there, so the chain survives clean-up of old run folders) and, failing that, the
run folder's `lineage/*.json`. Each step of the chain shows its artifact, fingerprint,
producer (dag, run, task, try), whether it was reused from an earlier run, and its key
figures. The CLI also hashes the version's files against the digests recorded when it was
published: a model whose files changed since is reported, and the command exits 1.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from retrain.orchestration import lineage

from retrain.common import paths, screen
from retrain.common.registry import Registry


def chain(registry: Registry, model: str, version: int | None = None,
          verify: bool = False) -> dict:
    """The lineage tree of one registry version as nested dicts (`inputs` are children).
    `verify`: add "files", the version's files against their digests at publish
    ({"state": intact | unrecorded | damaged, "problems", "digest", "files"})."""
    version = version if version is not None else registry.current_version(model)
    if version is None:
        raise ValueError(f"model {model!r} has no published version; pass --version N "
                         f"(see `retrain registry list {model}`)")
    meta = registry.get(model, version)
    records = meta.get("lineage") or (
        lineage.read_records(meta["run_dir"]) if meta.get("run_dir") else {})
    by_fp = {r["fingerprint"]: r for r in records.values() if r.get("fingerprint")}
    seen: set[str] = set()   # an artifact read by two steps is shown in full once
    root_inputs = [records[n] for n in ("train", "evaluate", "validate") if n in records]
    if not records:
        root_inputs = [{"name": "model", "type": "model", "uri": meta.get("source_model_uri"),
                        "note": "this version was published before lineage was recorded"}]
    return {
        "name": f"{model} v{version}", "type": "registered_model",
        "uri": str(registry.model_path(model, version)),
        "fingerprint": lineage.fingerprint([model, version, meta.get("fingerprint")]),
        "stage": meta.get("stage"), "current": registry.current_version(model) == version,
        "producer": {"dag_id": meta.get("dag_id"), "run_id": meta.get("run_id")},
        "code_version": meta.get("code_version"), "data_span": meta.get("data_span"),
        "figures": {k: meta.get("metrics", {}).get(k) for k in ("auc", "log_loss")
                    if isinstance(meta.get("metrics"), dict)},
        "inputs": [_expand(node, by_fp, seen) for node in root_inputs],
        **({"files": registry.integrity(model, version)} if verify else {}),
    }


def _expand(node: dict, by_fp: dict[str, dict], seen: set[str]) -> dict:
    full = dict(by_fp.get(node.get("fingerprint"), node))
    fp = full.get("fingerprint")
    if fp in seen:  # a diamond (e.g. evaluation reads the model) is shown once in full
        return {**{k: full.get(k) for k in ("name", "type", "uri", "fingerprint")},
                "see_above": True, "inputs": []}
    if fp:
        seen.add(fp)
    full["inputs"] = [_expand(i, by_fp, seen) for i in full.get("inputs", [])]
    return full


def render(tree: dict, width: int = screen.WIDTH) -> str:
    """The chain as an indented tree, every line at most `width` characters (longer text
    wraps under its own branch). Paths are shown under the folder that holds them all
    (printed once, as `home`); `--json` has every path in full."""
    home = screen.common_home([_path(n.get("uri")) for child in tree.get("inputs") or []
                               for n in _walk(child)])
    lines: list[str] = []

    def field(label: str, text: str) -> None:
        lines.extend(screen.fit(text, width, f"  {label:<10}", " " * 12))

    head = f"{tree['name']}  [{tree.get('stage')}{', serving' if tree.get('current') else ''}]"
    lines.append(head)
    field("registry", str(tree["uri"]))
    if home:
        field("home", f"{home}  (the paths below are under it)")
    field("made by", _who(tree.get("producer") or {}))
    field("code", str(tree.get("code_version")))
    field("span", str(tree.get("data_span")))
    if tree.get("figures"):
        field("metrics", _figures(tree["figures"], home))
    files = tree.get("files")
    if files:
        field("files", {
            "intact": f"verified: {files['files']} file(s) as published, digest "
                      f"{files['digest']}",
            "unrecorded": "not verifiable: no digests were recorded when it was published",
        }.get(files["state"], "DAMAGED: they differ from what was published"))
        for problem in files.get("problems", []):
            lines.extend(screen.fit(problem, width, " " * 12, " " * 14))
    children = tree.get("inputs", [])
    for i, child in enumerate(children):
        _render_node(child, "", i == len(children) - 1, lines, width, home)
    return "\n".join(lines)


def _walk(node: dict):
    yield node
    for child in node.get("inputs") or []:
        yield from _walk(child)


def _path(uri: Any) -> str:
    return str(uri).removeprefix("file://") if uri else ""


def _render_node(node: dict, prefix: str, last: bool, lines: list[str], width: int,
                 home: str | None) -> None:
    branch, cont = ("└─ ", "   ") if last else ("├─ ", "│  ")
    inner = prefix + cont
    children = node.get("inputs", [])
    # Under a node with children the tree's bar runs on beside its text.
    body = inner + ("│ " if children and not node.get("see_above") else "  ")

    def add(text: str) -> None:
        lines.extend(screen.fit(text, width, body, body + "  "))

    fp = node.get("fingerprint")
    lines.extend(screen.fit(f"{node.get('type')} {node.get('name')}"
                            + (f"  fp={fp}" if fp else ""), width, prefix + branch,
                            inner + "    "))
    add(screen.under(_path(node.get("uri")), home) or "-")
    if node.get("see_above"):
        add("(shown above)")
        return
    if node.get("producer"):
        add(f"made by {_who(node['producer'])}")
        if node.get("reused"):
            add(f"reused by {_who(node.get('recorded_by') or {})}")
    if node.get("code_version"):
        add(f"code {node['code_version']}")
    if node.get("figures"):
        add(_figures(node["figures"], home))
    if node.get("note"):
        add(node["note"])
    for i, child in enumerate(children):
        _render_node(child, inner, i == len(children) - 1, lines, width, home)


def _who(prod: dict) -> str:
    if not prod.get("run_id"):
        return f"local run ({prod.get('user') or 'unknown user'})"
    text = f"{prod.get('dag_id')} / {prod.get('run_id')}"
    if prod.get("task_id"):
        text += f" / {prod['task_id']} try {prod.get('try')}"
    return text


def _number(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 1 else f"{value:,.1f}"


def _figures(figures: dict, home: str | None = None) -> str:
    """Key figures on one line: numbers rounded, a file's content digests folded to its
    digest, nested tables (latencies) to their keys, empty lists left out."""
    parts = []
    for key, value in figures.items():
        if key == "content" and isinstance(value, dict):
            value = value.get("digest")
            key = "content digest"
        if value is None or value == [] or value == {}:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, float):
            value = _number(value)
        elif isinstance(value, dict):
            value = "{" + ", ".join(
                f"{k} {_number(v)}" if isinstance(v, float) and not isinstance(v, bool)
                else f"{k} {{...}}" if isinstance(v, dict) else f"{k} {v}"
                for k, v in value.items()) + "}"
        elif isinstance(value, list):
            value = (", ".join(map(str, value)) if len(value) <= 3
                     else f"{value[0]}..{value[-1]} ({len(value)})")
        elif isinstance(value, str) and value.startswith(("/", "file://")):
            value = screen.under(_path(value), home)
        parts.append(f"{key} {value}")
    return ", ".join(parts)


def add_cli(subparsers) -> None:
    parser = subparsers.add_parser(
        "lineage", help="trace a published model back to its raw data, runs and code",
        description="Print the chain from a registry version (default: the one serving) "
                    "back to the raw log partitions: every artifact with its fingerprint, "
                    "the Airflow run/task/try that made it, reuse of earlier artifacts, "
                    "key figures and the code version, wrapped to the terminal's width "
                    "(paths under the folder that holds them all; --json has the whole "
                    "record). The version's files are hashed against the digests recorded "
                    "when it was published; exit 1 if they differ.")
    parser.add_argument("model", metavar="MODEL", help="model name, e.g. ctr")
    parser.add_argument("--version", type=int, default=None, metavar="N",
                        help="registry version (default: the published one)")
    parser.add_argument("--json", action="store_true", help="print the whole chain as JSON (every path and figure in full) instead "
                             "of the tree")
    parser.add_argument("--root", default=None,
                        help="registry root (default: $RETRAIN_HOME/registry or ./var/registry)")
    parser.set_defaults(func=_cmd)


def _cmd(args) -> int:
    registry = Registry(args.root or paths.registry_root(paths.artifact_root()))
    if not Path(registry.root, args.model).is_dir():
        raise ValueError(f"no model {args.model!r} in registry {registry.root}")
    tree = chain(registry, args.model, args.version, verify=True)
    sys.stdout.write((json.dumps(tree, indent=2, default=str) if args.json
                      else render(tree, screen.width())) + "\n")
    if tree["files"]["state"] == "damaged":
        print(f"retrain lineage: model {args.model!r} version {tree['name'].rsplit('v', 1)[-1]}"
              f": its files differ from the digests recorded when it was published",
              file=sys.stderr)
        return 1
    return 0
