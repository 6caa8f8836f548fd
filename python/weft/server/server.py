"""The WebSocket server: the protocol of :mod:`weft.server.session` on websockets.

One server runs beside each run, on the run's event loop::

    server = await ProtocolServer.start(manager, JournalHistory(journal_path), token=token,
                                        read_token=read_token, commands=runtime,
                                        config=ServerConfig(port=0))
    server.port, server.url
    ...
    await server.close()          # after the run's last event; clients get them all first

Each connection has a :class:`~weft.server.session.Session` that decides and
this adapter that acts: it joins clients to the live :class:`~weft.server.fanout.Fanout`,
streams history pages from the journal (with flow control: a replaying client
sets its own pace), runs commands as tasks (a slow ``server.shutdown`` never
blocks a later ``server.force_shutdown``) and answers plain HTTP requests with
a 400 JSON body saying how to connect. Read-only answers (``pong``,
``history.batch``, ``checkpoint.list``) go to the asking connection only and
are never journaled. Nothing a client sends makes the adapter raise: what the
session cannot decode is an ``INVALID_COMMAND`` reply and the connection
stays open.

Resuming (``afterSeq`` in the handshake) is a catch-up: journal pages are sent
until the client is within the fan-out's ring of recent events; then the rest
comes from the ring and the client goes live in the same loop step, so the
stream it gets is gap-free, duplicate-free and in order, however fast the
run is producing events.

Why over 600 lines: it is the I/O half of one sans-I/O design (the protocol's
decisions are in :mod:`weft.server.session`, the encoding in
:mod:`weft.server.fanout`); what remains is :class:`ProtocolServer` acting on
one connection's actions (join, history pages, commands, close), which share
the connection table and the shutdown state.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from weft.errors import CommandRejectedError, WeftError
from weft.events.stream import CheckpointListEvent
from weft.server.auth import ensure_tokens, is_local_origin, is_loopback
from weft.server.fanout import Fanout, frames, text_frame
from weft.server.history import HistorySource, JournalHistory, Page
from weft.server.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_TOO_SLOW,
    CLOSE_TOO_SLOW_REASON,
    DEFAULT_PAGE_SIZE,
    HISTORY_LIMIT,
    PAGE_BYTES,
    CheckpointListData,
    CheckpointListReply,
    Code,
    CommandAck,
    HandshakeResponse,
    Pong,
    ServerReady,
    encode_message,
    history_page,
    now_iso,
)
from weft.server.seed import SeedFeed
from weft.server.session import (
    Action,
    Join,
    Ping,
    Reply,
    Run,
    SendHistory,
    ServerView,
    Session,
    error_message,
)
from weft.server.snapshot import ProgressFeed
from weft.state import Listener, Processed, StateManager
from weft.web.pages import dashboard_response

if TYPE_CHECKING:
    from weft.store.execution import ExecutionStore

log = logging.getLogger(__name__)


class EventFeed(Protocol):
    """Where the server's events come from: a run's :class:`~weft.state.StateManager`,
    or a finished execution's journal that gets no new ones (``weft ui``'s replay)."""

    @property
    def last_seq(self) -> int:
        """The newest journaled event's seq."""

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Calls ``listener`` with every event after :attr:`last_seq`; returns an unsubscribe."""


class RuntimeCommands(Protocol):
    """What the server calls for ``codon.*`` and ``server.*`` commands
    (:class:`weft.runtime.run.runtime.Runtime` is one)."""

    async def command(self, name: str, data: msgspec.Struct | None = None) -> bool:
        """Carries out ``name`` with its checked ``data``; False when it does
        not apply now. A :class:`~weft.errors.CommandRejectedError` says why."""


class RollbackHandler(Protocol):
    """What the server calls for ``checkpoint.list`` and ``rollback.*``.

    ``rollback`` returns once the work is under way; what happens is told by
    journaled events (``rollback.*``). ``checkpoint_list`` returns the list,
    which the server sends to the asking client alone. A refusal
    ("Checkpoint X not found in any run") is a :class:`~weft.errors.WeftError`
    whose message the client gets.
    """

    @property
    def rolling_back(self) -> bool:
        """Whether a rollback is running (other steering commands are refused)."""

    async def checkpoint_list(self, run_id: str | None) -> CheckpointListEvent:
        """The checkpoints of all runs (or of one), newest first."""

    async def rollback(self, command: str, data: msgspec.Struct) -> None:
        """Starts ``rollback.toCheckpoint``, ``rollback.toCodon`` or ``rollback.toLastSuccess``."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How the server listens and what it allows."""

    host: str = "127.0.0.1"
    port: int = 0
    """0: a free port is chosen (read it from :attr:`ProtocolServer.port`)."""
    max_message_size: int = 1 << 20
    """Bytes; a bigger client message closes the connection (code 1009)."""
    send_limit: int = 16 << 20
    """Bytes a live client may have waiting before it is dropped as too slow."""
    ring_size: int = 4096
    """Recent events kept in memory for handshakes and short catch-ups."""
    page_size: int = DEFAULT_PAGE_SIZE
    page_bytes: int = PAGE_BYTES
    allow_anonymous_read: bool = False
    """Let read-only clients in without a token (loopback peers that are not
    web pages of other sites only): the reference's behaviour, an opt-in."""
    ping_interval: float | None = 20.0
    """Seconds between pings to each client; None sends none."""
    ping_timeout: float | None = 20.0
    """Seconds a client has to answer a ping before it is closed (code 1011); None:
    never closed for not answering."""
    close_timeout: float = 2.0
    """Seconds a client has, when the server closes, to read what it was sent
    and answer the close; then its connection is dropped."""
    stall_timeout: float | None = 30.0
    """Seconds a client may leave bytes waiting without taking any before it is
    dropped as too slow (a reader that stopped holds no buffer for long, however
    little it was sent); None: only ``send_limit`` drops it."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``server.ready`` tells clients about the execution."""

    execution_path: str = ""
    agent_root_path: str = ""
    data_path: str | None = None
    server_version: str = ""
    replay: bool = False
    """A finished execution's journal served with no run (``server.ready``'s ``replay``)."""


