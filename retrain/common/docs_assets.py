"""Data Docs that render offline: the CSS/JS great-expectations links from CDNs, served
from the docs folder itself.

GX writes Data Docs whose pages load jQuery, Bootstrap, bootstrap-table, Font Awesome and
Vega from five CDNs, and its index builds the list of validations in JavaScript, so
without the network (a locked-down cluster, CI, a laptop on a plane) the index lists
nothing. `fetch` downloads the exact npm packages those URLs name from the npm registry
once (at install: `make venv`, the images), checked against pinned sha512 digests, into a
local cache; `localize` rewrites a docs folder's pages to relative paths and puts the files
under `static/vendor/` (hard links into the cache where the filesystem allows).

    python -m retrain.common.docs_assets fetch      # what `make venv` runs
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import logging
import os
import re
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

log = logging.getLogger(__name__)

REGISTRY = "https://registry.npmjs.org"
CACHE_ENV = "RETRAIN_DOCS_ASSETS"

# npm package, version -> sha512 of its tarball (npm's "integrity").
PACKAGES: dict[tuple[str, str], str] = {
    ("jquery", "3.7.1"): "m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
    ("bootstrap", "4.3.1"): "rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
    ("popper.js", "1.12.9"): "s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==",
    ("bootstrap-table", "1.19.1"): "WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
    ("bootstrap-datepicker", "1.9.0"): "9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
    ("@fortawesome/fontawesome-free", "6.6.0"): "60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
    ("@forevolve/bootstrap-dark", "1.1.0"): "A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
    ("vega", "5.30.0"): "ZGoC8LdfEUV0LlXIuz7hup9jxuQYhSaWek2M7r9dEHAPbPrzSQvKXZ0BbsJbrarM100TGRpTVN/l1AFxCwDkWw==",
    ("vega-lite", "5.21.0"): "hNxM9nuMqpI1vkUOhEx6ewEf23WWLmJxSFJ4TA86AW43ixJyqcLV+iSCO0NipuVTE0rlDcc2e8joSewWyOlEwA==",
    ("vega-embed", "6.26.0"): "AZCTdKHDAuhp6TFZRQOOs332tStCwZr/5e4uZMNEuJL69A57cT66NNZJdNiCP6u66REzIToYtMJhMTL9wl5B3A==",
}
FONT_AWESOME = ("@fortawesome/fontawesome-free", "6.6.0")
# Font Awesome's CSS loads these from ../webfonts/ (woff2 only: every browser that runs
# the docs' JavaScript reads it).
FONTS = tuple(f"webfonts/{n}.woff2" for n in ("fa-brands-400", "fa-regular-400",
                                              "fa-solid-900", "fa-v4compatibility"))

# The URLs great-expectations 1.x writes into its pages -> (package, file in the package).
CDN_URLS: dict[str, tuple[tuple[str, str], str]] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": (("jquery", "3.7.1"), "dist/jquery.min.js"),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css":
        (("bootstrap", "4.3.1"), "dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js":
        (("bootstrap", "4.3.1"), "dist/js/bootstrap.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js":
        (("popper.js", "1.12.9"), "dist/umd/popper.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css":
        (("bootstrap-table", "1.19.1"), "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js":
        (("bootstrap-table", "1.19.1"), "dist/bootstrap-table.min.js"),
    # GX links the filter-control CSS of 1.19.0 and its JS of 1.19.1: both served from 1.19.1.
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        (("bootstrap-table", "1.19.1"),
         "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        (("bootstrap-table", "1.19.1"),
         "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        (("bootstrap-table", "1.19.1"),
         "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        (("bootstrap-datepicker", "1.9.0"), "dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        (("bootstrap-datepicker", "1.9.0"), "dist/js/bootstrap-datepicker.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        (("@fortawesome/fontawesome-free", "6.6.0"), "css/all.min.css"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        (("@forevolve/bootstrap-dark", "1.1.0"), "dist/css/bootstrap-prefers-dark.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": (("vega", "5.30.0"), "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": (("vega-lite", "5.21.0"), "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": (("vega-embed", "6.26.0"),
                                                  "build/vega-embed.min.js"),
}
VENDOR = Path("static") / "vendor"
# GX's header logo is an image on its own web host (with a cache-busting query): the pages
# show a small local one instead, so opening a page contacts no host at all.
REMOTE_LOGO = re.compile(r'"https://great-expectations-web-assets\.[^"]*"')
LOGO = VENDOR / "data-docs-logo.svg"
LOGO_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="220" height="50">'
            '<text x="0" y="34" font-family="sans-serif" font-size="26" fill="#ff6310">'
            'Data Docs</text></svg>\n')


def _files() -> dict[tuple[str, str], set[str]]:
    """Each package's files the pages use: what CDN_URLS names, and the fonts."""
    files: dict[tuple[str, str], set[str]] = {p: set() for p in PACKAGES}
    for package, rel in CDN_URLS.values():
        files[package].add(rel)
    files[FONT_AWESOME].update(FONTS)
    return files


