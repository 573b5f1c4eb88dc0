"""The great-expectations run of one CTR span's validation: the suites of
`components.ctr.validation_rules` on the span's tables (its statistics row, its columns'
domains, its bounded sample), in a shared GX session or, for Data Docs, through GX
checkpoints whose site is written next to the report. `components.ctr.validate` is the
step; `components.ctr.validate_report` says what the results mean in words.

Module top level is stdlib only (pandas, pyarrow and GX are imported when used).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from retrain.common import docs_assets
from components.gx_session import (GxSession, build_data_docs, docs_run_name,
                                   ephemeral_context)
from components.ctr.validate_report import _compact
from components.ctr.validation_rules import (DOMAINS_SUITE, ERROR, SAMPLE_SUITE, STATS_SUITE,
                                             WARNING, build_suites)

log = logging.getLogger("retrain.validate")

PARTIAL_UNEXPECTED = 10


def _validate(spec, stats, previous, history, overlap, stats_dir: Path, docs_dir: Path | None,
              session: GxSession | None = None):
    """The suites' results on the span's tables. Data Docs (docs_dir) need GX checkpoints
    with a docs action; without them a shared session validates each table directly."""
    import pandas as pd
    import pyarrow.parquet as pq

    from components.ctr import feature_config
    from components.ctr.validation_rules import domains_table, rules_for, stats_row

    rules = rules_for(feature_config.load_for(spec.feature_config))
    row = stats_row(stats, previous, history, overlap, rules)
    sample = pq.read_table(stats_dir / "sample.parquet")
    tables = {
        STATS_SUITE: pd.DataFrame([row]),
        DOMAINS_SUITE: pd.DataFrame(domains_table(stats, rules), dtype=object),
        SAMPLE_SUITE: sample.to_pandas(),
    }
    suites = build_suites(spec, previous, history, rules)
    result_format = {"result_format": "SUMMARY", "partial_unexpected_count": PARTIAL_UNEXPECTED}
    if docs_dir is None:
        session = session or GxSession(stats.get("span", "span"))
        results = {name: session.validate(name, suite, tables[name], result_format)
                   for name, suite in suites.items()}
        return _summary(stats, suites, tables, results, row, rules, {})
    results, pages = _validate_with_docs(spec, stats, suites, tables, docs_dir, result_format)
    return _summary(stats, suites, tables, results, row, rules, pages)


def _validate_with_docs(spec, stats, suites, tables, docs_dir: Path, result_format: dict):
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    context = ephemeral_context()
    context.add_data_docs_site(site_name="run", site_config={
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                          "base_directory": str(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
    source = context.data_sources.add_pandas(stats.get("span", "span"))
    results, idents = {}, {}
    run_name = docs_run_name(spec.run_id or f"validate-{time.strftime('%Y%m%dT%H%M%S')}")
    for name, suite in suites.items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
        vd = context.validation_definitions.add(gx.ValidationDefinition(
            name=name, data=batch, suite=context.suites.add(suite)))
        cp = context.checkpoints.add(gx.Checkpoint(
            name=f"{name}_checkpoint", validation_definitions=[vd], actions=[],
            result_format=result_format))
        res = cp.run(batch_parameters={"dataframe": tables[name]},
                     run_id=RunIdentifier(run_name=run_name))
        for ident, vr in res.run_results.items():
            results[name], idents[ident] = vr, name
    build_data_docs(context, "run", {i: results[n] for i, n in idents.items()})
    pages = {name: _docs_page(docs_dir, ident) for ident, name in idents.items()}
    _prune_docs(docs_dir)
    online = docs_assets.localize(docs_dir)
    if online:
        log.warning("Data Docs still load %d asset(s) from the network, so they need it "
                    "to render (`python -m retrain.common.docs_assets fetch` caches "
                    "them): %s", len(online), ", ".join(online))
    return results, pages


def _summary(stats, suites, tables, results, row, rules, pages):
    compact = [c for name in suites for c in (_compact(r, name, tables[name])
                                              for r in results[name].results)]
    errors = [c for c in compact if not c["success"] and c["severity"] == ERROR]
    warnings = [c for c in compact if not c["success"] and c["severity"] == WARNING]
    ex = stats["columns"].get(rules.label)
    summary = {
        "rows": stats["rows"],
        "click_rate": stats.get("label_rate"),
        "success": not errors,
        "n_expectations": len(compact),
        "n_failed": len(errors),
        "n_warnings": len(warnings),
        "failed": errors,
        "warnings": warnings,
        "results": compact,
        "statistics_table": row,
        "null_rates": {c: d["null_rate"] for c, d in stats["columns"].items()},
        "types": {c: d["types"] for c, d in stats["columns"].items()},
        "label_domain": ex and ex.get("domain"),
        "data_docs_pages": pages,
    }
    gx_json = {name: r.to_json_dict() for name, r in results.items()}
    return summary, gx_json


def _prune_docs(docs_dir: Path) -> None:
    """Drop the site's static images no page links to (GX ships 3.4 MB of tutorial GIFs
    with every site; kept, they would make each run's report 4.4 MB instead of 1 MB)."""
    pages = " ".join(p.read_text(errors="replace") for p in docs_dir.rglob("*.html"))
    for image in (docs_dir / "static" / "images").glob("*"):
        if image.is_file() and image.name not in pages:
            image.unlink()


def _docs_page(docs_dir: Path, ident) -> str:
    """Relative path of a validation result's Data Docs page (found on disk: GX's
    layout is validations/<suite>/<run name>/<run time>/<batch id>.html)."""
    suite = ident.expectation_suite_identifier.name
    pages = sorted((docs_dir / "validations" / suite).rglob("*.html"))
    return str(pages[-1].relative_to(docs_dir)) if pages else "index.html"
