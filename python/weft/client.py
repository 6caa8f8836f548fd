"""An async client for Weft's WebSocket protocol: follow a run, steer it.

::

    async with weft.client.connect(url, token=read_token, mode="readonly") as c:
        async for event in c.events(replay=True):      # the whole journal, then live
            print(event.seq, event.type, event.data)

    async with weft.client.connect(url, token=token) as c:   # read-write
        await c.command("codon.next")

Every connection needs a token: the execution's read-write token
(``.weft/server.token``) or its read token (``.weft/server-read.token``, with
``mode="readonly"``); :func:`weft.server.client_token` picks the best one a
process can read. Only a server started with ``--allow-anonymous-read`` lets
a token-less client read.

:meth:`Client.events` yields every journaled event exactly once and in seq
order. ``replay=True`` starts from the journal's first event, ``replay=n``
after event ``n``, ``replay=False`` with the first live event. When the
connection drops (the network, or the server dropping a client that read too
slowly) the client reconnects and resumes right after the last event it
received (a handshake with ``afterSeq``), so nothing is lost or repeated; it
stops when the server says the run ended (close code 1001).

Live events come in ``live.batch`` messages (many per message). Events wait
in a bounded buffer for the consumer; when the consumer is slower than the run,
the buffer fills, the client stops reading, the server drops it as too slow,
and it resumes from its cursor once the consumer catches up: memory stays
bounded and the run is never slowed.

Why over 600 lines: it is one class, :class:`Client`, around one connection
(handshake, reconnect with the cursor, the bounded buffer, command replies);
its error classes and wire structs are short, and moving them out would not
make the connection's state machine smaller.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import msgspec
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from weft.errors import WeftError
from weft.server.protocol import CLOSE_GOING_AWAY, HistoryBatch, LiveBatch, ServerReady

log = logging.getLogger(__name__)

Mode = Literal["readonly", "readandwrite"]


class ClientError(WeftError):
    """Base of the client's errors."""


class HandshakeError(ClientError):
    """The server refused the handshake (``code`` says why, e.g. ``INVALID_TOKEN``)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class CommandError(ClientError):
    """The server refused a command or it failed (``code``: ``INSUFFICIENT_PERMISSIONS``,
    ``COMMAND_REJECTED``, ``NOT_AVAILABLE``...)."""

    def __init__(self, message: str, code: str, command: str) -> None:
        super().__init__(message)
        self.code = code
        self.command = command


class ConnectionLostError(ClientError):
    """The server could not be reached again."""


class ProtocolViolationError(ClientError):
    """The server broke the protocol's guarantees (a gap in the event sequence)."""


