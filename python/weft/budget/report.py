"""The ledger in the run's events: ``budget.exceeded`` and ``budget.summary``,
and the ledger rebuilt from the state of earlier runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import Any

from weft.budget.ledger import EarlierSpend, Ledger, Slot, Verdict
from weft.events.stream import BudgetExceededEvent, BudgetRow, BudgetSummaryEvent
from weft.progress import NANO

__all__ = ["earlier_spend", "exceeded_event", "restore_from_state", "summary_event"]


def exceeded_event(verdict: Verdict) -> BudgetExceededEvent:
    """The ``budget.exceeded`` event of a crossed budget."""
    return BudgetExceededEvent(
        scope=verdict.scope,
        scope_id=verdict.scope_id,
        limit_kind=verdict.kind,
        limit=verdict.limit,
        used=round(verdict.used, 9),
        on_exceeded=verdict.on_exceeded,
        message=verdict.message,
        codon_id=verdict.codon_id,
    )


def summary_event(ledger: Ledger) -> BudgetSummaryEvent:
    """The ``budget.summary`` of the run so far."""
    book = ledger.book
    rows = []
    for row in ledger.rows:
        own = book.codons.get(row.slot.base_id)
        rows.append(
            BudgetRow(
                codon_id=row.slot.codon_id,
                loop_id=row.slot.loop_id,
                status=row.status,
                budget={k: float(v) for k, v in own.caps.as_dict().items()} if own else {},
                dollars=None if row.unpriced and not row.dollar_nanos else row.dollar_nanos / NANO,
                time_seconds=round(row.seconds, 3),
                output_tokens=row.output_tokens,
            )
        )
    kept = _bounded(rows)
    return BudgetSummaryEvent(
        ceiling={k: float(v) for k, v in book.run.caps.as_dict().items()},
        allocation=book.run.allocation,
        rows=kept,
        omitted_rows=len(rows) - len(kept),
        actual_dollars=ledger.spent,
        actual_time_seconds=round(ledger.elapsed(), 3),
        unpriced_codons=ledger.unpriced,
        exceeded=[v.message for v in ledger.exceeded],
    )


MAX_SUMMARY_ROWS = 80
"""Rows ``budget.summary`` carries at most, so the event stays under the 16 KB every
event Weft writes itself keeps to, however long the run (its totals count every row)."""


def _bounded(rows: list[BudgetRow]) -> list[BudgetRow]:
    """At most :data:`MAX_SUMMARY_ROWS` rows, in run order: first the ones a reader
    needs (a codon with its own budget, one that crossed a budget, one without a
    price), then the latest of the others."""
    if len(rows) <= MAX_SUMMARY_ROWS:
        return rows
    needed = [
        i for i, r in enumerate(rows) if r.budget or r.status == "exceeded" or r.dollars is None
    ]
    keep = set(needed[-MAX_SUMMARY_ROWS:])
    for i in range(len(rows) - 1, -1, -1):
        if len(keep) >= MAX_SUMMARY_ROWS:
            break
        keep.add(i)
    return [rows[i] for i in sorted(keep)]


def _seconds(start: Any, end: Any) -> float:
    if not isinstance(start, str) or not isinstance(end, str):
        return 0.0
    try:
        a = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max((b - a).total_seconds(), 0.0)


def _spent(record: Mapping[str, Any]) -> float | None:
    """What a codon record spent, whatever its status (a skipped attempt's
    money was spent too): its final, partial or live cost."""
    for key in ("finalCost", "partialCost", "currentCost"):
        value = record.get(key)
        if isinstance(value, int | float):
            return float(value)
    return None


def earlier_spend(state: Mapping[str, Any]) -> Iterator[EarlierSpend]:
    """Every codon record of the state's runs, as spending to restore."""
    for run in state.get("runs") or ():
        for record in run.get("codons") or ():
            codon_id = str(record.get("codonId"))
            context = record.get("loopContext")
            loop_id = context.get("loopId") if isinstance(context, Mapping) else None
            tokens = record.get("finalTokens") or record.get("partialTokens") or {}
            yield EarlierSpend(
                slot=Slot(codon_id, codon_id.split("#", 1)[0], loop_id),
                dollars=_spent(record) or 0.0,
                seconds=_seconds(record.get("startTime"), record.get("endTime")),
                output_tokens=int(tokens.get("outputTokens", 0) or 0),
            )


def restore_from_state(ledger: Ledger, state: Mapping[str, Any]) -> None:
    """Counts the earlier runs of ``state`` (a document of ``core.state_json()``)
    in ``ledger``: their codons' spending and their wall time."""
    runs = state.get("runs") or ()
    seconds = sum(_seconds(r.get("startTime"), r.get("endTime")) for r in runs)
    ledger.restore(earlier_spend(state), seconds)
