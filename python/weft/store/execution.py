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
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weft._core import Core
from weft.clock import iso_from_ms, ms_from_iso
from weft.errors import LockHeldError, LockLostError, StoreError
from weft.store.diskspace import is_storage_failure, storage_error
from weft.store.journal import Journal, damaged, is_damage
from weft.store.lock import (
    HEARTBEAT_SECONDS,
    LOCK,
    LockInfo,
    RuntimeLock,
    holder,
    pid_alive,
    read_lock,
)
from weft.store.loss import check_before_open, check_database, check_reach, refuse_empty
from weft.store.recovery import Recovery, recover

if TYPE_CHECKING:
    # Only a run needs these (and asyncio, imported where used): a reader such as
    # `weft status` opens the store without loading them (start-up time).
    import asyncio
    import logging

    from weft.state import StateManager
    from weft.store.writer import StoreWriter


def _log() -> logging.Logger:
    # logging (with threading, traceback and string) is imported on the first
    # warning: about 5 ms that weft status, ls and logs would pay on every start.
    import logging

    return logging.getLogger(__name__)


WEFT_DIR = ".weft"
DATABASE = "weft.db"


def live_holder(weft_dir: Path) -> LockInfo | None:
    """The lock of a live Weft process on this execution, or ``None``.

    Read only (nothing is taken or written): the holder is live unless
    :func:`~weft.store.lock.holder` says its process is gone, the test the
    lock's acquisition applies (a live pid whose heartbeat stopped may be hung,
    and still holds the execution). An unreadable lock raises :class:`~weft.errors.LockHeldError`
    (fail closed: it may belong to a live process).
    """
    info = read_lock(weft_dir / LOCK)
    if info is None or holder(info, time.time()).state == "gone":
        return None
    return info


def _held_by_live_process(weft_dir: Path) -> bool:
    try:
        info = read_lock(weft_dir / LOCK)
    except LockHeldError:
        return True  # unreadable: may be live, so stay out of its way
    return info is not None and pid_alive(info.pid)


_LAST_OF_RUN = (
    # ``+run_id`` keeps SQLite off the (run_id, codon_id, seq) index, whose
    # entries for a long run it would all read to find the newest: walking the
    # journal back from ``seq`` stops at once, since a dead run's rows are its last.
    "SELECT timestamp FROM events WHERE +run_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
)


