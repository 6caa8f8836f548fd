"""An execution's store: the ``.weft/`` folder opened for use.

Opening follows the startup order of seed 001 for the parts it owns: take
the lock (refusing a second live instance), open and integrity-check the
journal, recover the state (snapshot + journal tail, or a rebuild). The
caller then gets a :class:`~weft.state.StateManager` whose persistence is
this store, and marks runs a dead process left running as crashed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weft._core import Core
from weft.clock import utc_now_iso
from weft.errors import LockHeldError, LockLostError, StoreError
from weft.store.diskspace import is_storage_failure, storage_error
from weft.store.journal import Journal
from weft.store.lock import (
    HEARTBEAT_SECONDS,
    LOCK,
    STALE_SECONDS,
    LockInfo,
    RuntimeLock,
    pid_alive,
    read_lock,
)
from weft.store.loss import check_before_open, check_database, check_reach, refuse_empty
from weft.store.recovery import Recovery, recover

if TYPE_CHECKING:
    # Only a run needs these (and asyncio, imported where used): a reader such as
    # `weft status` opens the store without loading them (start-up time).
    import asyncio

    from weft.state import StateManager
    from weft.store.writer import StoreWriter

log = logging.getLogger(__name__)

WEFT_DIR = ".weft"
DATABASE = "weft.db"


def live_holder(weft_dir: Path) -> LockInfo | None:
    """The lock of a live Weft process on this execution, or ``None``.

    Read only (nothing is taken or written): the holder is live when its pid
    exists and its heartbeat is fresh, the same test the lock's acquisition
    applies. An unreadable lock raises :class:`~weft.errors.LockHeldError`
    (fail closed: it may belong to a live process).
    """
    info = read_lock(weft_dir / LOCK)
    if info is None or info.pid == os.getpid() or not pid_alive(info.pid):
        return None
    if time.time() - info.last_heartbeat > STALE_SECONDS:
        return None
    return info


def _held_by_live_process(weft_dir: Path) -> bool:
    try:
        info = read_lock(weft_dir / LOCK)
    except LockHeldError:
        return True  # unreadable: may be live, so stay out of its way
    return info is not None and pid_alive(info.pid)


def weft_dir_of(path: Path) -> Path:
    """The ``.weft`` folder of an execution directory (or ``path`` if it is one)."""
    path = path.resolve()
    return path if path.name == WEFT_DIR else path / WEFT_DIR


class ExecutionStore:
    """The journal, snapshots and lock of one execution."""

    def __init__(
        self,
        weft_dir: Path,
        journal: Journal,
        recovery: Recovery,
        lock: RuntimeLock | None,
    ) -> None:
        self.weft_dir = weft_dir
        self.journal = journal
        self.recovery = recovery
        self.lock = lock
        self._writer: StoreWriter | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def core(self) -> Core:
        """The recovered state."""
        return self.recovery.core

    @classmethod
    def open(cls, execution: Path, *, readonly: bool = False) -> ExecutionStore:
        """Opens the store of ``execution`` (an execution directory or its ``.weft``).

        Writable: takes the lock first (``LockHeldError`` if a live process
        has it), creates what is missing, and saves a rebuilt state at once.
        Read-only: no lock, nothing written; the state is recovered in memory.
        """
        weft_dir = weft_dir_of(execution)
        if readonly and not weft_dir.is_dir():
            raise StoreError(f"{execution}: not an execution directory (no {WEFT_DIR}/ inside)")
        try:
            return cls._open(weft_dir, readonly=readonly)
        except (OSError, sqlite3.Error, StoreError) as exc:
            if not is_storage_failure(exc):
                raise
            raise storage_error(f"the store {weft_dir}", exc) from exc

    @classmethod
    def _open(cls, weft_dir: Path, *, readonly: bool) -> ExecutionStore:
        lock = None if readonly else RuntimeLock.acquire(weft_dir)
        try:
            # Before SQLite touches the files: it would make a missing journal
            # anew and reset a damaged WAL. A reader beside a live writer skips
            # the WAL (it may be mid-append); the writer's own next open checks it.
            if lock is not None:
                check_before_open(weft_dir)
                check_reach(weft_dir)
            elif not _held_by_live_process(weft_dir):
                check_before_open(weft_dir)
            else:
                check_database(weft_dir)
            journal = Journal.open(
                weft_dir / DATABASE,
                readonly=readonly,
                on_empty=lambda: refuse_empty(weft_dir, "holds no schema (its tables are gone)"),
            )
            try:
                recovery = recover(weft_dir, journal)
            except BaseException:
                journal.close()
                raise
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        store = cls(weft_dir, journal, recovery, lock)
        if not readonly and recovery.source in ("journal", "new"):
            try:
                store._writer_for().snapshot()
            except BaseException:
                store._writer_for().shutdown()
                journal.close()
                if lock is not None:
                    lock.release()
                raise
        return store

    def startup_notes(self) -> list[str]:
        """What opening the store acted on, one sentence each, for ``weft run`` to
        say: a stale lock taken over, and every recovery fallback."""
        took_over = None if self.lock is None else self.lock.describe_previous()
        notes = [] if took_over is None else [took_over]
        notes += [f"recovery: {n}" for n in self.recovery.notes]
        return notes

    def _writer_for(self) -> StoreWriter:
        from weft.store.writer import StoreWriter

        if self._writer is None:
            if self.lock is None:
                raise StoreError(f"{self.weft_dir}: opened read-only; nothing can be written")
            self._writer = StoreWriter(self.weft_dir, self.journal, self.core, self.lock)
        return self._writer

    def state_manager(
        self, *, max_batch: int = 4096, heartbeat_every: float = HEARTBEAT_SECONDS
    ) -> StateManager:
        """A StateManager whose transitions and events are journaled here.

        Called from async code, it also starts the lock's heartbeat.
        """
        import asyncio

        from weft.state import StateManager

        writer = self._writer_for()
        with contextlib.suppress(RuntimeError):  # no running loop: no heartbeat
            loop = asyncio.get_running_loop()
            if self._heartbeat is None:
                self._heartbeat = loop.create_task(self._beat(writer, heartbeat_every))
        return StateManager(self.core, persistence=writer, max_batch=max_batch)

    async def _beat(self, writer: StoreWriter, every: float) -> None:
        import asyncio

        lock = self.lock
        assert lock is not None
        while True:
            await asyncio.sleep(every)
            try:
                await writer.run(lock.heartbeat)
            except LockLostError:
                # Fenced off: the next commit fails on the same check and stops the run.
                return
            except OSError as exc:
                # A full disk: the lock keeps its last heartbeat (still ours, its
                # pid alive); the journal's next commit reports the failure.
                log.warning("cannot refresh the lock's heartbeat: %s", exc)

    def runs(self) -> list[dict[str, Any]]:
        """The runs of the state document, newest first."""
        runs: list[dict[str, Any]] = json.loads(self.core.state_json())["runs"]
        return runs

    async def mark_crashed_runs(self, manager: StateManager) -> list[str]:
        """Marks every run still ``running`` as crashed (seed: detectCrashedRuns).

        Only called with the lock held, so no live process owns those runs.
        Returns their ids.
        """
        from weft.events.transitions import RunCrashed

        crashed = []
        for run in self.runs():
            if run["status"] != "running":
                continue
            active = [
                c for c in run["codons"] if c["status"] not in ("completed", "failed", "skipped")
            ]
            await manager.transition_and_wait(
                RunCrashed(
                    run_id=run["runId"],
                    detected_at=utc_now_iso(),
                    last_codon_status=active[-1]["status"] if active else "unknown",
                )
            )
            crashed.append(run["runId"])
        return crashed

    async def close(self, manager: StateManager | None = None) -> None:
        """Flushes ``manager``, writes a final snapshot and releases the lock."""
        import asyncio

        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        # Whatever fails on the way (a full disk), the journal is closed and
        # the lock released, so the next run starts without a takeover.
        try:
            if manager is not None:
                await manager.close()
            if self._writer is not None:
                await self._writer.run(self._writer.snapshot)
        finally:
            if self._writer is not None:
                self._writer.shutdown()
            self.journal.close()
            if self.lock is not None:
                self.lock.release()
