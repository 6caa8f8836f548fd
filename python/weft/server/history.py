"""Reading journaled events for replay, as wire envelopes, off the event loop.

The server reads the journal through its own read-only SQLite connection (the
journal is in WAL mode, so reads never block the writer and see only committed
batches), on one dedicated thread. SQLite builds each envelope
(``{"id","seq","timestamp",...payload}``, the same bytes the live fan-out
sends), and a page comes back as one string of envelopes joined by commas,
ready to be spliced into a ``history.batch`` message. When the core shares
Python's SQLite library, the core reads and joins each page in one call,
detached from the interpreter (:class:`~weft._core.JournalPages`). The same
thread hands the journal's rows to the server's fold when it is first seeded
(:meth:`JournalHistory.fold`), a page at a time between the replay pages.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from weft._core import JournalPages
from weft.errors import StoreError
from weft.store.journal import core_connection

# The live side strips the same JSON whitespace before splicing (fanout.envelope).
_ENVELOPE = (
    '\'{"id":"\' || id || \'","seq":\' || seq || \',"timestamp":"\' || timestamp || \'",\' '
    "|| substr(ltrim(payload, char(32, 9, 10, 13)), 2)"
)
_PAGE = f"SELECT seq, {_ENVELOPE} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?"
_ROWS = (
    "SELECT seq, id, codon_id, payload FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?"
)

FOLD_PAGE = 2000
"""Rows read (and handed over) per step of :meth:`JournalHistory.fold`: between
two steps the reader thread serves the replay pages clients are waiting for."""

RowSink = Callable[[int, str, "str | None", bytes], None]
"""Takes one journal row: ``(seq, id, codon id, payload)``."""

NATIVE_PAGES = True
"""Whether pages are read by the core when it shares Python's SQLite (tests turn it off)."""


def _native_pages(conn: sqlite3.Connection, path: Path) -> JournalPages | None:
    """A :class:`~weft._core.JournalPages` on ``path`` when the core uses the
    SQLite library Python's ``conn`` does (see :func:`~weft.store.journal.core_connection`)."""
    return core_connection(lambda p: JournalPages(p, _PAGE), conn, path, "replaying")


@dataclass(frozen=True, slots=True)
class Page:
    """Consecutive journaled events: their envelopes joined by commas."""

    events: bytes
    count: int
    last_seq: int
    """The newest seq in the page (the ``after`` it was read from when empty)."""


class HistorySource(Protocol):
    """Where replayed events come from."""

    async def page(self, after: int, upto: int, limit: int, max_bytes: int) -> Page:
        """Events in ``(after, upto]``, oldest first: at most ``limit`` of them,
        and no more than ``max_bytes`` unless a single event is bigger."""

    async def tail(self, upto: int, n: int) -> list[tuple[int, bytes]]:
        """The ``n`` newest events up to ``upto``, oldest first, as (seq, envelope)."""

    async def fold(self, upto: int, sink: RowSink) -> None:
        """Hands every journaled event up to ``upto`` to ``sink``, oldest first,
        on the reader's thread (the server's fold is seeded so)."""

    async def close(self) -> None:
        """Releases the source."""


class JournalHistory:
    """A :class:`HistorySource` over an execution's journal database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._pages: JournalPages | None = None
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weft-history")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self.path.exists():
                raise StoreError(f"{self.path}: no journal to replay from")
            try:
                self._conn = sqlite3.connect(
                    f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, timeout=10
                )
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: cannot open the journal to replay: {e}") from e
            if NATIVE_PAGES:
                self._pages = _native_pages(self._conn, self.path)
        return self._conn

    def _page(self, after: int, upto: int, limit: int, max_bytes: int) -> Page:
        conn = self._connection()
        if self._pages is not None:
            # One call, detached: Python's sqlite3 hands the interpreter over at every row.
            events, count, last = self._pages.page(after, upto, limit, max_bytes)
            return Page(events, count, last)
        rows = conn.execute(_PAGE, (after, upto, limit)).fetchall()
        if not rows:
            return Page(b"", 0, after)
        size = 0
        envelopes = []
        for _, env in rows:
            envelopes.append(env.encode())
            size += len(envelopes[-1]) + 1
            if size >= max_bytes:
                break
        return Page(b",".join(envelopes), len(envelopes), rows[len(envelopes) - 1][0])

    def _tail(self, upto: int, n: int) -> list[tuple[int, bytes]]:
        if n <= 0 or upto <= 0:
            return []
        conn = self._connection()
        if self._pages is not None:
            return self._pages.rows(max(upto - n, 0), upto, n)
        rows = conn.execute(_PAGE, (max(upto - n, 0), upto, n)).fetchall()
        return [(seq, env.encode()) for seq, env in rows]

    def _fold(self, after: int, upto: int, sink: RowSink) -> int:
        rows = self._connection().execute(_ROWS, (after, upto, FOLD_PAGE)).fetchall()
        for seq, ident, codon_id, payload in rows:
            sink(seq, ident, codon_id, payload.encode())
        return int(rows[-1][0]) if rows else upto

    async def fold(self, upto: int, sink: RowSink) -> None:
        """See :meth:`HistorySource.fold`."""
        loop = asyncio.get_running_loop()
        cursor = 0
        while cursor < upto:
            cursor = await loop.run_in_executor(self._executor, self._fold, cursor, upto, sink)

    async def page(self, after: int, upto: int, limit: int, max_bytes: int) -> Page:
        """See :meth:`HistorySource.page`."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._page, after, upto, limit, max_bytes)

    async def tail(self, upto: int, n: int) -> list[tuple[int, bytes]]:
        """See :meth:`HistorySource.tail` (seqs are contiguous from 1, the journal checks it)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._tail, upto, n)

    async def close(self) -> None:
        """Closes the connection and stops the reader thread (idempotent)."""
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            if self._pages is not None:
                self._pages.close()
                self._pages = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, close)
        self._executor.shutdown(wait=False)
