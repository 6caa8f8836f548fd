"""Replay pages read from the journal through the server's own read-only connection."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from weft.errors import StoreError
from weft.events.stream import InfoEvent
from weft.server.history import JournalHistory
from weft.store import ExecutionStore


async def journal_of(tmp_path: Path, sizes: list[int]) -> Path:
    """A journal whose events carry messages of the given sizes."""
    store = await asyncio.to_thread(ExecutionStore.open, tmp_path / "x")
    manager = store.state_manager()
    for i, size in enumerate(sizes):
        manager.emit(InfoEvent(message=str(i % 10) * size))
    await manager.flush()
    path = Path(store.journal.path)
    await store.close(manager)
    return path


async def test_a_page_is_bounded_by_its_range_its_count_and_its_bytes(tmp_path: Path) -> None:
    history = JournalHistory(await journal_of(tmp_path, [100] * 50 + [5000] + [100] * 49))
    try:
        page = await history.page(10, 40, 7, 1 << 20)
        assert (page.count, page.last_seq) == (7, 17)
        docs = json.loads(b"[" + page.events + b"]")
        assert [d["seq"] for d in docs] == list(range(11, 18))
        bounded = await history.page(30, 100, 1000, 3000)
        sizes = [
            len(json.dumps(d, separators=(",", ":"))) + 1
            for d in json.loads(b"[" + bounded.events + b"]")
        ]
        assert len(sizes) == bounded.count == bounded.last_seq - 30
        assert sum(sizes[:-1]) < 3000 <= sum(sizes)  # the shortest page reaching the bytes
        big = await history.page(50, 100, 1000, 10)  # one event bigger than max_bytes still goes
        assert (big.count, big.last_seq) == (1, 51)
        end = await history.page(100, 200, 10, 1 << 20)
        assert (end.count, end.events, end.last_seq) == (0, b"", 100)
        assert [seq for seq, _ in await history.tail(60, 5)] == [56, 57, 58, 59, 60]
        assert await history.tail(3, 10) == [(s, e) for s, e in await history.tail(3, 3)]
    finally:
        await history.close()
        await history.close()  # idempotent


async def test_a_missing_journal_is_a_store_error(tmp_path: Path) -> None:
    history = JournalHistory(tmp_path / "nothing.db")
    try:
        with pytest.raises(StoreError, match="no journal to replay"):
            await history.page(0, 10, 10, 100)
    finally:
        await history.close()
