"""The batch store: one SQLite database (WAL) per batch, with one writer.

Tables (the seed's, plus what a runner needs):

* ``workstreams``: state, retry bookkeeping and backoff of each workstream;
* ``steps``: each step's state and retry bookkeeping, its plan (JSON), and the
  facts of its last run: execution folder, pid, exit code, cost, duration;
* ``breakers``: each tool's circuit breaker (state, counters, times);
* ``state_transitions``: the seed's audit table, one row per workstream or
  step move (``step_id`` is NULL for a workstream's own moves), with the
  ``metadata`` JSON saying why;
* ``breaker_transitions``: the same for circuit breakers;
* ``audit_notes``: what happened without moving a state (a step adopted by a
  resumed coordinator, a timeout's stop, an abandon request, a drain), each
  naming its subject (the batch, a workstream, a step or a breaker) and the
  state it was in. The transition tables hold real moves only: a change whose
  state does not move, marked ``audit``, is written here, never as a row whose
  from-state is its to-state;
* ``commands``: the inbox of ``weft batch abandon|retry|reset-breaker``.

**One writer.** Only the process holding ``batch.lock`` (an ``flock``) writes
states: the coordinator, or a recovery command when no coordinator runs. Any
process may read, and may append to ``commands``: the writer applies them.

**Validated before written.** Every state change reaching :meth:`commit` was
made by a core machine (:class:`weft.core.Workstream`, :class:`~weft.core.Step`,
:class:`~weft.core.CircuitBreaker`) in :mod:`weft.batch.scheduler`; the store
also checks that the row still holds the change's ``from`` state, so a change
made on a stale view is refused (``StoreError``) instead of written. A
:meth:`commit` is one transaction: all its changes and their audit rows, or
nothing.

**Damage is refused, never papered over.** SQLite opens a missing or empty
file as a new database, ignores a WAL whose header is damaged and forgets
one that was deleted: a coordinator trusting it would run finished steps
again. So :meth:`BatchStore.open` checks before it trusts (the checks are
:func:`check_files`, before SQLite opens the files, and ``_check_contents``,
in one read transaction):

* the files: a database missing, empty, truncated or not SQLite's, or a WAL
  damaged (:func:`weft.store.loss.wal_damage`) or deleted (its ``-shm`` left
  behind), beside step folders that prove steps ran;
* the schema: the tables, and ``PRAGMA user_version`` (:data:`SCHEMA_VERSION`);
* the rows: every state is one the machines know; the rows are those the plan
  recorded (``meta.plan_keys``); each row's state is the one its latest audit
  row moved it to;
* the audit trail: its row count and SHA-256 (``meta.audit_rows``,
  ``meta.audit_sha256``), kept in the same transaction as every audit row;
* the step folders (``steps/WS/STEP``): one that shows a launch belongs to a
  step the store records as launched; for the writer, its ``exit`` file agrees
  with the step's recorded exit code and its log counts no more launches than
  the store.

A failed check raises :class:`StoreError` naming what was found and the ways
forward (``weft batch rebuild FILE``, see :func:`step_traces`); nothing on
disk is changed. The audit ids are one sequence over both audit tables, so
the trail's order is the order it was written in, whatever the timestamps.

**Private.** The state folder is 0700 and the store's files 0600: a step's
plan may carry secrets in ``env``, which the store keeps masked anyway
(:data:`ENV_FILE` holds the values, 0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sqlite3
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from weft.clock import iso_from_ms
from weft.core import CIRCUIT_STATES, STEP_STATES, WORKSTREAM_STATES
from weft.errors import LockHeldError, StoreError
from weft.store.loss import wal_damage

__all__ = [
    "DB_FILE",
    "ENV_FILE",
    "LOCK_FILE",
    "SCHEMA_VERSION",
    "BatchStore",
    "BreakerRow",
    "Change",
    "Note",
    "StepRow",
    "StepTrace",
    "WorkstreamRow",
    "check_files",
    "step_traces",
]

DB_FILE = "batch.db"
LOCK_FILE = "batch.lock"
ENV_FILE = "step-env.json"
"""The real values of the steps' ``env`` (0600); the store holds them masked."""
STEPS_DIR = "steps"
SCHEMA_VERSION = 2
"""``PRAGMA user_version`` of the store this code writes. Version 1 (before
``audit_notes``) is read too, and made version 2 by its next writer: the table
is added and the rows of the transition tables that moved nothing become notes
(same ids, the audit checksum recomputed in the same transaction)."""
OLD_SCHEMA_VERSIONS = (1,)
TABLES = (
    "meta",
    "workstreams",
    "steps",
    "breakers",
    "state_transitions",
    "breaker_transitions",
    "commands",
    "audit_notes",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workstreams (
    ws_id TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    state TEXT NOT NULL,
    retry_count INTEGER NOT NULL DEFAULT 0,
    max_retries INTEGER NOT NULL,
    retry_ready_at_ms INTEGER,
    base_delay_ms INTEGER NOT NULL,
    max_delay_ms INTEGER NOT NULL,
    abandon_requested INTEGER NOT NULL DEFAULT 0,
    updated_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    ws_id TEXT NOT NULL REFERENCES workstreams(ws_id),
    step_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    state TEXT NOT NULL,
    retry_count INTEGER NOT NULL DEFAULT 0,
    max_retries INTEGER NOT NULL,
    retry_ready_at_ms INTEGER,
    plan TEXT NOT NULL,
    launches INTEGER NOT NULL DEFAULT 0,
    execution_dir TEXT,
    pid INTEGER,
    pid_start TEXT,
    started_at_ms INTEGER,
    exit_code INTEGER,
    cost_usd REAL NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    updated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (ws_id, step_id)
);
CREATE TABLE IF NOT EXISTS breakers (
    tool TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    half_open_successes INTEGER NOT NULL DEFAULT 0,
    opened_at_ms INTEGER,
    probe_started_at_ms INTEGER,
    failure_threshold INTEGER NOT NULL,
    cooldown_ms INTEGER NOT NULL,
    success_threshold INTEGER NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS state_transitions (
    transition_id INTEGER PRIMARY KEY AUTOINCREMENT,
    ws_id TEXT NOT NULL REFERENCES workstreams(ws_id),
    step_id TEXT,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    transitioned_at TIMESTAMP NOT NULL,
    metadata TEXT
);
CREATE TABLE IF NOT EXISTS breaker_transitions (
    transition_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tool TEXT NOT NULL REFERENCES breakers(tool),
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    transitioned_at TIMESTAMP NOT NULL,
    metadata TEXT
);
CREATE TABLE IF NOT EXISTS audit_notes (
    note_id INTEGER PRIMARY KEY,
    subject TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT,
    noted_at TIMESTAMP NOT NULL,
    metadata TEXT
);
CREATE TABLE IF NOT EXISTS commands (
    command_id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    requested_at TIMESTAMP NOT NULL,
    applied_at TIMESTAMP,
    result TEXT
);
"""


@dataclass
class WorkstreamRow:
    """A ``workstreams`` row."""

    ws_id: str
    position: int
    state: str
    retry_count: int
    max_retries: int
    retry_ready_at_ms: int | None
    base_delay_ms: int
    max_delay_ms: int
    abandon_requested: bool
    attempt: int = 1
    """The workstream's attempt: 1, plus one per reopening (``weft batch retry
    --reopen``), counted from the audit trail's moves out of ``S_ABANDONED``
    (the only way out of it); not a column."""


@dataclass
class StepRow:
    """A ``steps`` row."""

    ws_id: str
    step_id: str
    position: int
    state: str
    retry_count: int
    max_retries: int
    retry_ready_at_ms: int | None
    plan: dict[str, Any]
    launches: int = 0
    execution_dir: str | None = None
    pid: int | None = None
    pid_start: str | None = None
    started_at_ms: int | None = None
    exit_code: int | None = None
    cost_usd: float = 0.0
    duration_ms: int = 0
    error: str | None = None

    @property
    def key(self) -> str:
        """``ws_id/step_id``."""
        return f"{self.ws_id}/{self.step_id}"


@dataclass
class BreakerRow:
    """A ``breakers`` row."""

    tool: str
    state: str
    consecutive_failures: int
    half_open_successes: int
    opened_at_ms: int | None
    probe_started_at_ms: int | None
    failure_threshold: int
    cooldown_ms: int
    success_threshold: int


@dataclass
class Change:
    """One row update, with its audit row when the state moves.

    ``values`` are the columns to set. ``from_state`` must be what the row holds
    now (checked at commit); when ``to_state`` differs from it, an audit row is
    written; when it does not and ``audit`` is set (something worth keeping
    happened without a move), an :class:`audit note <Note>` instead.
    """

    table: Literal["workstreams", "steps", "breakers"]
    key: tuple[str, ...]
    from_state: str
    to_state: str
    values: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    audit: bool = False


@dataclass
class Note:
    """An audit note: something that happened to ``subject`` without moving its
    state (``audit_notes``).

    ``subject`` is ``batch`` (``name`` empty), ``workstream`` (``ws``),
    ``step`` (``ws/step``) or ``breaker`` (the tool); ``state`` is the state
    its row was in, ``None`` for the batch."""

    subject: Literal["batch", "workstream", "step", "breaker"]
    name: str
    metadata: dict[str, Any]
    state: str | None = None


_SUBJECT: dict[str, Literal["workstream", "step", "breaker"]] = {
    "workstreams": "workstream",
    "steps": "step",
    "breakers": "breaker",
}


@dataclass
class StoredBatch:
    """Everything the store holds about the batch's states."""

    workstreams: list[WorkstreamRow]
    steps: list[StepRow]
    breakers: list[BreakerRow]


@dataclass
class _Audit:
    """The writer's running view of the audit trail: row count, SHA-256 so far,
    and the next id (one sequence over both audit tables)."""

    rows: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    next_id: int = 1

    def copy(self) -> _Audit:
        return _Audit(self.rows, self.digest.copy(), self.next_id)

    def add(self, line: bytes) -> None:
        self.digest.update(line)
        self.rows += 1
        self.next_id += 1


class BatchStore:
    """One batch's database. Open with :meth:`open`; close when done."""

    def __init__(
        self, folder: Path, conn: sqlite3.Connection, lock_fd: int | None, audit: _Audit
    ) -> None:
        self.folder = folder
        self._conn = conn
        self._lock_fd = lock_fd
        self._audit = audit

    @classmethod
    def open(
        cls,
        folder: str | os.PathLike[str],
        *,
        writer: bool,
        batch_file: str | os.PathLike[str] | None = None,
        _fresh: bool = False,
    ) -> BatchStore:
        """The store in ``folder`` (created for a writer). A writer takes
        ``batch.lock`` first and raises :class:`LockHeldError` if it is held.

        Raises :class:`StoreError` when the store is damaged (see the module
        doc); ``batch_file`` only makes the message name the file to rebuild with.
        """
        path = Path(folder)
        lock_fd: int | None = None
        if writer:
            _private_dir(path)
            lock_fd = _take_lock(path / LOCK_FILE)
        conn: sqlite3.Connection | None = None
        try:
            # A store made again by `set_aside` is new beside the step folders.
            traces = {} if _fresh else step_traces(path, full=writer)
            found = check_files(path, traces, writer=writer, batch_file=batch_file)
            if not writer and not found:
                raise StoreError(
                    f"no batch store in {path} (no {DB_FILE}); run `weft batch run FILE` first"
                )
            if writer:
                _private_file(path / DB_FILE)
            conn = sqlite3.connect(path / DB_FILE, isolation_level=None, timeout=10.0)
            conn.execute("PRAGMA busy_timeout = 10000")
            audit = _check_contents(conn, path, traces, writer=writer, batch_file=batch_file)
            if audit is None and not writer:
                raise StoreError(f"the batch store {path / DB_FILE} is not set up yet (or not one)")
            if writer:
                conn.execute("PRAGMA journal_mode = WAL")
                # FULL: a step is launched only after its S_RUNNING is on disk.
                conn.execute("PRAGMA synchronous = FULL")
                if audit is None:
                    conn.executescript(
                        f"BEGIN; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                    )
                    audit = _Audit()
                elif conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                    audit = _upgrade(conn)
                for suffix in ("", "-wal", "-shm"):
                    _private_file(path / (DB_FILE + suffix), create=False)
        except BaseException as e:
            if conn is not None:
                conn.close()
            if lock_fd is not None:
                os.close(lock_fd)
            if isinstance(e, sqlite3.Error):
                raise StoreError(f"cannot open the batch store {path / DB_FILE}: {e}") from e
            raise
        assert audit is not None
        return cls(path, conn, lock_fd, audit)

    @classmethod
    def set_aside(cls, folder: str | os.PathLike[str]) -> tuple[BatchStore, Path | None]:
        """For ``weft batch rebuild``: takes the lock, moves the damaged store's
        files (``batch.db`` and its WAL and shared memory) into a new
        ``damaged-<time>`` folder beside them, and opens a new, empty store.
        Returns it and that folder (``None`` if there was nothing to move)."""
        path = Path(folder)
        _private_dir(path)
        lock_fd = _take_lock(path / LOCK_FILE)
        aside: Path | None = None
        try:
            for suffix in ("", "-wal", "-shm"):
                file = path / (DB_FILE + suffix)
                if file.exists():
                    if aside is None:
                        aside = path / time.strftime("damaged-%Y%m%dT%H%M%SZ", time.gmtime())
                        aside.mkdir(mode=0o700)
                    file.rename(aside / file.name)
        finally:
            os.close(lock_fd)
        return cls.open(path, writer=True, _fresh=True), aside

    @property
    def is_writer(self) -> bool:
        """Whether this handle holds the lock."""
        return self._lock_fd is not None

    def close(self) -> None:
        """Closes the database and releases the lock."""
        self._conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> BatchStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- meta ---------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A ``meta`` value."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, items: dict[str, str]) -> None:
        """Sets ``meta`` values (writer only)."""
        self._require_writer()
        with self._transaction():
            self._conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                list(items.items()),
            )

    # ---- rows ---------------------------------------------------------------

    def is_empty(self) -> bool:
        """Whether no workstream was recorded yet."""
        count: int = self._conn.execute("SELECT COUNT(*) FROM workstreams").fetchone()[0]
        return count == 0

    def insert_plan(
        self,
        workstreams: Sequence[WorkstreamRow],
        steps: Sequence[StepRow],
        breakers: Sequence[BreakerRow],
        now_ms: int,
    ) -> None:
        """Records new rows (a new batch, or workstreams added to the file)."""
        self._require_writer()
        at = iso_from_ms(now_ms)
        with self._transaction():
            self._conn.executemany(
                "INSERT INTO workstreams VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        w.ws_id,
                        w.position,
                        w.state,
                        w.retry_count,
                        w.max_retries,
                        w.retry_ready_at_ms,
                        w.base_delay_ms,
                        w.max_delay_ms,
                        int(w.abandon_requested),
                        at,
                    )
                    for w in workstreams
                ],
            )
            self._conn.executemany(
                "INSERT INTO steps (ws_id, step_id, position, state, retry_count, max_retries, "
                "retry_ready_at_ms, plan, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                [
                    (
                        s.ws_id,
                        s.step_id,
                        s.position,
                        s.state,
                        s.retry_count,
                        s.max_retries,
                        s.retry_ready_at_ms,
                        json.dumps(s.plan),
                        at,
                    )
                    for s in steps
                ],
            )
            self._conn.executemany(
                "INSERT INTO breakers VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        b.tool,
                        b.state,
                        b.consecutive_failures,
                        b.half_open_successes,
                        b.opened_at_ms,
                        b.probe_started_at_ms,
                        b.failure_threshold,
                        b.cooldown_ms,
                        b.success_threshold,
                        at,
                    )
                    for b in breakers
                ],
            )
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES ('plan_keys', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (json.dumps(_row_keys(self._conn)),),
            )

    def load(self) -> StoredBatch:
        """Every row, workstreams and steps in plan order."""
        c = self._conn
        reopened = dict(
            c.execute(
                "SELECT ws_id, COUNT(*) FROM state_transitions WHERE step_id IS NULL "
                "AND from_state = 'S_ABANDONED' GROUP BY ws_id"
            ).fetchall()
        )
        wss = [
            WorkstreamRow(
                ws_id=r[0],
                position=r[1],
                state=r[2],
                retry_count=r[3],
                max_retries=r[4],
                retry_ready_at_ms=r[5],
                base_delay_ms=r[6],
                max_delay_ms=r[7],
                abandon_requested=bool(r[8]),
                attempt=1 + int(reopened.get(r[0], 0)),
            )
            for r in c.execute(
                "SELECT ws_id, position, state, retry_count, max_retries, retry_ready_at_ms, "
                "base_delay_ms, max_delay_ms, abandon_requested FROM workstreams ORDER BY position"
            )
        ]
        steps = [
            StepRow(
                ws_id=r[0],
                step_id=r[1],
                position=r[2],
                state=r[3],
                retry_count=r[4],
                max_retries=r[5],
                retry_ready_at_ms=r[6],
                plan=json.loads(r[7]),
                launches=r[8],
                execution_dir=r[9],
                pid=r[10],
                pid_start=r[11],
                started_at_ms=r[12],
                exit_code=r[13],
                cost_usd=r[14],
                duration_ms=r[15],
                error=r[16],
            )
            for r in c.execute(
                "SELECT s.ws_id, step_id, s.position, s.state, s.retry_count, s.max_retries, "
                "s.retry_ready_at_ms, plan, launches, execution_dir, pid, pid_start, "
                "started_at_ms, exit_code, cost_usd, duration_ms, error FROM steps s "
                "JOIN workstreams w ON w.ws_id = s.ws_id ORDER BY w.position, s.position"
            )
        ]
        breakers = [
            BreakerRow(*r)
            for r in c.execute(
                "SELECT tool, state, consecutive_failures, half_open_successes, opened_at_ms, "
                "probe_started_at_ms, failure_threshold, cooldown_ms, success_threshold "
                "FROM breakers ORDER BY tool"
            )
        ]
        return StoredBatch(workstreams=wss, steps=steps, breakers=breakers)

    # ---- changes ------------------------------------------------------------

    def commit(self, changes: Sequence[Change | Note], now_ms: int) -> None:
        """Writes ``changes`` and their audit rows (and notes) in one transaction.

        Raises :class:`StoreError` (and writes nothing) if a row does not hold
        the change's ``from_state``.
        """
        if not changes:
            return
        self._require_writer()
        at = iso_from_ms(now_ms)
        audit = self._audit.copy()
        with self._transaction():
            for change in changes:
                if isinstance(change, Note):
                    self._note(change, at, audit)
                else:
                    self._apply(change, at, audit)
            if audit.rows != self._audit.rows:
                self._write_audit_meta(audit)
        self._audit = audit

    def _note(self, note: Note, at: str, audit: _Audit) -> None:
        meta = json.dumps(note.metadata, sort_keys=True) if note.metadata else None
        line = (audit.next_id, note.subject, note.name, note.state, at, meta)
        self._conn.execute(
            "INSERT INTO audit_notes (note_id, subject, name, state, noted_at, metadata) "
            "VALUES (?,?,?,?,?,?)",
            line,
        )
        audit.add(_audit_line("audit_notes", line))

    def _write_audit_meta(self, audit: _Audit) -> None:
        self._conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [("audit_rows", str(audit.rows)), ("audit_sha256", audit.digest.hexdigest())],
        )

    def _apply(self, change: Change, at: str, audit: _Audit) -> None:
        where = _KEYS[change.table]
        row = self._conn.execute(
            f"SELECT state FROM {change.table} WHERE {where}",
            change.key,
        ).fetchone()
        if row is None:
            raise StoreError(f"{change.table}: no row {'/'.join(change.key)}")
        if row[0] != change.from_state:
            raise StoreError(
                f"{change.table} {'/'.join(change.key)} is in {row[0]}, not {change.from_state}: "
                "another process changed the batch (only one coordinator may run)"
            )
        values = {**change.values, "state": change.to_state, "updated_at": at}
        sets = ", ".join(f"{col} = ?" for col in values)
        self._conn.execute(
            f"UPDATE {change.table} SET {sets} WHERE {where}",
            [*(_column(v) for v in values.values()), *change.key],
        )
        if change.from_state == change.to_state:
            if change.audit:  # nothing moved: a note, never a self-move
                subject = _SUBJECT[change.table]
                self._note(
                    Note(subject, "/".join(change.key), change.metadata, change.to_state), at, audit
                )
            return
        meta = json.dumps(change.metadata, sort_keys=True) if change.metadata else None
        line: tuple[Any, ...]
        if change.table == "breakers":
            line = (audit.next_id, change.key[0], change.from_state, change.to_state, at, meta)
            self._conn.execute(
                "INSERT INTO breaker_transitions (transition_id, tool, from_state, to_state, "
                "transitioned_at, metadata) VALUES (?,?,?,?,?,?)",
                line,
            )
            audit.add(_audit_line("breaker_transitions", line))
        else:
            step_id = change.key[1] if change.table == "steps" else None
            line = (audit.next_id, change.key[0], step_id, change.from_state, change.to_state)
            line += (at, meta)
            self._conn.execute(
                "INSERT INTO state_transitions (transition_id, ws_id, step_id, from_state, "
                "to_state, transitioned_at, metadata) VALUES (?,?,?,?,?,?,?)",
                line,
            )
            audit.add(_audit_line("state_transitions", line))

    # ---- audit --------------------------------------------------------------

    def transitions(self, ws_id: str | None = None) -> list[dict[str, Any]]:
        """The audit trail (``state_transitions``), oldest first."""
        sql = (
            "SELECT transition_id, ws_id, step_id, from_state, to_state, transitioned_at, "
            "metadata FROM state_transitions"
        )
        args: tuple[str, ...] = ()
        if ws_id is not None:
            sql += " WHERE ws_id = ?"
            args = (ws_id,)
        return [
            {
                "id": r[0],
                "ws_id": r[1],
                "step_id": r[2],
                "from": r[3],
                "to": r[4],
                "at": r[5],
                "metadata": json.loads(r[6]) if r[6] else {},
            }
            for r in self._conn.execute(sql + " ORDER BY transition_id", args)
        ]

    def notes(self) -> list[dict[str, Any]]:
        """The audit notes (``audit_notes``), oldest first; none in a version 1
        store not yet opened by a writer."""
        try:
            rows = self._conn.execute(
                "SELECT note_id, subject, name, state, noted_at, metadata FROM audit_notes "
                "ORDER BY note_id"
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        return [
            {
                "id": r[0],
                "subject": r[1],
                "name": r[2],
                "state": r[3],
                "at": r[4],
                "metadata": json.loads(r[5]) if r[5] else {},
            }
            for r in rows
        ]

    def breaker_transitions(self) -> list[dict[str, Any]]:
        """The breakers' audit trail, oldest first."""
        return [
            {
                "id": r[0],
                "tool": r[1],
                "from": r[2],
                "to": r[3],
                "at": r[4],
                "metadata": json.loads(r[5]) if r[5] else {},
            }
            for r in self._conn.execute(
                "SELECT transition_id, tool, from_state, to_state, transitioned_at, metadata "
                "FROM breaker_transitions ORDER BY transition_id"
            )
        ]

    # ---- commands -----------------------------------------------------------

    def add_command(self, kind: str, target: str, now_ms: int) -> int:
        """Appends a recovery command to the inbox (any process); its id."""
        with self._transaction():
            cur = self._conn.execute(
                "INSERT INTO commands (kind, target, requested_at) VALUES (?,?,?)",
                (kind, target, iso_from_ms(now_ms)),
            )
        return int(cur.lastrowid or 0)

    def pending_commands(self) -> list[tuple[int, str, str]]:
        """Commands not applied yet: (id, kind, target), oldest first."""
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self._conn.execute(
                "SELECT command_id, kind, target FROM commands WHERE applied_at IS NULL "
                "ORDER BY command_id"
            )
        ]

    def command_result(self, command_id: int) -> str | None:
        """The result of an applied command, ``None`` while pending."""
        row = self._conn.execute(
            "SELECT result FROM commands WHERE command_id = ? AND applied_at IS NOT NULL",
            (command_id,),
        ).fetchone()
        return None if row is None else str(row[0])

    def mark_command(self, command_id: int, result: str, now_ms: int) -> None:
        """Records that a command was applied (writer only)."""
        self._require_writer()
        with self._transaction():
            self._conn.execute(
                "UPDATE commands SET applied_at = ?, result = ? WHERE command_id = ?",
                (iso_from_ms(now_ms), result, command_id),
            )

    # ---- helpers ------------------------------------------------------------

    def _require_writer(self) -> None:
        if self._lock_fd is None:
            raise StoreError("this batch store was opened read-only; only the coordinator writes")

    class _Tx:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def __enter__(self) -> None:
            self.conn.execute("BEGIN IMMEDIATE")

        def __exit__(self, exc_type: object, *rest: object) -> None:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")

    def _transaction(self) -> BatchStore._Tx:
        return BatchStore._Tx(self._conn)


