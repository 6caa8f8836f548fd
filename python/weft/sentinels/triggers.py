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
   ``pattern``. With ``consecutive`` (the default) the pattern must match
   the last ``len(pattern)`` events of interest exactly ("three tool errors in
   a row"); with ``"consecutive": false``, events of interest that do not
   match the next step are passed over (the pattern is matched as a
   subsequence, each step by the earliest event that fits). After a
   completion, matching starts afresh with the next event.
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

Routing is indexed by event type: the first event of a type compiles the
routes that watch it (its own and the ``*`` ones) into one straight-line
function (:func:`_compile_router`), cached by type, so an event that no
sentinel watches costs one dictionary lookup however many sentinels are
attached, and one that some watch runs only their conditions and strategy
steps. The common steps are written out rather than called: an immediate
trigger is queued inline, a consecutive run of one step is one inline test,
and a field that several routes test is read once per event.
:meth:`TriggerEngine.feed_interpreted` is the same logic without the
generated code; property tests hold both to a reference model. The benchmark
(``benches/test_bench_sentinels.py``) measures routing against a scan of
every sentinel per event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import CodeType
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
from weft.sentinels.conditions import (
    _NUMBER_TYPES,
    Predicate,
    compile_conditions,
    inline_condition,
)

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

    __slots__ = ("consecutive", "matched", "steps", "uniform")

    def __init__(self, trigger: SequenceTrigger) -> None:
        self.steps: tuple[tuple[str, Predicate | None], ...] = tuple(
            (step.type, compile_conditions(step.conditions)) for step in trigger.pattern
        )
        # In a row unless said otherwise (the reference's default, with or
        # without ``options``).
        self.consecutive = trigger.options is None or trigger.options.consecutive
        self.uniform = all(step == trigger.pattern[0] for step in trigger.pattern)
        """Every step is the same ("three tool errors in a row"): one test per
        event decides, whatever the pattern's length."""
        self.matched: list[Observed] = []

    def _fits(self, index: int, event: Observed) -> bool:
        kind, test = self.steps[index]
        return (kind == "*" or kind == event.type) and (test is None or test(event.data))

    def see(self, event: Observed) -> list[Observed] | None:
        """Advances on an event of interest; the completed match, if any."""
        matched = self.matched
        if self.consecutive and self.uniform:
            if self._fits(0, event):
                matched.append(event)
            else:
                matched.clear()
        elif self.consecutive:
            # The last len(pattern) events of interest, each fitting its step.
            matched.append(event)
            if len(matched) > len(self.steps):
                del matched[0]
            if len(matched) < len(self.steps) or not all(
                self._fits(i, e) for i, e in enumerate(matched)
            ):
                return None
        elif self._fits(len(matched), event):
            matched.append(event)
        if len(matched) == len(self.steps):
            self.matched = []
            return matched
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
        "spec",
        "test",
        "threshold",
        "triggered",
    )

    def __init__(self, spec: SentinelSpec, buffer_limit: int, queue_limit: int) -> None:
        self.id = spec.id
        self.spec = spec
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
        self.buffer: deque[Observed] = deque(maxlen=buffer_limit)
        """Matched events waiting for the strategy to fire. A deque: when a
        busy codon keeps a debounce from ever firing, the buffer stays full
        and each new event pushes the oldest out in O(1) (a list paid a copy
        of the whole buffer per event there)."""
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
        over = len(buffer) + len(events) - self.limit
        if over > 0:
            self.buffer_dropped += min(over, len(buffer))
        buffer.extend(events)  # the deque's maxlen drops the oldest
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
        batch = list(self.buffer)
        self.buffer.clear()
        return batch

    def fire(self, events: list[Observed], now: int) -> None:
        """Queues a trigger holding ``events``."""
        self.number += 1
        self.triggered += 1
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1
        self.queue.append(Trigger(self.id, self.number, tuple(events), now))


_CODE: dict[str, CodeType] = {}
"""Compiled routing code by its source (which holds generated names only)."""
_Router = Callable[[Mapping[str, Any], int, int], int]
"""The compiled routing of one event type: ``(data, seq, now) -> triggers fired``."""


