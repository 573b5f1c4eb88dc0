"""The Markdown of the README and the manual renders as written, on GitHub and in mkdocs.

A reviewer found, in the built manual, an empty cell left by a stray `| |`, a REST example
whose fenced block (indented inside a list item) came out as one line of inline code, and a
site that showed directory listings when opened from files. These checks read the Markdown
itself (no mkdocs needed, well under a second) over README.md and docs/**/*.md:

- fenced code blocks are balanced and start at column 0 (Python-Markdown's fenced_code,
  which mkdocs uses, does not see an indented fence: the block turns into prose);
- every relative link resolves to a file (not a folder: opened from files a folder is a
  listing), a page of the manual links only inside docs/ (the built site holds nothing
  else), and every `#anchor` names a heading of its target, with mkdocs' slugs (the
  README's own headings: GitHub's slugs too);
- external links are not fetched, only well formed (http, https or mailto, with a host);
- every table row has as many cells as its header, no cell is empty, no table line is
  longer than MAX_TABLE_LINE characters, and a table starts after a blank line (else
  Python-Markdown renders it as a paragraph of pipes).

Each check is also run on a small broken sample, so that it is known to be able to fail.
The built site itself (mkdocs.yml's `use_directory_urls: false`) is checked by
test_the_built_manual_works_opened_from_files when mkdocs is installed (`make docs`).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
# A table cell is a figure and its source, not its history (which goes below the table).
# 900 is where the manual stands now (docs/performance.md's longest rows); the aim is 400.
MAX_TABLE_LINE = 900

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\((?P<target><[^>]*>|[^)\s]+)"
                  r"(?:\s+\"[^\"]*\")?\)")
AUTOLINK = re.compile(r"<(?P<target>(?:https?|mailto):[^>\s]*)>")
DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _name(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


# --- fenced code ---------------------------------------------------------------------------

def scan(text: str) -> tuple[list[tuple[int, str]], list[str]]:
    """(the lines outside fenced code, numbered from 1; the fences' problems)."""
    prose, problems, fence, opened = [], [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence, opened = match.group("fence"), number
                if match.group("indent"):
                    problems.append(f"line {number}: an indented fence (mkdocs renders it as "
                                    "prose; put the block at column 0, outside the list)")
            else:
                prose.append((number, line))
        elif (match and match.group("fence")[0] == fence[0]
              and len(match.group("fence")) >= len(fence) and not match.group("info").strip()):
            fence = None
    if fence is not None:
        problems.append(f"line {opened}: a fence that is never closed")
    return prose, problems


def without_code_spans(line: str) -> str:
    return CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), line)


# --- headings and anchors ------------------------------------------------------------------

def _heading_text(raw: str) -> str:
    """A heading as text, the way toc sees it once rendered: code spans keep their content,
    links their text, emphasis markers and HTML tags go."""
    text = re.sub(r"\s+#+\s*$", "", raw.strip())
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"(\*\*|__|\*)", "", text)


def mkdocs_slug(text: str) -> str:
    """Python-Markdown's toc `slugify` (mkdocs' default)."""
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def github_slug(text: str) -> str:
    return re.sub(r" ", "-", re.sub(r"[^\w\- ]", "", text.strip().lower()))


def anchors(text: str, slug=mkdocs_slug) -> set[str]:
    """Every id a heading of `text` gets; a repeated one gets _1, _2 in mkdocs (-1 on GitHub)."""
    prose, _ = scan(text)
    seen: dict[str, int] = {}
    ids = set()
    sep = "_" if slug is mkdocs_slug else "-"
    for _, line in prose:
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if not match:
            continue
        base = slug(_heading_text(match.group(1)))
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}{sep}{count}")
    return ids


# --- links ---------------------------------------------------------------------------------