_KEYS: dict[str, str] = {
    "workstreams": "ws_id = ?",
    "steps": "ws_id = ? AND step_id = ?",
    "breakers": "tool = ?",
}


def _column(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def _take_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise LockHeldError(
            f"the batch in {path.parent} is being run by pid {holder}; "
            "wait for it, or send it the command (weft batch abandon|retry|reset-breaker)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


# ---- privacy ------------------------------------------------------------------


def _private_dir(path: Path) -> None:
    """Creates ``path`` (0700), or makes an existing one 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _private_file(path: Path, *, create: bool = True) -> None:
    """Makes ``path`` 0600, creating it empty first if asked. SQLite gives its WAL
    and shared-memory files the database file's mode, so they follow."""
    if create:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    with contextlib.suppress(FileNotFoundError):
        path.chmod(0o600)


# ---- damage -------------------------------------------------------------------

_LAUNCH_HEADER = re.compile(rb"^--- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ launch", re.MULTILINE)
"""The line :class:`weft.batch.engine.LocalEngine` writes to ``step.log`` at each launch."""
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SHOWN = 6
"""Problems listed in a refusal; the rest are counted."""


@dataclass(frozen=True)
class StepTrace:
    """What a step folder (``steps/WS/STEP``) proves: the step was launched."""

    key: str
    folder: Path
    launches: int | None = None
    """Launch lines in ``step.log`` (read only when asked: logs can be long)."""
    exit_code: int | None = None
    """The ``exit`` file's code: the last launch ended with it."""
    has_exit: bool = False

    @property
    def where(self) -> str:
        """``steps/WS/STEP``."""
        return f"{STEPS_DIR}/{self.key}"


def step_traces(folder: Path, *, full: bool = True) -> dict[str, StepTrace]:
    """The step folders under ``folder/steps`` that show a launch (a ``step.log``,
    an ``exit`` or ``exit.pid`` file, or an ``execution`` folder), by step key.
    ``full`` also reads each exit code and counts the launches in each log."""
    traces: dict[str, StepTrace] = {}
    root = folder / STEPS_DIR
    try:
        ws_dirs = sorted(e.path for e in os.scandir(root) if e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return traces
    marks = {"step.log", "exit", "exit.pid", "execution"}
    for ws_path in ws_dirs:
        for step_path in sorted(e.path for e in os.scandir(ws_path) if e.is_dir()):
            # One listing per folder, not a stat per name: status opens the store often.
            try:
                names = set(os.listdir(step_path))
            except FileNotFoundError:
                continue
            if not names & marks:
                continue
            key = f"{os.path.basename(ws_path)}/{os.path.basename(step_path)}"
            step_dir = Path(step_path)
            exit_file = step_dir / "exit"
            has_exit = "exit" in names
            launches = code = None
            if full:
                try:
                    launches = len(_LAUNCH_HEADER.findall((step_dir / "step.log").read_bytes()))
                except OSError:
                    launches = 0
                try:
                    code = int(exit_file.read_text().strip()) if has_exit else None
                except (OSError, ValueError):
                    code = None
            traces[key] = StepTrace(key, step_dir, launches, code, has_exit)
    return traces


def _ways_forward(folder: Path, batch_file: str | os.PathLike[str] | None) -> str:
    file = str(batch_file) if batch_file is not None else "FILE"
    state = "" if batch_file is not None else f" --state-dir {folder}"
    return (
        f"Nothing was changed. Ways forward: `weft batch rebuild {file}{state}` rebuilds the "
        "store from what the step folders prove (a step whose exit file shows it succeeded "
        "is kept; the others run again; the damaged files are kept in a damaged-* folder), "
        f"or move {folder} away to start the batch over."
    )


def _refuse(
    folder: Path, problems: list[str], batch_file: str | os.PathLike[str] | None
) -> StoreError:
    shown = problems[:_SHOWN]
    more = len(problems) - len(shown)
    text = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return StoreError(
        f"the batch store {folder / DB_FILE} is damaged: {text}. "
        "Resuming would run finished steps again. " + _ways_forward(folder, batch_file)
    )


def _evidence(traces: dict[str, StepTrace]) -> str:
    keys = list(traces)
    named = ", ".join(f"{STEPS_DIR}/{k}" for k in keys[:3])
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"{named}{more} prove{'s' if len(keys) == 1 else ''} steps were launched"


def check_files(
    folder: Path,
    traces: dict[str, StepTrace],
    *,
    writer: bool,
    batch_file: str | os.PathLike[str] | None = None,
) -> bool:
    """The checks made before SQLite opens the files (it would take a missing
    file for a new store and reset a damaged WAL). Whether there is a database
    file to open; raises :class:`StoreError` on damage."""
    db = folder / DB_FILE
    try:
        size = db.stat().st_size
    except FileNotFoundError:
        size = None
    if not size:
        if traces:
            what = "is missing" if size is None else "is empty (0 bytes)"
            raise _refuse(folder, [f"{DB_FILE} {what}, but {_evidence(traces)}"], batch_file)
        return size is not None and writer
    problems = []
    with db.open("rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        problems.append(f"{DB_FILE} is not a SQLite database (its header is damaged or cut)")
    else:
        page_size = struct.unpack(">H", header[16:18])[0]
        page_size = 65536 if page_size == 1 else page_size
        pages = struct.unpack(">I", header[28:32])[0]
        if page_size < 512 or size % page_size or size < pages * page_size:
            problems.append(
                f"{DB_FILE} is truncated ({size} bytes; its header says {pages} pages of "
                f"{page_size} bytes)"
            )
    wal = folder / (DB_FILE + "-wal")
    try:
        damage = wal_damage(wal)
    except OSError as e:
        damage = f"it cannot be read ({os.strerror(e.errno or 0)})"
    if damage is not None:
        problems.append(
            f"its write-ahead log {wal.name} is damaged: {damage} (SQLite would drop "
            "committed transactions)"
        )
    elif (
        (folder / (DB_FILE + "-shm")).exists()
        and not wal.exists()
        # A running coordinator may be closing its store right now: ask only
        # when no one holds the lock.
        and (writer or not _locked(folder / LOCK_FILE))
    ):
        # SQLite removes the shared memory before the WAL when it closes a store:
        # shared memory without a WAL is a WAL someone deleted, commits and all.
        problems.append(
            f"its write-ahead log {wal.name} is missing ({DB_FILE}-shm is still there): "
            "the transactions it held are lost"
        )
    if problems:
        raise _refuse(folder, problems, batch_file)
    return True


def _locked(path: Path) -> bool:
    """Whether a writer holds ``batch.lock`` (tested without keeping it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _upgrade(conn: sqlite3.Connection) -> _Audit:
    """A version 1 store made version 2 (see :data:`SCHEMA_VERSION`), in one
    transaction; the audit trail's new running view."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # The one table version 1 lacks (executescript would commit first).
        conn.execute(
            _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS audit_notes") :].split(";")[0]
        )
        conn.execute(
            "INSERT INTO audit_notes (note_id, subject, name, state, noted_at, metadata) "
            "SELECT transition_id, CASE WHEN step_id IS NULL THEN 'workstream' ELSE 'step' END, "
            "ws_id || COALESCE('/' || step_id, ''), to_state, transitioned_at, metadata "
            "FROM state_transitions WHERE from_state = to_state"
        )
        conn.execute(
            "INSERT INTO audit_notes (note_id, subject, name, state, noted_at, metadata) "
            "SELECT transition_id, 'breaker', tool, to_state, transitioned_at, metadata "
            "FROM breaker_transitions WHERE from_state = to_state"
        )
        conn.execute("DELETE FROM state_transitions WHERE from_state = to_state")
        conn.execute("DELETE FROM breaker_transitions WHERE from_state = to_state")
        audit = _Audit()
        rows = [
            *(
                ("state_transitions", r)
                for r in conn.execute(
                    "SELECT transition_id, ws_id, step_id, from_state, to_state, transitioned_at, "
                    "metadata FROM state_transitions"
                )
            ),
            *(
                ("breaker_transitions", r)
                for r in conn.execute(
                    "SELECT transition_id, tool, from_state, to_state, transitioned_at, metadata "
                    "FROM breaker_transitions"
                )
            ),
            *(
                ("audit_notes", r)
                for r in conn.execute(
                    "SELECT note_id, subject, name, state, noted_at, metadata FROM audit_notes"
                )
            ),
        ]
        rows.sort(key=lambda tr: int(tr[1][0]))
        for table, row in rows:
            audit.add(_audit_line(table, row))
        audit.next_id = (int(rows[-1][1][0]) + 1) if rows else 1
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [("audit_rows", str(audit.rows)), ("audit_sha256", audit.digest.hexdigest())],
        )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return audit


def _audit_line(table: str, row: Sequence[Any]) -> bytes:
    """One audit row as hashed into ``meta.audit_sha256`` (its values are
    str, int and None, whose ``repr`` is exact and fast)."""
    return (repr((table, *row)) + "\n").encode()


def _row_keys(conn: sqlite3.Connection) -> list[str]:
    """Every row's key, as ``meta.plan_keys`` records them."""
    return [
        *(f"workstream {r[0]}" for r in conn.execute("SELECT ws_id FROM workstreams ORDER BY 1")),
        *(
            f"step {r[0]}/{r[1]}"
            for r in conn.execute("SELECT ws_id, step_id FROM steps ORDER BY 1, 2")
        ),
        *(f"breaker {r[0]}" for r in conn.execute("SELECT tool FROM breakers ORDER BY 1")),
    ]


def _check_contents(
    conn: sqlite3.Connection,
    folder: Path,
    traces: dict[str, StepTrace],
    *,
    writer: bool,
    batch_file: str | os.PathLike[str] | None,
) -> _Audit | None:
    """The checks of what the database holds, in one read transaction; the audit
    trail's running view, or ``None`` for a database without any table yet."""
    conn.execute("BEGIN")
    try:
        return _contents(conn, folder, traces, writer=writer, batch_file=batch_file)
    finally:
        conn.execute("COMMIT")


def _contents(
    conn: sqlite3.Connection,
    folder: Path,
    traces: dict[str, StepTrace],
    *,
    writer: bool,
    batch_file: str | os.PathLike[str] | None,
) -> _Audit | None:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        if traces:
            problem = f"{DB_FILE} holds no batch (no tables), but {_evidence(traces)}"
            raise _refuse(folder, [problem], batch_file)
        return None
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    missing = [t for t in TABLES if t not in tables and not (t == "audit_notes" and version == 1)]
    if missing:
        raise _refuse(folder, [f"its tables {', '.join(missing)} are gone"], batch_file)
    if version != SCHEMA_VERSION and version not in OLD_SCHEMA_VERSIONS:
        problem = (
            f"its schema version (PRAGMA user_version) is {version}, and this Weft reads "
            f"version {SCHEMA_VERSION} only"
        )
        if version == 0:
            problem += " (a store made before the audit trail was checksummed)"
        raise _refuse(folder, [problem], batch_file)
    problems: list[str] = []
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())

    # The audit trail against its count and checksum.
    audit = _Audit()
    rows = [
        ("state_transitions", r)
        for r in conn.execute(
            "SELECT transition_id, ws_id, step_id, from_state, to_state, transitioned_at, "
            "metadata FROM state_transitions"
        )
    ] + [
        ("breaker_transitions", r)
        for r in conn.execute(
            "SELECT transition_id, tool, from_state, to_state, transitioned_at, metadata "
            "FROM breaker_transitions"
        )
    ]
    if "audit_notes" in tables:
        rows += [
            ("audit_notes", r)
            for r in conn.execute(
                "SELECT note_id, subject, name, state, noted_at, metadata FROM audit_notes"
            )
        ]
    rows.sort(key=lambda tr: int(tr[1][0]))
    for table, row in rows:
        audit.add(_audit_line(table, row))
    audit.next_id = (int(rows[-1][1][0]) + 1) if rows else 1
    want_rows = int(meta.get("audit_rows", "0"))
    want_sha = meta.get("audit_sha256", hashlib.sha256().hexdigest())
    if audit.rows != want_rows:
        problems.append(
            f"the audit trail (state_transitions, breaker_transitions) has {audit.rows} rows, "
            f"but {want_rows} were written"
        )
    elif audit.digest.hexdigest() != want_sha:
        problems.append("the audit trail was edited (its checksum does not match)")

    # The rows: known states, the plan's keys, each as its latest audit row left it.
    latest: dict[str, str] = {}
    for r in conn.execute(
        "SELECT ws_id, step_id, to_state FROM state_transitions ORDER BY transition_id"
    ):
        latest[f"step {r[0]}/{r[1]}" if r[1] is not None else f"workstream {r[0]}"] = r[2]
    for r in conn.execute("SELECT tool, to_state FROM breaker_transitions ORDER BY transition_id"):
        latest[f"breaker {r[0]}"] = r[1]
    # A step noted (rebuilt to run again, say) was seen by the store without moving.
    noted = (
        {
            f"step {r[0]}"
            for r in conn.execute("SELECT name FROM audit_notes WHERE subject = 'step'")
        }
        if "audit_notes" in tables
        else set()
    )
    stored: dict[str, str] = {}
    exit_codes: dict[str, int | None] = {}
    launches: dict[str, int] = {}
    for r in conn.execute("SELECT ws_id, state FROM workstreams"):
        stored[f"workstream {r[0]}"] = r[1]
    for r in conn.execute("SELECT ws_id, step_id, state, exit_code, launches FROM steps"):
        stored[f"step {r[0]}/{r[1]}"] = r[2]
        exit_codes[f"{r[0]}/{r[1]}"] = r[3] if r[2] != "S_RUNNING" else -1
        launches[f"{r[0]}/{r[1]}"] = int(r[4])
    for r in conn.execute("SELECT tool, state FROM breakers"):
        stored[f"breaker {r[0]}"] = r[1]
    for who, state in stored.items():
        known = (
            CIRCUIT_STATES
            if who.startswith("breaker")
            else STEP_STATES
            if who.startswith("step")
            else WORKSTREAM_STATES
        )
        if state not in known:
            problems.append(f"{who} is in the unknown state {state!r} (known: {', '.join(known)})")
            continue
        initial = "CLOSED" if who.startswith("breaker") else "S_PENDING"
        expected = latest.get(who, initial)
        if state != expected:
            problems.append(
                f"{who} is {state}, but its audit trail leaves it {expected}"
                if who in latest
                else f"{who} is {state}, but its audit trail never moved it"
            )
    planned: dict[str, None] = dict.fromkeys(json.loads(meta.get("plan_keys", "[]")))
    gone: list[str] = []
    if stored or planned:
        gone = [k for k in planned if k not in stored]
        extra = [k for k in stored if k not in planned]
        problems += [f"the {k} row is gone (the plan recorded it)" for k in gone]
        problems += [f"the {k} row is not in the recorded plan" for k in extra]
        problems += [
            f"the audit trail moves {k}, which has no row"
            for k in latest
            if k not in stored and k not in gone
        ]

    # The step folders: each launch they show, the store recorded.
    for key, trace in traces.items():
        who = f"step {key}"
        if who not in stored:
            if who not in planned:
                problems.append(f"{trace.where} shows a launch of {key}, which has no row")
            continue
        if who not in latest and who not in noted:
            problems.append(
                f"{trace.where} shows a launch, but the store never recorded one "
                f"(step {key} is {stored[who]})"
            )
            continue
        if not writer:
            continue  # a running coordinator may be launching or ending it now
        if trace.launches is not None and trace.launches > launches[key] + 1:
            problems.append(
                f"{trace.where}/step.log shows {trace.launches} launches, the store {launches[key]}"
            )
        code = exit_codes[key]
        if trace.exit_code is not None and code not in (None, -1) and code != trace.exit_code:
            problems.append(
                f"{trace.where}/exit holds exit code {trace.exit_code}, but step {key} "
                f"recorded {code}"
            )
    if problems:
        raise _refuse(folder, problems, batch_file)
    return audit
