"""The README stays a short tour and the manual (mkdocs.yml, docs/) stays whole and true.

- README.md is at most 200 lines; the rest lives in the manual;
- every page of the manual's nav exists, every docs/*.md page is in the nav, and every
  README link into docs/ names a file that exists;
- docs/cli.md is exactly what scripts/gen_cli_reference.py writes from the parsers now;
- every `make <target>` and `retrain <subcommand>` the README shows exists;
- the README's Performance table is at most 10 headline rows, each figure and source
  found in the manual's full table (docs/performance.md).

`make docs` (mkdocs --strict) checks the links inside the manual; these checks need no
mkdocs and take about a second (building the `retrain` parser).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 200


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference",
                                                  REPO / "scripts" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code(markdown: str) -> str:
    """The README's code: fenced blocks and inline code spans, one per line (prose such as
    "make sure" is not a command)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", prose)
    return "\n".join(blocks + spans)


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, flags=re.M))


def missing_make_targets(markdown: str, targets: set[str]) -> set[str]:
    return {t for t in re.findall(r"\bmake ([a-z][\w-]*)", _code(markdown)) if t not in targets}


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def unknown_retrain_commands(markdown: str, parser: argparse.ArgumentParser) -> set[str]:
    """`retrain X` (or `.venv/bin/retrain X`) where X is no subcommand; for a subcommand
    with actions of its own (`registry`, `stack`), each of `retrain X a|b` must be one."""
    unknown = set()
    top = _commands(parser)
    for match in re.finditer(r"(?<![\w./-])(?:\.venv/bin/)?retrain ([a-z][\w-]*)((?: [\w|-]+)?)",
                             _code(markdown)):
        name, rest = match.group(1), match.group(2).strip()
        if name not in top:
            unknown.add(name)
            continue
        actions = _commands(top[name])
        if actions and rest and not rest.startswith("-"):
            unknown |= {f"{name} {a}" for a in rest.split("|") if a not in actions}
    return unknown


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _performance_rows(markdown: str, heading: str, last: str = "command") -> list[str]:
    """The rows of the table under `heading`, up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    section = markdown.split(f"\n{heading}\n", 1)[1] if not markdown.startswith(heading) \
        else markdown[len(heading):]
    section = section.split(f"\n{level} ", 1)[0]
    table = re.search(rf"^\| what \| figure \| {last} \|\n(?:\|.*(?:\n|$))+", section,
                      flags=re.M)
    assert table, f"no Performance table under {heading!r}"
    return table.group(0).strip().splitlines()[2:]


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text()


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    from retrain.cli import build_parser
    return build_parser()


def test_the_readme_is_short(readme):
    lines = len(readme.splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move detail into docs/")


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = _nav_pages(config["nav"])
    assert "index.md" in pages and "configuration.md" in pages and "cli.md" in pages
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"in mkdocs.yml's nav but not in docs/: {missing}"
    left_out = sorted({p.name for p in DOCS.glob("*.md")} - set(pages))
    assert not left_out, f"docs pages missing from mkdocs.yml's nav: {left_out}"


def test_the_readme_links_into_the_manual_resolve(readme):
    targets = re.findall(r"\]\(((?:docs/)[^)#\s]*)(?:#[^)]*)?\)", readme)
    assert any(t.startswith("docs/images/") for t in targets)       # the scan finds them
    assert any(t.endswith(".md") for t in targets)
    broken = sorted({t for t in targets if not (REPO / t).is_file()})
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_the_cli_reference_is_what_the_parsers_say_now():
    expected = _generator().render()
    assert "## `retrain registry`" in expected and "### `retrain stack up`" in expected
    assert str(REPO) not in expected            # no machine-specific path in the page
    current = (DOCS / "cli.md").read_text()
    assert current == expected, (
        "docs/cli.md is out of date: run .venv/bin/python scripts/gen_cli_reference.py")


def test_every_make_target_the_readme_shows_exists(readme):
    targets = _make_targets()
    assert {"demo", "test", "docs", "ui"} <= targets
    shown = set(re.findall(r"\bmake ([a-z][\w-]*)", _code(readme)))
    assert {"demo", "test"} <= shown
    assert missing_make_targets(readme, targets) == set()
    # the check itself can fail
    assert missing_make_targets("run `make no-such-target`", targets) == {"no-such-target"}


def test_every_retrain_command_the_readme_shows_exists(readme, parser):
    assert unknown_retrain_commands(readme, parser) == set()
    # the check itself can fail, for a command and for an action of one
    assert unknown_retrain_commands("`.venv/bin/retrain frobnicate`", parser) == {"frobnicate"}
    assert unknown_retrain_commands("`retrain registry list|purge`", parser) == {"registry purge"}
    assert unknown_retrain_commands("`retrain stack up --root x`", parser) == set()


def test_the_readme_shows_headline_figures_that_the_manual_backs(readme):
    """A short table a newcomer reads at a glance; each of its numbers and its source
    stands in docs/performance.md, so the two cannot drift apart."""
    ours = _performance_rows(readme, "## Performance", last="source")
    manual = "\n".join(_performance_rows((DOCS / "performance.md").read_text(),
                                         "# Performance"))
    assert 5 <= len(ours) <= 10, f"{len(ours)} headline rows (at most 10)"
    for row in ours:
        what, figure, source = (c.strip() for c in row.strip("|").split("|"))
        assert len(row) <= 200, f"headline row of {len(row)} characters: {what}"
        assert not re.search(r"\b[0-9a-f]{7,40}\b", figure), f"a commit hash in: {what}"
        cited = re.findall(r"`([^`]+)`", source)
        assert cited and all(c in manual for c in cited), f"source not in the manual: {source}"
        missing = [n for n in re.findall(r"\d[\d,.]*\d|\d", figure) if n not in manual]
        assert not missing, f"figures of {what!r} not in docs/performance.md: {missing}"
    # and the check itself fails on a figure the manual does not have
    assert "7,777,777" not in manual


