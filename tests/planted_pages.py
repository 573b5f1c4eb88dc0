"""Markup planted in training data, and Data Docs built from a day that holds it: shared by
tests/unit/test_served_pages.py (escaping, policies) and
tests/integration/test_served_pages_browser.py (a real browser through the Retrain tab's view).

Each payload announces itself if it ever runs: it sets `window.__pwned` (and the title)."""
from __future__ import annotations

from pathlib import Path

SCRIPT = "<script>window.__pwned=1;document.title='pwned'</script>"
IMG = "<img src=x onerror=\"window.__pwned=2;document.title='pwned'\">"
CLOSE = "</td></tr></table></svg>" + SCRIPT        # a value that tries to leave its cell
PLANTED = (SCRIPT, IMG, CLOSE)
EVIL = " ".join(PLANTED)


def build_planted_docs(root: Path, run_id: str = "r1") -> Path:
    """Validate a generated day whose `device` column holds the payloads (the allowed-values
    rule fails and GX's pages list the unexpected values); returns its Data Docs folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.validate import ValidateSpec, ValidationFailed, run
    from retrain.common import paths, served_files

    generate(GenerateSpec(out_root=str(root), start="2026-11-01", days=2, rows_per_day=2000,
                          n_users=3000, n_items=2000, n_categories=30))
    day = root / "raw" / "ctr" / "dt=2026-11-02"
    table = pq.read_table(day / "part-00000.parquet")
    rows = table.to_pylist()
    for i, value in enumerate(PLANTED):
        rows[3 + i]["device"] = value
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), day / "part-00000.parquet")
    out = root / "runs" / "ctr" / "dt=2026-11-02" / paths.safe_run_id(run_id) / "validation"
    with pytest.raises(ValidationFailed, match=r"allowed_values:device"):
        run(ValidateSpec(span_dir=str(day), out_dir=str(out),
                         history_root=str(root / "runs" / "ctr"),
                         quarantine_dir=str(root / "quarantine"), run_id=run_id,
                         data_docs=True))
    return out / served_files.DATA_DOCS_DIR
