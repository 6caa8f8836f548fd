"""The event journal: one SQLite database per execution (``.weft/weft.db``).

Every processed submission gets one row, in sequence order: applied
transitions (``kind = 'transition'``), rejected transitions (recorded as
``error`` events) and stream events. A batch is one transaction, and in WAL
mode with ``synchronous = FULL`` one commit is one fsync of the WAL: that is
the group commit. The payload column holds the exact encoded JSON, so the
journal, the wire and the replay all read the same bytes.

The connection belongs to one thread: the store's writer thread for a
writable journal, the caller's for a read-only one. A writable journal's
batches are inserted and committed by the core (``weft._core.JournalAppender``,
a second connection on the same thread, detached from the interpreter) when it
uses the same SQLite library as Python; see :func:`_native_appender`.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from weft._core import JournalAppender
from weft.errors import StoreCorruptError, StoreError
from weft.filemodes import private_file, tighten
from weft.store.schema import migrate

if TYPE_CHECKING:
    import logging

    from weft.state import Processed


def _log() -> logging.Logger:
    # logging (with threading, traceback and string) is imported on the first
    # warning: about 5 ms that weft status, ls and logs would pay on every start.
    import logging

    return logging.getLogger(__name__)


Row = tuple[int, str, str, str, str, str | None, str | None, str]
"""(seq, id, timestamp, kind, type, run_id, codon_id, payload)"""

_INSERT = (
    "INSERT INTO events (seq, id, timestamp, kind, type, run_id, codon_id, payload, crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

NATIVE_APPEND = True
"""Whether a writable journal appends through the core when it can (tests set it
False to run Python's own appends)."""

_CHECK_PAGE = 20_000
"""Rows read per query when verifying payload checksums at open."""


def is_damage(error: sqlite3.Error) -> bool:
    """Whether ``error`` says the journal's bytes are damaged (a malformed page,
    not a database, text that is not UTF-8), not that the disk or a lock failed."""
    name = getattr(error, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or type(error) is sqlite3.DatabaseError:
        return True
    # Python's own decoding of a TEXT column: SQLite never checks what it stores.
    return str(error).startswith("Could not decode to UTF-8")


def damaged(path: Path, error: sqlite3.Error) -> StoreCorruptError:
    """The refusal of a journal whose bytes are damaged (:func:`is_damage`), one line."""
    text = str(error)
    if text.startswith("Could not decode to UTF-8"):
        # The rest quotes the garbled row itself: bytes no terminal should get.
        text = "a row's text is not valid UTF-8"
    return StoreCorruptError(
        f"{path}: the journal is damaged ({text}); the run will not continue. "
        "Keep a copy of .weft/ for inspection; `weft store rebuild` cannot help "
        "when the journal itself is unreadable"
    )


def payload_crc(payload: str) -> int:
    """The checksum stored beside a payload (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(payload.encode())


def _with_crc(row: Row) -> tuple[object, ...]:
    return (*row, payload_crc(row[7]))


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """One journal row."""

    seq: int
    id: str
    timestamp: str
    kind: str
    type: str
    run_id: str | None
    codon_id: str | None
    payload: str


class Journal:
    """An execution's journal database."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._appender: JournalAppender | None = None
        """The core's connection that appends batches (see :func:`_native_appender`)."""

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        readonly: bool = False,
        check: bool = True,
        on_empty: Callable[[], None] | None = None,
    ) -> Journal:
        """Opens (creating unless ``readonly``) and checks the journal at ``path``.

        A database that fails SQLite's integrity check, or whose sequence
        numbers have a gap, raises :class:`~weft.errors.StoreCorruptError`:
        the run refuses to continue rather than drop data silently.
        ``on_empty`` is called, before anything is written, when the database
        holds no schema yet (new, or emptied): it may raise to refuse.
        """
        if readonly and not path.exists():
            raise StoreError(f"{path}: no journal here; is this an execution directory?")
        uri = f"file:{path}?mode={'ro' if readonly else 'rwc'}"
        if not readonly:
            # SQLite gives the -wal and -shm files the database's mode: all three private.
            private_file(path)
            for companion in ("-wal", "-shm"):
                tighten(f"{path}{companion}")
        try:
            conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False, timeout=10
            )
        except sqlite3.Error as e:
            raise StoreError(f"{path}: cannot open the journal: {e}") from e
        try:
            if not readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
            if check:
                _check_integrity(conn, path)
            if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                if on_empty is not None:
                    on_empty()
                if readonly:
                    # Nothing migrated it yet: a run is being created, or never was.
                    raise StoreError(f"{path}: the journal holds no tables yet; nothing to read")
            if not readonly:
                migrate(conn, str(path))
        except sqlite3.DatabaseError as e:
            conn.close()
            raise damaged(path, e) from e
        except BaseException:
            conn.close()
            raise
        journal = cls(conn, path)
        if check:
            try:
                journal._check_sequence()
                journal._check_payloads()
            except sqlite3.DatabaseError as e:
                # A page SQLite's quick check passes can still hold rows it cannot read.
                conn.close()
                if not is_damage(e):
                    raise
                raise damaged(path, e) from e
            except BaseException:
                conn.close()
                raise
        if not readonly and NATIVE_APPEND:
            journal._appender = _native_appender(conn, path)
        return journal

    def close(self) -> None:
        """Closes the connection (checkpointing the WAL when writable)."""
        try:
            if self._appender is not None:
                self._appender.close()
        finally:
            self._conn.close()

    @property
    def native(self) -> bool:
        """Whether batches are appended by the core (:func:`_native_appender`)."""
        return self._appender is not None

    def execute_on_writers(self, sql: str) -> None:
        """Runs ``sql`` (a ``PRAGMA``) on every connection that writes: for tests
        that make SQLite's own limits bite."""
        self._conn.execute(sql)
        if self._appender is not None:
            self._appender.execute_batch(sql)

    # -- writing -----------------------------------------------------------

    def append_processed(self, items: Sequence[Processed]) -> tuple[int, bool, str | None]:
        """Appends the rows of the StateManager's processed ``items`` in one
        transaction, the core building them (:attr:`native` only: otherwise
        the caller appends their rows). Returns their payload bytes, whether an
        applied transition among them ended a codon or the run or started a
        run, and the run id of the last applied ``RunStarted``."""
        if self._appender is None:
            raise RuntimeError("append_processed needs the core's appender (Journal.native)")
        return self._appender.append_processed(items if isinstance(items, list) else list(items))

    def append(self, rows: Sequence[Row]) -> None:
        """Appends a batch in one transaction: durable when this returns."""
        if self._appender is not None:
            self._appender.append(rows)
            return
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_INSERT, map(_with_crc, rows))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # -- reading -----------------------------------------------------------

    def last_seq(self) -> int:
        """The newest sequence number, 0 for an empty journal."""
        (last,) = self._conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        return int(last)

    def count_applied(self, kind: str, through: int) -> int:
        """How many ``kind`` transitions were applied up to seq ``through``."""
        (n,) = self._conn.execute(
            "SELECT count(*) FROM events WHERE type = ? AND kind = 'transition' AND seq <= ?",
            (kind, through),
        ).fetchone()
        return int(n)

    def count(self) -> int:
        """Number of rows."""
        (n,) = self._conn.execute("SELECT count(*) FROM events").fetchone()
        return int(n)

    def after(self, seq: int, limit: int = 1000) -> list[JournalEvent]:
        """Up to ``limit`` events after ``seq``, oldest first (one page)."""
        rows = self._conn.execute(
            "SELECT seq, id, timestamp, kind, type, run_id, codon_id, payload "
            "FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        ).fetchall()
        return [JournalEvent(*r) for r in rows]

    def pages(self, after: int = 0, page: int = 1000) -> Iterator[list[JournalEvent]]:
        """Every event after ``after``, a page at a time, never all in memory."""
        while events := self.after(after, page):
            yield events
            after = events[-1].seq

    def of_types(self, types: Sequence[str]) -> list[JournalEvent]:
        """Every event of one of ``types``, oldest first (served by the type
        index, so it costs what it returns, not the journal's size)."""
        marks = ", ".join("?" for _ in types)
        rows = self._conn.execute(
            "SELECT seq, id, timestamp, kind, type, run_id, codon_id, payload "
            f"FROM events WHERE type IN ({marks}) ORDER BY seq",
            tuple(types),
        ).fetchall()
        return [JournalEvent(*r) for r in rows]

    def last_of_type(self, type_: str) -> JournalEvent | None:
        """The newest event of ``type_`` (served by the type index), or None."""
        row = self._conn.execute(
            "SELECT seq, id, timestamp, kind, type, run_id, codon_id, payload "
            "FROM events WHERE type = ? ORDER BY seq DESC LIMIT 1",
            (type_,),
        ).fetchone()
        return None if row is None else JournalEvent(*row)

    def last(self, n: int) -> list[JournalEvent]:
        """The newest ``n`` events, oldest first."""
        rows = self._conn.execute(
            "SELECT seq, id, timestamp, kind, type, run_id, codon_id, payload "
            "FROM events ORDER BY seq DESC LIMIT ?",
            (n,),
        ).fetchall()
        return [JournalEvent(*r) for r in reversed(rows)]

    def transition_payloads(
        self, after: int = 0, page: int = 50_000, *, upto: int | None = None
    ) -> Iterator[tuple[list[int], list[bytes]]]:
        """Applied transitions after ``after`` (and at most ``upto``) as (seqs,
        encoded bytes), in pages: the replay feed. ``upto`` keeps a reader of a
        live execution to the end it saw first, while the writer goes on."""
        end = (1 << 62) if upto is None else upto
        while True:
            rows = self._conn.execute(
                "SELECT seq, payload FROM events WHERE kind = 'transition' AND seq > ? "
                "AND seq <= ? ORDER BY seq LIMIT ?",
                (after, end, page),
            ).fetchall()
            if not rows:
                return
            yield [s for s, _ in rows], [p.encode() for _, p in rows]
            after = rows[-1][0]

    def baseline(self) -> tuple[int, bytes] | None:
        """(seq, state document) a restored journal starts from, else None."""
        try:
            row = self._conn.execute(
                "SELECT seq, state FROM baseline ORDER BY seq LIMIT 1"
            ).fetchone()
        except sqlite3.OperationalError:
            return None  # a schema-1 journal opened read-only: never restored
        return None if row is None else (int(row[0]), row[1].encode())

    def set_baseline(self, seq: int, source: str, state: bytes, note: Row) -> None:
        """Makes an empty journal start from ``state`` (reflecting it through
        ``seq``), with ``note`` (at ``seq``) saying so: one transaction."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO baseline (seq, source, state) VALUES (?, ?, ?)",
                (seq, source, state.decode()),
            )
            conn.execute(_INSERT, _with_crc(note))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_sequence(self) -> None:
        count, first, last = self._conn.execute(
            "SELECT count(*), coalesce(min(seq), 1), coalesce(max(seq), 0) FROM events"
        ).fetchone()
        if count and (first != 1 or last != count):
            raise StoreCorruptError(
                f"{self.path}: the journal has gaps (seqs {first}..{last} but {count} rows); "
                "the run will not continue. Keep a copy of .weft/ for inspection"
            )

    def _check_payloads(self) -> None:
        """Every payload still matches the checksum written beside it."""
        columns = {r[1] for r in self._conn.execute("PRAGMA table_info(events)")}
        if "crc" not in columns:
            return  # a version-1 journal opened read-only: nothing to compare
        after = 0
        while rows := self._conn.execute(
            "SELECT seq, payload, crc FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, _CHECK_PAGE),
        ).fetchall():
            for seq, payload, crc in rows:
                if crc is not None and payload_crc(payload) != crc:
                    raise StoreCorruptError(
                        f"{self.path}: journal entry seq {seq} was altered after it was "
                        "written (its checksum does not match); the run will not continue. "
                        "Keep a copy of .weft/ for inspection"
                    )
            after = rows[-1][0]


class CoreConnection(Protocol):
    """A connection of the core to a journal (:class:`~weft._core.JournalAppender`,
    :class:`~weft._core.JournalPages`)."""

    def soft_heap_limit(self, limit: int) -> int:
        """Sets SQLite's process-wide soft heap limit; returns the limit in force."""

    def close(self) -> None:
        """Closes the connection."""


C = TypeVar("C", bound=CoreConnection)


def shares_sqlite(native: CoreConnection, conn: sqlite3.Connection) -> bool:
    """Whether the core's connection ``native`` uses the SQLite library that
    Python's connection ``conn`` does. The soft heap limit is a setting of the
    library, shared by all its connections: one side sets it and the other reads it."""
    (before,) = conn.execute("PRAGMA soft_heap_limit").fetchone()
    probe = before + 1 if before > 0 else 1 << 40
    try:
        native.soft_heap_limit(probe)
        (seen,) = conn.execute("PRAGMA soft_heap_limit").fetchone()
    finally:
        native.soft_heap_limit(before)
        conn.execute(f"PRAGMA soft_heap_limit = {int(before)}")
    return bool(seen == probe)


def core_connection(
    make: Callable[[Path], C], conn: sqlite3.Connection, path: Path, doing: str
) -> C | None:
    """``make(path)``, a connection of the core, if it uses the SQLite library
    Python's ``conn`` does (:func:`shares_sqlite`); else None, and Python does
    the work (``doing``, for the log: "appending to").

    Python's ``sqlite3`` gives the interpreter up and takes it back around every
    row it steps through; the core's connections work on a whole batch or page
    detached. It must be the same library: two copies in one process would
    release each other's locks on the journal's files.
    """
    try:
        native = make(path)
    except sqlite3.Error as exc:
        _log().debug("%s %s from Python: %s", doing, path, exc)
        return None
    if not shares_sqlite(native, conn):
        _log().debug("%s %s from Python: the core links another SQLite", doing, path)
        native.close()
        return None
    return native


def _native_appender(conn: sqlite3.Connection, path: Path) -> JournalAppender | None:
    """A :class:`~weft._core.JournalAppender` on ``path`` (see :func:`core_connection`)."""
    return core_connection(JournalAppender, conn, path, "appending to")


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    problems = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
    if problems != ["ok"]:
        raise StoreCorruptError(
            f"{path}: the journal failed its integrity check: {'; '.join(problems[:5])}. "
            "The run will not continue; keep a copy of .weft/ for inspection"
        )


def backup_journal(source: Path, target: Path) -> None:
    """A consistent copy of the journal at ``source`` into ``target`` (SQLite's
    backup API: whole even while a run appends), private to the user; the
    source is only read."""
    from weft.filemodes import tighten

    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()
    tighten(target)
