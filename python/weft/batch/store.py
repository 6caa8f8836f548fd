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
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from weft.clock import iso_from_ms
from weft.errors import LockHeldError, StoreError

__all__ = ["DB_FILE", "LOCK_FILE", "BatchStore", "BreakerRow", "Change", "StepRow", "WorkstreamRow"]

DB_FILE = "batch.db"
LOCK_FILE = "batch.lock"

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
    now (checked at commit); when ``to_state`` differs from it, or ``audit`` is
    set (a reset that lands where it started), an audit row is written.
    """

    table: Literal["workstreams", "steps", "breakers"]
    key: tuple[str, ...]
    from_state: str
    to_state: str
    values: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    audit: bool = False


@dataclass
class StoredBatch:
    """Everything the store holds about the batch's states."""

    workstreams: list[WorkstreamRow]
    steps: list[StepRow]
    breakers: list[BreakerRow]


class BatchStore:
    """One batch's database. Open with :meth:`open`; close when done."""

    def __init__(self, folder: Path, conn: sqlite3.Connection, lock_fd: int | None) -> None:
        self.folder = folder
        self._conn = conn
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, writer: bool) -> BatchStore:
        """The store in ``folder`` (created for a writer). A writer takes
        ``batch.lock`` first and raises :class:`LockHeldError` if it is held."""
        path = Path(folder)
        lock_fd: int | None = None
        if writer:
            path.mkdir(parents=True, exist_ok=True)
            lock_fd = _take_lock(path / LOCK_FILE)
        elif not (path / DB_FILE).is_file():
            raise StoreError(
                f"no batch store in {path} (no {DB_FILE}); run `weft batch run FILE` first"
            )
        try:
            conn = sqlite3.connect(path / DB_FILE, isolation_level=None, timeout=10.0)
            conn.execute("PRAGMA busy_timeout = 10000")
            if writer:
                conn.execute("PRAGMA journal_mode = WAL")
                # FULL: a step is launched only after its S_RUNNING is on disk.
                conn.execute("PRAGMA synchronous = FULL")
                conn.executescript(_SCHEMA)
            elif not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'commands'"
            ).fetchone():
                conn.close()
                raise StoreError(f"the batch store {path / DB_FILE} is not set up yet (or not one)")
        except sqlite3.Error as e:
            if lock_fd is not None:
                os.close(lock_fd)
            raise StoreError(f"cannot open the batch store {path / DB_FILE}: {e}") from e
        return cls(path, conn, lock_fd)

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

    def load(self) -> StoredBatch:
        """Every row, workstreams and steps in plan order."""
        c = self._conn
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

    def commit(self, changes: Sequence[Change], now_ms: int) -> None:
        """Writes ``changes`` and their audit rows in one transaction.

        Raises :class:`StoreError` (and writes nothing) if a row does not hold
        the change's ``from_state``.
        """
        if not changes:
            return
        self._require_writer()
        at = iso_from_ms(now_ms)
        with self._transaction():
            for change in changes:
                self._apply(change, at)

    def _apply(self, change: Change, at: str) -> None:
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
        if change.from_state == change.to_state and not change.audit:
            return
        meta = json.dumps(change.metadata, sort_keys=True) if change.metadata else None
        if change.table == "breakers":
            self._conn.execute(
                "INSERT INTO breaker_transitions (tool, from_state, to_state, transitioned_at, "
                "metadata) VALUES (?,?,?,?,?)",
                (change.key[0], change.from_state, change.to_state, at, meta),
            )
        else:
            step_id = change.key[1] if change.table == "steps" else None
            self._conn.execute(
                "INSERT INTO state_transitions (ws_id, step_id, from_state, to_state, "
                "transitioned_at, metadata) VALUES (?,?,?,?,?,?)",
                (change.key[0], step_id, change.from_state, change.to_state, at, meta),
            )

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
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
