"""The dashboard's static files, shipped inside the package.

Plain modern JavaScript and CSS, no build step and no CDN: the machines Weft
runs on often have no network, and no npm registry is reachable from them
(``docs/dashboard.md`` says more). Each file is read once per process and
kept with its ``ETag`` (a hash of its bytes), so a reload costs a 304.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
from dataclasses import dataclass

CONTENT_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
    "png": "image/png",
}


@dataclass(frozen=True, slots=True)
class Asset:
    """One static file: its bytes, type and validator."""

    name: str
    body: bytes
    content_type: str
    etag: str


def names() -> list[str]:
    """Every file under ``static/`` (flat: the dashboard has no folders)."""
    root = importlib.resources.files("weft.web") / "static"
    return sorted(entry.name for entry in root.iterdir() if entry.is_file())


@functools.cache
def asset(name: str) -> Asset | None:
    """The static file ``name`` (a bare file name), or None when there is none.

    Only names listed in ``static/`` with a known type are served, so a
    request path can never reach outside the folder.
    """
    if name not in names():
        return None
    kind = CONTENT_TYPES.get(name.rsplit(".", 1)[-1])
    if kind is None:
        return None
    body = (importlib.resources.files("weft.web") / "static" / name).read_bytes()
    etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
    return Asset(name, body, kind, etag)
