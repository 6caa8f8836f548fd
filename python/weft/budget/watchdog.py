"""The watchdog: the ledger beside a running codon, stopping it the moment a
budget is crossed.

It is the only part of the budget package that touches asyncio. The runner
tells it when an attempt begins and ends and feeds it the agent's usage as
the events arrive (live estimates, per message, then the agent's own total),
so a dollar or token cap (a run's or a loop's ``maxTokens`` counts every
token, input and cache ones included) trips on the message that crosses it, not at the
codon's end; a timer ticks once a second for the time limits (the
reference's period). On a crossing it emits ``budget.exceeded`` once and asks
the runner to stop the attempt; the runner then ends the codon as the
budget's ``onExceeded`` says (:attr:`Watchdog.verdict`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import msgspec

from weft.agents.events import Tokens
from weft.budget.ledger import Ledger, Slot, Verdict
from weft.budget.report import exceeded_event, summary_event
from weft.events.stream import BudgetSummaryEvent, StreamData

__all__ = ["TICK_SECONDS", "Watchdog"]

TICK_SECONDS = 1.0
"""How often time limits are checked while a codon runs (the reference's period)."""

Emit = Callable[[StreamData, str | None, str | None], None]
Stop = Callable[[Verdict], Awaitable[object]]


class Watchdog:
    """Watches one attempt at a time against ``ledger``."""

    def __init__(self, ledger: Ledger, emit: Emit, *, tick: float = TICK_SECONDS) -> None:
        self.ledger = ledger
        self._emit = emit
        self._tick = tick
        self._stop: Stop | None = None
        self._run_id: str | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[object] | None = None
        self.verdict: Verdict | None = None
        """The budget the current (or last) attempt crossed, if any."""
        self._timed = self._has_time_limits()

    def _has_time_limits(self) -> bool:
        book = self.ledger.book
        return (
            book.run.caps.seconds is not None
            or any(c.caps.seconds is not None for c in book.loops.values())
            or any(c.caps.seconds is not None for c in book.codons.values())
        )

    # -- the attempt ------------------------------------------------------------

    def preflight(self, slot: Slot, run_id: str) -> Verdict | None:
        """Whether the run's own ceiling is used up before ``slot`` starts."""
        ledger = self.ledger
        verdict = ledger.check_run_left(slot) if ledger.book.run.caps.any else None
        if verdict is not None:
            ledger.note(verdict)
            event = exceeded_event(verdict)
            message = f"{event.message}; {slot.codon_id} is not started"
            # No codon runs: the event is the run's, not the codon's.
            self._emit(msgspec.structs.replace(event, codon_id=None, message=message), run_id, None)
        return verdict

    def begin(self, slot: Slot, run_id: str, stop: Stop) -> Verdict | None:
        """An attempt starts; returns a verdict when it must not run (it is
        also tripped: the event is emitted and ``stop`` will be asked)."""
        self._run_id, self._stop = run_id, stop
        self.verdict = None
        verdict = self.ledger.begin(slot)
        if verdict is not None:
            self._trip(verdict, schedule=False)
            return verdict
        if self._timed:
            self._ticker = asyncio.get_running_loop().create_task(self._watch_time())
        return None

    def usage(self, cost: float | None, tokens: Tokens) -> None:
        """One message's usage (the live estimate)."""
        context = tokens.input + tokens.cache_creation + tokens.cache_read
        verdict = self.ledger.add(cost, tokens.output, context, tokens.total)
        if verdict is not None:
            self._trip(verdict)

    def total(self, cost: float, tokens: Tokens) -> None:
        """The agent's own total for the attempt: every session so far, not
        the last one's (:meth:`Ledger.set_total`)."""
        verdict = self.ledger.set_total(cost, tokens.output, tokens.total)
        if verdict is not None:
            self._trip(verdict)

    def sentinel_spend(self, codon_id: str | None, cost: float) -> None:
        """Money a sentinel of ``codon_id`` spent (counted against the loop and the run)."""
        verdict = self.ledger.add_sentinel(codon_id, cost)
        if verdict is not None:
            self._trip(verdict)

    async def end(self, status: str) -> Verdict | None:
        """The attempt ended as ``status``; returns the budget it crossed, if any."""
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        self.ledger.end(status)
        self._stop = None
        self._stopping = None
        return self.verdict

    def summary(self) -> BudgetSummaryEvent:
        """The ``budget.summary`` of the run so far."""
        return summary_event(self.ledger)

    # -- tripping ---------------------------------------------------------------

    def _trip(self, verdict: Verdict, *, schedule: bool = True) -> None:
        if self.verdict is not None:
            return  # one crossing per attempt: the stop is already on its way
        self.verdict = verdict
        self.ledger.note(verdict)
        self._emit(exceeded_event(verdict), self._run_id, verdict.codon_id)
        stop = self._stop
        if schedule and stop is not None:
            self._stopping = asyncio.get_running_loop().create_task(_call(stop, verdict))

    async def _watch_time(self) -> None:
        while self.verdict is None:
            await asyncio.sleep(self._tick)
            verdict = self.ledger.check()
            if verdict is not None:
                self._trip(verdict)


async def _call(stop: Stop, verdict: Verdict) -> object:
    return await stop(verdict)
