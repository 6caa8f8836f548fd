"""The trigger engine: which committed events wake which sentinel, and when.

Sans-I/O. The engine is fed events with the time (``now``, milliseconds on
any clock that never goes back), and asked when its next timer is due; it
never reads a clock, sleeps or calls a model. Its output is a bounded queue
of :class:`Trigger` values per sentinel, which the manager takes one at a
time (a sentinel's triggers are processed serially).

Three stages per sentinel:

1. **Matching.** An *event trigger* matches events whose type is in its ``on``
   list (``*`` is every type) and whose data meets every condition. A
   *sequence trigger* looks only at events in its ``interestFilter``; it
   completes (yielding the events of its steps) when they match its ordered
   ``pattern``. Without ``consecutive``, events of interest that do not match
   the next step are passed over (the pattern is matched as a subsequence,
   each step by the earliest event that fits); with it, the pattern must match
   the last ``len(pattern)`` events of interest exactly ("three tool errors in
   a row"). After a completion, matching starts afresh with the next event.
2. **The strategy** turns matches into triggers: ``immediate`` (one trigger
   per match), ``count`` (every ``threshold`` matched events), ``debounce``
   (once matches have stopped for ``milliseconds``), ``timeWindow`` (at the
   end of a window of ``milliseconds`` opened by the first match). Matched
   events wait in a buffer of at most :data:`BUFFER_LIMIT` events (the oldest
   is dropped and counted).
3. **The queue** holds at most :data:`QUEUE_LIMIT` triggers per sentinel; a
   new one pushes the oldest out (counted in :attr:`SentinelRoute.dropped`).

Time-based strategies fire when the time given to :meth:`TriggerEngine.tick`
(or to :meth:`TriggerEngine.feed`, which ticks first) reaches their
deadline; :meth:`TriggerEngine.next_deadline` says when that is, so the
adapter sleeps exactly that long. :meth:`TriggerEngine.flush` fires whatever
is buffered at once (the drain before and after a codon completes).

Routing is indexed by event type: a feed looks up the routes of its type
(cached with the ``*`` routes appended), so an event that no sentinel watches
costs one dictionary lookup however many sentinels are attached. The
benchmark (``benches/test_bench_sentinels.py``) holds this against a scan of
every sentinel per event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from weft.config.schema import (
    CountExecution,
    DebounceExecution,
    EventTrigger,
    ImmediateExecution,
    SentinelExecution,
    SentinelTrigger,
    SequenceTrigger,
    TimeWindowExecution,
)
from weft.sentinels.conditions import Predicate, compile_conditions

__all__ = [
    "BUFFER_LIMIT",
    "QUEUE_LIMIT",
    "Observed",
    "SentinelRoute",
    "SentinelSpec",
    "Trigger",
    "TriggerEngine",
]

QUEUE_LIMIT: Final = 100
"""Triggers waiting per sentinel (the reference's limit): a sentinel whose
model is slower than its triggers falls behind by at most this many, and the
oldest are dropped, since a sentinel cares most about what is happening now."""
BUFFER_LIMIT: Final = 10_000
"""Matched events a strategy holds before it fires (the reference's limit):
bounds the memory of a debounce that never goes quiet."""
_TYPE_CACHE_LIMIT: Final = 4096
"""Distinct event types whose merged route lists are cached. Event types are
a small fixed set; the bound only matters for a hostile stream."""


class Observed(msgspec.Struct, frozen=True, gc=False):
    """A committed event as a sentinel sees it."""

    type: str
    data: Mapping[str, Any]
    seq: int
    at: int
    """When the engine was fed it (milliseconds)."""


class Trigger(msgspec.Struct, frozen=True, gc=False):
    """One wake-up of one sentinel: the events it is about."""

    sentinel: str
    number: int
    """1, 2, ... per sentinel."""
    events: tuple[Observed, ...]
    at: int
    """When it fired (milliseconds)."""


@dataclass(frozen=True, slots=True)
class SentinelSpec:
    """What the engine needs of a sentinel config."""

    id: str
    trigger: SentinelTrigger
    execution: SentinelExecution


# --------------------------------------------------------------------------- sequences


class _Sequence:
    """Progress of one sequence trigger through its pattern."""

    __slots__ = ("consecutive", "matched", "steps")

    def __init__(self, trigger: SequenceTrigger) -> None:
        self.steps: tuple[tuple[str, Predicate | None], ...] = tuple(
            (step.type, compile_conditions(step.conditions)) for step in trigger.pattern
        )
        self.consecutive = bool(trigger.options and trigger.options.consecutive)
        self.matched: list[Observed] = []

    def _fits(self, index: int, event: Observed) -> bool:
        kind, test = self.steps[index]
        return (kind == "*" or kind == event.type) and (test is None or test(event.data))

    def see(self, event: Observed) -> list[Observed] | None:
        """Advances on an event of interest; the completed match, if any."""
        if self.consecutive:
            # The last len(pattern) events of interest, each fitting its step.
            self.matched.append(event)
            if len(self.matched) > len(self.steps):
                del self.matched[0]
            if len(self.matched) < len(self.steps) or not all(
                self._fits(i, e) for i, e in enumerate(self.matched)
            ):
                return None
        elif self._fits(len(self.matched), event):
            self.matched.append(event)
        if len(self.matched) == len(self.steps):
            done, self.matched = self.matched, []
            return done
        return None


# --------------------------------------------------------------------------- engine


IMMEDIATE: Final = 0
COUNT: Final = 1
DEBOUNCE: Final = 2
TIME_WINDOW: Final = 3


class SentinelRoute:
    """One sentinel inside the engine: its matcher, strategy state and queue.

    The strategies are a mode and a few fields rather than objects, so that
    the engine's feed loop applies them inline: routing is the hot path.
    """

    __slots__ = (
        "buffer",
        "buffer_dropped",
        "dropped",
        "id",
        "last",
        "limit",
        "mode",
        "number",
        "opened",
        "period",
        "queue",
        "sequence",
        "test",
        "threshold",
        "triggered",
    )

    def __init__(self, spec: SentinelSpec, buffer_limit: int, queue_limit: int) -> None:
        self.id = spec.id
        trigger = spec.trigger
        self.test: Predicate | None = (
            compile_conditions(trigger.conditions) if isinstance(trigger, EventTrigger) else None
        )
        self.sequence = _Sequence(trigger) if isinstance(trigger, SequenceTrigger) else None
        execution = spec.execution
        self.threshold = 0
        self.period = 0
        """The debounce's quiet time or the window's width (milliseconds)."""
        if isinstance(execution, ImmediateExecution):
            self.mode = IMMEDIATE
        elif isinstance(execution, CountExecution):
            self.mode, self.threshold = COUNT, execution.threshold
        elif isinstance(execution, DebounceExecution):
            self.mode, self.period = DEBOUNCE, execution.milliseconds
        elif isinstance(execution, TimeWindowExecution):
            self.mode, self.period = TIME_WINDOW, execution.milliseconds
        else:  # the schema allows no other
            raise TypeError(f"unknown execution strategy {execution!r}")
        self.buffer: list[Observed] = []
        """Matched events waiting for the strategy to fire."""
        self.limit = buffer_limit
        self.buffer_dropped = 0
        """Matched events pushed out of the full buffer."""
        self.last = 0
        """The debounce: when the last event matched."""
        self.opened = 0
        """The time window: when it opened."""
        self.queue: deque[Trigger] = deque(maxlen=queue_limit)
        self.number = 0
        self.triggered = 0
        """Triggers fired (queued) so far, dropped ones included."""
        self.dropped = 0
        """Triggers pushed out of the full queue."""

    @property
    def timed(self) -> bool:
        """Whether the strategy fires by itself once time passes."""
        return self.mode in (DEBOUNCE, TIME_WINDOW)

    def add(self, events: Sequence[Observed], now: int) -> bool:
        """Hands matched events to the strategy; True when a trigger fired."""
        mode = self.mode
        if mode == IMMEDIATE:
            self.fire(list(events), now)
            return True
        buffer = self.buffer
        if mode == TIME_WINDOW and not buffer:
            self.opened = now
        buffer.extend(events)
        if len(buffer) > self.limit:
            over = len(buffer) - self.limit
            del buffer[:over]
            self.buffer_dropped += over
        if mode == COUNT:
            if len(buffer) >= self.threshold:
                self.fire(self.take(), now)
                return True
        elif mode == DEBOUNCE:
            self.last = now
        return False

    def deadline(self) -> int | None:
        """When the buffered events fire by themselves (``None``: never)."""
        if not self.buffer:
            return None
        if self.mode == DEBOUNCE:
            return self.last + self.period
        if self.mode == TIME_WINDOW:
            return self.opened + self.period
        return None

    def take(self) -> list[Observed]:
        """Empties the buffer, returning what it held."""
        batch, self.buffer = self.buffer, []
        return batch

    def fire(self, events: list[Observed], now: int) -> None:
        """Queues a trigger holding ``events``."""
        self.number += 1
        self.triggered += 1
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1
        self.queue.append(Trigger(self.id, self.number, tuple(events), now))


def _types(trigger: SentinelTrigger) -> list[str]:
    if isinstance(trigger, EventTrigger):
        return list(trigger.on)
    return list(trigger.interest_filter.on)


class TriggerEngine:
    """Routes events to sentinels and queues their triggers (see the module doc)."""

    def __init__(
        self,
        specs: Sequence[SentinelSpec],
        *,
        buffer_limit: int = BUFFER_LIMIT,
        queue_limit: int = QUEUE_LIMIT,
    ) -> None:
        self.routes: dict[str, SentinelRoute] = {}
        self._by_type: dict[str, list[SentinelRoute]] = {}
        self._wild: list[SentinelRoute] = []
        self._timed: list[SentinelRoute] = []
        for spec in specs:
            if spec.id in self.routes:
                raise ValueError(f"sentinel {spec.id!r} is routed twice")
            route = SentinelRoute(spec, buffer_limit, queue_limit)
            self.routes[spec.id] = route
            types = _types(spec.trigger)
            if "*" in types:
                self._wild.append(route)
            else:
                for kind in dict.fromkeys(types):
                    self._by_type.setdefault(kind, []).append(route)
            if route.timed:
                self._timed.append(route)
        self._cache: dict[str, tuple[SentinelRoute, ...]] = {}
        self._deadline: int | None = None
        """No timer fires before it (``None``: no timer set); kept so that a
        feed only visits the timed strategies when one may be due."""

    def remove(self, sentinel: str) -> None:
        """Stops routing to ``sentinel`` (it was unloaded); its queue is dropped."""
        route = self.routes.pop(sentinel, None)
        if route is None:
            return
        for routes in self._by_type.values():
            if route in routes:
                routes.remove(route)
        if route in self._wild:
            self._wild.remove(route)
        if route in self._timed:
            self._timed.remove(route)
        self._cache.clear()
        self._recompute_deadline()

    def _routes(self, kind: str) -> tuple[SentinelRoute, ...]:
        routes = (*self._by_type.get(kind, ()), *self._wild)
        if len(self._cache) < _TYPE_CACHE_LIMIT:
            self._cache[kind] = routes
        return routes

    def feed(self, kind: str, data: Mapping[str, Any], seq: int, now: int) -> int:
        """Routes one committed event at ``now``; returns the triggers it queued
        (timers that came due first included)."""
        fired = 0
        if self._deadline is not None and now >= self._deadline:
            fired = self.tick(now)
        routes = self._cache.get(kind)
        if routes is None:
            routes = self._routes(kind)
        if not routes:
            return fired
        event: Observed | None = None
        for route in routes:
            test = route.test
            if test is not None and not test(data):
                continue
            if event is None:
                event = Observed(kind, data, seq, now)
            if route.sequence is not None:
                done = route.sequence.see(event)
                if done is not None and route.add(done, now):
                    fired += 1
                elif done is not None and route.mode >= DEBOUNCE:
                    self._lower_deadline(route)
                continue
            # One matched event, the strategies inline (see SentinelRoute.add).
            mode = route.mode
            if mode == IMMEDIATE:
                route.fire([event], now)
                fired += 1
                continue
            buffer = route.buffer
            buffer.append(event)
            if len(buffer) > route.limit:
                del buffer[0]
                route.buffer_dropped += 1
            if mode == COUNT:
                if len(buffer) >= route.threshold:
                    route.fire(route.take(), now)
                    fired += 1
                continue
            if mode == DEBOUNCE:
                route.last = now
            elif len(buffer) == 1:
                route.opened = now
            deadline = now + route.period if mode == DEBOUNCE else route.opened + route.period
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
        return fired

    def _lower_deadline(self, route: SentinelRoute) -> None:
        deadline = route.deadline()
        if deadline is not None and (self._deadline is None or deadline < self._deadline):
            self._deadline = deadline

    def tick(self, now: int) -> int:
        """Fires the time-based strategies due at ``now``; returns how many."""
        fired = 0
        for route in self._timed:
            deadline = route.deadline()
            if deadline is not None and now >= deadline:
                route.fire(route.take(), now)
                fired += 1
        self._recompute_deadline()
        return fired

    def flush(self, now: int) -> int:
        """Fires every buffered batch at once, whatever its strategy (a drain);
        an unfinished sequence stays unfinished. Returns how many fired."""
        fired = 0
        for route in self.routes.values():
            if route.buffer:
                route.fire(route.take(), now)
                fired += 1
        self._deadline = None
        return fired

    def _recompute_deadline(self) -> None:
        deadlines = [d for r in self._timed if (d := r.deadline()) is not None]
        self._deadline = min(deadlines) if deadlines else None

    def next_deadline(self) -> int | None:
        """When :meth:`tick` next has something to fire (``None``: no timer)."""
        # ``_deadline`` is a lower bound (a debounce that moved later keeps
        # the earlier value, so feed stays cheap); the answer here is exact.
        self._recompute_deadline()
        return self._deadline

    def pop(self, sentinel: str) -> Trigger | None:
        """The oldest queued trigger of ``sentinel`` (``None`` when none waits)."""
        route = self.routes.get(sentinel)
        if route is None or not route.queue:
            return None
        return route.queue.popleft()

    def pending(self, sentinel: str) -> int:
        """Triggers queued for ``sentinel``."""
        route = self.routes.get(sentinel)
        return len(route.queue) if route is not None else 0

    def buffered(self, sentinel: str) -> int:
        """Matched events waiting in ``sentinel``'s strategy."""
        route = self.routes.get(sentinel)
        return len(route.buffer) if route is not None else 0