def _compile_router(engine: TriggerEngine, kind: str, routes: Sequence[SentinelRoute]) -> _Router:
    """One function that routes events of type ``kind`` to ``routes``.

    Routing is the hot path (every committed event, every sentinel), so the
    per-route decisions are unrolled into straight-line code: the conditions
    inline (:func:`~weft.sentinels.conditions.inline_condition`), each
    strategy's step written out for its mode, no loop and no dispatch. The
    source is assembled from fixed text and generated names only; every
    config value (keys, constants, limits, the routes themselves) is bound in
    the function's namespace, never written into the source.
    :meth:`TriggerEngine.feed_interpreted` makes the same decisions without
    generated code.
    """
    ns: dict[str, Any] = {
        "Observed": Observed,
        "Trigger": Trigger,
        "_NUMBER_TYPES": _NUMBER_TYPES,
        "E": engine,
        "KIND": kind,
    }
    # The event is made once, by the first route that matches; when the
    # first route takes every event (a narrator on ``*``), it is made up
    # front and no route tests for it.
    first = routes[0].spec.trigger if routes else None
    made = isinstance(first, EventTrigger) and not first.conditions
    make = ["        if ev is None:", "            ev = Observed(KIND, data, seq, now)"]
    if made:
        make = []
    ev = "Observed(KIND, data, seq, now)" if made else "None"
    lines = ["def route(data, seq, now):", "    fired = 0", f"    ev = {ev}"]
    fetched = _hoisted(kind, routes, ns, lines)
    for i, route in enumerate(routes):
        r = f"r{i}"
        ns[r] = route
        trigger = route.spec.trigger
        tests: list[str] = []
        if isinstance(trigger, EventTrigger):
            tests = [
                inline_condition(c, f"c{i}_{j}", ns, fetched)
                for j, c in enumerate(trigger.conditions)
            ]
        sequence = route.sequence
        if sequence is not None and sequence.consecutive and sequence.uniform:
            lines += _inline_run(i, kind, sequence, trigger, ns, make, fetched)
            continue
        lines.append(f"    if {' and '.join(tests) or 'True'}:")
        lines += make
        if sequence is not None:
            lines += [
                f"        done = {r}.sequence.see(ev)",
                "        if done is not None:",
                f"            if {r}.add(done, now):",
                "                fired += 1",
                "            else:",
                f"                E._lower_deadline({r})",
            ]
            continue
        if route.mode == IMMEDIATE:
            # SentinelRoute.fire written out: one trigger per event is the
            # common case (error and stuck detectors), so no call and no copy.
            ns[f"I{i}"], ns[f"Q{i}"] = route.id, route.queue.maxlen
            lines += [
                f"        q = {r}.queue",
                f"        {r}.number = n = {r}.number + 1",
                f"        {r}.triggered += 1",
                f"        if len(q) == Q{i}:",
                f"            {r}.dropped += 1",
                f"        q.append(Trigger(I{i}, n, (ev,), now))",
                "        fired += 1",
            ]
            continue
        ns[f"L{i}"] = route.limit
        lines += [
            f"        b = {r}.buffer",
            f"        if len(b) == L{i}:",
            f"            {r}.buffer_dropped += 1",
            "        b.append(ev)",
        ]
        if route.mode == COUNT:
            ns[f"N{i}"] = route.threshold
            lines += [
                f"        if len(b) >= N{i}:",
                f"            {r}.fire({r}.take(), now)",
                "            fired += 1",
            ]
            continue
        ns[f"P{i}"] = route.period
        if route.mode == DEBOUNCE:
            lines += [f"        {r}.last = now", f"        d = now + P{i}"]
        else:
            lines += [
                "        if len(b) == 1:",
                f"            {r}.opened = now",
                f"        d = {r}.opened + P{i}",
            ]
        lines += [
            "        if E._deadline is None or d < E._deadline:",
            "            E._deadline = d",
        ]
    lines.append("    return fired")
    # exec: see the docstring; the source holds no text from the config, so
    # the same shapes of routes (the same sentinels on the next codon) share
    # one compiled code object, bound to this engine's routes by ``ns``.
    source = "\n".join(lines)
    code = _CODE.get(source)
    if code is None:
        code = compile(source, f"<sentinel routes for {len(routes)} sentinels>", "exec")
        if len(_CODE) < _TYPE_CACHE_LIMIT:
            _CODE[source] = code
    exec(code, ns)
    router: _Router = ns["route"]
    return router


