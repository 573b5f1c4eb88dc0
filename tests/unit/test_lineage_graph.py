"""The lineage chain as a graph: each artifact once, inputs left of what read them, every
box a link to its own page, nothing loaded from elsewhere."""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from retrain.orchestration import lineage_graph


def node(kind, name, fp, inputs=(), **more):
    return {"type": kind, "name": name, "fingerprint": fp, "uri": f"file:///home/{name}",
            "inputs": list(inputs), **more}


def stub(full):
    return {**{k: full[k] for k in ("type", "name", "fingerprint", "uri")}, "see_above": True,
            "inputs": []}


RAW_A = node("raw_span", "dt=2026-11-02", "aaa")
RAW_B = node("raw_span", "dt=2026-11-03", "bbb")
PRE = node("transformed_examples", "preprocess <&>", "ppp", [RAW_A, RAW_B],
           producer={"run_id": "manual__1"}, reused=True)
MODEL = node("model", "train", "mmm", [PRE])
TREE = node("registered_model", "ctr v2", "reg", [
    MODEL, node("evaluation", "evaluate", "eee", [stub(MODEL), stub(PRE)]),
    node("validation", "validate", "vvv", [stub(RAW_B)])])


def test_each_artifact_is_one_box_and_inputs_sit_left_of_their_readers():
    boxes, edges = lineage_graph.layout(TREE)
    assert set(boxes) == {"aaa", "bbb", "ppp", "mmm", "reg", "eee", "vvv"}
    x = {k: b["x"] for k, b in boxes.items()}
    for src, dst in edges:
        assert x[src] < x[dst], (src, dst)
    assert ("mmm", "eee") in edges and ("ppp", "eee") in edges and ("bbb", "vvv") in edges
    assert x["aaa"] == x["bbb"] < x["ppp"] < x["mmm"] < x["reg"]


def test_the_svg_links_every_box_escapes_names_and_loads_nothing():
    svg = lineage_graph.svg(TREE, lambda n: f"/retrain/lineage/ctr/2/artifacts/{n['fingerprint']}")
    assert svg.count('<g class="node">') == 7 and svg.count('class="edge"') == 9
    for fp in ("aaa", "bbb", "ppp", "mmm", "reg", "eee", "vvv"):
        assert f'href="/retrain/lineage/ctr/2/artifacts/{fp}"' in svg
    assert "preprocess &lt;&amp;&gt;" in svg and "<&>" not in svg
    assert "transformed_examples (reused)" in svg
    assert re.findall(r"https?://[^\"]+", svg) == ["http://www.w3.org/2000/svg"]  # a name


def test_find_returns_the_full_node_never_a_stub():
    assert lineage_graph.find(TREE, "mmm")["inputs"] == [PRE]
    assert lineage_graph.find(TREE, "nope") is None


@pytest.fixture
def client(monkeypatch):
    from retrain.orchestration import airflow_views

    monkeypatch.setattr(airflow_views, "_chain", lambda model, version: TREE)
    airflow_views.app.dependency_overrides[airflow_views.can_read_runs] = lambda: None
    yield TestClient(airflow_views.app)
    airflow_views.app.dependency_overrides.clear()


def test_the_lineage_page_shows_the_graph_and_each_artifact_has_a_page(client):
    page = client.get("/lineage/ctr/2").text
    assert "<svg" in page and "as text" in page
    artifact = client.get("/lineage/ctr/2/artifacts/ppp")
    assert artifact.status_code == 200
    assert "manual__1" in artifact.text and "yes, from the run above" in artifact.text
    assert 'href="/retrain/lineage/ctr/2/artifacts/aaa"' in artifact.text
    assert client.get("/lineage/ctr/2/artifacts/zzz").status_code == 404
