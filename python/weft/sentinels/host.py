"""The runtime's side of sentinels: one :class:`SentinelManager` per codon.

:class:`RuntimeSentinels` is the :class:`~weft.runtime.codon.attempt.SentinelHost`
``weft run`` uses. It connects the sans-I/O pieces of this package to a run:

* **load** (codon ``starting``, seed 001's step 5): the codon's sentinel
  entries are attached (:func:`~weft.sentinels.config.attach`) and loaded. A
  sentinel that cannot load is journaled as ``sentinel.error``
  (``load-failed``); when its entry says ``failCodonIfNotLoaded``, ``load``
  returns the reason the runner fails the codon with;
* **feed**: a StateManager listener, so a sentinel sees exactly the
  committed events, in journal order (durable before visible), from the
  codon's load to its unload. Sentinel and connection events are never fed.
  An event's data is decoded only when some sentinel watches its type;
  ``file.updated`` gets the virtual field ``content`` (the file's text,
  read then, up to :data:`CONTENT_LIMIT` bytes) for conditions; a state
  transition is fed as the reference's ``state.transition`` event
  (``{transitionType, runId, codonId, transition: {type, data}}``);
* **drain** (``completing-sentinels``): once the agent's events (everything
  before the move to ``completing-sentinels``) and the ``file.updated``
  events they lead to were committed and fed, buffered events fire and
  queued triggers finish; the move itself is fed as it commits, for the
  second drain. The states changed meanwhile go out once, at the end;
* **seal** (right before the terminal move): the last
  ``SentinelStatesUpdated`` while the core still takes one (it refuses
  updates to a terminal codon's sentinels, and a refusal stops the run);
* **finish** (after ``codon.completed``): the second drain, then unload with
  ``codon-complete`` (``shutdown`` when Weft is stopping), in the background:
  the next codon starts at once; **settle** waits for it (before a run
  ends).

``SentinelStatesUpdated`` is submitted whenever a sentinel's state changes
(calls, failures, cost, unload), so the codon record's ``sentinels`` stays
current and carries the codon's sentinel spend apart from the agent's.
Sentinel events go through the StateManager like every other event, so a
crash loses nothing that was journaled; a resumed codon is a new attempt
whose sentinels see only its own events, so no output is produced twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import orjson

from weft.clock import iso_from_ms, utc_now_iso
from weft.config.loader import LoadedHank
from weft.errors import PersistenceError
from weft.events.stream import InfoEvent, SentinelData, SentinelError, UnloadReason
from weft.events.transitions import SentinelState, SentinelStatesUpdated
from weft.plan import PlannedCodon
from weft.state import Processed, StateManager

if TYPE_CHECKING:
    # The sentinel machinery (managers, templates, providers: about 50 ms of
    # imports) is imported when a codon with sentinels loads them, so a run
    # of a hank without any does not pay for it before its first agent.
    from weft.sentinels.manager import LoadCache, LoadFailure, SentinelManager
    from weft.sentinels.providers import ProviderRegistry

__all__ = ["CONTENT_LIMIT", "RuntimeSentinels"]

CONTENT_LIMIT: Final = 256 * 1024
"""The most of a file's text ``file.updated``'s virtual ``content`` holds (bytes):
enough for the source files conditions look into, and a bound on the read
made while routing."""


def _clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Live:
    """The sentinels of the codon that runs now."""

    planned: PlannedCodon
    run_id: str
    manager: SentinelManager
    failures: list[LoadFailure]
    sealed: bool = False
    last: tuple[list[SentinelState], float] | None = None
    """The newest states (and their total cost), submitted or not."""
    pending: bool = False
    """``last`` is waiting for its ``SentinelStatesUpdated``."""
    draining: bool = False
    """In the first drain: the states go out once, at its end."""
    until: int = 0
    """Once finished: the last event (seq) submitted while the codon ran."""
    abandoned: bool = False
    """Unloaded with ``shutdown`` by :meth:`RuntimeSentinels.abandon`."""


class RuntimeSentinels:
    """Runs each codon's sentinels during ``weft run`` (see the module docstring)."""

    def __init__(
        self,
        state: StateManager,
        hank: LoadedHank,
        *,
        workspace: Path,
        weft_dir: Path,
        env: Mapping[str, str] | None = None,
        model_override: str | None = None,
        persist_history: bool = True,
        call_timeout: float = 60.0,
        registry: ProviderRegistry | None = None,
        clock: Callable[[], int] = _clock_ms,
        before_drain: Callable[[], Awaitable[None]] | None = None,
        spend: Callable[[str, float], None] | None = None,
    ) -> None:
        """``model_override`` (``--sentinel-model``, the ``sentinel.model``
        setting) replaces every sentinel's model, e.g. ``fake/haiku`` offline;
        ``before_drain`` is awaited before each drain (events still being
        produced from what was committed, such as ``file.updated``);
        ``spend`` is told each model call's cost with its codon (the budget
        counts it, whether or not the sentinel reports its outputs);
        ``call_timeout`` bounds each model call (``sentinel.callTimeoutMs``)."""
        self._state = state
        self._hank = hank
        self._workspace = workspace
        self._weft_dir = weft_dir
        self._env = dict(os.environ if env is None else env)
        self._call_timeout = call_timeout
        self._registry = registry
        """The model clients: made when a codon's sentinels first load."""
        self._override = model_override
        self._persist = persist_history
        self._clock = clock
        self._before_drain = before_drain
        self._spend = spend
        self._live: _Live | None = None
        self._ending: set[asyncio.Task[None]] = set()
        self._finishing: list[_Live] = []
        """Codons whose sentinels still get the events submitted before their end."""
        self._cache: LoadCache | None = None
        self._resolved: dict[str, Path] = {}
        """Each sentinel config reference's resolved path, for every codon."""
        self._unsubscribe = state.add_listener(self._on_processed)

    # ------------------------------------------------------------------ the seam

    async def load(self, planned: PlannedCodon, run_id: str, *, since: int = 0) -> str | None:
        """Loads the codon's sentinels, fed the committed events from seq
        ``since`` on (the codon's move to ``starting``): the tail of the codon
        before, committed after this load, is not theirs. The reason to fail
        the codon when a ``failCodonIfNotLoaded`` sentinel could not load
        (else ``None``)."""
        if self._live is not None:  # an attempt left without finishing (an exception)
            await self._end(self._live, "shutdown")
        codon = planned.codon
        if not codon.sentinels:
            return None
        from weft.sentinels.config import attach
        from weft.sentinels.manager import CodonInfo, LoadCache, SentinelManager
        from weft.sentinels.providers import ProviderRegistry

        if self._registry is None:
            self._registry = ProviderRegistry(self._env, call_timeout=self._call_timeout)
        if self._cache is None:
            self._cache = LoadCache()
        emit = functools.partial(self._emit, run_id, planned.codon_id)
        live: _Live | None = None

        def on_states(states: list[SentinelState], total_cost: float) -> None:
            # Bound to this codon: its manager still runs (the second drain)
            # after the next codon's sentinels are live.
            if live is not None:
                self._on_states(live, states, total_cost)

        manager = SentinelManager(
            CodonInfo(planned.codon_id, codon.name, codon.description, utc_now_iso()),
            registry=self._registry,
            emit=emit,
            workspace=self._workspace,
            state_dir=self._weft_dir,
            clock=self._clock,
            on_states=on_states,
            on_spend=None
            if self._spend is None
            else functools.partial(self._spend, planned.codon_id),
            model_override=self._override,
            persist_history=self._persist,
            cache=self._cache,
            after_seq=since - 1,
        )
        live = _Live(planned, run_id, manager, [])
        self._live = live
        attached, unattached = attach(
            codon, self._hank.directory, self._hank.sentinel_configs, self._resolved
        )
        for failure in unattached:
            emit(
                SentinelError(
                    sentinel_id=failure.sentinel_id,
                    codon_id=planned.codon_id,
                    error_type="load-failed",
                    message=failure.message,
                    retriable=False,
                    consecutive_failure_count=0,
                )
            )
        live.failures = [*unattached, *manager.load(attached)]
        required = [f for f in live.failures if f.required]
        if not required:
            return None
        listed = "; ".join(f"{f.sentinel_id}: {f.message}" for f in required)
        return (
            f"Required sentinel(s) of codon {planned.codon_id} failed to load "
            f"(failCodonIfNotLoaded is true): {listed}"
        )

    async def drain(
        self, planned: PlannedCodon, run_id: str, *, upto: int, files_written: bool = True
    ) -> None:
        """Lets the codon's sentinels see every event of the agent (up to seq
        ``upto``, the last one before the codon's move to
        ``completing-sentinels``) and finish their work. The move and what
        follows it reach the sentinels in the second drain (:meth:`finish`).
        ``files_written``: whether the agent called a file-writing tool, so
        ``file.updated`` events may be due before the codon goes on."""
        live = self._live
        if live is None or live.planned.codon_id != planned.codon_id or not live.manager.loaded:
            # No sentinel here (or none loaded and active), but the file.updated
            # of the agent's writes are journaled before the codon's end all the
            # same: the tool results must be dispatched first (an agent that
            # wrote nothing has none to wait for).
            if self._before_drain is not None and files_written:
                await self._state.wait_dispatched(upto)
                await self._before_drain()
            return
        count = live.manager.loaded
        self._emit(run_id, planned.codon_id, InfoEvent(message=_completing(count)))
        live.draining = True
        try:
            await self._settle(upto)
            await live.manager.drain()
        finally:
            live.draining = False
            self._flush_states(live)
        said = (
            "Sentinel work abandoned: Weft is stopping"
            if live.abandoned
            else "Sentinel work completed"
        )
        self._emit(run_id, planned.codon_id, InfoEvent(message=said))

    def seal(self, planned: PlannedCodon, run_id: str) -> None:
        """Submits the codon's last sentinel states before its terminal move,
        each still active one as unloaded with ``codon-complete`` (what
        :meth:`finish` does next); the calls of the second drain are journaled
        as ``sentinel.*`` events, the record no longer changes."""
        live = self._live
        if live is None or live.planned.codon_id != planned.codon_id or live.sealed:
            return
        live.sealed = True
        if live.last is None:
            return
        states, total = live.last
        at = iso_from_ms(self._clock())
        final = [
            s
            if s.status == "unloaded"
            else msgspec.structs.replace(
                s, status="unloaded", unloaded_at=at, unload_reason="codon-complete"
            )
            for s in states
        ]
        self._submit(live, final, total)

    async def finish(self, planned: PlannedCodon, run_id: str, *, shutdown: bool = False) -> None:
        """After ``codon.completed``: the second drain, then the unload.

        Done in the background: the codon is over and nothing waits for its
        sentinels' last words, so the next codon starts at once (its own
        sentinels are fed from then on; these see nothing more). A shutdown
        unloads at once. :meth:`aclose` waits for what is still running."""
        live = self._live
        if live is None or live.planned.codon_id != planned.codon_id:
            return
        self._live = None
        live.sealed = True
        if shutdown:
            await self._end(live, "shutdown")
            return
        live.until = self._state.core.next_seq - 1
        self._finishing.append(live)
        task = asyncio.get_running_loop().create_task(self._end(live, "codon-complete"))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    def abandon(self) -> None:
        """Weft is stopping: every codon's sentinels are unloaded with
        ``shutdown`` now, their queued triggers abandoned and their model
        calls cancelled, so a drain in progress ends at once (the codon goes
        on to its end) and the run's end waits for nothing they do."""
        lives = [*self._finishing, *([self._live] if self._live is not None else [])]
        for live in lives:
            if live.abandoned:
                continue
            live.abandoned = True
            task = asyncio.get_running_loop().create_task(live.manager.unload("shutdown"))
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)

    async def settle(self) -> None:
        """Waits until the finished codons' sentinels did their last work (the
        second drain and the unload): their events are then all submitted."""
        while self._ending:
            await asyncio.gather(*tuple(self._ending), return_exceptions=True)

    async def aclose(self) -> None:
        """Waits for every codon's last drain and unload, then stops listening
        and closes the model clients. Call before the StateManager closes."""
        try:
            await self.settle()
            if self._live is not None:  # the run ended inside a codon (an exception)
                # The journal may be what failed: the unload is then not
                # recorded, and the run's own error is the one to report.
                with contextlib.suppress(PersistenceError, RuntimeError):
                    await self._end(self._live, "shutdown")
        finally:
            self._live = None
            self._unsubscribe()
            if self._registry is not None:
                with contextlib.suppress(Exception):  # an SDK client failing to close
                    await self._registry.aclose()

    # ------------------------------------------------------------------ plumbing

    async def _end(self, live: _Live, reason: UnloadReason) -> None:
        live.sealed = True  # the record is terminal, or about to be
        if self._live is live:
            self._live = None
        if reason == "codon-complete":
            # codon.completed was submitted before this: once committed (the
            # flush), it was fed, so the drain gives it to the sentinels.
            await self._state.flush()
            if live in self._finishing:
                self._finishing.remove(live)
            await live.manager.drain()
            await live.manager.unload("codon-complete")
        else:
            await live.manager.unload("shutdown")

    async def _settle(self, upto: int) -> None:
        """Until the events up to ``upto`` were committed and fed, and the
        ``file.updated`` events they lead to too.

        Only those: waiting for everything submitted (a flush) would wait for
        the commit of the move to ``completing-sentinels`` and of the info
        line after it, one more fsync round trip on the codon's path."""
        await self._state.wait_dispatched(upto)
        if self._before_drain is not None:
            # Fed its tool results, it reports the files they wrote: anything
            # submitted meanwhile is one of those or came while it worked.
            mark = self._state.core.next_seq
            await self._before_drain()
            if self._state.core.next_seq != mark:
                await self._state.wait_dispatched(self._state.core.next_seq - 1)

    def _emit(self, run_id: str, codon_id: str, event: SentinelData | InfoEvent) -> None:
        self._state.emit(event, run_id=run_id, codon_id=codon_id)

    def _on_states(self, live: _Live, states: list[SentinelState], total_cost: float) -> None:
        if live.sealed:
            return  # the codon's record is terminal: the core takes no more states
        # Coalesced: the newest states go out once per loop turn, however
        # many calls, failures and unloads changed them in that turn; during
        # the drain, once at its end.
        if not live.pending and not live.draining:
            asyncio.get_running_loop().call_soon(self._flush_states, live)
        live.pending = True
        live.last = (states, total_cost)

    def _flush_states(self, live: _Live) -> None:
        if not live.pending or live.sealed or live.draining or live.last is None:
            return
        live.pending = False
        self._submit(live, *live.last)

    def _submit(self, live: _Live, states: list[SentinelState], total_cost: float) -> None:
        if not states:
            return
        self._state.transition(
            SentinelStatesUpdated(
                run_id=live.run_id,
                codon_id=live.planned.codon_id,
                sentinel_states=list(states),
                total_cost=total_cost,
            )
        )

    def _on_processed(self, item: Processed) -> None:
        """Feeds one committed event to the live codon's sentinels (and to a
        finished codon's, up to the last event submitted while it ran)."""
        if self._live is None and not self._finishing:
            return  # no codon with sentinels: the common case, at every event
        targets = [f.manager for f in self._finishing if item.seq <= f.until]
        if self._live is not None:
            targets.append(self._live.manager)
        if not targets:
            return
        from weft.sentinels.checks import TRANSITION_EVENT  # loaded with the sentinels

        if item.stream is not None:
            kind = item.stream.type
        elif item.event is not None and not isinstance(item.event, SentinelStatesUpdated):
            # SentinelStatesUpdated is sentinel activity: fed back, a sentinel
            # watching transitions would wake itself for ever.
            kind = TRANSITION_EVENT
        else:
            return
        watching = [m for m in targets if m.watches(kind)]
        if not watching:
            return
        data = _data_of(item.payload)
        if kind == TRANSITION_EVENT:
            # A transition is seen as the reference's state.transition event.
            name = type(item.event).__name__
            data = {
                "transitionType": name,
                "runId": data.get("runId"),
                "codonId": data.get("codonId"),
                "transition": {"type": name, "data": data},
            }
        elif kind == "file.updated":
            data["content"] = self._content(data.get("path"))
        for manager in watching:
            manager.feed(kind, data, item.seq)

    def _content(self, path: Any) -> str:
        if not isinstance(path, str):
            return ""
        try:
            with open(self._workspace / path, "rb") as f:
                return f.read(CONTENT_LIMIT).decode("utf-8", "replace")
        except OSError:
            return ""


def _data_of(payload: bytes) -> dict[str, Any]:
    """The ``data`` of journal bytes ``{"type": ..., "data": ...}``."""
    decoded = orjson.loads(payload)
    data = decoded.get("data") if isinstance(decoded, dict) else None
    return data if isinstance(data, dict) else {}


def _completing(count: int) -> str:
    return f"Completing work for {count} sentinel(s)..."