def _hoisted(
    kind: str, routes: Sequence[SentinelRoute], ns: dict[str, Any], lines: list[str]
) -> dict[str, str]:
    """Reads once, at the top of the router, each top-level field that the
    conditions of two or more routes test (``action`` for a narrator, a
    thinking analyzer and a tool counter); returns field -> local name."""
    counts: dict[str, int] = {}
    for route in routes:
        trigger = route.spec.trigger
        conditions: Sequence[Any] = ()
        if isinstance(trigger, EventTrigger):
            conditions = trigger.conditions
        elif (
            isinstance(trigger, SequenceTrigger)
            and route.sequence is not None
            and route.sequence.consecutive
            and route.sequence.uniform
        ):
            conditions = trigger.pattern[0].conditions  # inlined by _inline_run
        for key in {c.path for c in conditions if "." not in c.path}:
            counts[key] = counts.get(key, 0) + 1
    fetched: dict[str, str] = {}
    for key, count in counts.items():
        if count > 1:
            n = len(fetched)
            ns[f"H{n}"] = key
            fetched[key] = f"h{n}"
            lines.append(f"    h{n} = data.get(H{n})")
    return fetched


def _inline_run(
    i: int,
    kind: str,
    sequence: _Sequence,
    trigger: SentinelTrigger,
    ns: dict[str, Any],
    make: list[str],
    fetched: dict[str, str],
) -> list[str]:
    """:meth:`_Sequence.see` of a consecutive pattern of one repeated step
    ("three tool errors in a row"), written out for events of type ``kind``:
    the step's type is decided here, once, and its conditions inline, so an
    event that breaks the run costs one test and no allocation."""
    assert isinstance(trigger, SequenceTrigger)
    r = f"r{i}"
    step = trigger.pattern[0]
    ns[f"S{i}"] = sequence
    ns[f"N{i}"] = len(sequence.steps)
    lines = [f"    m = S{i}.matched"]
    if step.type not in ("*", kind):
        return [*lines, "    m.clear()"]
    tests = [inline_condition(c, f"c{i}_s{j}", ns, fetched) for j, c in enumerate(step.conditions)]
    return [
        *lines,
        f"    if {' and '.join(tests) or 'True'}:",
        *make,
        "        m.append(ev)",
        f"        if len(m) == N{i}:",
        f"            S{i}.matched = []",
        f"            if {r}.add(m, now):",
        "                fired += 1",
        "            else:",
        f"                E._lower_deadline({r})",
        "    else:",
        "        m.clear()",
    ]


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
        self._cache: dict[str, _Router | None] = {}
        """The compiled router of each event type seen (``None``: nobody watches it)."""
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
        return (*self._by_type.get(kind, ()), *self._wild)

    def _router(self, kind: str) -> _Router | None:
        routes = self._routes(kind)
        router = _compile_router(self, kind, routes) if routes else None
        if len(self._cache) < _TYPE_CACHE_LIMIT:
            self._cache[kind] = router
        return router

    def watches(self, kind: str) -> bool:
        """Whether some sentinel looks at events of type ``kind`` (one dictionary
        lookup once the type was seen): an adapter skips decoding the others."""
        try:
            router = self._cache[kind]
        except KeyError:
            router = self._router(kind)
        return router is not None

    def feed(self, kind: str, data: Mapping[str, Any], seq: int, now: int) -> int:
        """Routes one committed event at ``now``; returns the triggers it queued
        (timers that came due first included)."""
        fired = 0
        if self._deadline is not None and now >= self._deadline:
            fired = self.tick(now)
        try:
            router = self._cache[kind]
        except KeyError:
            router = self._router(kind)
        if router is None:
            return fired
        return fired + router(data, seq, now)

    def feed_interpreted(self, kind: str, data: Mapping[str, Any], seq: int, now: int) -> int:
        """:meth:`feed` without the compiled routers: the same decisions, made
        route by route. The property tests hold the two to the same triggers."""
        fired = 0
        if self._deadline is not None and now >= self._deadline:
            fired = self.tick(now)
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
            if route.add((event,), now):
                fired += 1
            elif route.mode >= DEBOUNCE:
                self._lower_deadline(route)
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

    @property
    def earliest(self) -> int | None:
        """No timer fires before this (a lower bound, free to read; ``None``:
        no timer is set). :meth:`next_deadline` is the exact time."""
        return self._deadline

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
