"""The StateManager: the single writer of an execution's state.

Every state change goes the same way::

    transition(event) -> encode once (msgspec) -> Core.submit -> seq, returned at once
    pump task: Core.drain() -> persistence.commit(batch) -> listeners, waiters

The compiled core validates and applies transitions strictly in submission
order; a rejected one changes nothing and is reported in its place, and the
queue goes on. Listeners and waiters hear of a transition only after its
batch was handed to persistence ("durable before visible"). The default
:class:`InMemoryPersistence` keeps nothing; the durable SQLite journal plugs
in through the same :class:`Persistence` protocol. A persistence failure is
fatal: the manager stops accepting transitions and every waiter gets a
:class:`~weft.errors.PersistenceError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import msgspec

from weft._core import Core, ExecutionThread, Outcome
from weft.clock import iso_from_ms
from weft.errors import PersistenceError, rejection_error
from weft.events.stream import Event, RejectedTransition, StreamData
from weft.events.transitions import Transition, encode

log = logging.getLogger(__name__)
_event_encoder = msgspec.json.Encoder()
_prefixes: dict[str, bytes] = {}


def encode_stream(event: StreamData | RejectedTransition) -> bytes:
    """The journal bytes of a stream event, ``{"type": TYPE, "data": ...}``, encoded once."""
    prefix = _prefixes.get(event.TYPE)
    if prefix is None:
        prefix = _prefixes[event.TYPE] = b'{"type":"' + event.TYPE.encode() + b'","data":'
    return prefix + _event_encoder.encode(event) + b"}"


def _rejected(outcome: Outcome, payload: bytes) -> RejectedTransition:
    # A refused transition changed nothing: it is journaled, and sent, as an error event.
    return RejectedTransition(
        code=outcome.code,
        message=outcome.message,
        transition_type=outcome.kind,
        transition=payload.decode("utf-8", "replace"),
    )


class StreamEvent(msgspec.Struct, frozen=True, gc=False):
    """What a stream event (not a transition) is about."""

    type: str
    run_id: str | None = None
    codon_id: str | None = None


def event_id(seq: int, time_ns: int) -> str:
    """The event id: ``<13-digit ms>-<9 hex digits of the seq>``, unique per journal
    (the reference's ``<13 digits>-<9 of [a-z0-9]>`` shape)."""
    return f"{time_ns // 1_000_000:013d}-{seq:09x}"


class Processed(msgspec.Struct, frozen=True, gc=False):
    """One submission after the core processed it: a transition, applied or
    rejected, or a stream event, in its journal form.

    (A frozen msgspec Struct, not a frozen dataclass: one is made per event,
    and the dataclass's ``__init__`` cost ten times as much. Not tracked by the
    garbage collector: it refers to no container that could refer back.)

    ``payload`` is the exact encoded bytes, which is what the journal stores
    and clients receive, and ``event`` the typed event they encode (None only
    for a transition submitted as bytes, see :meth:`StateManager.transition_bytes`).
    A refused transition changed nothing: its journal form is an ``error``
    event (:class:`~weft.events.stream.RejectedTransition`), made once, here,
    by the manager; ``stream`` then says so, as for any stream event.
    """

    seq: int
    payload: bytes
    event: Event | None
    outcome: Outcome
    time_ns: int
    """When it was submitted (wall clock, ns since the epoch)."""
    stream: StreamEvent | None = None
    """The type, run and codon of a stream event (or of a refused transition's error)."""

    @property
    def applied(self) -> bool:
        """Whether the state changed."""
        return self.outcome.ok and self.outcome.transition

    @property
    def id(self) -> str:
        """The event id (see :func:`event_id`)."""
        return event_id(self.seq, self.time_ns)

    @property
    def timestamp(self) -> str:
        """ISO-8601 UTC submission time, to the millisecond."""
        return iso_from_ms(self.time_ns // 1_000_000)


class Persistence(Protocol):
    """Where processed transitions go before anyone hears of them.

    ``commit`` receives each batch in order and must return only once the
    batch is durable. Raising makes the manager stop (a persistence failure is
    fatal); the exception is kept as the ``__cause__`` of the
    :class:`~weft.errors.PersistenceError` callers see.
    """

    async def commit(self, batch: Sequence[Processed]) -> None:
        """Make ``batch`` durable."""


class InMemoryPersistence:
    """Keeps nothing: for embedding and tests without a store."""

    async def commit(self, batch: Sequence[Processed]) -> None:
        """Accept the batch; nothing is written."""


Listener = Callable[[Processed], object]
"""Called with every processed item; what it returns is ignored."""


class StateManager:
    """Owns a :class:`~weft._core.Core` and serialises every change to it.

    ``transition`` may be called from any thread; the pump runs on the event
    loop the manager was first used in. Listeners run on that loop, in
    submission order, one processed transition at a time; an exception in a
    listener is logged and does not stop the queue.
    """

    def __init__(
        self,
        core: Core | None = None,
        *,
        persistence: Persistence | None = None,
        max_batch: int = 1024,
    ) -> None:
        self._core = core if core is not None else Core()
        self._persistence = persistence if persistence is not None else InMemoryPersistence()
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[bytes, Event | None, int, StreamEvent | None]] = {}
        self._waiters: dict[int, list[asyncio.Future[Outcome]]] = {}
        self._listeners: list[tuple[Listener, frozenset[str] | None]] = []
        """Each listener with the item types it takes (None: all), in order."""
        self._by_type: dict[str, tuple[Listener, ...]] = {}
        """The listeners of each item type, made when first needed."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        """The thread the loop was bound on (a submission from it needs no hand-over)."""
        self._wake: asyncio.Event | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._failure: PersistenceError | None = None
        self._dispatched = self._core.next_seq - 1
        self._applied = self._dispatched
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closed = False

    @property
    def core(self) -> Core:
        """The compiled core: read state and costs from it directly.

        Submit only through the manager: a transition submitted on the core
        itself would bypass the persistence and the listeners.
        """
        return self._core

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest transition listeners have seen."""
        return self._dispatched

    def add_listener(
        self, listener: Listener, *, types: Iterable[str] | None = None
    ) -> Callable[[], None]:
        """Calls ``listener`` with every processed transition; returns an unsubscribe.

        ``types`` limits it to the items of those types (a stream event's
        ``type``, a transition's kind; a refused transition is an ``error``):
        the others are not handed to it at all. Listeners are called in the
        order they were added either way.
        """
        entry = (listener, None if types is None else frozenset(types))
        self._listeners.append(entry)
        self._by_type.clear()

        def remove() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)
                self._by_type.clear()

        return remove

    def _listeners_of(self, kind: str) -> tuple[Listener, ...]:
        """The listeners of items of type ``kind``, in the order they were added."""
        found = self._by_type.get(kind)
        if found is None:
            found = tuple(f for f, types in self._listeners if types is None or kind in types)
            self._by_type[kind] = found
        return found

    def transition(self, event: Transition) -> int:
        """Queues ``event`` and returns its sequence number at once."""
        return self._submit(encode(event), event, None)

    def transition_bytes(self, payload: bytes) -> int:
        """Queues an already-encoded transition; returns its sequence number."""
        return self._submit(payload, None, None)

    def emit(
        self, event: StreamData, *, run_id: str | None = None, codon_id: str | None = None
    ) -> int:
        """Queues a stream event (``assistant.action``, ``rig.output``...) in the
        same order as transitions; it is journaled but does not touch the state."""
        stream = StreamEvent(event.TYPE, run_id, codon_id)
        return self._submit(encode_stream(event), event, stream)

    async def transition_and_wait(self, event: Transition) -> Outcome:
        """Queues ``event`` and waits until it is durable.

        Returns the outcome when it was applied; raises the matching
        :class:`~weft.errors.TransitionRejectedError` when it was refused.
        """
        seq = self.transition(event)
        outcome = await self._wait_for(seq)
        if not outcome.ok:
            raise rejection_error(outcome)
        return outcome

    async def execution_thread(
        self, checkpoints: Iterable[str] | None = None, target_run_id: str | None = None
    ) -> ExecutionThread:
        """The execution thread (seed 003) of the state once everything submitted
        so far has been applied; ``checkpoints`` are the SHAs git confirms."""
        await self.flush()
        return self._core.execution_thread(checkpoints=checkpoints, target_run_id=target_run_id)

    async def flush(self) -> None:
        """Waits until everything submitted so far reached the listeners."""
        last = self._core.next_seq - 1
        if last > self._dispatched:
            await self._wait_for(last)
        elif self._failure is not None:
            raise self._failure

    async def wait_dispatched(self, seq: int) -> None:
        """Waits until the transition numbered ``seq`` (and so every one before
        it) is durable and reached the listeners. Unlike :meth:`flush`, what
        was submitted after ``seq`` is not waited for (its commit may be the
        next one). A ``seq`` not submitted yet means the newest one."""
        seq = min(seq, self._core.next_seq - 1)
        if seq <= self._dispatched:
            if self._failure is not None:
                raise self._failure
            return
        await self._wait_for(seq)

    async def applied(self) -> None:
        """Waits until everything submitted so far has been applied by the core:
        validated and folded into its state, so :attr:`core`'s figures (costs)
        include it. Not a durability promise: the batch may still be committing.

        Cheaper than :meth:`flush` on a busy road: it waits for the batch being
        committed to finish and the next one to be drained, not for that next
        batch's commit (one fsync round trip instead of two).
        """
        last = self._core.next_seq - 1
        if self._failure is not None:
            raise self._failure
        if last <= self._applied:
            return
        future: asyncio.Future[None] = self._bind_loop().create_future()
        self._applied_waiters.append((last, future))
        await future

    async def close(self) -> None:
        """Flushes, then stops the pump. Later transitions are refused."""
        await self.flush()
        self._closed = True
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task
            self._pump_task = None

    # -- internals ---------------------------------------------------------

    def _submit(self, payload: bytes, event: Event | None, stream: StreamEvent | None) -> int:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise RuntimeError("the StateManager is closed")
        # Every event passes here: the loop checks are inline, not calls.
        loop = self._loop if self._loop is not None else self._bind_loop()
        now = time.time_ns()
        with self._lock:
            seq = self._core.emit(payload) if stream else self._core.submit(payload)
            self._pending[seq] = (payload, event, now, stream)
        # On the loop's own thread with the loop running, this is the loop (one
        # loop runs per thread): no get_running_loop, which costs a getpid.
        if threading.get_ident() == self._loop_thread and loop.is_running():
            self._kick()
        else:
            loop.call_soon_threadsafe(self._kick)
        return seq

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
                self._loop_thread = threading.get_ident()
            except RuntimeError:
                raise RuntimeError(
                    "StateManager needs a running event loop: use it first from async code"
                ) from None
            self._wake = asyncio.Event()
        return self._loop

    def _kick(self) -> None:
        assert self._wake is not None
        self._wake.set()
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    def _wait_for(self, seq: int) -> asyncio.Future[Outcome]:
        if self._failure is not None:
            raise self._failure
        future: asyncio.Future[Outcome] = self._bind_loop().create_future()
        self._waiters.setdefault(seq, []).append(future)
        return future

    async def _pump(self) -> None:
        assert self._wake is not None
        while True:
            outcomes = self._core.drain(self._max_batch)
            if outcomes:
                self._mark_applied(outcomes[-1].seq)
            if not outcomes:
                self._wake.clear()
                if self._core.pending:
                    continue
                await self._wake.wait()
                continue
            with self._lock:
                batch = []
                pending = [self._pending.pop(o.seq) for o in outcomes]
            for o, (payload, event, now, stream) in zip(outcomes, pending, strict=True):
                if stream is None and not o.ok:
                    event = _rejected(o, payload)
                    payload = encode_stream(event)
                    stream = StreamEvent("error", o.run_id, o.codon_id)
                batch.append(Processed(o.seq, payload, event, o, now, stream))
            try:
                await self._persistence.commit(batch)
            except Exception as exc:
                self._fail(exc)
                return
            for item in batch:
                self._dispatched = item.seq
                self._notify(item)

    def _notify(self, item: Processed) -> None:
        stream = item.stream
        for listener in self._listeners_of(
            stream.type if stream is not None else item.outcome.kind or ""
        ):
            try:
                listener(item)
            except Exception:
                log.exception("state listener %r failed on transition %d", listener, item.seq)
        for future in self._waiters.pop(item.seq, ()):
            if not future.done():
                future.set_result(item.outcome)

    def _mark_applied(self, seq: int) -> None:
        self._applied = seq
        if self._applied_waiters:
            waiting = []
            for last, future in self._applied_waiters:
                if last > seq:
                    waiting.append((last, future))
                elif not future.done():
                    future.set_result(None)
            self._applied_waiters = waiting

    def _fail(self, exc: Exception) -> None:
        failure = PersistenceError(f"persisting transitions failed: {exc}")
        failure.__cause__ = exc
        self._failure = failure
        log.critical("%s", failure)
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(failure)
        self._waiters.clear()
        for _, waiter in self._applied_waiters:
            if not waiter.done():
                waiter.set_exception(failure)
        self._applied_waiters.clear()
