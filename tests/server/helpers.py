"""A real server over a real store, raw protocol clients, and a TCP proxy that cuts.

Every server test runs :class:`~weft.server.ProtocolServer` on 127.0.0.1 port
0 over a real :class:`~weft.state.StateManager` whose persistence is a real
:class:`~weft.store.ExecutionStore` in ``tmp_path``: live events are what the
manager commits, replay reads the real journal.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from tests.builders import lifecycle, run_started
from websockets.asyncio.client import ClientConnection, connect

from weft.events.stream import CheckpointListEvent, InfoEvent
from weft.server import JournalHistory, ProtocolServer, ServerConfig
from weft.server.server import RollbackHandler, RuntimeCommands
from weft.state import StateManager
from weft.store import ExecutionStore, Journal

TOKEN = "test-token-0123456789"
"""The test servers' read-write token."""
READ_TOKEN = "test-read-token-0123456789"
"""The test servers' read token."""


class Recorder:
    """Runtime commands that are recorded and answered with ``answer``."""

    def __init__(self, answer: bool | Exception = True) -> None:
        self.calls: list[str] = []
        self.answer = answer

    async def command(self, name: str, data: Any = None) -> bool:
        self.calls.append(name)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Rollbacks:
    """A rollback handler that records calls; ``rolling_back`` is settable."""

    def __init__(self) -> None:
        self.rolling_back = False
        self.calls: list[tuple[str, Any]] = []

    async def checkpoint_list(self, run_id: str | None) -> CheckpointListEvent:
        self.calls.append(("checkpoint.list", run_id))
        return CheckpointListEvent(checkpoints=[], current_branch="run-r1", run_id=run_id)

    async def rollback(self, command: str, data: msgspec.Struct) -> None:
        self.calls.append((command, msgspec.to_builtins(data)))


def emit(manager: StateManager, n: int, prefix: str = "e") -> None:
    """Queues ``n`` info events."""
    for i in range(n):
        manager.emit(InfoEvent(message=f"{prefix}{i}"))


@dataclass
class Harness:
    """A running server and what it serves."""

    store: ExecutionStore
    manager: StateManager
    server: ProtocolServer

    @property
    def url(self) -> str:
        return self.server.url

    def emit(self, n: int, prefix: str = "e") -> None:
        """Queues ``n`` info events."""
        emit(self.manager, n, prefix)

    def journal(self) -> list[tuple[int, str]]:
        """(seq, id) of every journal row, read through a separate connection."""
        journal = Journal.open(self.store.journal.path, readonly=True, check=False)
        try:
            return [(e.seq, e.id) for page in journal.pages() for e in page]
        finally:
            journal.close()


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    *,
    events: int = 0,
    config: ServerConfig | None = None,
    commands: RuntimeCommands | None = None,
    rollback: RollbackHandler | None = None,
    token: str = TOKEN,
    transitions: bool = False,
) -> AsyncIterator[Harness]:
    """A server with ``events`` info events journaled before it starts (and,
    with ``transitions``, a run with two codon lifecycles and a refused transition)."""
    store = await asyncio.to_thread(ExecutionStore.open, tmp_path / "execution")
    manager = store.state_manager()
    if transitions:
        manager.transition(run_started("r1"))
        for codon in ("a", "b"):
            for t in lifecycle("r1", codon):
                manager.transition(t)
        # Refused (the codon is completed): journaled as an error event.
        manager.transition(lifecycle("r1", "a")[1])
    emit(manager, events, "before")
    await manager.flush()
    server = await ProtocolServer.start(
        manager,
        JournalHistory(store.journal.path),
        token=token,
        read_token=READ_TOKEN,
        commands=commands,
        rollback=rollback,
        config=config or ServerConfig(ping_interval=None),
    )
    harness = Harness(store, manager, server)
    try:
        yield harness
    finally:
        await server.close()
        await store.close(manager)


@dataclass
class Raw:
    """A protocol client speaking JSON by hand (no weft.client), for protocol tests."""

    ws: ClientConnection
    received: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, message: Any) -> None:
        await self.ws.send(message if isinstance(message, str | bytes) else json.dumps(message))

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            message: dict[str, Any] = json.loads(await self.ws.recv())
        self.received.append(message)
        return message

    async def handshake(self, **data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Shakes hands with the token its mode needs (``token=None``: none)."""
        data.setdefault("mode", "readonly")
        data.setdefault("token", READ_TOKEN if data["mode"] == "readonly" else TOKEN)
        if data["token"] is None:
            del data["token"]
        await self.send({"type": "handshake", "data": data})
        response = await self.recv()
        if response["type"] != "handshake.response":
            raise AssertionError(f"handshake refused: {response}")
        ready = await self.recv()
        assert ready["type"] == "server.ready", ready
        return response, ready

    async def until(self, kind: str, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        """Reads until a message of ``kind`` whose data has ``match``."""
        while True:
            message = await self.recv(timeout)
            data = message.get("data") or {}
            if message["type"] == kind and all(data.get(k) == v for k, v in match.items()):
                return message


@contextlib.asynccontextmanager
async def raw(url: str, **kwargs: Any) -> AsyncIterator[Raw]:
    """A raw protocol connection."""
    kwargs.setdefault("max_size", None)
    async with connect(url, **kwargs) as ws:
        yield Raw(ws)


def seqs_of(message: dict[str, Any]) -> list[int]:
    """The seqs a message carries: one event, or a page/batch of them."""
    if "seq" in message:
        return [message["seq"]]
    data = message.get("data") or {}
    events = data.get("events", data.get("eventHistory", []))
    return [e["seq"] for e in events]


class Proxy:
    """A TCP proxy in front of the server whose connections can be cut at will
    (the network failing, as a client sees it)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._pipes |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(1 << 16):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._pipes.discard(dst)
            dst.close()

    def cut(self) -> None:
        """Drops every connection through the proxy at once."""
        self.cuts += 1
        for writer in list(self._pipes):
            writer.transport.abort()
        self._pipes.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()


# ------------------------------------------------------------ a client that stops reading


def _masked_text(payload: bytes) -> bytes:
    """One client text frame (clients mask: RFC 6455 §5.3)."""
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    n = len(payload)
    length = bytes((0x80 | n,)) if n < 126 else bytes((0x80 | 126,)) + n.to_bytes(2, "big")
    head = b"\x81" + length
    return head + key + masked


def open_stalled(port: int, token: str, mode: str = "readonly") -> socket.socket:
    """A client that hand-shakes (HTTP upgrade, then Weft's handshake) and never
    reads another byte: its 4 KiB receive buffer fills and stays full. Blocking:
    from a test's event loop, call it in a thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert b" 101 " in answer.split(b"\r\n", 1)[0], answer
    hello = {"type": "handshake", "data": {"mode": mode, "token": token}}
    sock.sendall(_masked_text(json.dumps(hello).encode()))
    return sock


@contextlib.contextmanager
def stalled_client(port: int, token: str, mode: str = "readonly") -> Iterator[socket.socket]:
    """:func:`open_stalled`, closed at the end."""
    sock = open_stalled(port, token, mode)
    try:
        yield sock
    finally:
        sock.close()
