"""Which plain-HTTP request gets which page: websockets ``Response`` values, no I/O.

A run's server answers on one port: WebSocket upgrades are the protocol,
and a browser's ``GET /`` (it asks for ``text/html``) is the dashboard. Other
plain requests keep the protocol's 400 JSON body saying how to connect, so
a script that probes the port learns what it is.

Every page goes out with headers that keep it to itself: a content security
policy allowing only its own scripts, styles and connections (no inline
script, so nothing injected into an event can run), no framing, no referrer
(the token is in the fragment, which browsers never send, and this makes
sure no link leaks the page address either) and ``ETag`` revalidation
(``Cache-Control: no-cache``).
"""

from __future__ import annotations

import http
from typing import Protocol
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from weft.web.assets import Asset, asset

SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("Referrer-Policy", "no-referrer"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
)
"""Sent with every page and asset (see the module docstring for why)."""

STATIC_PREFIX = "/static/"


class Served(Protocol):
    """What :func:`dashboard_url` needs of a server."""

    @property
    def url(self) -> str:
        """``ws://host:port``."""


def dashboard_url(server: Served, token: str | None = None) -> str:
    """The dashboard's address on ``server``'s port; with ``token`` in the
    fragment (never sent over the network by a browser, so never logged)."""
    base = "http" + server.url.removeprefix("ws") + "/"
    return f"{base}#token={token}" if token else base


def wants_html(request: Request) -> bool:
    """Whether a plain request comes from a browser asking for a page."""
    return "text/html" in request.headers.get("Accept", "")


def path_of(request: Request) -> str:
    """The request's path without its query (a query is never looked at)."""
    return urlsplit(request.path).path or "/"


def dashboard_response(request: Request, *, index: str = "index.html") -> Response | None:
    """The dashboard page or asset ``request`` asks for, or None when it is
    not a dashboard request (a WebSocket upgrade, or a path the dashboard does
    not serve to this client)."""
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return None
    path = path_of(request)
    if path in ("/", "/index.html"):
        if path == "/" and not wants_html(request):
            return None
        page = asset(index)
        return None if page is None else serve(page, request)
    if path.startswith(STATIC_PREFIX):
        found = asset(path.removeprefix(STATIC_PREFIX))
        return serve(found, request) if found is not None else not_found()
    if path == "/favicon.ico":
        # Browsers ask on their own; no icon, and no error in the console.
        return response(http.HTTPStatus.NO_CONTENT, b"", "image/x-icon")
    return None


def serve(page: Asset, request: Request) -> Response:
    """``page`` with its type and security headers; 304 when the client has it."""
    if request.headers.get("If-None-Match") == page.etag:
        return response(http.HTTPStatus.NOT_MODIFIED, b"", page.content_type, etag=page.etag)
    return response(http.HTTPStatus.OK, page.body, page.content_type, etag=page.etag)


def not_found() -> Response:
    """A plain 404."""
    return response(http.HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")


def response(
    status: http.HTTPStatus,
    body: bytes,
    content_type: str,
    *,
    etag: str | None = None,
    cache: str = "no-cache",
) -> Response:
    """A complete response with the security headers; ``cache`` is its
    ``Cache-Control`` (pages revalidate; API answers say ``no-store``)."""
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            ("Cache-Control", cache),
            *SECURITY_HEADERS,
        ]
    )
    if etag is not None:
        headers["ETag"] = etag
    return Response(status.value, status.phrase, headers, body)
