"""YAML out for `retrain config suggest`: a suggested config as commented YAML lines.

Why its own module: the suggester decides what goes in the file, this decides only how it
reads (flow-style lists, quoted words YAML would misread such as `no` or `on`, a comment
beside the value it explains). Stdlib only.
"""
from __future__ import annotations

import json
import re

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}


def scalar(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = f"{v:.6f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    v = str(v)
    return v if _PLAIN.match(v) and v.lower() not in _YAML_WORDS else json.dumps(v)


def _comment(text: str) -> str:
    return "  # " + " ".join(str(text).split()) if text else ""


def render(doc, indent: int = 0) -> list[str]:
    """YAML lines of a dict whose leaves may be (value, comment) tuples; keys starting
    with "#" are comment lines. Lists of scalars go in flow style."""
    pad, lines = "  " * indent, []
    for key, value in doc.items():
        if str(key).startswith("#"):
            lines += [f"{pad}# {line}" for line in str(value).splitlines()]
            continue
        comment = ""
        if isinstance(value, tuple):
            value, comment = value
        head = f"{pad}{scalar(key)}:"
        if isinstance(value, dict) and value:
            lines += [head + _comment(comment), *render(value, indent + 1)]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(head + _comment(comment))
            for item in value:
                sub = render(item, indent + 2)
                lines += [f"{pad}  - {sub[0].lstrip()}", *sub[1:]]
        elif isinstance(value, (list, dict)):
            flow = "{}" if isinstance(value, dict) else \
                "[" + ", ".join(scalar(x) for x in value) + "]"
            lines.append(f"{head} {flow}{_comment(comment)}")
        else:
            lines.append(f"{head} {scalar(value)}{_comment(comment)}")
    return lines
