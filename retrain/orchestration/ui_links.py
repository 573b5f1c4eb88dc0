"""Links into the Retrain views of the Airflow UI, for text that a person reads elsewhere
(the approval request in Required Actions, the demo's summary).

Why: a path on the server's disk is no use in a browser; the run's files are served by
/retrain/runs/{dag_id}/{run_id}/files/{path} (retrain.orchestration.airflow_views), behind
Airflow's login. Root-relative, so they work in whatever host the UI is opened at.
Stdlib only.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from retrain.orchestration.ui_routes import PREFIX

# A run folder's pages a person opens, by their path in the folder (the Retrain tab's links).
RUN_REPORTS = (("evaluation/report.html", "Report"),
               ("validation/data_docs/index.html", "Data Docs"))


def _seg(text: str) -> str:
    # ':' and '+' (in every run id) are plain characters in a path; the rest is escaped.
    return quote(str(text), safe=":+@")


def run_page(dag_id: str, run_id: str) -> str:
    """The run's page: what the Retrain tab of the run shows."""
    return f"{PREFIX}/runs/{_seg(dag_id)}/{_seg(run_id)}"


def run_file(dag_id: str, run_id: str, rel: str) -> str:
    """A file of the run's folder, `rel` its path in the folder."""
    return run_page(dag_id, run_id) + "/files/" + "/".join(_seg(p) for p in rel.split("/"))


def lineage_page(model: str, version: int) -> str:
    return f"{PREFIX}/lineage/{_seg(model)}/{int(version)}"


def run_reports(dag_id: str, run_id: str, run_dir: str | Path | None,
                report_uri: str | None = None) -> list[tuple[str, str]]:
    """(title, link) of the run's reports that exist in its folder, then its Retrain tab.
    `report_uri`: where the evaluation wrote its report, if not the usual place."""
    folder = Path(run_dir) if run_dir else None
    rels = [rel for rel, _ in RUN_REPORTS]
    if report_uri and folder and Path(report_uri).is_relative_to(folder):
        rels[0] = Path(report_uri).relative_to(folder).as_posix()
    out = [(title, run_file(dag_id, run_id, rel)) for rel, (_, title) in zip(rels, RUN_REPORTS)
           if folder is not None and (folder / rel).is_file()]
    return out + [("Retrain tab", run_page(dag_id, run_id))]
