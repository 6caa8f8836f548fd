"""``budget.summary`` stays bounded however long the run (issue 20's 16 KB per
event); a continued run's ledger is rebuilt from the state and the journal of
the earlier runs, as those runs counted it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from tests.budget.test_ledger import codon, hank, ledger

from weft.budget import Slot
from weft.budget.report import (
    MAX_SUMMARY_ROWS,
    _bounded,
    earlier_spend,
    journal_spend,
    restore_from_state,
    summary_event,
)
from weft.events.stream import (
    BudgetRow,
    BudgetSummaryEvent,
    SentinelOutput,
    SentinelTokens,
    SentinelUnloaded,
    StreamData,
    TokenUsageEvent,
)
from weft.state import encode_stream
from weft.store.journal import JournalEvent


def row(i: int, **fields: object) -> BudgetRow:
    base: dict[str, object] = {
        "codon_id": f"write#{i}",
        "loop_id": "refine",
        "status": "completed",
        "dollars": 0.0123,
        "time_seconds": 1.5,
        "output_tokens": 120,
    }
    base.update(fields)
    return BudgetRow(**base)  # type: ignore[arg-type]


def test_a_short_run_keeps_every_row() -> None:
    rows = [row(i) for i in range(10)]
    assert _bounded(rows) == rows


def test_a_long_run_keeps_the_rows_a_reader_needs_then_the_latest() -> None:
    rows = [row(i) for i in range(10_000)]
    rows[3] = row(3, budget={"maxDollars": 0.5})
    rows[40] = row(40, status="exceeded")
    rows[500] = row(500, dollars=None)
    kept = _bounded(rows)
    assert len(kept) == MAX_SUMMARY_ROWS
    ids = [r.codon_id for r in kept]
    assert ids[:3] == ["write#3", "write#40", "write#500"]
    assert ids[-1] == "write#9999"
    assert ids == sorted(ids, key=lambda s: int(s.split("#")[1]))  # run order
    event = BudgetSummaryEvent(
        rows=kept,
        omitted_rows=len(rows) - len(kept),
        actual_dollars=123.0,
        actual_time_seconds=3600.0,
        ceiling={"maxDollars": 200.0},
    )
    assert len(msgspec.json.encode(event)) < 16 * 1024


# --------------------------------------------------------------------------- a continued run

RUN_1, RUN_2 = "1795827255210-5q1mt", "1795827256089-26ye9"
B = Slot("b", "b")


def record(codon_id: str, cost: float, second: int, **fields: Any) -> dict[str, Any]:
    """A finished codon record of state.json, started ``second`` seconds in."""
    return {
        "codonId": codon_id,
        "status": "completed",
        "startTime": f"2026-11-28T00:54:{second:02d}.000Z",
        "endTime": f"2026-11-28T00:54:{second:02d}.500Z",
        "finalCost": cost,
        "finalTokens": {"inputTokens": 6, "outputTokens": 58, "cacheCreationTokens": 4719},
        **fields,
    }


def state(*runs: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A state.json document: its runs newest first, as the core writes them."""
    return {
        "runs": [
            {
                "runId": run_id,
                "status": "failed",
                "startTime": codons[0]["startTime"],
                "endTime": codons[-1]["endTime"],
                "codons": codons,
            }
            for run_id, codons in runs
        ]
    }


def sentinels(total: float) -> dict[str, Any]:
    return {"executed": [{"id": "watch", "totalCost": total}], "totalCost": total}


def _payload(event: StreamData) -> str:
    return encode_stream(event).decode()


class Journal:
    """The journal query :func:`journal_spend` makes, over events journaled as
    the store journals them (the same bytes)."""

    def __init__(self, *events: tuple[str, str, StreamData]) -> None:
        self.rows = [
            JournalEvent(seq, f"e{seq}", "", "stream", e.TYPE, run_id, codon_id, _payload(e))
            for seq, (run_id, codon_id, e) in enumerate(events, 1)
        ]

    def of_types(self, types: Sequence[str]) -> list[JournalEvent]:
        return [row for row in self.rows if row.type in types]


def usage(cost: float | None, *, final: bool = False) -> TokenUsageEvent:
    return TokenUsageEvent(
        codon_id="a", input_tokens=3979, output_tokens=32, cache_creation_tokens=0,
        cache_read_tokens=1628, total_cost=cost, final=final,
    )  # fmt: skip