LAGGING_CLOSE_TIMEOUT = 30.0

PROGRESS_INTERVAL = 0.25
"""Seconds a ``progress.snapshot`` waits after the batch that changed the
figures: the batches of that time share one snapshot (at most four a second)."""

_REJECTED_HINTS = {
    "codon.skip": "no codon is running",
    "codon.forceStop": "no codon is running",
    "codon.redo": "there is no codon to redo now",
    "codon.start": "the runtime is not waiting for a codon to start",
    "codon.next": "the runtime is not waiting for a codon to start",
}


class _Peer:
    """One connection: its session, its live cursor and its background tasks."""

    __slots__ = (
        "caught_up", "cursor", "live_batches", "progress", "seed_from", "sent", "session",
        "stalled_since", "tasks", "written", "ws",
    )  # fmt: skip

    def __init__(self, ws: ServerConnection, session: Session) -> None:
        self.ws = ws
        self.session = session
        self.cursor = 0
        self.live_batches = False
        self.progress = False
        """It asked for ``progress.snapshot`` messages."""
        self.seed_from: int | None = None
        """It asked for the seed's shapes: those made from events after this
        seq (its live start) come to it (None: it did not ask)."""
        self.tasks: set[asyncio.Task[Any]] = set()
        self.caught_up = asyncio.Event()
        """Clear while it reads the journal's pages to catch up (set once
        live, or gone): the server's close lets a catch-up finish first."""
        self.caught_up.set()
        self.written = 0
        """Bytes written to its transport (what it was sent is this less :meth:`waiting`)."""
        self.sent = 0
        self.stalled_since: float | None = None
        """Since when it has had bytes waiting and taken none (monotonic seconds)."""

    def stalled_for(self, now: float) -> float:
        """Seconds it has had bytes waiting without taking any, as of ``now``."""
        waiting = self.waiting()
        sent = self.written - waiting
        if waiting == 0 or sent != self.sent:
            self.sent = sent
            self.stalled_since = None
            return 0.0
        if self.stalled_since is None:
            self.stalled_since = now
        return now - self.stalled_since

    @property
    def open(self) -> bool:
        return self.ws.protocol.state is State.OPEN

    def waiting(self) -> int:
        """Bytes written but not yet sent (the send queue)."""
        return self.ws.transport.get_write_buffer_size() if self.open else 0

    def write(self, data: bytes) -> None:
        """Writes complete frames now (the fan-out's and replies' path)."""
        if self.open:
            self.written += len(data)
            self.ws.transport.write(data)

    def send(self, message: bytes) -> None:
        """Sends one message now, behind everything written before it."""
        self.write(text_frame(message))

    def lagging(self) -> None:
        # The close frame queues behind up to send_limit bytes; give a slow
        # reader time to reach it, so it learns why and how to resume. One
        # that reads nothing loses its connection then, and what it held.
        self.spawn(
            close_within(self.ws, CLOSE_TOO_SLOW, CLOSE_TOO_SLOW_REASON, LAGGING_CLOSE_TIMEOUT)
        )

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(_quietly(work))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def close_within(ws: ServerConnection, code: int, reason: str, grace: float) -> None:
    """Closes ``ws`` with ``code``, giving the client ``grace`` seconds to read
    what was sent before and answer; then drops the TCP connection.

    ``ServerConnection.close`` alone can wait forever: it drains the send
    buffer before its own close timeout starts, and a client that stopped
    reading never lets the buffer drain. Nothing Weft waits for may hang so.
    """
    try:
        async with asyncio.timeout(grace):
            await ws.close(code, reason)
    except TimeoutError:
        ws.transport.abort()
    except ConnectionClosed:
        pass


