"""A small reference model of sentinel triggering, for differential tests.

Written to be obviously right rather than fast: every sentinel keeps the whole
history it has matched and re-derives its state from it on every step. The
trigger engine (:mod:`weft.sentinels.triggers`) must fire the same triggers,
with the same events, at the same times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weft.config.schema import (
    Condition,
    CountExecution,
    DebounceExecution,
    EventTrigger,
    ImmediateExecution,
    SequenceTrigger,
    TimeWindowExecution,
)
from weft.sentinels.triggers import SentinelSpec

Fired = tuple[str, tuple[int, ...], int]
"""(sentinel id, seqs of the trigger's events, time fired)."""


def holds(condition: Condition, data: dict[str, Any]) -> bool:
    """One condition, by the JavaScript rules, written out longhand."""
    value: Any = data
    found = True
    for part in condition.path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            found = False
            break

    def same(a: Any, b: Any) -> bool:
        if type(a) is bool or type(b) is bool:
            return type(a) is type(b) and a == b
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a == b
        if isinstance(a, str) and isinstance(b, str):
            return a == b
        return a is None and b is None

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and type(v) is not bool

    op, want = condition.operator, condition.value
    if op == "equals":
        return found and same(value, want)
    if op == "notEquals":
        return not (found and same(value, want))
    wants = want if isinstance(want, list) else [want]
    if op == "in":
        return found and any(same(value, w) for w in wants)
    if op == "notIn":
        return not (found and any(same(value, w) for w in wants))
    if not found:
        return False
    if op == "contains":
        if isinstance(value, str):
            return isinstance(want, str) and want in value
        return isinstance(value, list) and any(same(v, want) for v in value)
    if op == "greaterThan":
        return number(value) and number(want) and value > want
    if op == "lessThan":
        return number(value) and number(want) and value < want
    raise AssertionError(op)


@dataclass
class _Model:
    spec: SentinelSpec
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    """Events of interest since the last completed sequence."""
    buffer: list[tuple[int, int]] = field(default_factory=list)
    """(seq, time) of matched events not yet fired."""

    def due(self, now: int) -> bool:
        ex = self.spec.execution
        if not self.buffer:
            return False
        if isinstance(ex, DebounceExecution):
            return now >= self.buffer[-1][1] + ex.milliseconds
        if isinstance(ex, TimeWindowExecution):
            return now >= self.buffer[0][1] + ex.milliseconds
        return False

    def matches(self, seq: int, kind: str, data: dict[str, Any]) -> list[int]:
        trig = self.spec.trigger
        if isinstance(trig, EventTrigger):
            ok = ("*" in trig.on or kind in trig.on) and all(
                holds(c, data) for c in trig.conditions
            )
            return [seq] if ok else []
        assert isinstance(trig, SequenceTrigger)
        if "*" not in trig.interest_filter.on and kind not in trig.interest_filter.on:
            return []
        self.history.append((seq, kind, data))

        def fits(step: int, ev: tuple[int, str, dict[str, Any]]) -> bool:
            s = trig.pattern[step]
            return s.type in ("*", ev[1]) and all(holds(c, ev[2]) for c in s.conditions)

        n = len(trig.pattern)
        if trig.options is None or trig.options.consecutive:
            tail = self.history[-n:]
            if len(tail) == n and all(fits(i, e) for i, e in enumerate(tail)):
                self.history = []
                return [e[0] for e in tail]
            return []
        picked: list[int] = []
        for ev in self.history:  # the earliest subsequence, searched from scratch
            if len(picked) < n and fits(len(picked), ev):
                picked.append(ev[0])
        if len(picked) == n:
            self.history = []
            return picked
        return []


def run_reference(
    specs: list[SentinelSpec], ops: list[tuple[Any, ...]], buffer_limit: int
) -> list[Fired]:
    """Every trigger fired for ``ops``: ``("event", kind, data, seq, now)``,
    ``("tick", now)`` or ``("flush", now)``."""
    models = [_Model(s) for s in specs]
    fired: list[Fired] = []

    def fire(m: _Model, now: int) -> None:
        fired.append((m.spec.id, tuple(s for s, _ in m.buffer[-buffer_limit:]), now))
        m.buffer = []

    for op in ops:
        now = op[-1]
        for m in models:
            if m.due(now):
                fire(m, now)
        if op[0] == "flush":
            for m in models:
                if m.buffer:
                    fire(m, now)
            continue
        if op[0] != "event":
            continue
        _, kind, data, seq, _ = op
        for m in models:
            got = m.matches(seq, kind, data)
            if not got:
                continue
            ex = m.spec.execution
            if isinstance(ex, TimeWindowExecution) and not m.buffer:
                pass  # the window opens at this event's time (buffer[0])
            m.buffer.extend((s, now) for s in got)
            if isinstance(ex, ImmediateExecution) or (
                isinstance(ex, CountExecution) and len(m.buffer) >= ex.threshold
            ):
                fire(m, now)
    return fired
