"""What a run's file carries when the Airflow UI serves it: its type and its page policy.

The Retrain tab (retrain.orchestration.airflow_views) serves a run's files in the Airflow
UI's own origin, next to the session that can trigger and delete DAG runs. Their content
holds values of the training data (a categorical value, a label, a batch id), so a value
that reached a page unescaped would run as the logged-in user. Everything written into
HTML is escaped where it is written (components.report, the views, the Data Docs' results
in components.ctr.validate); this module is the second wall, in the response:

- the type comes from a short list of suffixes, never from the content, and is sent with
  `X-Content-Type-Options: nosniff`; an unknown suffix is an attachment
  (`application/octet-stream`), never a page;
- every page carries a Content-Security-Policy: nothing loads from another host, no inline
  script runs. The project's own pages need no script at all (`script-src 'none'`). Data
  Docs pages (great-expectations' renderer) load their JavaScript from their own folder
  (retrain.common.docs_assets) and have a few inline scripts and click handlers of GX's
  templates: those are allowed by their sha256 only when they are GX's (a pinned list of
  the fixed ones, the exact shape of the index's two table set-ups), so a `<script>` or an
  `onerror=` that came from data does not run even if it reached the page.

Stdlib only: the API server imports it.
"""
from __future__ import annotations

import base64
import hashlib
import re
from pathlib import PurePosixPath

# The folder a validation writes its Data Docs into (components.ctr.validate imports it).
DATA_DOCS_DIR = "data_docs"

# suffix -> Content-Type; anything else is served as an attachment.
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".png": "image/png",
    ".gif": "image/gif",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".ico": "image/x-icon",
    ".svg": "image/svg+xml",
    ".woff2": "font/woff2",
}
ATTACHMENT = "application/octet-stream"

_BASE = ("default-src 'none'", "style-src 'self' 'unsafe-inline'", "img-src 'self' data:",
         "font-src 'self'", "connect-src 'none'", "object-src 'none'", "base-uri 'none'",
         "form-action 'none'", "frame-ancestors 'self'")
# The project's own pages (reports, the run, lineage and asset pages): no script at all.
PAGE_POLICY = "; ".join(("script-src 'none'",) + _BASE)

# great-expectations 1.24's inline scripts, as `_template` leaves them (their sha256, as CSP
# writes it): the index's table helpers, its two tables' set-up (their rows, a Python
# literal on one line, are blanked before hashing) and its footer; a validation page's
# walk-through modal and its show/hide functions. tests/unit/test_served_pages.py builds
# Data Docs and fails when a GX upgrade writes a script that is not here (its pages would
# lose it).
GX_SCRIPTS = frozenset({
    "sha256-1I2ZKoQmwuT9Qo2nEI5BpeSPAFDWVoM67ZPN9Sm/Bck=",     # index: table helpers
    "sha256-TpnguRCZ5p2sYJDmyDVqa6GqgZJVe4b08K+Bo4iWSsQ=",     # index: validations table
    "sha256-7M04dqW+t+1q1VyHSbCurYtgwBhcZhxOgLI1C+4Swig=",     # index: suites table
    "sha256-DhvXXuBx1hqDHbNi67yRAQGti/AQ+ysIfA61SGyKLGA=",     # index: footer
    "sha256-loVK40+lekatUpT5FGeF8X8D98jj2LAtCP9jHscdTr8=",     # validation: walk-through
    "sha256-gohp0y43UjzSJTa7tPe9rc0wep/LVMX8VCahWN7jXfE=",     # validation: show / hide
})
# A table's rows: one line of the set-up, a Python literal (repr escapes quotes and line
# ends, so a value cannot leave its string).
_ROWS = re.compile(r"^(        data: )\[.*\],$", re.M)
# GX's click handlers (allowed by hash with 'unsafe-hashes': no other handler runs).
GX_HANDLERS = re.compile(r"showAllValidations\(\)|hideSucceededValidations\(\)"
                         r"|clearTableFilters\('section-\d+-content-block-\d+-\d+-body-table'\)")

_SCRIPT = re.compile(r"<script(\s[^>]*)?>(.*?)</script\s*>", re.S | re.I)
_ONCLICK = re.compile(r'\sonclick="([^"]*)"')


def sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def _template(script: str) -> str:
    """The hash of an inline script with a table's rows blanked."""
    return sha256(_ROWS.sub(r"\1[],", script, count=1))


def content_type(rel: str) -> str:
    """The Content-Type of a run's file, from its suffix (`ATTACHMENT` when unknown)."""
    return TYPES.get(PurePosixPath(rel).suffix.lower(), ATTACHMENT)


def is_data_docs(rel: str) -> bool:
    return DATA_DOCS_DIR in PurePosixPath(rel).parts[:-1]


def gx_hashes(page: str) -> tuple[list[str], list[str]]:
    """(the hashes of the page's inline scripts that are GX's, of its GX click handlers)."""
    scripts = []
    for attrs, body in _SCRIPT.findall(page):
        if "src=" in (attrs or "").lower():
            continue
        if _template(body) in GX_SCRIPTS:
            scripts.append(sha256(body))
    handlers = [sha256(h) for h in _ONCLICK.findall(page) if GX_HANDLERS.fullmatch(h)]
    return sorted(set(scripts)), sorted(set(handlers))


def policy(rel: str, content: bytes | None = None) -> str:
    """The Content-Security-Policy of a run's file at `rel` (relative to its run folder)."""
    if not (is_data_docs(rel) and content_type(rel).startswith("text/html")):
        return PAGE_POLICY
    scripts, handlers = gx_hashes((content or b"").decode("utf-8", "replace"))
    allowed = ["'self'", *(f"'{h}'" for h in scripts)]
    if handlers:
        allowed += ["'unsafe-hashes'", *(f"'{h}'" for h in handlers)]
    return "; ".join(("script-src " + " ".join(allowed),) + _BASE)


def headers(rel: str, content: bytes | None = None) -> dict[str, str]:
    """The headers every served file carries (Content-Type is `content_type(rel)`)."""
    out = {"Content-Security-Policy": policy(rel, content),
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}
    if content_type(rel) == ATTACHMENT:
        out["Content-Disposition"] = "attachment"
    return out