class Event(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One journaled event: ``seq`` orders them, ``type`` and ``data`` say what happened.

    Not tracked by the garbage collector (an event cannot be part of a cycle
    unless its ``data`` is made to point back at it): at tens of thousands of
    events a second, tracked events made collections pause the client for
    milliseconds and tripled the tail latency.
    """

    id: str
    seq: int
    timestamp: str
    type: str
    data: Any = None


class _Head(msgspec.Struct, kw_only=True):
    """Any server message, its data left undecoded."""

    type: str
    id: str = ""
    timestamp: str = ""
    seq: int | None = None
    data: msgspec.Raw = msgspec.Raw(b"null")


class _Reply(msgspec.Struct, rename="camel", kw_only=True):
    """The fields of connection replies the client routes on."""

    command_id: str | int | None = None
    message: str = ""
    code: str = ""
    command: str = ""
    client_id: str | None = None


class _Handshake(msgspec.Struct, rename="camel", kw_only=True):
    client_id: str
    mode: Mode
    event_history: list[Event]
    total_events: int
    last_seq: int
    live_batches: bool = False
    protocol_version: int = 0


_head = msgspec.json.Decoder(_Head)
_reply = msgspec.json.Decoder(_Reply)
_handshake = msgspec.json.Decoder(_Handshake)
_ready = msgspec.json.Decoder(ServerReady)
_history = msgspec.json.Decoder(HistoryBatch[Event])
_live = msgspec.json.Decoder(LiveBatch[Event])
_encoder = msgspec.json.Encoder()

_END = object()


class _Sync:
    """One outstanding ``history.sync``: its pages, in order."""

    def __init__(self) -> None:
        self.pages: asyncio.Queue[list[Event] | BaseException | object] = asyncio.Queue()


class Client:
    """A connection to a Weft server. Use :func:`connect`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        mode: Mode,
        after_seq: int | None,
        send_previous: bool,
        reconnect: bool,
        reconnect_timeout: float,
        buffer: int,
        open_timeout: float,
        page_size: int | None,
    ) -> None:
        self.url = url
        self.token = token
        self.mode: Mode = mode
        self._after_seq = after_seq
        self._send_previous = send_previous
        self._reconnect = reconnect
        self._reconnect_timeout = reconnect_timeout
        self._buffer_limit = max(buffer, 1)
        self._open_timeout = open_timeout
        self._page_size = page_size
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._buf: deque[Event] = deque()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._online = asyncio.Event()
        """Set while connected, and once reading ended for good."""
        self._received = 0
        """The newest seq put in the buffer (the resume point)."""
        self.cursor = 0
        """The newest seq :meth:`events` yielded."""
        self._floor = 1
        self._ended = False
        self._failure: BaseException | None = None
        self._closing = False
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[_Reply]] = {}
        self._listings: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._syncs: dict[str, _Sync] = {}
        self.client_id = ""
        self.server: ServerReady | None = None
        """What the server said about itself in ``server.ready``."""
        self.history: list[Event] = []
        """The handshake's ``eventHistory`` (with ``send_previous``)."""
        self.joined_at = 0
        """The newest seq when this client joined: live events come after it."""
        self.reconnects = 0

    # -- opening and closing ---------------------------------------------------

    async def _open(self, after_seq: int | None) -> None:
        try:
            ws = await ws_connect(
                self.url,
                max_size=None,
                max_queue=4,  # received messages wait in this client's own buffer instead
                compression=None,
                open_timeout=self._open_timeout,
                close_timeout=2,
            )
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as e:
            raise ConnectionLostError(f"cannot connect to {self.url}: {e}") from e
        data: dict[str, Any] = {"mode": self.mode, "liveBatches": True}
        if self.token is not None:
            data["token"] = self.token
        if after_seq is not None:
            data["afterSeq"] = after_seq
        elif self._send_previous:
            data["sendPreviousEvents"] = True
        if self._page_size is not None:
            data["pageSize"] = self._page_size
        try:
            async with asyncio.timeout(self._open_timeout):
                shake = await self._handshake(ws, data)
        except TimeoutError as e:
            await ws.close()
            raise ConnectionLostError(f"{self.url} did not answer the handshake") from e
        except BaseException:
            await ws.close()
            raise
        self._ws = ws
        self.client_id = shake.client_id
        self.mode = shake.mode
        if after_seq is None:
            self.history = shake.event_history
            self.joined_at = shake.last_seq
            self._received = shake.last_seq
            self._floor = shake.event_history[0].seq if shake.event_history else shake.last_seq + 1
        else:
            self._received = min(after_seq, shake.last_seq)

    async def _handshake(self, ws: ClientConnection, data: dict[str, Any]) -> _Handshake:
        await ws.send(_encoder.encode({"id": "handshake", "type": "handshake", "data": data}))
        head = _head.decode(await ws.recv(decode=False))
        if head.type == "error":
            reply = _reply.decode(head.data)
            raise HandshakeError(f"handshake refused: {reply.message}", reply.code)
        if head.type != "handshake.response":
            raise ProtocolViolationError(f"expected handshake.response, got {head.type}")
        shake = _handshake.decode(head.data)
        head = _head.decode(await ws.recv(decode=False))
        if head.type != "server.ready":
            raise ProtocolViolationError(f"expected server.ready, got {head.type}")
        self.server = _ready.decode(head.data)
        return shake

    async def _start(self) -> None:
        await self._open(self._after_seq)
        if self._after_seq is not None:
            self.joined_at = self._received
            self._floor = self._received + 1
        self.cursor = self.joined_at
        self._online.set()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def close(self) -> None:
        """Closes the connection (pending commands fail with :class:`ConnectionLostError`)."""
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._fail_pending(ConnectionLostError("the client was closed"))
        self._ended = True
        self._wake.set()

    # -- reading -----------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                ws = self._ws
                assert ws is not None
                try:
                    async for message in ws:
                        await self._dispatch(message)
                    code = ws.close_code
                except ConnectionClosed as closed:
                    code = closed.rcvd.code if closed.rcvd is not None else None
                self._online.clear()
                self._fail_pending(ConnectionLostError(f"the connection closed (code {code})"))
                if self._closing or code in (CLOSE_GOING_AWAY, 1000) or not self._reconnect:
                    self._ended = True
                    return
                await self._resume()
                self._online.set()
        except ClientError as e:
            self._failure = e
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            self._failure = ProtocolViolationError(f"the server sent a malformed message: {e}")
        finally:
            # Whatever ended the reading, nobody may wait for it forever.
            self._online.set()
            self._wake.set()

    async def _resume(self) -> None:
        deadline = time.monotonic() + self._reconnect_timeout
        delay = 0.05
        while True:
            # Wait for room first: reconnecting into a full buffer would only
            # get this client dropped again.
            await self._room.wait()
            try:
                await self._open(self._received)
                self.reconnects += 1
                return
            except ConnectionLostError:
                if time.monotonic() + delay > deadline:
                    raise ConnectionLostError(
                        f"lost the connection to {self.url} and could not reconnect "
                        f"within {self._reconnect_timeout:.0f} s"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _dispatch(self, message: str | bytes) -> None:
        head = _head.decode(message)
        kind = head.type
        if head.seq is not None:
            event = Event(
                id=head.id,
                seq=head.seq,
                timestamp=head.timestamp,
                type=kind,
                data=msgspec.json.decode(head.data),
            )
            await self._put([event])
        elif kind == "live.batch":
            await self._put(_live.decode(head.data).events)
        elif kind == "history.batch":
            page = _history.decode(head.data)
            sync = self._syncs.get(str(page.command_id)) if page.command_id is not None else None
            if sync is not None:
                sync.pages.put_nowait(page.events)
                if not page.has_more:
                    sync.pages.put_nowait(_END)
            else:
                await self._put(page.events)  # a resume's catch-up: part of the stream
        elif kind == "checkpoint.list":
            listing = msgspec.json.decode(head.data)
            key = str(listing.get("commandId")) if isinstance(listing, dict) else ""
            pending = self._listings.pop(key, None)
            if pending is not None and not pending.done():
                pending.set_result(listing)
        elif kind in ("command.ack", "error", "pong"):
            reply = _reply.decode(head.data)
            key = str(reply.command_id)
            future = self._waiting.pop(key, None)
            if future is not None and not future.done():
                if kind == "error":
                    future.set_exception(CommandError(reply.message, reply.code, reply.command))
                else:
                    future.set_result(reply)
            elif kind == "error":
                sync = self._syncs.get(key)
                if sync is not None:
                    sync.pages.put_nowait(CommandError(reply.message, reply.code, reply.command))
                else:
                    log.warning("server error: %s (%s)", reply.message, reply.code)

    async def _put(self, events: list[Event]) -> None:
        if not events:
            return
        if not self._syncs and len(self._buf) >= self._buffer_limit:
            # Full: stop reading until the consumer makes room (see module doc).
            self._room.clear()
            await self._room.wait()
        self._buf.extend(events)
        self._received = max(self._received, events[-1].seq)
        self._wake.set()

    def _fail_pending(self, error: ClientError) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()
        for sync in self._syncs.values():
            sync.pages.put_nowait(error)

    # -- the public face -------------------------------------------------------

    async def events(self, *, replay: bool | int = False) -> AsyncIterator[Event]:
        """Every event from the start point on, exactly once, in seq order.

        ``replay``: True for the whole journal, an int to start after that
        seq, False for live events only. Ends when the server closes because
        the run ended; raises :class:`ConnectionLostError` when it cannot reconnect.
        """
        async for batch in self.batches(replay=replay):
            for event in batch:
                yield event

    async def batches(self, *, replay: bool | int = False) -> AsyncIterator[list[Event]]:
        """:meth:`events` a batch at a time (cheaper when events come fast)."""
        if replay is not False:
            after = 0 if replay is True else int(replay)
            if after >= self.cursor:
                self.cursor = after  # live events up to it are skipped
            else:
                # History is older than anything yielded so far: check it from
                # its own start, then go on where the live stream stands.
                resume_at = self.cursor
                self.cursor = after
                if after < self._floor - 1:
                    async for page in self._sync(after):
                        fresh = self._take(page)
                        if fresh:
                            yield fresh
                fresh = self._take([e for e in self.history if e.seq > self.cursor])
                if fresh:
                    yield fresh  # the handshake's history comes right after the pages
                self.cursor = max(resume_at, self.cursor)
        while True:
            while not self._buf:
                if self._failure is not None:
                    raise self._failure
                if self._ended:
                    return
                self._wake.clear()
                await self._wake.wait()
            batch = list(self._buf)
            self._buf.clear()
            self._room.set()
            fresh = self._take(batch)
            if fresh:
                yield fresh

    def _take(self, events: list[Event]) -> list[Event]:
        """The events not yielded yet; checks that none is missing."""
        cursor = self.cursor
        if events and events[0].seq == cursor + 1 and events[-1].seq == cursor + len(events):
            self.cursor = events[-1].seq  # the common case: exactly the next ones
            return events
        fresh = []
        for event in events:
            if event.seq <= cursor:
                continue  # already yielded
            if event.seq != cursor + 1:
                raise ProtocolViolationError(
                    f"event {cursor + 1} is missing: the server sent {event.seq} next"
                )
            fresh.append(event)
            cursor = event.seq
        self.cursor = cursor
        return fresh

    async def _sync(self, after: int) -> AsyncIterator[list[Event]]:
        """History pages from ``after`` on; after a drop, asks again on the new
        connection from the newest event already yielded (:attr:`cursor`)."""
        first = after
        while True:
            key = f"sync-{next(self._ids)}"
            sync = self._syncs[key] = _Sync()
            self._room.set()  # the pages come behind whatever the reader holds
            try:
                await self._send({"id": key, "type": "history.sync", "data": {"afterSeq": after}})
                while True:
                    item = await sync.pages.get()
                    if item is _END:
                        self._floor = first + 1
                        return
                    if isinstance(item, BaseException):
                        raise item
                    assert isinstance(item, list)
                    yield item
            except ConnectionLostError:
                if not self._reconnect or self._closing:
                    raise
            finally:
                del self._syncs[key]
            await self._online.wait()
            if self._failure is not None:
                raise self._failure
            if self._ended:
                raise ConnectionLostError("the server ended the stream during a history sync")
            after = self.cursor

    async def _send(self, message: Mapping[str, Any]) -> None:
        ws = self._ws
        if ws is None:
            raise ConnectionLostError("not connected")
        try:
            await ws.send(_encoder.encode(message))
        except ConnectionClosed as e:
            raise ConnectionLostError(f"the connection closed: {e}") from e

    async def command(
        self, name: str, data: Mapping[str, Any] | None = None, *, timeout: float = 30.0
    ) -> None:
        """Sends a command and waits until the server accepted it (``command.ack``);
        raises :class:`CommandError` with the server's reason otherwise."""
        key = f"cmd-{next(self._ids)}"
        future: asyncio.Future[_Reply] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        message: dict[str, Any] = {"id": key, "type": name}
        if data is not None:
            message["data"] = dict(data)
        try:
            await self._send(message)
            async with asyncio.timeout(timeout):
                await future
        finally:
            self._waiting.pop(key, None)

    async def message(self, text: str, *, urgent: bool = False, timeout: float = 30.0) -> None:
        """Sends ``codon.message``: a message for the running codon's agent.
        Urgent, the agent is interrupted and resumed with it; otherwise it joins
        the next prompt. Raises :class:`CommandError` when the server refuses."""
        await self.command("codon.message", {"message": text, "urgent": urgent}, timeout=timeout)

    async def breaker_reset(self, provider: str, *, timeout: float = 30.0) -> None:
        """Sends ``breaker.reset``: closes ``provider``'s circuit breaker
        (``anthropic``, ``openai``, ``google``); codons waiting on it go at
        once. Raises :class:`CommandError` when the server refuses."""
        await self.command("breaker.reset", {"provider": provider}, timeout=timeout)

    async def checkpoint_list(
        self, run_id: str | None = None, *, timeout: float = 30.0
    ) -> dict[str, Any]:
        """The execution's checkpoints (of every run, or of ``run_id``), newest
        first: the data of the server's ``checkpoint.list`` answer
        (``checkpoints``, ``currentBranch``). Raises :class:`CommandError` when refused."""
        key = f"cmd-{next(self._ids)}"
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[_Reply] = loop.create_future()
        listing: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._waiting[key] = acked
        self._listings[key] = listing
        message: dict[str, Any] = {"id": key, "type": "checkpoint.list"}
        if run_id is not None:
            message["data"] = {"runId": run_id}
        try:
            await self._send(message)
            async with asyncio.timeout(timeout):
                await acked  # the server sends the list, then the ack
                return await listing
        finally:
            self._waiting.pop(key, None)
            self._listings.pop(key, None)

    async def ping(self, *, timeout: float = 10.0) -> float:
        """Round-trip time of a protocol ``ping``, in seconds."""
        key = f"ping-{next(self._ids)}"
        future: asyncio.Future[_Reply] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        started = time.perf_counter()
        try:
            await self._send({"id": key, "type": "ping"})
            async with asyncio.timeout(timeout):
                await future
        finally:
            self._waiting.pop(key, None)
        return time.perf_counter() - started


@contextlib.asynccontextmanager
async def connect(
    url: str,
    *,
    token: str | None = None,
    mode: Mode | None = None,
    after_seq: int | None = None,
    send_previous: bool = False,
    reconnect: bool = True,
    reconnect_timeout: float = 30.0,
    buffer: int = 100_000,
    open_timeout: float = 10.0,
    page_size: int | None = None,
) -> AsyncIterator[Client]:
    """Connects and shakes hands; closes on exit.

    ``mode`` defaults to read-write when a ``token`` is given, read-only
    otherwise; pass ``mode="readonly"`` with a read token. ``after_seq``
    resumes: the stream starts right after that event. ``send_previous``
    asks for the last 50 events (:attr:`Client.history`).
    ``buffer`` is how many received events may wait for the consumer.
    """
    client = Client(
        url,
        token=token,
        mode=mode or ("readandwrite" if token else "readonly"),
        after_seq=after_seq,
        send_previous=send_previous,
        reconnect=reconnect,
        reconnect_timeout=reconnect_timeout,
        buffer=buffer,
        open_timeout=open_timeout,
        page_size=page_size,
    )
    await client._start()
    try:
        yield client
    finally:
        await client.close()


__all__ = [
    "Client",
    "ClientError",
    "CommandError",
    "ConnectionLostError",
    "Event",
    "HandshakeError",
    "ProtocolViolationError",
    "connect",
]
