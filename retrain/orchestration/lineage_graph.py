"""The lineage chain of a published model as a graph people can read: an inline SVG.

Why: `retrain lineage` prints a tree whose long lines a browser cuts off, and an artifact
read by two steps (the model, by evaluation and by the registry) appears twice. Here every
artifact is one box, placed in a column by how far it is from the registry version (raw
data on the left, the version on the right: data -> validation -> transform -> model ->
registry), an arrow from each input to what read it, and each box a link to its own page
(`node_href(fingerprint)`). Stdlib only and self-contained: nothing loads from a remote host.
"""
from __future__ import annotations

import html
from typing import Callable, Iterator

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 230, 58, 70, 22, 24
COLOURS = {"raw_span": "#e8f1fb", "validation_report": "#eef7ea",
           "transformed_examples": "#fdf3e1", "model": "#f3ecfa", "published_model": "#f3ecfa",
           "evaluation": "#fbeaea", "registered_model": "#e6f4f1"}


def _nodes(tree: dict) -> Iterator[tuple[dict, dict | None, int]]:
    """(node, the node that read it, depth) for every node of the tree, root first."""
    todo = [(tree, None, 0)]
    while todo:
        node, parent, depth = todo.pop(0)
        yield node, parent, depth
        todo.extend((child, node, depth + 1) for child in node.get("inputs") or [])


def _key(node: dict) -> str:
    return node.get("fingerprint") or f"{node.get('type')}:{node.get('name')}"


def layout(tree: dict) -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """Boxes by key (each artifact once, its column its longest path to the registry
    version, so inputs stay left of everything that read them) and edges (input key,
    reader key)."""
    boxes: dict[str, dict] = {}
    edges: set[tuple[str, str]] = set()
    for node, parent, _ in _nodes(tree):
        key = _key(node)
        if key not in boxes or not node.get("see_above"):
            boxes[key] = {**boxes.get(key, {}), **({} if node.get("see_above") else node)}
        if parent is not None:
            edges.add((key, _key(parent)))
    # Longest path to the root: an input is always left of everything that read it.
    depth = dict.fromkeys(boxes, 0)
    changed = True
    while changed:
        changed = False
        for src, dst in edges:
            if depth[src] < depth[dst] + 1:
                depth[src], changed = depth[dst] + 1, True
    for key, box in boxes.items():
        box["depth"] = depth[key]
    columns = max(b["depth"] for b in boxes.values())
    rows: dict[int, int] = {}
    for box in boxes.values():
        col = columns - box["depth"]
        box["x"] = PAD + col * (BOX_W + GAP_X)
        box["y"] = PAD + rows.get(col, 0) * (BOX_H + GAP_Y)
        rows[col] = rows.get(col, 0) + 1
    return boxes, sorted(edges)


def _route(a: dict, b: dict) -> str:
    """An edge from a's right side to b's left side; one that skips columns runs along the
    gap above the rows it passes, so it never hides behind a box."""
    x1, y1, x2, y2 = a["x"] + BOX_W, a["y"] + BOX_H / 2, b["x"], b["y"] + BOX_H / 2
    if x2 - x1 <= GAP_X:
        return f"M {x1} {y1} C {x1 + GAP_X / 2} {y1} {x2 - GAP_X / 2} {y2} {x2} {y2}"
    gutter = min(a["y"], b["y"]) - GAP_Y / 2
    bend = GAP_X / 2
    return (f"M {x1} {y1} C {x1 + bend} {y1} {x1 + bend} {gutter} {x1 + GAP_X} {gutter} "
            f"L {x2 - GAP_X} {gutter} C {x2 - bend} {gutter} {x2 - bend} {y2} {x2} {y2}")


def _short(text: str, width: int = 34) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def svg(tree: dict, node_href: Callable[[dict], str | None]) -> str:
    """The graph as an <svg> element; `node_href(node)`: the link of a box (None: none)."""
    boxes, edges = layout(tree)
    width = max(b["x"] for b in boxes.values()) + BOX_W + PAD
    height = max(b["y"] for b in boxes.values()) + BOX_H + PAD
    # Natural size at most: narrower pages scale the whole graph down (the viewBox keeps
    # its proportions), so the registry box on the right is never off-screen.
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" style="max-width:100%;height:auto" '
             f'font-family="sans-serif" font-size="12" role="img" aria-label="lineage graph">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
             'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
             '<path d="M 0 0 L 10 5 L 0 10 z" fill="#667"/></marker></defs>']
    for src, dst in edges:
        parts.append(f'<path class="edge" d="{_route(boxes[src], boxes[dst])}" fill="none" '
                     f'stroke="#667" marker-end="url(#arrow)"/>')
    for box in boxes.values():
        kind = str(box.get("type") or "artifact")
        fp = box.get("fingerprint") or ""
        who = (box.get("producer") or {}).get("run_id") or ""
        lines = [(kind + (" (reused)" if box.get("reused") else ""), "bold"),
                 (str(box.get("name") or ""), "normal"),
                 (f"fp {fp}" + (f" · {who}" if who else ""), "normal")]
        text = "".join(
            f'<text x="{box["x"] + 8}" y="{box["y"] + 17 + 16 * i}" font-weight="{weight}">'
            f'{html.escape(_short(value))}</text>' for i, (value, weight) in enumerate(lines))
        title = html.escape(f"{kind} {box.get('name')} {box.get('uri') or ''}")
        rect = (f'<rect x="{box["x"]}" y="{box["y"]}" width="{BOX_W}" height="{BOX_H}" '
                f'rx="6" fill="{COLOURS.get(kind, "#f4f4f4")}" stroke="#889"/>')
        group = f'<g class="node"><title>{title}</title>{rect}{text}</g>'
        href = node_href(box)
        parts.append(f'<a href="{html.escape(href)}">{group}</a>' if href else group)
    parts.append("</svg>")
    return "".join(parts)


def find(tree: dict, fingerprint: str) -> dict | None:
    """The full node of an artifact (not a `see_above` stub), by fingerprint."""
    return next((n for n, _, _ in _nodes(tree)
                 if n.get("fingerprint") == fingerprint and not n.get("see_above")), None)
