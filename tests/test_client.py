"""weft.client against a real server: replay, dedup, resume after drops, commands."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path
from typing import Any

import pytest
from tests.server.helpers import READ_TOKEN, TOKEN, Proxy, Recorder, running

import weft.client
from weft.client import Client, CommandError, ConnectionLostError, Event, HandshakeError
from weft.events.stream import InfoEvent
from weft.server import ServerConfig


def reader(url: str, **options: Any) -> contextlib.AbstractAsyncContextManager[Client]:
    """A read-only client with the read token (every connection needs a token)."""
    return weft.client.connect(url, token=READ_TOKEN, mode="readonly", **options)


async def take(events: weft.client.Client, n: int, *, replay: bool | int = True) -> list[Event]:
    got: list[Event] = []
    async for event in events.events(replay=replay):
        got.append(event)
        if len(got) == n:
            break
    return got


async def test_replay_then_live_is_every_event_once_in_order_and_ends_with_the_run(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, events=5000, transitions=True) as h:
        before = h.manager.last_seq

        async def produce() -> None:
            for burst in range(30):
                h.emit(100, f"live{burst}-")
                await asyncio.sleep(0.003)
            await h.manager.flush()
            await h.server.close()  # the run ended

        async with reader(h.url) as c:
            producer = asyncio.create_task(produce())
            seqs = [e.seq async for e in c.events(replay=True)]  # ends when the server closes
            await producer
            journal = h.journal()
    assert seqs == list(range(1, before + 3001))
    assert [seq for seq, _ in journal] == seqs


async def test_replay_from_a_cursor_and_live_only(tmp_path: Path) -> None:
    async with running(tmp_path, events=300) as h:
        async with reader(h.url) as c:
            assert c.joined_at == 300
            got = await take(c, 250, replay=50)
            assert [e.seq for e in got] == list(range(51, 301))
            assert got[0].data == {"message": "before50"}
        async with reader(h.url) as live:
            h.emit(3, "new")
            got = await take(live, 3, replay=False)
            assert [(e.seq, e.type) for e in got] == [(301, "info"), (302, "info"), (303, "info")]
        async with weft.client.connect(
            h.url, token=READ_TOKEN, mode="readonly", after_seq=280, page_size=7
        ) as resumed:
            got = await take(resumed, 23, replay=False)
            assert [e.seq for e in got] == list(range(281, 304))
        async with weft.client.connect(
            h.url, token=READ_TOKEN, mode="readonly", send_previous=True
        ) as shaken:
            assert [e.seq for e in shaken.history] == list(range(254, 304))
            got = await take(shaken, 303, replay=True)  # the pages, then the handshake's history
            assert [e.seq for e in got] == list(range(1, 304))
        async with weft.client.connect(
            h.url, token=READ_TOKEN, mode="readonly", send_previous=True
        ) as shaken:
            h.emit(2, "later")
            got = await take(shaken, 7, replay=298)  # within the handshake's history
            assert [e.seq for e in got] == list(range(299, 306))


async def test_drops_mid_stream_are_resumed_with_no_gap_and_no_duplicate(tmp_path: Path) -> None:
    rng = random.Random(3)
    async with running(tmp_path, events=1000) as h:
        proxy = await Proxy(h.server.port).start()
        total = 1000 + 40 * 100
        try:
            async with reader(proxy.url) as c:

                async def produce() -> None:
                    for burst in range(40):
                        h.emit(100, f"live{burst}-")
                        await asyncio.sleep(rng.uniform(0, 0.01))
                        if burst % 8 == 3:
                            proxy.cut()  # the network fails under the client

                producer = asyncio.create_task(produce())
                got = await take(c, total, replay=True)
                await producer
                reconnects, cuts = c.reconnects, proxy.cuts
        finally:
            await proxy.close()
    assert [e.seq for e in got] == list(range(1, total + 1))
    assert cuts == 5
    assert 1 <= reconnects <= cuts


async def test_a_drop_during_the_replay_is_resumed_where_the_replay_was(tmp_path: Path) -> None:
    async with running(tmp_path, events=20_000) as h:
        proxy = await Proxy(h.server.port).start()
        try:
            async with weft.client.connect(
                proxy.url, token=READ_TOKEN, mode="readonly", page_size=100
            ) as c:
                h.emit(500, "live")  # buffered while the history comes
                seqs: list[int] = []
                async for batch in c.batches(replay=True):
                    seqs += [e.seq for e in batch]
                    if len(seqs) in (3000, 9000):
                        proxy.cut()
                    if len(seqs) >= 20_500:
                        break
                reconnects = c.reconnects
        finally:
            await proxy.close()
    assert seqs == list(range(1, 20_501))
    assert reconnects == 2


async def test_a_slow_consumer_is_dropped_by_the_server_and_resumes_without_loss(
    tmp_path: Path,
) -> None:
    config = ServerConfig(send_limit=64 * 1024, ping_interval=None)
    blob = "y" * 4000
    total = 4000  # 16 MB: more than the socket buffers hold for a client that stops reading
    async with (
        running(tmp_path, config=config) as h,
        reader(h.url, buffer=20) as c,
    ):

        async def produce() -> None:
            for burst in range(40):
                for i in range(100):
                    h.manager.emit(InfoEvent(message=f"{blob}{burst * 100 + i}"))
                await h.manager.flush()
                await asyncio.sleep(0.002)

        producer = asyncio.create_task(produce())
        seqs: list[int] = []
        async for event in c.events(replay=True):
            seqs.append(event.seq)
            if len(seqs) < 200:
                await asyncio.sleep(0.005)  # a consumer far slower than the run, at first
            if len(seqs) == total:
                break
        await producer
    assert seqs == list(range(1, total + 1))
    assert c.reconnects >= 1


async def test_commands_are_acknowledged_or_raise_the_server_s_reason(tmp_path: Path) -> None:
    recorder = Recorder()
    async with running(tmp_path, commands=recorder) as h:
        async with weft.client.connect(h.url, token=TOKEN) as c:
            assert c.mode == "readandwrite"
            await c.command("codon.next")
            await c.command("codon.forceStop", {"reason": "enough"})
            with pytest.raises(CommandError) as refused:
                await c.command("rollback.toLastSuccess")
            assert (refused.value.code, refused.value.command) == (
                "NOT_AVAILABLE",
                "rollback.toLastSuccess",
            )
            with pytest.raises(CommandError, match="Unknown command"):
                await c.command("codon.teleport")
            assert await c.ping() > 0
        async with reader(h.url) as ro:
            assert ro.mode == "readonly"
            with pytest.raises(CommandError) as denied:
                await ro.command("codon.skip")
            assert denied.value.code == "INSUFFICIENT_PERMISSIONS"
    assert recorder.calls == ["codon.next", "codon.forceStop"]


async def test_a_wrong_token_and_an_unreachable_server_are_clear_errors(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        with pytest.raises(HandshakeError) as refused:
            async with weft.client.connect(h.url, token="nope"):
                pass
        assert refused.value.code == "INVALID_TOKEN"
        # The read token reads; it does not open a read-write connection.
        with pytest.raises(HandshakeError, match="read-write token"):
            async with weft.client.connect(h.url, token=READ_TOKEN):
                pass
        with pytest.raises(HandshakeError, match="none was given"):
            async with weft.client.connect(h.url):
                pass
        port = h.server.port
    with pytest.raises(ConnectionLostError, match="cannot connect"):
        async with weft.client.connect(f"ws://127.0.0.1:{port}", token=READ_TOKEN):
            pass


async def test_a_server_that_stays_gone_ends_the_stream_with_connection_lost(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, events=10) as h:
        proxy = await Proxy(h.server.port).start()
        async with weft.client.connect(
            proxy.url, token=READ_TOKEN, mode="readonly", reconnect_timeout=0.5
        ) as c:
            got = await take(c, 10)
            assert [e.seq for e in got] == list(range(1, 11))
            await proxy.close()  # nothing listens there any more
            with pytest.raises(ConnectionLostError, match="could not reconnect"):
                await take(c, 1, replay=False)
