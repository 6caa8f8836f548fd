"""Circuit breakers per agent provider in ``weft run`` (seed 004).

:class:`ProviderBreakers` keeps one seed-004 machine per provider
(``anthropic``, ``openai``, ``google``) for every codon of an execution,
through :class:`weft.batch.breakers.Breakers` (the same keyed machines
``weft batch`` uses, so a batch runner can hand one object to several
executions). The codon runner asks it:

* :meth:`ProviderBreakers.gate` before each agent session: while the
  provider's breaker is open the codon waits out the cool-down (journaled
  ``breaker.waiting`` with the time left) instead of failing; after it, one
  probe session goes;
* :meth:`ProviderBreakers.record` after each session: a transient provider
  failure (rate limit, overload, 5xx) counts toward opening it; any other end
  means the provider answered. State changes are journaled
  (``breaker.changed``).

:meth:`ProviderBreakers.reset` closes a breaker (the seed's Recovery 3, the
``breaker.reset`` command) and wakes the codons waiting on it. The clock and
the sleep are injected, so tests never wait real cool-downs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

from weft.agents.events import ErrorClass, SessionExited
from weft.batch.breakers import Breakers, monotonic_ms
from weft.batch.file import BreakerSpec
from weft.config.runtime import RuntimeBreakerSettings
from weft.events.stream import BreakerChangedEvent, BreakerWaitingEvent, StreamData
from weft.runtime.codon.sessions import Sleep, is_transient

__all__ = ["PROVIDERS", "Emit", "ProviderBreakers", "is_provider_failure", "provider_of"]

PROVIDERS: dict[str, str] = {"claude": "anthropic", "codex": "openai", "gemini": "google"}
"""The provider behind each harness (fake agents stand for the same ones)."""

Emit: TypeAlias = Callable[[StreamData, str | None], object]
"""Journals a stream event for a codon (``codon_id``)."""

State = Literal["closed", "open", "half_open"]

_PROVIDER_CLASSES = frozenset({ErrorClass.RATE_LIMIT, ErrorClass.OVERLOADED, ErrorClass.API_ERROR})


def provider_of(harness: str) -> str:
    """The provider a harness calls (the harness's own name when unknown)."""
    return PROVIDERS.get(harness, harness)


def is_provider_failure(exit: SessionExited) -> bool:
    """Whether the session ended on a transient failure of the provider's API
    (429, 529, 5xx, overloaded), the failures that open its breaker."""
    return is_transient(exit) and exit.error_class in _PROVIDER_CLASSES


_STATES: dict[str, State] = {"CLOSED": "closed", "OPEN": "open", "HALF_OPEN": "half_open"}
"""The core's state codes as the events spell them."""


class ProviderBreakers:
    """One circuit breaker per agent provider, shared by the codons of a run."""

    def __init__(
        self,
        settings: RuntimeBreakerSettings | None = None,
        *,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.settings = settings or RuntimeBreakerSettings()
        spec = BreakerSpec(
            failure_threshold=self.settings.failure_threshold,
            cooldown_seconds=self.settings.cooldown_ms / 1000,
            success_threshold=self.settings.success_threshold,
        )
        self.breakers = Breakers({"*": spec}, clock=clock)
        self._resets: dict[str, asyncio.Event] = {}
        self.emit: Emit | None = None
        """Where state changes are journaled (the running codon runner's stream)."""

    def state(self, provider: str) -> State:
        """``closed``, ``open`` or ``half_open``."""
        state: State = _STATES[self.breakers.code(provider)]
        return state

    def _changed(
        self, provider: str, before: State, reason: str, codon_id: str | None, emit: Emit | None
    ) -> None:
        after = self.state(provider)
        if after == before or (emit := emit or self.emit) is None:
            return
        s = self.breakers.state(provider)
        emit(
            BreakerChangedEvent(
                provider=provider,
                state=after,
                previous=before,
                reason=reason,  # type: ignore[arg-type]
                consecutive_failures=s.consecutive_failures,
                failure_threshold=self.settings.failure_threshold,
                cooldown_ms=self.settings.cooldown_ms,
                codon_id=codon_id,
            ),
            codon_id,
        )

    async def gate(
        self, provider: str, codon_id: str, emit: Emit, sleep: Sleep, woken: asyncio.Event
    ) -> bool:
        """Waits until ``provider`` may take a session for ``codon_id``: at
        once when closed, after the cool-down when open (then as the probe).
        False when ``woken`` (an operator interrupt) cut the wait short."""
        while True:
            before = self.state(provider)
            decision = self.breakers.allow(provider)
            if decision.allowed:
                self._changed(provider, before, "probe", codon_id, emit)
                return True
            emit(
                BreakerWaitingEvent(
                    provider=provider,
                    codon_id=codon_id,
                    retry_in_ms=decision.retry_in_ms,
                    message=decision.message,
                ),
                codon_id,
            )
            reset = self._resets.setdefault(provider, asyncio.Event())
            if not await _wait(decision.retry_in_ms / 1000, sleep, woken, reset):
                return False
            reset.clear()

    def record(self, provider: str, exit: SessionExited | None, codon_id: str, emit: Emit) -> None:
        """Reports how a session that :meth:`gate` let through ended (None:
        it never started, which tells nothing about the provider)."""
        if exit is None:
            return
        before = self.state(provider)
        failed = is_provider_failure(exit)
        self.breakers.record(provider, success=not failed)
        self._changed(provider, before, "failure" if failed else "success", codon_id, emit)

    def reset(self, provider: str, emit: Emit | None = None) -> State:
        """Closes ``provider``'s breaker (seed 004 Recovery 3) and lets the
        codons waiting on it go; the state it had."""
        before = self.state(provider)
        self.breakers.reset(provider)
        self._changed(provider, before, "reset", None, emit)
        event = self._resets.get(provider)
        if event is not None:
            event.set()
        return before


async def _wait(seconds: float, sleep: Sleep, *events: asyncio.Event) -> bool:
    """Sleeps ``seconds``; False when ``events[0]`` (an interrupt) ended it,
    True when the time passed or another event (a reset) ended it."""
    if events[0].is_set():
        return False
    tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(sleep(seconds))]
    tasks += [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    return not events[0].is_set()
