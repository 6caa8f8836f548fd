"""The watchdog: one ``budget.exceeded`` and one stop per crossing, the time
limits on its tick, nothing scheduled when no budget is crossed."""

from __future__ import annotations

import asyncio

from tests.budget.test_ledger import Clock, codon, hank, ledger

from weft.agents.events import Tokens
from weft.budget import Slot, Verdict, Watchdog
from weft.events.stream import BudgetExceededEvent, BudgetSummaryEvent, StreamData

A = Slot("a", "a")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[StreamData, str | None, str | None]] = []
        self.stops: list[Verdict] = []

    def emit(self, event: StreamData, run_id: str | None, codon_id: str | None) -> None:
        self.events.append((event, run_id, codon_id))

    async def stop(self, verdict: Verdict) -> None:
        self.stops.append(verdict)


async def test_a_crossing_emits_once_and_stops_once() -> None:
    rec = Recorder()
    dog = Watchdog(ledger(hank(codon("a", maxDollars=0.1))), rec.emit)
    assert dog.begin(A, "run-1", rec.stop) is None
    dog.usage(0.06, Tokens(output=5))
    assert rec.events == []
    dog.usage(0.06, Tokens(output=5))
    dog.usage(0.06, Tokens(output=5))  # a message in flight: no second event or stop
    await asyncio.sleep(0)
    assert len(rec.stops) == 1
    ((event, run_id, codon_id),) = rec.events
    assert isinstance(event, BudgetExceededEvent)
    assert (run_id, codon_id, event.scope, event.limit_kind) == ("run-1", "a", "codon", "dollars")
    verdict = await dog.end("completed")
    assert verdict is rec.stops[0]
    assert dog.ledger.spent == 0.18  # what came after the stop was spent too


async def test_a_time_cap_trips_on_the_tick() -> None:
    rec = Recorder()
    clock = Clock()
    dog = Watchdog(ledger(hank(codon("a", maxTimeSeconds=2)), clock), rec.emit, tick=0.01)
    dog.begin(A, "run-1", rec.stop)
    await asyncio.sleep(0.05)
    assert rec.stops == []
    clock.now += 2
    for _ in range(100):
        await asyncio.sleep(0.01)
        if rec.stops:
            break
    assert [v.kind for v in rec.stops] == ["timeSeconds"]
    await dog.end("completed")


async def test_no_budget_no_ticker_and_a_summary_of_the_spend() -> None:
    rec = Recorder()
    dog = Watchdog(ledger(hank(codon("a"))), rec.emit)
    dog.begin(A, "run-1", rec.stop)
    assert dog._ticker is None
    dog.usage(None, Tokens(input=10, output=5))  # an unpriced model
    dog.usage(0.25, Tokens(output=5))
    await dog.end("completed")
    summary = dog.summary()
    assert isinstance(summary, BudgetSummaryEvent)
    assert summary.actual_dollars == 0.25
    assert summary.unpriced_codons == 1
    assert summary.ceiling == {}
    assert rec.events == []
    assert rec.stops == []


async def test_a_used_up_run_is_refused_before_the_codon_starts() -> None:
    rec = Recorder()
    lg = ledger(hank(codon("a")), dollars=0.1)
    lg.restore([], 0.0)
    lg.begin(A)
    lg.add(0.2)
    lg.end("completed")
    dog = Watchdog(lg, rec.emit)
    verdict = dog.preflight(A, "run-2")
    assert verdict is not None
    ((event, run_id, codon_id),) = rec.events
    assert isinstance(event, BudgetExceededEvent)
    assert (run_id, codon_id) == ("run-2", None)
    assert event.message.endswith("a is not started")


async def test_sentinel_spending_counts_against_the_run_as_it_is_told() -> None:
    """Each model call's cost comes from the sentinel host as it is known
    (whatever the sentinel reports), and can cross the run's ceiling."""
    rec = Recorder()
    dog = Watchdog(ledger(hank(codon("a")), dollars=1.0), rec.emit)
    dog.begin(A, "run-1", rec.stop)
    for cost in (0.25, 0.25, 0.25):
        dog.sentinel_spend("a", cost)
    assert dog.ledger.spent == 0.75
    assert rec.stops == []
    dog.sentinel_spend("a", 0.3)
    await asyncio.sleep(0)
    assert [v.scope for v in rec.stops] == ["run"]
    await dog.end("completed")