def _last_journaled(database: Path, run_id: str, upto: int) -> str | None:
    """The submission time of the newest journal row about ``run_id`` at most
    at seq ``upto``, or ``None``.

    A connection of its own, read-only: the store's connection belongs to its
    writer thread, which may be committing this process's first events.
    """
    try:
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
        try:
            row = conn.execute(_LAST_OF_RUN, (run_id, upto)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        # Not fatal: the crash is still marked, ended at the other evidence.
        _log().warning("cannot read when run %s was last journaled: %s", run_id, exc)
        return None
    return None if row is None else str(row[0])


def crash_end_ms(
    run: Mapping[str, Any],
    *,
    last_journaled: str | None,
    last_heartbeat: float | None,
    detected_ms: int,
) -> int:
    """When a run found dead ended, in ms since the epoch: its last sign of life.

    ``last_journaled`` is the submission time of the newest journal row about
    the run, ``last_heartbeat`` the dead holder's ``lastHeartbeat`` (epoch
    seconds) when its lock named this run. The newer wins; without either, the
    detection time ``detected_ms``. The result is never later than the
    detection nor earlier than any time the run's state already holds (its
    ``startTime``, its codon records' start and end times), so durations
    summed from it are never negative.
    """
    # The detection time only counts when nothing else is known: the dead
    # process was certainly not running between its last sign of life and
    # now, and counting that downtime spends the run's --max-time on nothing.
    seen = [
        ms
        for ms in (
            ms_from_iso(last_journaled),
            None if last_heartbeat is None else int(last_heartbeat * 1000),
        )
        if ms is not None
    ]
    # A clock that jumped ahead in the dead process cannot end the run after it was found dead.
    end = min(max(seen), detected_ms) if seen else detected_ms
    floor = [ms_from_iso(run.get("startTime"))]
    for record in run.get("codons") or ():
        floor += [ms_from_iso(record.get("startTime")), ms_from_iso(record.get("endTime"))]
    known = [ms for ms in floor if ms is not None]
    return max([end, *known])


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
        self._inherited = recovery.core.next_seq - 1
        """The journal's end when opened: rows up to it were written by earlier processes."""

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
            if isinstance(exc, sqlite3.Error) and not is_storage_failure(exc) and is_damage(exc):
                # Read past the open's checks (the loss checks, recovery): the same refusal.
                raise damaged(weft_dir / DATABASE, exc) from exc
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
                _log().warning("cannot refresh the lock's heartbeat: %s", exc)

    def runs(self) -> list[dict[str, Any]]:
        """The runs of the state document, newest first."""
        runs: list[dict[str, Any]] = json.loads(self.core.state_json())["runs"]
        return runs

    async def mark_crashed_runs(
        self, manager: StateManager, *, clock: Callable[[], float] = time.time
    ) -> list[str]:
        """Marks every run still ``running`` as crashed (seed: detectCrashedRuns).

        Only called with the lock held, so no live process owns those runs.
        A run, and its active codon, end at the run's last sign of life (see
        :meth:`last_sign_of_life`), not when the crash is found: the journal
        row of the ``RunCrashed`` still says when that was. ``clock`` gives
        the detection time (epoch seconds). Returns the runs' ids.
        """
        from weft.events.transitions import RunCrashed

        crashed = []
        for run in self.runs():
            if run["status"] != "running":
                continue
            active = [
                c for c in run["codons"] if c["status"] not in ("completed", "failed", "skipped")
            ]
            detected_ms = int(clock() * 1000)
            ended = await self.last_sign_of_life(run, detected_ms)
            await manager.transition_and_wait(
                RunCrashed(
                    run_id=run["runId"],
                    # The core ends the run and its active codon at this time
                    # (their endTime): the wall time the run really lived.
                    detected_at=iso_from_ms(ended),
                    last_codon_status=active[-1]["status"] if active else "unknown",
                )
            )
            crashed.append(run["runId"])
        return crashed

    async def last_sign_of_life(self, run: Mapping[str, Any], detected_ms: int) -> int:
        """When a run found dead at ``detected_ms`` was last seen alive (ms since
        the epoch; see :func:`crash_end_ms` for the bounds).

        Two witnesses, both written by the dead process itself on this host's
        wall clock, so comparable with each other and with the detection:

        - the newest journal row about the run among those the journal held
          when this store was opened. Durable (committed before anything else
          saw it) and written by the run's own process alone (the single
          writer); this process's start-up notes, journaled before crashes are
          marked, are newer and name no run. But a codon whose agent works
          silently journals nothing for minutes.
        - the lock's ``lastHeartbeat``, refreshed every 30 s while the dead
          process's event loop ran, silent agent or not; only when the lock
          taken over named this run (the writer records the run there once its
          ``RunStarted`` commits): another holder's heartbeat, or one left by a
          command that ran no run, says nothing about it.

        Each alone may lag the other (the journal during a silent agent, the
        heartbeat by up to 30 s otherwise), so the newer counts.
        """
        import asyncio

        # Only rows earlier processes wrote: this one's never prove the dead one alive.
        journaled = await asyncio.to_thread(
            _last_journaled, self.journal.path, str(run["runId"]), self._inherited
        )
        previous = None if self.lock is None else self.lock.previous
        heartbeat = None
        if previous is not None and previous.info.run_id == run["runId"]:
            heartbeat = previous.info.last_heartbeat
        return crash_end_ms(
            run, last_journaled=journaled, last_heartbeat=heartbeat, detected_ms=detected_ms
        )

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
