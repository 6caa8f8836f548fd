"""The server end to end: real clients on 127.0.0.1 against a real server over a real store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import stat
from pathlib import Path
from typing import Any

import pytest
from tests.server.helpers import (
    READ_TOKEN,
    TOKEN,
    Raw,
    Recorder,
    Rollbacks,
    open_stalled,
    raw,
    running,
    seqs_of,
)
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from weft.errors import WeftError
from weft.events.stream import InfoEvent
from weft.server import ServerConfig, ServerError, start_server
from weft.server.protocol import CLOSE_TOO_SLOW, HISTORY_LIMIT
from weft.store.lock import LOCK, read_lock

# --------------------------------------------------------------------------- connecting


async def test_a_plain_http_request_gets_a_400_json_body_saying_how_to_connect(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        reader, writer = await asyncio.open_connection("127.0.0.1", h.server.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        response = await reader.read()
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert b"content-type: application/json" in head.lower()
    doc = json.loads(body)
    assert doc["error"] == "HTTP API not available"
    assert doc["websocket"] == h.url
    assert "handshake" in doc["message"]


async def test_commands_before_the_handshake_are_refused_and_the_connection_stays_open(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, events=3) as h, raw(h.url) as c:
        await c.send({"id": 1, "type": "ping"})
        error = await c.recv()
        assert error["type"] == "error"
        assert error["data"]["code"] == "HANDSHAKE_REQUIRED"
        assert error["data"]["commandId"] == 1
        response, ready = await c.handshake()
        assert response["data"]["totalEvents"] == 3
        assert ready["data"]["port"] == h.server.port


async def test_bad_json_bad_shapes_and_unknown_commands_get_errors_and_the_connection_lives(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h, raw(h.url) as c:
        await c.handshake()
        cases: list[tuple[Any, str]] = [
            ("{not json", "INVALID_COMMAND"),
            ("[1, 2]", "INVALID_COMMAND"),
            ({"type": 7}, "INVALID_COMMAND"),
            ({"id": "u", "type": "codon.teleport"}, "UNKNOWN_COMMAND"),
            ({"id": "h", "type": "history.sync", "data": {"afterSeq": -1}}, "INVALID_COMMAND"),
            ({"id": "h2", "type": "history.sync", "data": "all"}, "INVALID_COMMAND"),
            ({"id": "again", "type": "handshake", "data": {"mode": "readonly"}}, ""),
        ]
        replies = []
        for message, code in cases:
            await c.send(message)
            reply = await c.recv()
            assert reply["type"] == "error", (message, reply)
            assert reply["data"]["code"] == (code or "ALREADY_HANDSHAKEN")
            replies.append(reply)
        assert "$.data.afterSeq" in replies[4]["data"]["message"]
        assert replies[3]["data"]["commandId"] == "u"
        await c.send({"id": "p", "type": "ping"})
        pong = await c.recv()
        assert (pong["type"], pong["data"]["commandId"]) == ("pong", "p")


async def test_a_message_over_the_size_limit_closes_the_connection_with_1009(
    tmp_path: Path,
) -> None:
    config = ServerConfig(max_message_size=1024, ping_interval=None)
    async with running(tmp_path, config=config) as h, raw(h.url) as c:
        await c.handshake()
        await c.send({"type": "ping", "id": "x" * 2000})
        with pytest.raises(ConnectionClosed) as closed:
            await c.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1009
        # The server itself is fine.
        async with raw(h.url) as other:
            await other.handshake()


# --------------------------------------------------------------------------- permissions


async def test_read_only_clients_cannot_steer(tmp_path: Path) -> None:
    recorder = Recorder()
    async with running(tmp_path, commands=recorder) as h, raw(h.url) as c:
        await c.handshake(mode="readonly")
        for name in ("codon.next", "codon.skip", "server.shutdown", "ping.broadcast"):
            await c.send({"id": name, "type": name})
            reply = await c.recv()
            assert reply["data"]["code"] == "INSUFFICIENT_PERMISSIONS", reply
            assert reply["data"]["commandId"] == name
    assert recorder.calls == []


async def test_read_write_needs_the_token_and_a_refused_handshake_can_be_retried(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    async with running(tmp_path, commands=recorder) as h, raw(h.url) as c:
        for token in (None, "wrong", TOKEN[:-1]):
            data: dict[str, Any] = {"mode": "readandwrite"}
            if token is not None:
                data["token"] = token
            await c.send({"type": "handshake", "data": data})
            reply = await c.recv()
            assert reply["data"]["code"] == "INVALID_TOKEN"
            assert "server.token" in reply["data"]["message"]
        response, _ = await c.handshake(mode="readandwrite", token=TOKEN)
        assert response["data"]["mode"] == "readandwrite"
        await c.send({"id": 5, "type": "codon.next"})
        ack = await c.recv()
        assert (ack["type"], ack["data"]["commandId"], ack["data"]["command"]) == (
            "command.ack",
            5,
            "codon.next",
        )
    assert recorder.calls == ["codon.next"]


async def test_every_steering_command_reaches_the_runtime_then_shutdown_gates_them(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    names = ["codon.start", "codon.next", "codon.skip", "codon.redo", "codon.forceStop"]
    async with running(tmp_path, commands=recorder) as h, raw(h.url) as c:
        await c.handshake(mode="readandwrite", token=TOKEN)
        for name in [*names, "server.shutdown"]:
            await c.send({"id": name, "type": name, "data": {"reason": "r"}})
            assert (await c.until("command.ack", command=name))["data"]["commandId"] == name
        await c.send({"id": "late", "type": "codon.next"})
        refused = await c.recv()
        assert refused["data"]["code"] == "SHUTTING_DOWN"
        await c.send({"id": "force", "type": "server.force_shutdown"})
        await c.until("command.ack", command="server.force_shutdown")
    assert recorder.calls == [*names, "server.shutdown", "server.force_shutdown"]


@pytest.mark.parametrize(
    ("answer", "code", "text"),
    [
        (False, "COMMAND_REJECTED", "no codon is running"),
        (WeftError("the agent is gone"), "COMMAND_FAILED", "the agent is gone"),
        (RuntimeError("boom"), "COMMAND_FAILED", "Command execution failed: boom"),
    ],
)
async def test_a_runtime_refusal_or_failure_is_the_command_s_error(
    tmp_path: Path, answer: bool | Exception, code: str, text: str
) -> None:
    async with running(tmp_path, commands=Recorder(answer)) as h, raw(h.url) as c:
        await c.handshake(mode="readandwrite", token=TOKEN)
        await c.send({"id": "s", "type": "codon.skip"})
        reply = await c.until("error")
        assert (reply["data"]["code"], reply["data"]["commandId"]) == (code, "s")
        assert text in reply["data"]["message"]


async def test_without_a_runtime_or_rollback_handler_commands_are_not_available(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h, raw(h.url) as c:
        await c.handshake(mode="readandwrite", token=TOKEN)
        for name in ("codon.next", "checkpoint.list", "rollback.toLastSuccess"):
            await c.send({"id": name, "type": name})
            reply = await c.until("error")
            assert (reply["data"]["code"], reply["data"]["commandId"]) == ("NOT_AVAILABLE", name)


async def test_rollback_commands_go_to_the_handler_and_a_rollback_gates_steering(
    tmp_path: Path,
) -> None:
    rollbacks = Rollbacks()
    recorder = Recorder()
    async with (
        running(tmp_path, commands=recorder, rollback=rollbacks) as h,
        raw(h.url) as c,
    ):
        await c.handshake(mode="readandwrite", token=TOKEN)
        await c.send({"id": 1, "type": "checkpoint.list", "data": {"runId": "r1"}})
        # The list comes to the asker alone, as a connection message, then the ack.
        listing = await c.until("checkpoint.list", commandId=1)
        assert "seq" not in listing
        assert listing["data"] == {
            "checkpoints": [],
            "currentBranch": "run-r1",
            "runId": "r1",
            "commandId": 1,
        }
        await c.until("command.ack", commandId=1)
        await c.send(
            {"id": 2, "type": "rollback.toCheckpoint", "data": {"checkpointSha": "abc123"}}
        )
        await c.until("command.ack", commandId=2)
        await c.send(
            {"id": 3, "type": "rollback.toCodon", "data": {"codonId": "a", "checkpointType": "x"}}
        )
        invalid = await c.until("error", commandId=3)
        assert invalid["data"]["code"] == "INVALID_COMMAND"
        assert "checkpointType" in invalid["data"]["message"]
        rollbacks.rolling_back = True
        await c.send({"id": 4, "type": "codon.next"})
        gated = await c.until("error", commandId=4)
        assert gated["data"]["code"] == "ROLLBACK_IN_PROGRESS"
        await c.send({"id": 5, "type": "checkpoint.list"})
        await c.until("command.ack", commandId=5)
    assert rollbacks.calls == [
        ("checkpoint.list", "r1"),
        ("rollback.toCheckpoint", {"checkpointSha": "abc123"}),
        ("checkpoint.list", None),
    ]
    assert recorder.calls == []


async def test_ping_broadcast_reaches_every_handshaken_client_with_the_sender_s_id(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h, raw(h.url) as a, raw(h.url) as b, raw(h.url) as lurker:
        sender, _ = await a.handshake(mode="readandwrite", token=TOKEN)
        await b.handshake()
        await a.send({"id": "all", "type": "ping.broadcast"})
        for c in (a, b):
            pong = await c.recv()
            assert pong["type"] == "pong"
            assert pong["data"]["clientId"] == sender["data"]["clientId"]
        await lurker.send({"id": "mine", "type": "ping"})
        first = await lurker.recv()
        assert first["data"]["code"] == "HANDSHAKE_REQUIRED"  # no broadcast pong before it


async def test_a_web_page_from_elsewhere_needs_the_token_even_with_anonymous_reads(
    tmp_path: Path,
) -> None:
    config = ServerConfig(ping_interval=None, allow_anonymous_read=True)
    async with running(tmp_path, config=config) as h:
        async with raw(h.url, origin="https://evil.example") as c:
            await c.send({"type": "handshake", "data": {"mode": "readonly"}})
            assert (await c.recv())["data"]["code"] == "INVALID_TOKEN"
            await c.handshake(token=READ_TOKEN)
        async with raw(h.url, origin="http://localhost:5173") as local:
            await local.handshake(token=None)


# --------------------------------------------------------------------------- exactly once


async def test_the_handshake_history_is_the_last_50_journal_events(tmp_path: Path) -> None:
    async with running(tmp_path, events=120) as h, raw(h.url) as c:
        response, _ = await c.handshake(sendPreviousEvents=True)
        journal = h.journal()
    data = response["data"]
    assert (data["totalEvents"], data["lastSeq"]) == (120, 120)
    history = data["eventHistory"]
    assert len(history) == HISTORY_LIMIT
    assert [(e["seq"], e["id"]) for e in history] == journal[-HISTORY_LIMIT:]
    assert history[-1]["data"] == {"message": "before119"}


async def _until_closed(ws: ClientConnection) -> tuple[list[str | bytes], ConnectionClosed]:
    """Every message until the connection closes, and how it closed."""
    messages: list[str | bytes] = []
    while True:
        try:
            messages.append(await asyncio.wait_for(ws.recv(), 30))
        except ConnectionClosed as closed:
            return messages, closed


async def _collect_until(c: Raw, want: int, seen: list[int]) -> None:
    while len(seen) < want:
        seen.extend(seqs_of(await c.recv()))


async def test_handshake_history_history_sync_and_live_events_are_the_journal_exactly(
    tmp_path: Path,
) -> None:
    rng = random.Random(8)
    async with running(tmp_path, events=700, transitions=True) as h:
        produced = h.manager.last_seq
        total = produced + 3000

        async def produce() -> None:
            for burst in range(60):
                h.emit(50, f"live{burst}-")
                await asyncio.sleep(rng.uniform(0, 0.01))

        async def client(delay: float, previous: bool) -> list[int]:
            await asyncio.sleep(delay)
            async with raw(h.url) as c:
                response, _ = await c.handshake(sendPreviousEvents=previous)
                seen = seqs_of(response)
                await asyncio.sleep(rng.uniform(0, 0.05))  # live events flow meanwhile
                await c.send({"id": "s", "type": "history.sync"})
                await _collect_until(c, total, seen)
                return seen

        producer = asyncio.create_task(produce())
        results = await asyncio.gather(
            *(client(rng.uniform(0, 0.4), rng.random() < 0.5) for _ in range(6))
        )
        await producer
        journal = h.journal()
    assert len(journal) == total
    for seen in results:
        assert sorted(seen) == list(range(1, total + 1))  # no gap, no duplicate


async def test_history_sync_sends_only_what_this_connection_has_not_been_given(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, events=300) as h, raw(h.url) as c:
        await c.handshake()
        await c.send({"id": "a", "type": "history.sync", "data": {"afterSeq": 200, "pageSize": 40}})
        pages = [await c.until("history.batch", commandId="a")]
        while pages[-1]["data"]["hasMore"]:
            pages.append(await c.recv())
        assert [len(p["data"]["events"]) for p in pages] == [40, 40, 20]
        assert [seq for p in pages for seq in seqs_of(p)] == list(range(201, 301))
        assert pages[-1]["data"]["lastSeq"] == 300
        await c.send({"id": "b", "type": "history.sync"})
        got: list[int] = []
        while True:
            page = await c.until("history.batch", commandId="b")
            got += seqs_of(page)
            if not page["data"]["hasMore"]:
                break
        assert got == list(range(1, 201))
        await c.send({"id": "c", "type": "history.sync"})
        empty = await c.until("history.batch", commandId="c")
        assert (empty["data"]["events"], empty["data"]["hasMore"]) == ([], False)


async def test_a_resuming_handshake_gets_everything_after_its_cursor_in_order(
    tmp_path: Path,
) -> None:
    # A small ring makes the catch-up read the journal before it joins the live stream.
    config = ServerConfig(ring_size=64, page_size=100, ping_interval=None)
    async with running(tmp_path, events=2500, config=config) as h:

        async def produce() -> None:
            for burst in range(40):
                h.emit(25, f"live{burst}-")
                await asyncio.sleep(0.002)

        producer = asyncio.create_task(produce())
        total = 2500 + 40 * 25
        async with raw(h.url) as c:
            response, _ = await c.handshake(afterSeq=333, pageSize=100)
            assert response["data"]["eventHistory"] == []
            seen: list[int] = []
            kinds = set()
            while len(seen) < total - 333:
                message = await c.recv()
                kinds.add(message["type"])
                seen += seqs_of(message)
        await producer
    assert seen == list(range(334, total + 1))  # in order, no gap, no duplicate
    assert "history.batch" in kinds


async def test_live_batches_carry_many_events_per_message(tmp_path: Path) -> None:
    async with running(tmp_path) as h, raw(h.url) as c:
        await c.handshake(liveBatches=True)
        h.emit(500)
        seen: list[int] = []
        messages = 0
        while len(seen) < 500:
            message = await c.recv()
            assert message["type"] == "live.batch"
            messages += 1
            seen += seqs_of(message)
    assert seen == list(range(1, 501))
    assert messages < 500


async def test_closing_the_server_delivers_every_event_then_closes_with_1001(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h, raw(h.url) as c:
        await c.handshake()
        h.emit(200)
        await h.manager.flush()
        reader = asyncio.create_task(_until_closed(c.ws))
        await h.server.close()
        messages, closed = await reader
    assert [seq for m in messages for seq in seqs_of(json.loads(m))] == list(range(1, 201))
    assert closed.rcvd is not None
    assert (closed.rcvd.code, closed.rcvd.reason) == (1001, "Weft run ended")


async def test_closing_lets_a_client_catching_up_finish_then_closes_with_1001(
    tmp_path: Path,
) -> None:
    """A client that joined from seq 0 is still reading the journal's pages
    when the run ends: it gets every event before the close (it used to be
    closed mid-replay, and `weft attach --json` said it lost the run)."""
    async with running(tmp_path, events=6000) as h, raw(h.url) as c:
        total = h.manager.last_seq
        await c.handshake(afterSeq=0, pageSize=50)
        reader = asyncio.create_task(_until_closed(c.ws))
        await h.server.close()
        messages, closed = await reader
    seen = [seq for m in messages for seq in seqs_of(json.loads(m))]
    assert seen == list(range(1, total + 1))
    assert closed.rcvd is not None
    assert closed.rcvd.code == 1001


# --------------------------------------------------------------------------- load


async def test_a_slow_client_is_dropped_with_a_resume_reason_and_slows_nobody(
    tmp_path: Path,
) -> None:
    config = ServerConfig(send_limit=1 << 20, ping_interval=None)
    blob = "x" * 8000
    bursts, per_burst = 40, 100  # 32 MB: far more than the socket buffers and the send limit
    total = bursts * per_burst
    async with (
        running(tmp_path, config=config) as h,
        connect(h.url, max_queue=1, max_size=None) as slow,
        raw(h.url) as fast,
    ):
        shake = {"mode": "readonly", "token": READ_TOKEN}
        await slow.send(json.dumps({"type": "handshake", "data": shake}))
        await fast.handshake(liveBatches=True)
        seen: list[int] = []
        reader = asyncio.create_task(_collect_until(fast, total, seen))
        # The slow client reads nothing while the run emits everything.
        for burst in range(bursts):
            for i in range(per_burst):
                h.manager.emit(InfoEvent(message=f"{blob}{burst * per_burst + i}"))
            await h.manager.flush()  # never held up by the stalled client
            await asyncio.sleep(0.005)
        await reader
        assert seen == list(range(1, total + 1))
        assert h.server.live_clients == 1  # the slow one was dropped, the fast one stays
        messages, closed = await _until_closed(slow)
    assert closed.rcvd is not None
    assert closed.rcvd.code == CLOSE_TOO_SLOW
    assert "resume" in closed.rcvd.reason
    assert 2 <= len(messages) < total + 2


async def test_a_client_that_stops_reading_is_dropped_after_the_stall_timeout(
    tmp_path: Path,
) -> None:
    """Far below ``send_limit`` (16 MB): it is the stall that drops it. Before,
    a reader that stopped after a little connected held its buffer forever."""
    config = ServerConfig(ping_interval=None, stall_timeout=1.0)
    async with running(tmp_path, config=config) as h:
        sock = await asyncio.to_thread(open_stalled, h.server.port, READ_TOKEN)
        try:
            async with asyncio.timeout(10):
                while h.server.live_clients == 0:
                    await asyncio.sleep(0.01)
            blob = "x" * 8000
            for burst in range(40):  # 3.2 MB: more than the sockets' buffers hold
                for i in range(10):
                    h.manager.emit(InfoEvent(message=f"{blob}{burst}-{i}"))
                await h.manager.flush()
            assert h.server.live_clients == 1
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(10):
                while h.server.live_clients:
                    await asyncio.sleep(0.05)
            waited = asyncio.get_running_loop().time() - started
        finally:
            sock.close()
    assert 0.5 <= waited <= 4.0, waited


async def test_closing_drops_a_client_that_never_reads_within_the_grace(
    tmp_path: Path,
) -> None:
    config = ServerConfig(ping_interval=None, stall_timeout=None, close_timeout=0.5)
    async with running(tmp_path, config=config) as h:
        sock = await asyncio.to_thread(open_stalled, h.server.port, READ_TOKEN)
        try:
            async with asyncio.timeout(10):
                while h.server.live_clients == 0:
                    await asyncio.sleep(0.01)
            for burst in range(40):
                for i in range(10):
                    h.manager.emit(InfoEvent(message=f"{'y' * 8000}{burst}-{i}"))
                await h.manager.flush()
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(10):  # forever before: the close waited for a drain
                await h.server.close()
            took = asyncio.get_running_loop().time() - started
        finally:
            sock.close()
    assert took < 3.0, took


async def test_two_hundred_clients_each_get_every_event_in_order(tmp_path: Path) -> None:
    async with running(tmp_path, events=10) as h, contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(raw(h.url)) for _ in range(200)]
        await asyncio.gather(*(c.handshake(liveBatches=True) for c in clients))
        assert h.server.live_clients == 200

        async def produce() -> list[int]:
            for burst in range(10):
                h.emit(50, f"b{burst}-")
                await asyncio.sleep(0.005)
            return []

        async def collect(c: Raw) -> list[int]:
            seen: list[int] = []
            await _collect_until(c, 500, seen)
            return seen

        results = await asyncio.gather(produce(), *(collect(c) for c in clients))
    for seen in results[1:]:
        assert seen == list(range(11, 511))


# --------------------------------------------------------------------------- startup


async def test_start_server_writes_its_port_to_the_lock_and_keeps_a_private_token(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        server = await start_server(h.manager, h.store)
        try:
            weft_dir = h.store.weft_dir
            lock = read_lock(weft_dir / LOCK)
            assert lock is not None
            assert lock.port == server.port != h.server.port
            token_file = weft_dir / "server.token"
            read_file = weft_dir / "server-read.token"
            for path in (token_file, read_file):
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            assert token_file.read_text().strip() == server.token
            assert read_file.read_text().strip() == server.read_token != server.token
            async with raw(server.url) as c:
                response, _ = await c.handshake(mode="readandwrite", token=server.token)
                assert response["data"]["mode"] == "readandwrite"
            async with raw(server.url) as c:
                response, _ = await c.handshake(token=server.read_token)
                assert response["data"]["mode"] == "readonly"
        finally:
            await server.close()


async def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        with pytest.raises(ServerError, match=f"cannot listen on 127.0.0.1:{h.server.port}"):
            await start_server(h.manager, h.store, port=h.server.port)


# --------------------------------------------------------------------------- idle clients


async def _silent_client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that completes the WebSocket upgrade by hand, then never answers anything
    (a hung or vanished peer whose TCP connection stays open)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    return reader, writer


async def test_an_idle_timeout_closes_a_client_that_stops_answering_pings(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        server = await start_server(h.manager, h.store, idle_timeout=0.5)
        try:
            reader, writer = await _silent_client(server.port)
            async with raw(server.url) as alive:
                await alive.handshake(token=server.read_token)
                # Ping at 0.5 s, no pong by 1 s: closed (1011), the TCP connection
                # dropped after the close timeout, since the silent peer never answers.
                async with asyncio.timeout(10):
                    received = await reader.read(-1)
                writer.close()
                assert received[0] == 0x89  # a ping frame came first
                assert b"\x88" in received  # then a close frame
                assert (1011).to_bytes(2, "big") in received
                # A client that answers pings (as every WebSocket library does) stays.
                await alive.send({"id": 7, "type": "ping"})
                assert (await alive.recv())["type"] == "pong"
        finally:
            await server.close()


async def test_without_an_idle_timeout_a_silent_client_is_neither_pinged_nor_closed(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        server = await start_server(h.manager, h.store)
        try:
            reader, writer = await _silent_client(server.port)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.5):
                    await reader.read(1)
            writer.close()
        finally:
            await server.close()
