"""Replay pages read from the journal through the server's own read-only connection."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import weft.server.history as history_module
from weft.errors import StoreError
from weft.events.stream import InfoEvent
from weft.server.history import JournalHistory
from weft.store import ExecutionStore


@pytest.fixture(params=[True, False], ids=["core", "python"])
def native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Pages read by the core (when it shares Python's SQLite) or by Python."""
    monkeypatch.setattr(history_module, "NATIVE_PAGES", request.param)
    return bool(request.param)


def _links_system_sqlite() -> bool:
    with open("/proc/self/maps") as maps:
        return "libsqlite3.so" in maps.read()


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


async def test_a_page_is_bounded_by_its_range_its_count_and_its_bytes(
    tmp_path: Path, native: bool
) -> None:
    history = JournalHistory(await journal_of(tmp_path, [100] * 50 + [5000] + [100] * 49))
    try:
        page = await history.page(10, 40, 7, 1 << 20)
        assert (history._pages is not None) == (native and _links_system_sqlite())
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


async def test_a_missing_journal_is_a_store_error(tmp_path: Path, native: bool) -> None:
    history = JournalHistory(tmp_path / "nothing.db")
    try:
        with pytest.raises(StoreError, match="no journal to replay"):
            await history.page(0, 10, 10, 100)
    finally:
        await history.close()


@pytest.fixture(scope="module")
def mixed_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Events of many sizes, some of their text outside ASCII (bytes are not characters)."""
    sizes = [(i * 37) % 700 for i in range(300)]

    async def make() -> Path:
        tmp = tmp_path_factory.mktemp("mixed")
        store = await asyncio.to_thread(ExecutionStore.open, tmp / "x")
        manager = store.state_manager()
        for i, size in enumerate(sizes):
            manager.emit(InfoEvent(message=("é€" if i % 3 else "ab") * size))
        await manager.flush()
        path = Path(store.journal.path)
        await store.close(manager)
        return path

    return asyncio.run(make())


@pytest.mark.skipif(not _links_system_sqlite(), reason="the core cannot share this SQLite")
@settings(max_examples=80, deadline=None)
@given(
    after=st.integers(0, 310),
    span=st.integers(0, 320),
    limit=st.integers(1, 400),
    max_bytes=st.integers(1, 200_000),
    n=st.integers(0, 40),
)
def test_the_core_reads_the_pages_python_reads(
    mixed_journal: Path, after: int, span: int, limit: int, max_bytes: int, n: int
) -> None:
    core, python = JournalHistory(mixed_journal), JournalHistory(mixed_journal)
    try:
        history_module.NATIVE_PAGES = False
        try:
            expected = python._page(after, after + span, limit, max_bytes)
            expected_tail = python._tail(after + span, n)
        finally:
            history_module.NATIVE_PAGES = True
        page = core._page(after, after + span, limit, max_bytes)
        assert core._pages is not None
        assert python._pages is None
        assert page == expected
        assert core._tail(after + span, n) == expected_tail
        if page.count:
            docs = json.loads(b"[" + page.events + b"]")
            assert [d["seq"] for d in docs] == list(range(after + 1, page.last_seq + 1))
    finally:
        for h in (core, python):
            asyncio.run(h.close())
