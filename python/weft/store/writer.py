"""The store's side of the StateManager's persistence seam.

Each batch the StateManager drains becomes one SQLite transaction (one fsync)
on a dedicated writer thread, so the event loop never blocks on the disk and
submissions keep arriving while a batch commits: the next batch is whatever
accumulated meanwhile (group commit). Before each commit the runtime lock is
checked, so a process that was fenced off stops writing; a committed
RunStarted is recorded in the lock as its ``runId``.

After a commit the writer rewrites state.json when the journal has moved on
by at least as many payload bytes as the snapshot holds, at a codon's or a
run's end (anywhere once that is also ``snapshot_bytes``); at every codon
boundary (a codon's start or end, a run's start or end) whenever the last
rewrite is older than :data:`SNAPSHOT_DUTY` times its own cost (else as soon as
it is, on a timer); and when the
last snapshot is ``snapshot_every`` seconds old, on a timer, so a codon that
journals nothing for a while still leaves state.json at most that far behind
(a reader of state.json, such as a seed client after a SIGKILL, sees every
codon that started). The byte bound keeps the rewrites amortised (each byte
rewritten is paid for by a byte journaled, so a codon costs the same at codon
10,000 as at codon 10) and bounds what recovery replays (a tail about the
snapshot's size); it is also the evidence that lets :mod:`.loss` prove a
cut-short journal lost committed events. The duty bound is what keeps the
boundary rewrites cheap: a real codon lasts seconds and state.json takes a
millisecond or two to rewrite, so every boundary is written; only codons a
few milliseconds apart with a state.json of megabytes are written together
(at most 1/:data:`SNAPSHOT_DUTY` of the writer's time). Recovery stays
snapshot + journal tail.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from weft._core import Core
from weft.heap import give_back
from weft.state import Processed
from weft.store.diskspace import is_storage_failure, storage_error
from weft.store.journal import Journal, Row
from weft.store.lock import RuntimeLock
from weft.store.snapshot import STATE, write_snapshot

SNAPSHOT_BYTES = 1 << 20
"""Journal payload (bytes) after which a snapshot at least as large as it is due
even inside a codon: an agent producing megabytes in one codon."""

GIVE_BACK_EVERY = 0.25
"""Seconds between two returns of freed memory to the system (after a commit, or
with a state.json rewrite, whose buffers are the largest a run frees): a long
run's freed memory otherwise stays scattered in the process (9 MB more after
10,000 codons). One costs 1-4 ms of the writer thread."""

SNAPSHOT_DUTY = 20
"""The boundary and time bounds wait at least this many times the last
snapshot's cost: rewriting a 9 MB state.json at every codon, or every 2 s,
would otherwise take a growing share of a long run (at most 1/20 of the writer
thread's time goes to them)."""

SNAPSHOT_EVERY = 2.0
"""Seconds state.json may lag the journal, at most (the time bound, on a timer):
"a few seconds behind" at worst, as docs/store.md promises."""


def to_row(p: Processed) -> Row:
    """The journal row of one processed submission (a refused transition's
    payload is already its ``error`` event: the StateManager made it once)."""
    payload = p.payload.decode("utf-8", "replace")
    if p.stream is not None:
        s = p.stream
        return (p.seq, p.id, p.timestamp, "event", s.type, s.run_id, s.codon_id, payload)
    o = p.outcome
    kind = o.kind or "unknown"
    return (p.seq, p.id, p.timestamp, "transition", kind, o.run_id, o.codon_id, payload)


def summarize(batch: Sequence[Processed]) -> tuple[int, bool, str | None]:
    """What the writer needs to know of a journaled batch, as
    :meth:`Journal.append_processed` returns it: the payload bytes, whether an
    applied transition ended a codon or the run or started a run, and the run
    id of the last applied ``RunStarted``."""
    size = 0
    ended = False
    started: str | None = None
    for p in batch:
        size += len(p.payload)
        if p.applied:
            o = p.outcome
            run_started = o.kind == "RunStarted"
            ended = ended or o.codon_terminal or o.run_ended or run_started
            if run_started:
                started = o.run_id
    return size, ended, started


class StoreWriter:
    """Commits batches to the journal and keeps state.json fresh."""

    def __init__(
        self,
        weft_dir: Path,
        journal: Journal,
        core: Core,
        lock: RuntimeLock | None,
        *,
        snapshot_every: float = SNAPSHOT_EVERY,
        snapshot_bytes: int = SNAPSHOT_BYTES,
    ) -> None:
        self._weft_dir = weft_dir
        self._journal = journal
        self._core = core
        self._lock = lock
        self._snapshot_every = snapshot_every
        self._snapshot_bytes = snapshot_bytes
        self._last_snapshot = time.monotonic()
        state = weft_dir / STATE
        self._last_size = state.stat().st_size if state.exists() else 0
        """The bytes of the last state.json written (or found, on resume)."""
        self._tail = 0
        """Payload bytes journaled since the last snapshot."""
        self._last_cost = 0.0
        """Seconds the last snapshot took (encode, write, fsync, rename)."""
        self._given_back = time.monotonic()
        self.snapshots = 0
        """How many times state.json was written (for tests and benchmarks)."""
        self.snapshot_seconds = 0.0
        """Seconds spent writing state.json (for tests and benchmarks)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weft-writer")
        self._timer: asyncio.TimerHandle | None = None
        """The pending check, while a committed tail is not in state.json."""
        self._timer_at = 0.0
        """When it fires (the loop's clock)."""
        self._boundary_waits = False
        """A boundary was committed but not written (the duty bound): it is
        written as soon as the bound allows, not at the time bound."""
        self._timed_failure: Exception | None = None
        """A timed snapshot's failure (a full disk), raised by the next commit."""
        self._closed = False
        self._committed: int | None = core.journal_seq
        """The newest seq committed by this writer (what the core holds at open)."""

    async def commit(self, batch: Sequence[Processed]) -> None:
        """Makes ``batch`` durable (on the writer thread)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._commit, batch)
        self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._tail <= 0 or self._closed:
            return
        # Nothing may commit for a while (an agent thinking, a long tool call):
        # the timer writes the tail then, not the next commit; a boundary the
        # duty bound held back, as soon as the bound allows.
        delay = self._snapshot_every
        if self._boundary_waits:
            since = time.monotonic() - self._last_snapshot
            delay = min(delay, max(SNAPSHOT_DUTY * self._last_cost - since, 0.0))
        at = loop.time() + delay
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._on_timer, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self._closed:
            done = loop.run_in_executor(self._executor, self._timed)
            done.add_done_callback(lambda _: self._arm(loop))

    def _timed(self) -> None:
        """The deferred writes, on the writer thread (so they never race a commit).

        Between two commits the core may already hold the next batch (the
        StateManager applies a batch, then commits it): a snapshot then would
        be ahead of the journal, which recovery rightly takes for a journal
        that lost events. So it is kept only if the core was at the last
        committed event from before it was written until after; otherwise the
        commit under way comes next, and its own check (and timer) follow."""
        try:
            committed = self._committed
            if self._core.journal_seq != committed:
                return
            if self._snapshot_due(False, self._boundary_waits):
                self.snapshot(keep=lambda: self._core.journal_seq == committed)
        except Exception as exc:  # raised by the next commit, which stops the run
            self._timed_failure = exc

    def _commit(self, batch: Sequence[Processed]) -> None:
        if self._timed_failure is not None:
            raise self._timed_failure
        if self._lock is not None:
            self._lock.verify()
        journal = self._journal
        try:
            if journal.native:
                # The core builds the rows: no Python per event on this thread,
                # which the event loop's thread would wait for.
                size, ended, started = journal.append_processed(batch)
            else:
                journal.append([to_row(p) for p in batch])
                size, ended, started = summarize(batch)
        except (sqlite3.Error, OSError) as exc:
            if is_storage_failure(exc):
                raise storage_error(f"the journal {journal.path}", exc) from exc
            raise
        if self._lock is not None and started is not None:
            # The lock names the run its holder works on (weft status reads it).
            self._lock.update(run_id=started)
        self._tail += size
        self._committed = batch[-1].seq if batch else self._committed
        # A codon's start is a boundary too: state.json then names the codon
        # that runs (what a seed reader looks for after a crash).
        boundary = ended or any(p.outcome.kind == "CodonStarted" for p in batch)
        if self._snapshot_due(ended, boundary):
            self.snapshot()
        elif boundary:
            self._boundary_waits = True
        elif time.monotonic() - self._given_back >= GIVE_BACK_EVERY:
            self._give_back()

    def _give_back(self) -> None:
        """Returns freed memory to the system (:func:`weft.heap.give_back`), here
        on the writer thread, off the event loop's."""
        give_back()
        self._given_back = time.monotonic()

    def _snapshot_due(self, ended: bool, boundary: bool) -> bool:
        """``ended``: the batch ended a codon or the run, or started a run;
        ``boundary``: that, or it started a codon."""
        if self._tail >= self._last_size and (self._tail >= self._snapshot_bytes or ended):
            return True
        if self._tail <= 0:
            return False
        since = time.monotonic() - self._last_snapshot
        duty = SNAPSHOT_DUTY * self._last_cost
        if boundary and since >= duty:
            return True
        return since >= max(self._snapshot_every, duty)

    def snapshot(self, keep: Callable[[], bool] | None = None) -> None:
        """Writes state.json now (on the calling thread); ``keep`` as
        :func:`~weft.store.snapshot.write_snapshot` has it."""
        started = time.monotonic()
        try:
            size = write_snapshot(self._weft_dir, self._core.write_snapshot_json, keep)
        except OSError as exc:
            # The journal holds everything the snapshot would: nothing is lost,
            # but a run that cannot keep its snapshot fresh stops here.
            if is_storage_failure(exc):
                raise storage_error(str(self._weft_dir / STATE), exc) from exc
            raise
        self._give_back()
        if size is None:
            return  # refused: the commit under way writes it
        self._last_snapshot = time.monotonic()
        self._last_cost = self._last_snapshot - started
        self.snapshot_seconds += self._last_cost
        self._last_size = size
        self._tail = 0
        self._boundary_waits = False
        self.snapshots += 1

    async def run(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` on the writer thread, after every commit queued before it."""
        await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def shutdown(self) -> None:
        """Stops the writer thread after its queued work."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._executor.shutdown(wait=True)