def output(cost: float) -> SentinelOutput:
    return SentinelOutput(
        sentinel_id="watch", codon_id="a", trigger_number=1, output_type="text",
        content="ok", cost=cost, tokens=SentinelTokens(input=5, output=14), event_count=1,
    )  # fmt: skip


def test_a_continued_run_counts_the_sentinel_spend_of_earlier_runs() -> None:
    # Run 1: a cost $0.0245209, its sentinel $0.000525: $0.0250459 of a $0.0248 cap.
    earlier = state((RUN_1, [record("a", 0.0245209, 15, sentinels=sentinels(0.000525))]))
    lg = ledger(hank(codon("a"), codon("b")), dollars=0.0248)
    restore_from_state(lg, earlier)
    assert lg.spent_nanos == 25_045_900
    verdict = lg.check_run_left(B)  # the same ceiling: nothing more starts
    assert verdict is not None
    assert verdict.used == pytest.approx(0.0250459)


def test_the_journal_adds_the_sentinel_calls_made_after_a_codon_was_sealed() -> None:
    # The record was sealed after two calls; the second drain made a third, and
    # the unload's final cost adds a call no output reported.
    earlier = state((RUN_1, [record("a", 0.01, 15, sentinels=sentinels(0.00015))]))
    journal = Journal(
        (RUN_1, "a", output(0.000075)),
        (RUN_1, "a", output(0.000075)),
        (RUN_1, "a", output(0.000075)),
        (RUN_1, "a", SentinelUnloaded(
            sentinel_id="watch", codon_id="a", reason="codon-complete", final_cost=0.0003,
            llm_call_count=4,
        )),
    )  # fmt: skip
    lg = ledger(hank(codon("a"), codon("b")))
    restore_from_state(lg, earlier, journal_spend(journal))
    assert lg.spent_nanos == 10_300_000
    # Without the journal, the record's own figure.
    lg = ledger(hank(codon("a"), codon("b")))
    restore_from_state(lg, earlier)
    assert lg.spent_nanos == 10_150_000


def test_a_continued_run_rolls_over_what_a_finished_child_left() -> None:
    # Proportional $0.10 over a and b ($0.05 each): a spent $0.0005 in run 1,
    # which was stopped before b; b may spend its share and what a left.
    budget = {"maxDollars": 0.1, "allocation": "proportional"}
    lg = ledger(hank(codon("a"), codon("b"), budget=budget), dollars=0.1)
    restore_from_state(lg, state((RUN_1, [record("a", 0.0005, 15)])))
    lg.begin(B)
    assert lg.add(0.0536) is None
    verdict = lg.add(0.046)
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id) == ("share", "b")
    assert verdict.limit == pytest.approx(0.0995)


def test_earlier_attempts_are_restored_in_the_order_they_began() -> None:
    # Runs newest first: run 2 continued run 1 after a rollback to before b.
    first = [record("a", 0.01, 10), record("b", 0.01, 11), record("c", 0.01, 12)]
    second = [record("b", 0.01, 20)]
    restored = earlier_spend(state((RUN_2, second), (RUN_1, first)))
    assert [s.slot.codon_id for s in restored] == ["a", "b", "c", "b"]


def test_an_earlier_unpriced_attempt_stays_unpriced_when_continued() -> None:
    # state.json keeps an unpriced codon's cost as 0.0; the journal says it had no price.
    earlier = state((RUN_1, [record("a", 0.0, 15), record("b", 0.0133512, 16)]))
    journal = Journal(
        (RUN_1, "a", usage(None)),
        (RUN_1, "b", usage(0.0133512)),
        (RUN_1, "b", usage(0.0133512, final=True)),
    )
    lg = ledger(hank(codon("a"), codon("b"), codon("c")), dollars=1.0)
    restore_from_state(lg, earlier, journal_spend(journal))
    summary = summary_event(lg)
    assert summary.unpriced_codons == 1  # the totals are a lower bound
    assert summary.actual_dollars == pytest.approx(0.0133512)


def test_an_unpriced_codons_attempt_that_used_nothing_spent_nothing() -> None:
    failed = record("a", 0.0, 16, status="failed", finalTokens={"inputTokens": 0})
    earlier = state((RUN_1, [record("a", 0.0, 15), failed]))
    lg = ledger(hank(codon("a"), codon("b")))
    restore_from_state(lg, earlier, journal_spend(Journal((RUN_1, "a", usage(None)))))
    assert lg.unpriced == 1
