"""Circuit breakers keyed by tool or provider, with an injected clock.

A thin, general face over :class:`weft.core.CircuitBreaker` (the seed-004
machine in the Rust core) for any caller that guards calls to several tools
or providers: ``weft batch`` guards step launches per tool with the same
machines; the steering and sentinel paths can guard agent providers or model
APIs with this class. The machine decides; this class only keys them, reads
the clock and words the seed's message::

    breakers = Breakers({"anthropic": BreakerSpec(failure_threshold=3)})
    decision = breakers.allow("anthropic")
    if not decision.allowed:
        print(decision.message)   # anthropic circuit is open, retry in 58 seconds
    ...
    breakers.record("anthropic", success=False)

Every key not configured gets the ``"*"`` entry's tuning, else the seed's
(5 failures, 60 s, 1 success). :meth:`Breakers.states` shows every breaker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from weft.batch.file import BreakerSpec
from weft.core import CircuitBreaker, circuit_open_message

__all__ = ["BreakerState", "Breakers", "Decision", "monotonic_ms"]


def monotonic_ms() -> int:
    """The default clock: a monotonic clock in milliseconds."""
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class Decision:
    """Whether a request may go now; if not, how long to wait and the seed's words."""

    key: str
    allowed: bool
    retry_in_ms: int = 0

    @property
    def message(self) -> str:
        """``"<key> circuit is open, retry in 58 seconds"`` (empty when allowed)."""
        return "" if self.allowed else f"{self.key} {circuit_open_message(self.retry_in_ms)}"


@dataclass(frozen=True)
class BreakerState:
    """One breaker as it is now."""

    key: str
    state: str
    consecutive_failures: int
    half_open_successes: int
    opened_at_ms: int | None
    probe_in_flight: bool


class Breakers:
    """One circuit breaker per key, made on first use."""

    def __init__(
        self,
        specs: Mapping[str, BreakerSpec] | None = None,
        *,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._specs = dict(specs or {})
        self._clock = clock
        self._machines: dict[str, CircuitBreaker] = {}

    def _machine(self, key: str) -> CircuitBreaker:
        machine = self._machines.get(key)
        if machine is None:
            spec = self._specs.get(key) or self._specs.get("*") or BreakerSpec()
            machine = CircuitBreaker(
                failure_threshold=spec.failure_threshold,
                cooldown_ms=int(spec.cooldown_seconds * 1000),
                success_threshold=spec.success_threshold,
            )
            self._machines[key] = machine
        return machine

    def allow(self, key: str) -> Decision:
        """Asks before a request to ``key``. An allowed request must be reported
        with :meth:`record` (after the cool-down it is the single test request)."""
        wait = self._machine(key).allow_request(self._clock())
        return Decision(key, allowed=wait is None, retry_in_ms=wait or 0)

    def record(self, key: str, *, success: bool) -> None:
        """Reports how an allowed request to ``key`` ended."""
        machine = self._machine(key)
        if success:
            machine.record_success(self._clock())
        else:
            machine.record_failure(self._clock())

    def reset(self, key: str) -> None:
        """Closes ``key``'s breaker (the seed's Recovery 3)."""
        self._machine(key).reset()

    def code(self, key: str) -> str:
        """``key``'s breaker's state code now (``CLOSED``, ``OPEN``, ``HALF_OPEN``):
        :meth:`state` without the rest, for a check made at every codon."""
        return self._machine(key).state

    def state(self, key: str) -> BreakerState:
        """``key``'s breaker now."""
        m = self._machine(key)
        return BreakerState(
            key=key,
            state=m.state,
            consecutive_failures=m.consecutive_failures,
            half_open_successes=m.half_open_successes,
            opened_at_ms=m.opened_at_ms,
            probe_in_flight=m.probe_in_flight,
        )

    def states(self) -> list[BreakerState]:
        """Every breaker used so far, by key."""
        return [self.state(key) for key in sorted(self._machines)]
