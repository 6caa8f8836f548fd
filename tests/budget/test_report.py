"""``budget.summary`` stays bounded however long the run (issue 20's 16 KB per event)."""

from __future__ import annotations

import msgspec

from weft.budget.report import MAX_SUMMARY_ROWS, _bounded
from weft.events.stream import BudgetRow, BudgetSummaryEvent


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
