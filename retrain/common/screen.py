"""How the CLI's text for a person fits a terminal: the width to wrap at, lines wrapped with
a hanging indent, long paths shown under a common home.

Why one module: `retrain registry show`, `retrain lineage` and the demo's summary all print
lines a person reads in a terminal (or an Airflow log); a line that runs to 400 characters
is cut off or wraps at random. Machine output is each command's `--json`, never this.
Stdlib only.
"""
from __future__ import annotations

import os
import shutil

WIDTH = 100      # the fallback width, and the most the fixed-width screens use
MIN_WIDTH = 40


def width(fallback: int = WIDTH) -> int:
    """The terminal's width ($COLUMNS, else the terminal's, else `fallback`)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((fallback, 24)).columns)


def fit(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """`text` as lines of at most `width` characters (where the prefixes leave room): the
    first line starts with `first`, the others with `rest` (default: `first` as spaces plus
    two). A word longer than a line (a path) breaks after a '/' where it can."""
    rest = " " * (len(first) + 2) if rest is None else rest
    lines: list[str] = []
    line, prefix = first, first
    for word in text.split():
        while True:
            sep = "" if line == prefix else " "
            if len(line) + len(sep) + len(word) <= width:
                line += sep + word
                break
            if line != prefix:                      # start a new line, then try again
                lines.append(line)
                line = prefix = rest
                continue
            room = max(width - len(line), 8)        # the word alone is longer than a line
            cut = word.rfind("/", 0, room) + 1 or room
            lines.append(line + word[:cut])
            word = word[cut:]
            line = prefix = rest
            if not word:
                break
    if line != prefix or not lines:
        lines.append(line)
    return [ln.rstrip() for ln in lines]


def common_home(paths: list[str]) -> str | None:
    """The deepest folder that holds every one of these absolute paths (None: fewer than two
    distinct ones, or nothing shared but the file system's root)."""
    absolute = sorted({p for p in paths if p and os.path.isabs(p)})
    if len(absolute) < 2:
        return None
    home = os.path.commonpath(absolute)
    if home in absolute:                            # one of them: its folder holds them
        home = os.path.dirname(home)
    return home if home.count(os.sep) >= 2 else None


def under(path: str, home: str | None) -> str:
    """`path` relative to `home` when it lies under it, else unchanged."""
    if home and path.startswith(home.rstrip(os.sep) + os.sep):
        return path[len(home.rstrip(os.sep)) + 1:]
    return path