async def _quietly(work: Coroutine[Any, Any, None]) -> None:
    """Runs a connection's background work; its connection closing ends it quietly."""
    try:
        await work
    except ConnectionClosed:
        pass
    except Exception:
        log.exception("a WebSocket connection task failed")


class ServerError(WeftError):
    """The WebSocket server could not start."""


class ProtocolServer:
    """A running server. Use :meth:`start`; stop with :meth:`close`."""

    def __init__(
        self,
        manager: EventFeed,
        fanout: Fanout,
        history: HistorySource,
        *,
        token: str,
        read_token: str,
        commands: RuntimeCommands | None,
        rollback: RollbackHandler | None,
        config: ServerConfig,
        info: ServerInfo,
    ) -> None:
        self.token = token
        self.read_token = read_token
        self.config = config
        self.info = info
        self._manager = manager
        self._fanout = fanout
        self._history = history
        self._commands = commands
        self._rollback = rollback
        self._peers: dict[_Peer, None] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: Server | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._shutting_down = False
        self._closed = False
        self._feed: asyncio.Future[ProgressFeed] | None = None
        """The run's fold, seeded when a client first asks for progress."""
        self._feed_unsubscribe: Callable[[], None] | None = None
        self._progress_peers: dict[_Peer, None] = {}
        """Live connections that get ``progress.snapshot`` messages."""
        self._progress_timer: asyncio.TimerHandle | None = None
        self._seed: asyncio.Future[SeedFeed] | None = None
        """The seed shapes' maker, seeded when a client first asks for them."""
        self._seed_unsubscribe: Callable[[], None] | None = None
        self._seed_early: list[Processed] | None = []
        """Items that came while the maker was seeded (None once it is)."""
        self._seed_pending: list[tuple[int, bytes]] = []
        """(source seq, message) made since the last flush."""
        self._seed_peers: dict[_Peer, None] = {}
        self.port = 0
        self.host = config.host

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    async def start(
        cls,
        manager: EventFeed,
        history: HistorySource,
        *,
        token: str | None = None,
        read_token: str | None = None,
        commands: RuntimeCommands | None = None,
        rollback: RollbackHandler | None = None,
        config: ServerConfig | None = None,
        info: ServerInfo | None = None,
    ) -> ProtocolServer:
        """Subscribes to ``manager`` and starts listening.

        ``token`` is what read-write clients must present, ``read_token``
        what read-only clients may present instead (without
        ``config.allow_anonymous_read`` they must present one of the two);
        random ones are made when none is given (read them back from
        :attr:`token` and :attr:`read_token`).
        ``commands`` and ``rollback`` carry out steering commands; without
        them those commands are answered with ``NOT_AVAILABLE``.
        """
        config = config or ServerConfig()
        if info is None or not info.server_version:
            from weft import __version__

            base = info or ServerInfo()
            info = ServerInfo(
                base.execution_path, base.agent_root_path, base.data_path, __version__, base.replay
            )
        ring = max(config.ring_size, HISTORY_LIMIT)
        head = manager.last_seq
        fanout = Fanout(head, ring_size=ring, send_limit=config.send_limit)
        self = cls(
            manager,
            fanout,
            history,
            token=token or secrets.token_urlsafe(32),
            read_token=read_token or secrets.token_urlsafe(32),
            commands=commands,
            rollback=rollback,
            config=config,
            info=info,
        )
        # Subscribe first, then read what came before: nothing falls between.
        self._unsubscribe = manager.add_listener(fanout.on_processed)
        try:
            fanout.seed(await history.tail(head, ring))
            self._server = await _listen(
                config,
                self._handle,
                self._http,
            )
        except BaseException:
            self._unsubscribe()
            raise
        self.port = int(self._server.sockets[0].getsockname()[1])
        if config.stall_timeout is not None:
            watch = asyncio.get_running_loop().create_task(self._watch_stalls(config.stall_timeout))
            self._tasks.add(watch)
            watch.add_done_callback(self._tasks.discard)
        return self

    async def _watch_stalls(self, limit: float) -> None:
        """Drops the clients that took nothing of what waits for them for
        ``limit`` seconds: the fan-out's ``send_limit`` alone keeps one that
        stopped reading after a little connected, holding its buffer, forever."""
        while True:
            await asyncio.sleep(min(limit / 4, 5.0))
            now = time.monotonic()
            for peer in list(self._peers):
                if peer.open and peer.stalled_for(now) >= limit:
                    log.info("a client took nothing for %.0f s; dropping it", limit)
                    self._fanout.remove(peer)
                    self._progress_peers.pop(peer, None)
                    peer.stalled_since = None
                    peer.lagging()

    @property
    def url(self) -> str:
        """``ws://host:port`` to connect to (loopback when bound to every interface)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"ws://{host}:{self.port}"

    @property
    def clients(self) -> int:
        """Connections open now (handshaken or not)."""
        return len(self._peers)

    @property
    def live_clients(self) -> int:
        """Connections receiving live events now."""
        return self._fanout.subscribers

    def mark_shutting_down(self) -> None:
        """From now on steering commands are refused (``SHUTTING_DOWN``),
        except ``server.force_shutdown``."""
        self._shutting_down = True

    def drop_connections(self) -> None:
        """Drops every connection now, without a closing handshake (the
        process is told to end while clients are still being let go)."""
        if self._server is not None:
            for connection in list(self._server.connections):
                connection.transport.abort()

    async def close(self) -> None:
        """Sends every event seen so far, then closes every connection (1001),
        each within ``config.close_timeout`` seconds: a client that does not
        read its last events and the close frame by then is dropped.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._feed_unsubscribe is not None:
            self._feed_unsubscribe()
            self._feed_unsubscribe = None
        if self._seed_unsubscribe is not None:
            self._seed_unsubscribe()
            self._seed_unsubscribe = None
        self._fanout.flush()
        self._flush_seed()
        if self._progress_timer is not None:
            # The figures of the run's last events go out before the connections close.
            self._progress_timer.cancel()
            self._send_progress()
        if self._feed is not None and not self._feed.done():
            self._feed.cancel()
        if self._seed is not None and not self._seed.done():
            self._seed.cancel()
        if self._server is not None:
            self._server.close(close_connections=False)
            grace = self.config.close_timeout
            catching_up = [p.caught_up.wait() for p in self._peers if not p.caught_up.is_set()]
            if catching_up:
                # A client reading the journal's pages (a dashboard opened
                # late, `weft attach`) gets the rest and the run's last events
                # before its close, within the grace.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace):
                        await asyncio.gather(*catching_up)
            for peer in list(self._peers):
                task = asyncio.get_running_loop().create_task(
                    _quietly(close_within(peer.ws, CLOSE_GOING_AWAY, "Weft run ended", grace))
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            try:
                # Every connection was closed or dropped within the grace; a
                # handler still busy after that (a reply it cannot send) has
                # lost its transport and ends at its next await.
                async with asyncio.timeout(grace + 1.0):
                    await self._server.wait_closed()
            except TimeoutError:
                self.drop_connections()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._server.wait_closed()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._history.close()

    # -- connections -----------------------------------------------------------

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        upgrade = request.headers.get("Upgrade", "")
        if upgrade.lower() == "websocket":
            return None
        # A browser asking for a page gets the dashboard (weft.web), on this same port.
        page = dashboard_response(request)
        if page is not None:
            return page
        body = msgspec.json.encode(
            {
                "error": "HTTP API not available",
                "message": "This is Weft's WebSocket endpoint: connect with a WebSocket client "
                'and send {"type": "handshake", "data": {"mode": "readonly", "token": "..."}} '
                "first (the token is in the execution's .weft/server-read.token).",
                "websocket": self.url,
                "help": "See docs/protocol.md, or run `weft attach` to watch the run.",
                "dashboard": "Open " + self.url.replace("ws", "http", 1) + "/ in a browser.",
            }
        )
        headers = Headers(
            [
                ("Connection", "close"),
                ("Content-Length", str(len(body))),
                ("Content-Type", "application/json"),
                ("Access-Control-Allow-Origin", "*"),
            ]
        )
        status = http.HTTPStatus.BAD_REQUEST
        return Response(status.value, status.phrase, headers, body)

    async def _handle(self, ws: ServerConnection) -> None:
        origin = ws.request.headers.get("Origin") if ws.request is not None else None
        session = Session(
            secrets.token_hex(6),
            token=self.token,
            read_token=self.read_token,
            # A web page the user happens to visit may connect to a loopback port
            # too; only a loopback page (a local dashboard) counts as local.
            anonymous_read=self.config.allow_anonymous_read
            and is_loopback(ws.remote_address)
            and is_local_origin(origin),
            page_size=self.config.page_size,
        )
        peer = _Peer(ws, session)
        self._peers[peer] = None
        try:
            async for message in ws:
                view = ServerView(
                    rolling_back=self._rollback is not None and self._rollback.rolling_back,
                    shutting_down=self._shutting_down,
                    now=time.monotonic(),
                )
                self._perform(peer, self._receive(session, message, view))
        except ConnectionClosed:
            pass
        finally:
            self._fanout.remove(peer)
            self._peers.pop(peer, None)
            self._progress_peers.pop(peer, None)
            self._seed_peers.pop(peer, None)
            for task in list(peer.tasks):
                task.cancel()

    def _receive(self, session: Session, message: str | bytes, view: ServerView) -> Action:
        """The session's answer; a fault of its own is the client's error reply,
        not a closed connection with a traceback in the run's log."""
        try:
            return session.receive(message, view)
        except Exception as exc:
            log.warning("a client message could not be handled: %s: %s", type(exc).__name__, exc)
            return Reply(
                error_message(
                    Code.INVALID_COMMAND, f"Invalid command: it could not be handled ({exc})"
                )
            )

    def _perform(self, peer: _Peer, action: Action) -> None:
        if isinstance(action, Reply):
            peer.send(action.message)
        elif isinstance(action, Join):
            self._join(peer, action)
        elif isinstance(action, Run):
            # Commands outlive their connection: a client may send
            # server.shutdown and hang up.
            task = asyncio.get_running_loop().create_task(self._run(peer, action))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(action, SendHistory):
            peer.spawn(self._send_history(peer, action))
        elif isinstance(action, Ping):
            self._ping(peer, action)

    def _join(self, peer: _Peer, join: Join) -> None:
        fanout = self._fanout
        head = fanout.head
        history = (
            fanout.last(HISTORY_LIMIT) if join.send_previous and join.after_seq is None else []
        )
        peer.live_batches = join.live_batches
        peer.progress = join.progress
        response = HandshakeResponse(
            client_id=peer.session.client_id,
            mode=join.mode,
            event_history=[msgspec.Raw(env) for _, env in history],
            total_events=head,
            last_seq=head,
            live_batches=join.live_batches,
        )
        peer.send(encode_message("handshake.response", response))
        peer.send(
            encode_message(
                "server.ready",
                ServerReady(
                    server_version=self.info.server_version,
                    execution_path=self.info.execution_path,
                    agent_root_path=self.info.agent_root_path,
                    data_path=self.info.data_path,
                    port=self.port,
                    replay=self.info.replay,
                ),
            )
        )
        if join.after_seq is None:
            peer.cursor = head
            peer.session.joined(history[0][0] if history else head + 1)
            fanout.add(peer)
            if join.seed_events:
                self._seed_live(peer)
            if peer.progress:
                peer.spawn(self._progress_live(peer))
            return
        # A cursor past the journal's end cannot be honoured: start from the end.
        peer.cursor = min(join.after_seq, head)
        peer.session.joined(peer.cursor + 1)
        peer.caught_up.clear()
        peer.spawn(self._catch_up(peer, join.page_size, join.seed_events))

    async def _catch_up(self, peer: _Peer, page_size: int, seed_events: bool) -> None:
        fanout = self._fanout
        # The next page is read from the journal while this one is being sent:
        # the reader thread and the socket work at once (a dashboard's first
        # load of a long run is mostly this loop).
        ahead: asyncio.Future[Page] | None = None
        try:
            while peer.open:
                tail = fanout.since(peer.cursor)
                if tail is not None:
                    # The ring holds the rest: send it and go live in this same step,
                    # so no event can fall between the pages and the live stream.
                    self._send_rows(peer, tail, page_size, None, peer.cursor)
                    peer.cursor = fanout.head
                    fanout.add(peer)
                    peer.caught_up.set()
                    if seed_events:
                        self._seed_live(peer)
                    if peer.progress:
                        await self._progress_live(peer)
                    return
                page = await (
                    ahead
                    or self._history.page(
                        peer.cursor, fanout.head, page_size, self.config.page_bytes
                    )
                )
                ahead = None
                if page.count == 0:
                    log.error("the journal has no events after %d for a catch-up", peer.cursor)
                    await close_within(
                        peer.ws, CLOSE_GOING_AWAY, "journal unreadable", self.config.close_timeout
                    )
                    return
                if page.last_seq < fanout.head:
                    ahead = asyncio.ensure_future(
                        self._history.page(
                            page.last_seq, fanout.head, page_size, self.config.page_bytes
                        )
                    )
                await peer.ws.send(history_page(page.events, True, page.last_seq, None), text=True)
                peer.cursor = page.last_seq
        finally:
            peer.caught_up.set()
            if ahead is not None:
                # Not needed after all (the ring took over, or the client left).
                ahead.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ahead

    def _send_rows(
        self,
        peer: _Peer,
        rows: list[tuple[int, bytes]],
        page_size: int,
        command_id: str | int | None,
        after: int,
        more_after: bool = False,
    ) -> None:
        """Sends ring rows as pages now; the last one says ``hasMore: more_after``."""
        if not rows:
            peer.send(history_page(b"", more_after, after, command_id))
            return
        for start in range(0, len(rows), page_size):
            chunk = rows[start : start + page_size]
            last = start + page_size >= len(rows)
            events = b",".join(env for _, env in chunk)
            peer.send(history_page(events, more_after or not last, chunk[-1][0], command_id))

    async def _send_history(self, peer: _Peer, request: SendHistory) -> None:
        cursor, upto = request.after, request.upto
        sent = False
        while cursor < upto and peer.open:
            rows = self._fanout.since(cursor, upto)
            if rows is not None:
                self._send_rows(peer, rows, request.page_size, request.command_id, cursor)
                return
            page = await self._history.page(cursor, upto, request.page_size, self.config.page_bytes)
            if page.count == 0:
                break
            more = page.last_seq < upto
            await peer.ws.send(
                history_page(page.events, more, page.last_seq, request.command_id), text=True
            )
            sent = True
            cursor = page.last_seq
            if not more:
                return
        if not sent or cursor < upto:
            peer.send(history_page(b"", False, cursor, request.command_id))

    # -- the seed's shapes -----------------------------------------------------------

    def _seed_live(self, peer: _Peer) -> None:
        """``peer`` is live and asked for the seed's shapes: those of the events
        it gets live from now on come to it, each after its event."""
        peer.seed_from = peer.cursor
        self._seed_peers[peer] = None
        if self._seed is not None:
            return
        feed = SeedFeed()
        head = self._manager.last_seq
        # Subscribed first, then the journal up to then is folded (off the
        # loop): the items that come meanwhile wait, none is missed or doubled.
        self._seed_unsubscribe = self._manager.add_listener(self._seed_item)

        async def seed() -> SeedFeed:
            await self._history.fold(head, feed.fold_row)
            early, self._seed_early = self._seed_early or [], None
            for item in early:
                self._seed_made(item, feed.on_processed(item))
            return feed

        self._seed = asyncio.ensure_future(seed())
        self._seed.add_done_callback(self._seed_failed)

    def _seed_failed(self, done: asyncio.Future[SeedFeed]) -> None:
        if done.cancelled() or done.exception() is None:
            return
        log.error("the seed's shapes could not be made from the journal: %s", done.exception())
        for peer in list(self._seed_peers):
            peer.send(
                error_message(
                    Code.NOT_AVAILABLE,
                    f"seedEvents is not available: the journal could not be read "
                    f"({done.exception()})",
                )
            )
        self._seed_peers.clear()

    def _seed_item(self, item: Processed) -> None:
        """The StateManager listener of the seed's shapes (after the fan-out's)."""
        if self._seed_early is not None:
            self._seed_early.append(item)
            return
        seed = self._seed
        if seed is None or not seed.done() or seed.cancelled() or seed.exception() is not None:
            return  # it failed: its clients were told (_seed_failed)
        self._seed_made(item, seed.result().on_processed(item, make=bool(self._seed_peers)))

    def _seed_made(self, item: Processed, messages: list[bytes]) -> None:
        if not messages or not self._seed_peers:
            return
        if not self._seed_pending:
            # After the fan-out's flush of the same batch (scheduled first):
            # each seed message follows the event it was made from.
            asyncio.get_running_loop().call_soon(self._flush_seed)
        self._seed_pending.extend((item.seq, m) for m in messages)

    def _flush_seed(self) -> None:
        pending, self._seed_pending = self._seed_pending, []
        if not pending:
            return
        for peer in list(self._seed_peers):
            start = peer.seed_from
            if start is None:
                continue
            ours = [m for seq, m in pending if start < seq <= peer.cursor]
            if ours:
                peer.write(frames(ours))

    # -- progress ------------------------------------------------------------------

    def _progress_feed(self) -> asyncio.Future[ProgressFeed]:
        """The run's fold, seeded from the journal the first time a client asks:
        subscribed first, then the journal up to then is read (off the loop);
        the live items that come meanwhile wait in the feed."""
        if self._feed is None:
            feed = ProgressFeed(self._progress_changed)
            head = self._manager.last_seq
            self._feed_unsubscribe = self._manager.add_listener(feed.on_processed)

            async def seed() -> ProgressFeed:
                await self._history.fold(head, feed.fold_row)
                feed.seed_done()
                return feed

            self._feed = asyncio.ensure_future(seed())
        return self._feed

    async def _progress_live(self, peer: _Peer) -> None:
        """``peer`` is live: it gets the figures now, then with the batches."""
        try:
            feed = await asyncio.shield(self._progress_feed())
        except Exception as exc:
            log.error("the run's figures could not be folded from the journal: %s", exc)
            peer.send(
                error_message(Code.NOT_AVAILABLE, f"progress.snapshot is not available: {exc}")
            )
            return
        if self._closed or not peer.open:
            return
        peer.send(encode_message("progress.snapshot", feed.snapshot()))
        self._progress_peers[peer] = None

    def _progress_changed(self) -> None:
        """A batch changed the fold: a snapshot follows within PROGRESS_INTERVAL."""
        if self._progress_timer is None and self._progress_peers:
            self._progress_timer = asyncio.get_running_loop().call_later(
                PROGRESS_INTERVAL, self._send_progress
            )

    def _send_progress(self) -> None:
        """One snapshot, encoded once, to every live connection that asked."""
        self._progress_timer = None
        feed = self._feed
        if not self._progress_peers or feed is None or not feed.done() or feed.cancelled():
            return
        if feed.exception() is not None:
            return  # each waiting connection was told (_progress_live)
        frame = text_frame(encode_message("progress.snapshot", feed.result().snapshot()))
        for peer in list(self._progress_peers):
            peer.write(frame)

    def _ping(self, peer: _Peer, ping: Ping) -> None:
        _, stamp = now_iso()
        if not ping.everyone:
            pong = Pong(message="pong", timestamp=stamp, command_id=ping.command_id)
            peer.send(encode_message("pong", pong))
            return
        message = encode_message(
            "pong", Pong(message="pong", timestamp=stamp, client_id=peer.session.client_id)
        )
        for other in self._peers:
            if other.session.handshaken:
                other.send(message)

    async def _run(self, peer: _Peer, run: Run) -> None:
        name, command_id = run.command, run.command_id

        def fail(code: str, message: str) -> None:
            peer.send(error_message(code, message, command=name, command_id=command_id))

        try:
            if run.route == "runtime":
                if self._commands is None:
                    fail(Code.NOT_AVAILABLE, f"{name}: no runtime is attached to this server")
                    return
                if name in ("server.shutdown", "server.force_shutdown"):
                    self._shutting_down = True
                accepted = await self._commands.command(name, run.data)
            else:
                if self._rollback is None:
                    fail(
                        Code.NOT_AVAILABLE,
                        f"{name}: checkpoints and rollback are not available from this server yet",
                    )
                    return
                if isinstance(run.data, CheckpointListData):
                    listing = await self._rollback.checkpoint_list(run.data.run_id)
                    peer.send(
                        encode_message(
                            "checkpoint.list",
                            CheckpointListReply(
                                checkpoints=listing.checkpoints,
                                current_branch=listing.current_branch,
                                run_id=listing.run_id,
                                command_id=command_id,
                            ),
                        )
                    )
                else:
                    await self._rollback.rollback(name, run.data)
                accepted = True
        except CommandRejectedError as exc:
            fail(exc.code or Code.COMMAND_REJECTED, str(exc))
            return
        except WeftError as exc:
            fail(Code.COMMAND_FAILED, str(exc))
            return
        except Exception as exc:
            log.exception("command %s failed", name)
            fail(Code.COMMAND_FAILED, f"Command execution failed: {exc}")
            return
        if accepted:
            peer.send(
                encode_message("command.ack", CommandAck(command_id=command_id, command=name))
            )
        else:
            hint = _REJECTED_HINTS.get(name, "it does not apply now")
            fail(Code.COMMAND_REJECTED, f"{name} refused: {hint}")


async def _listen(
    config: ServerConfig,
    handler: Callable[[ServerConnection], Coroutine[Any, Any, None]],
    http_handler: Callable[[ServerConnection, Request], Response | None],
) -> Server:
    try:
        return await serve(
            handler,
            config.host,
            config.port,
            process_request=http_handler,
            compression=None,
            max_size=config.max_message_size,
            ping_interval=config.ping_interval,
            ping_timeout=config.ping_timeout,
            close_timeout=config.close_timeout,
            server_header=None,
        )
    except OSError as e:
        raise ServerError(
            f"cannot listen on {config.host}:{config.port}: {e.strerror or e}; "
            "choose another --port (0 picks a free one) or --host"
        ) from e


async def start_server(
    manager: StateManager,
    store: ExecutionStore,
    *,
    commands: RuntimeCommands | None = None,
    rollback: RollbackHandler | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    info: ServerInfo | None = None,
    allow_anonymous_read: bool = False,
    idle_timeout: float = 0,
) -> ProtocolServer:
    """The server of a run: the execution's tokens (made if missing), replay from
    its journal, the chosen port written to the lock file. ``idle_timeout`` (the
    ``idleTimeout`` setting, seconds): each client is pinged that often and closed
    when it does not answer within as long; 0 sends no pings and closes no one."""
    tokens = await asyncio.to_thread(ensure_tokens, store.weft_dir)
    server = await ProtocolServer.start(
        manager,
        JournalHistory(Path(store.journal.path)),
        token=tokens.readwrite,
        read_token=tokens.read,
        commands=commands,
        rollback=rollback,
        config=ServerConfig(
            host=host,
            port=port,
            allow_anonymous_read=allow_anonymous_read,
            ping_interval=idle_timeout or None,
            ping_timeout=idle_timeout or None,
        ),
        info=info,
    )
    if store.lock is not None:
        lock = store.lock
        try:
            await asyncio.to_thread(lock.update, port=server.port)
        except BaseException:
            await server.close()
            raise
    return server
