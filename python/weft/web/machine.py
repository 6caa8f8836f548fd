"""``weft ui``: one dashboard over every execution on the machine.

One HTTP server (websockets' own HTTP layer: the dashboard needs ``GET``
only) serves the list page and a small JSON API behind a token:

* ``GET /api/executions``: the executions under the root (see
  :mod:`weft.web.listing`);
* ``GET /api/open/<id>``: where to watch one: a live run's own server (its
  port is in the lock file; the token is the execution's, read from its
  ``.weft/`` like ``weft attach`` does), or, for a finished execution, a
  read-only replay server started for it on a free port: the same
  :class:`~weft.server.ProtocolServer` over the journal, with no runtime and
  a feed that never grows, so the page replays it exactly as it would a run.

The API takes its token in an ``Authorization: Bearer`` header only: never
in a query string, so never in a log, and a page of another site cannot
send it (the server answers no CORS preflight). The list page gets the
token from its URL fragment. The server binds to loopback unless told
otherwise; it hands out the executions' tokens, so its own token guards
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from weft.server.auth import client_token, token_matches
from weft.server.history import JournalHistory
from weft.server.server import ProtocolServer, ServerConfig, ServerError, ServerInfo
from weft.state import Listener
from weft.store.execution import DATABASE
from weft.web.assets import asset
from weft.web.listing import ExecutionEntry, list_executions, read_execution
from weft.web.pages import STATIC_PREFIX, dashboard_url, path_of, response
from weft.web.pages import serve as serve_asset

OPEN_PREFIX = "/api/open/"


class FinishedJournal:
    """The event feed of an execution nobody runs: its journal's end, and no new events."""

    def __init__(self, last_seq: int) -> None:
        self._last_seq = last_seq

    @property
    def last_seq(self) -> int:
        """The journal's newest seq."""
        return self._last_seq

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Nothing will ever be heard: the execution is not running."""
        return lambda: None


async def start_replay(
    database: Path, *, host: str = "127.0.0.1", execution: Path | None = None
) -> ProtocolServer:
    """A read-only replay server over a finished execution's journal on a free
    port: the protocol server with no runtime and a feed that never grows, whose
    ``server.ready`` says ``replay`` (the page then says it is a finished execution)."""
    end = await asyncio.to_thread(journal_end, database)
    execution = execution if execution is not None else database.parent.parent
    return await ProtocolServer.start(
        FinishedJournal(end),
        JournalHistory(database),
        config=ServerConfig(host=host, port=0),
        info=ServerInfo(
            execution_path=str(execution),
            agent_root_path=str(execution / "agentRoot"),
            replay=True,
        ),
    )


def journal_end(database: Path) -> int:
    """The newest seq in a journal (0 when it is empty or missing)."""
    if not database.exists():
        return 0
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        row = conn.execute("SELECT max(seq) FROM events").fetchone()
    finally:
        conn.close()
    return int(row[0] or 0)


@dataclass(slots=True)
class MachineDashboard:
    """The ``weft ui`` server. Use :meth:`start`; stop with :meth:`close`."""

    root: Path
    host: str = "127.0.0.1"
    port: int = 0
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    _server: Server | None = None
    _replays: dict[str, ProtocolServer] = field(default_factory=dict)

    async def start(self) -> None:
        """Starts listening (``port`` 0 picks a free one; read :attr:`port` after)."""
        try:
            self._server = await serve(
                _refuse_websocket,
                self.host,
                self.port,
                process_request=self._http,
                compression=None,
                server_header=None,
            )
        except OSError as e:
            raise ServerError(
                f"cannot listen on {self.host}:{self.port}: {e.strerror or e}; "
                "choose another --port (0 picks a free one) or --host"
            ) from e
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """The list page's address, without the token."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/"

    async def close(self) -> None:
        """Stops the replay servers and the list server (idempotent)."""
        replays, self._replays = list(self._replays.values()), {}
        for replay in replays:
            await replay.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # -- requests ---------------------------------------------------------------

    async def _http(self, connection: ServerConnection, request: Request) -> Response:
        path = path_of(request)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return _json(http.HTTPStatus.NOT_FOUND, {"error": "no WebSocket endpoint here"})
        if path in ("/", "/index.html", "/list.html"):
            page = asset("list.html")
            assert page is not None, "list.html ships with the package"
            return serve_asset(page, request)
        if path.startswith(STATIC_PREFIX):
            found = asset(path.removeprefix(STATIC_PREFIX))
            if found is None:
                return _json(http.HTTPStatus.NOT_FOUND, {"error": "not found"})
            return serve_asset(found, request)
        if path == "/favicon.ico":
            return response(http.HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        if not path.startswith("/api/"):
            return _json(http.HTTPStatus.NOT_FOUND, {"error": "not found"})
        if not self._authorized(request):
            return _json(
                http.HTTPStatus.UNAUTHORIZED,
                {
                    "error": "a token is needed",
                    "message": "send the token `weft ui` printed "
                    "as 'Authorization: Bearer <token>'",
                },
            )
        if path == "/api/executions":
            entries = await asyncio.to_thread(list_executions, self.root)
            now = time.time()
            return _json(
                http.HTTPStatus.OK,
                {"root": str(self.root), "executions": [e.to_json(now) for e in entries]},
            )
        if path.startswith(OPEN_PREFIX):
            return await self._open(path.removeprefix(OPEN_PREFIX))
        return _json(http.HTTPStatus.NOT_FOUND, {"error": "not found"})

    def _authorized(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token_matches(self.token, given.strip())

    async def _open(self, ident: str) -> Response:
        if not ident or "/" in ident or ident in (".", ".."):
            return _json(http.HTTPStatus.NOT_FOUND, {"error": f"no execution {ident!r}"})
        entry = await asyncio.to_thread(read_execution, self.root / ident)
        if entry is None:
            return _json(
                http.HTTPStatus.NOT_FOUND,
                {"error": f"no execution {ident!r} under {self.root}"},
            )
        if entry.port is not None:
            return await self._open_live(entry, entry.port)
        return await self._open_replay(entry)

    async def _open_live(self, entry: ExecutionEntry, port: int) -> Response:
        stale = self._replays.pop(entry.id, None)
        if stale is not None:
            await stale.close()
        found = await asyncio.to_thread(client_token, entry.path / ".weft")
        if found is None:
            return _json(
                http.HTTPStatus.FORBIDDEN,
                {"error": f"cannot read the tokens of {entry.path} (they belong to its owner)"},
            )
        token, mode = found
        return _json(
            http.HTTPStatus.OK,
            {"url": f"http://127.0.0.1:{port}/", "token": token, "mode": mode, "live": True},
        )

    async def _open_replay(self, entry: ExecutionEntry) -> Response:
        replay = self._replays.get(entry.id)
        if replay is None:
            database = entry.path / ".weft" / DATABASE
            try:
                replay = await start_replay(database, host=self.host, execution=entry.path)
            except (sqlite3.Error, OSError, ServerError) as e:
                return _json(
                    http.HTTPStatus.INTERNAL_SERVER_ERROR,
                    {"error": f"cannot replay {entry.path}: {e}"},
                )
            self._replays[entry.id] = replay
        return _json(
            http.HTTPStatus.OK,
            {
                "url": dashboard_url(replay),
                "token": replay.read_token,
                "mode": "readonly",
                "live": False,
            },
        )


async def _refuse_websocket(ws: ServerConnection) -> None:
    # Never reached: process_request answers every request, upgrades included.
    with contextlib.suppress(Exception):
        await ws.close()


def _json(status: http.HTTPStatus, doc: dict[str, Any]) -> Response:
    return response(status, msgspec.json.encode(doc), "application/json", cache="no-store")