def cache_dir() -> Path:
    """RETRAIN_DOCS_ASSETS, else <the environment>/share/retrain/docs-assets."""
    from retrain.common.settings import settings
    return Path(settings().docs_assets or Path(sys.prefix) / "share" / "retrain" / "docs-assets")


def _folder(package: tuple[str, str]) -> str:
    name, version = package
    return f"{name.rsplit('/', 1)[-1]}@{version}"


def missing(cache: Path | None = None) -> list[str]:
    cache = cache or cache_dir()
    return [f"{_folder(p)}/{f}" for p, files in _files().items() for f in sorted(files)
            if not (cache / _folder(p) / f).is_file()]


def fetch(cache: Path | None = None, timeout: float = 60) -> Path:
    """Download and unpack what is missing from the cache; every tarball is checked against
    its pinned digest before a file of it is kept."""
    cache = cache or cache_dir()
    for package, files in _files().items():
        integrity = PACKAGES[package]
        folder = cache / _folder(package)
        if all((folder / f).is_file() for f in files):
            continue
        name, version = package
        url = f"{REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = resp.read()
        digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
        if digest != integrity:
            raise ValueError(f"{url}: sha512 {digest} is not the pinned {integrity}")
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for f in files:
                target = tmp / f
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(f"package/{f}").read())
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        log.info("docs assets: %s@%s", name, version)
    return cache


def _place(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)           # same filesystem: no copy per docs folder
    except OSError:
        shutil.copyfile(src, dst)


def localize(docs_dir: Path, cache: Path | None = None) -> list[str]:
    """Point every page of a Data Docs folder at local copies of its CDN assets. Returns
    the CDN URLs it could not serve locally (not in the cache, or unknown: a newer GX)."""
    cache = cache or cache_dir()
    docs_dir = Path(docs_dir)
    unresolved: set[str] = set()
    for page in docs_dir.rglob("*.html"):
        text = original = page.read_text()
        for url, (package, rel) in CDN_URLS.items():
            if f'"{url}"' not in text:
                continue
            src = cache / _folder(package) / rel
            if not src.is_file():
                unresolved.add(url)
                continue
            dst = docs_dir / VENDOR / _folder(package) / rel
            _place(src, dst)
            if package == FONT_AWESOME:      # its fonts, at ../webfonts/ from the CSS
                for font in FONTS:
                    _place(cache / _folder(package) / font,
                           docs_dir / VENDOR / _folder(package) / font)
            text = text.replace(f'"{url}"', '"' + os.path.relpath(dst, page.parent) + '"')
        if REMOTE_LOGO.search(text):
            logo = docs_dir / LOGO
            if not logo.exists():
                logo.parent.mkdir(parents=True, exist_ok=True)
                logo.write_text(LOGO_SVG)
            text = REMOTE_LOGO.sub('"' + os.path.relpath(logo, page.parent) + '"', text)
        for left in ("https://cdn", "https://unpkg", "https://code.jquery",
                     "https://maxcdn", "https://stackpath"):
            start = text.find(left)
            while start != -1:
                unresolved.add(text[start:text.find('"', start)])
                start = text.find(left, start + 1)
        if text != original:
            page.write_text(text)
    return sorted(unresolved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the pinned npm packages into the cache "
                                 f"(${CACHE_ENV}, default {cache_dir()})")
    sub.add_parser("status", help="print the cache folder and what is missing from it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "fetch":
        print(f"docs assets in {fetch()}")
        return 0
    gaps = missing()
    print(json.dumps({"cache": str(cache_dir()), "missing": gaps}, indent=1))
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