def links(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in scan(text)[0]:
        line = without_code_spans(line)
        found += [(number, m.group("target").strip("<>")) for m in LINK.finditer(line)]
        found += [(number, m.group("target")) for m in AUTOLINK.finditer(line)]
    return found


def broken_links(path: Path, text: str, docs_root: Path = DOCS,
                 readme: Path = README) -> list[str]:
    problems = []
    in_manual = path.is_relative_to(docs_root)
    for number, target in links(text):
        where = f"{_name(path)}:{number}: {target}"
        parts = urlsplit(target)
        if parts.scheme or target.startswith("//"):
            if parts.scheme not in ("http", "https", "mailto"):
                problems.append(f"{where}: scheme {parts.scheme!r} is not http, https or mailto")
            elif parts.scheme != "mailto" and not re.fullmatch(r"[\w.-]+(:\d+)?", parts.netloc):
                problems.append(f"{where}: no well-formed host")
            continue
        if target.startswith("/"):
            problems.append(f"{where}: an absolute path (breaks opened from files)")
            continue
        file = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if parts.path:
            if not file.exists():
                problems.append(f"{where}: no such file")
                continue
            if file.is_dir():
                problems.append(f"{where}: a folder, not a page (opened from files: a listing)")
                continue
            if in_manual and not file.is_relative_to(docs_root):
                problems.append(f"{where}: outside docs/, so not in the built manual")
                continue
        if parts.fragment:
            if file.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not a page")
                continue
            target_text = file.read_text()
            ids = anchors(target_text)
            if file == readme:
                ids |= anchors(target_text, github_slug)
            if parts.fragment not in ids:
                problems.append(f"{where}: no heading with the id #{parts.fragment}")
    return problems


# --- tables --------------------------------------------------------------------------------

def cells(row: str) -> list[str]:
    """A row's cells the way Python-Markdown's tables split them: a pipe inside a code span
    or escaped (`\\|`) does not separate."""
    masked = without_code_spans(row.replace("\\|", "xx")).strip()
    if masked.startswith("|"):
        masked, row = masked[1:], row.strip()[1:]
    else:
        row = row.strip()
    if masked.endswith("|"):
        masked, row = masked[:-1], row[:-1]
    out, start = [], 0
    for index, char in enumerate(masked):
        if char == "|":
            out.append(row[start:index])
            start = index + 1
    out.append(row[start:])
    return [cell.strip() for cell in out]


def table_problems(path: Path, text: str) -> list[str]:
    problems = []
    prose = scan(text)[0]
    number_to_line = dict(prose)
    index = 0
    while index < len(prose):
        number, line = prose[index]
        following = prose[index + 1] if index + 1 < len(prose) else (None, "")
        if not (line.lstrip().startswith("|") and following[0] == number + 1
                and DELIMITER.match(following[1])):
            if line.lstrip().startswith("|") and line.rstrip().endswith("|"):
                problems.append(f"{_name(path)}:{number}: a table row without a header row")
            index += 1
            continue
        where = f"{_name(path)}:{number}"
        before = number_to_line.get(number - 1)
        if number > 1 and before is not None and before.strip():
            problems.append(f"{where}: a table needs a blank line before it "
                            "(mkdocs renders it as a paragraph)")
        header = cells(line)
        width = len(header)
        if len(cells(following[1])) != width:
            problems.append(f"{where}: the delimiter row has {len(cells(following[1]))} cells, "
                            f"the header {width}")
        rows = [(number, line)]
        index += 2
        while index < len(prose) and prose[index][1].lstrip().startswith("|") \
                and prose[index][0] == rows[-1][0] + (1 if len(rows) > 1 else 2):
            rows.append(prose[index])
            index += 1
        for row_number, row in rows:
            row_cells = cells(row)
            at = f"{_name(path)}:{row_number}"
            if len(row_cells) != width:
                problems.append(f"{at}: {len(row_cells)} cells, the header has {width}")
            if any(not cell for cell in row_cells):
                problems.append(f"{at}: an empty cell (write what it means, e.g. '–')")
            if len(row) > MAX_TABLE_LINE:
                problems.append(f"{at}: a table line of {len(row)} characters "
                                f"(at most {MAX_TABLE_LINE}: move detail into the text)")
            if any("|" in m.group(2) for m in CODE_SPAN.finditer(row.replace("\\|", "xx"))):
                problems.append(f"{at}: a pipe inside a code span (GitHub splits the cell)")
    return problems


# --- the checks ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pages() -> dict[Path, str]:
    files = markdown_files()
    assert len(files) > 10 and README in files and DOCS / "performance.md" in files
    return {path: path.read_text() for path in files}


def test_fenced_code_blocks_are_balanced_and_at_column_0(pages):
    problems = [f"{_name(path)}: {p}" for path, text in pages.items() for p in scan(text)[1]]
    assert not problems, "\n".join(problems)


def test_every_link_resolves(pages):
    problems = [p for path, text in pages.items() for p in broken_links(path, text)]
    assert not problems, "\n".join(problems)
    # the scan does see the links that are there
    readme_targets = [t for _, t in links(pages[README])]
    assert any(t.startswith("docs/") and "#" in t for t in readme_targets)
    assert sum(len(links(text)) for text in pages.values()) > 100


def test_every_table_is_whole(pages):
    problems = [p for path, text in pages.items() for p in table_problems(path, text)]
    assert not problems, "\n".join(problems)
    assert sum(len(re.findall(r"^\|[-:| ]+\|$", text, flags=re.M))
               for text in pages.values()) > 10        # the scan does see the tables


def test_the_checks_can_fail(tmp_path):
    docs = tmp_path / "docs"
    (docs / "images").mkdir(parents=True)
    (docs / "images" / "a.png").write_bytes(b"")
    (docs / "other.md").write_text("# Other page\n\n## A `code` heading: yes!\n\n## Again\n\n"
                                   "## Again\n")
    (tmp_path / "README.md").write_text("# Top\n")
    page = docs / "page.md"
    text = "\n".join([
        "# Page",
        "[ok](other.md#a-code-heading-yes) [ok](other.md#again_1) [ok](#page)",
        "![ok](images/a.png) [ok](https://example.org/x?y=1#z) <mailto:a@b.org>",
        "`[not a link](nowhere.md)`",
        "[gone](missing.md) [anchor](other.md#nope) [dir](images) [out](../README.md)",
        "[abs](/docs/other.md) [scheme](javascript:alert) [host](https:///x)",
        "",
        "```bash",
        "[in code](nowhere.md)",
        "```",
        "- a list item:",
        "",
        "  ```",
        "  indented",
        "  ```",
        "",
        "| a | b |",
        "|---|---|",
        "| 1 | `x|y` |",
        "| 1 | 2 | 3 |",
        "| | 2 |",
        "| 1 | " + "y" * MAX_TABLE_LINE + " |",
        "text",
        "| c | d |",
        "|---|---|",
        "",
        "| stray | row |",
        "",
        "~~~",
        "never closed",
    ])
    page.write_text(text)
    problems = broken_links(page, text, docs_root=docs, readme=tmp_path / "README.md")
    found = "\n".join(problems)
    for target, why in [("missing.md", "no such file"), ("other.md#nope", "no heading"),
                        ("images", "a folder"), ("../README.md", "outside docs/"),
                        ("/docs/other.md", "absolute"), ("javascript:", "scheme"),
                        ("https:///x", "host")]:
        assert re.search(rf"{re.escape(target)}.*{why}", found), (target, found)
    assert len(problems) == 7, found
    fences = scan(text)[1]
    assert len(fences) == 2 and "indented" in fences[0] and "never closed" in fences[1]
    tables = "\n".join(table_problems(page, text))
    for why in ["20: 3 cells", "21: an empty cell", "22: a table line of",
                "19: a pipe inside a code span", "24: a table needs a blank line",
                "27: a table row without a header"]:
        assert why in tables, (why, tables)
    assert len(table_problems(page, text)) == 6, tables
    assert cells("| a `b|c` \\| d | e |") == ["a `b|c` \\| d", "e"]
    assert mkdocs_slug("Quick start: `make demo` (2 min)") == "quick-start-make-demo-2-min"


def _docs_python() -> Path | None:
    for candidate in (REPO / ".venv-docs" / "bin" / "python",
                      Path(os.environ.get("RETRAIN_DOCS_PYTHON", "/nonexistent"))):
        if candidate.is_file():
            return candidate
    return None


def test_the_built_manual_works_opened_from_files(tmp_path):
    """`mkdocs build` into a temporary folder; then, as a browser opening site/index.html
    from disk would: every page is a file, and every local link of every page (href, src)
    points to a file that exists, never to a folder (file:// shows a listing there)."""
    assert yaml.safe_load((REPO / "mkdocs.yml").read_text())["use_directory_urls"] is False
    python = _docs_python()
    if python is None:
        message = "mkdocs not installed (.venv-docs: `make docs` creates it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; .ci/run runs `make docs` before the tests")
        pytest.skip(message)
    site = tmp_path / "site"
    result = subprocess.run([str(python), "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(site), "--config-file", str(REPO / "mkdocs.yml")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    html = sorted(site.rglob("*.html"))
    assert (site / "index.html").is_file() and (site / "performance.html").is_file()
    problems, checked = [], 0
    for page in html:
        if page.name == "404.html":     # a server's page: absolute paths on purpose
            continue
        for target in re.findall(r'(?:href|src)="([^"]+)"', page.read_text()):
            parts = urlsplit(target)
            if parts.scheme or target.startswith(("//", "#")) or not parts.path:
                continue
            checked += 1
            file = (page.parent / unquote(parts.path)).resolve()
            if not file.is_file():
                problems.append(f"{page.relative_to(site)}: {target}")
    assert checked > 100, checked
    assert not problems, "links that do not open from files:\n" + "\n".join(problems[:30])


if __name__ == "__main__":      # a quick look without pytest: the problems, one a line
    for file in markdown_files():
        body = file.read_text()
        for problem in scan(body)[1] + broken_links(file, body) + table_problems(file, body):
            print(_name(file), problem) if not problem.startswith(_name(file)) else print(problem)
    sys.exit(0)
