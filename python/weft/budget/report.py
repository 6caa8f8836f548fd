"""The ledger in the run's events: ``budget.exceeded`` and ``budget.summary``,
and the ledger rebuilt from the state of earlier runs.

A continued run (``weft run --execution``) keeps its budget: :func:`restore_from_state`
counts every codon record of the earlier runs in the new run's ledger. The state
does not hold everything the ledger counted, so :func:`journal_spend` reads the
rest from the journal once, before the run: which attempts had no price (state.json
keeps their cost as 0.0) and the sentinel calls made after a codon's record was
sealed at its terminal move.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from weft.budget.ledger import EarlierSpend, Ledger, Slot, Verdict
from weft.clock import ms_from_iso
from weft.events.stream import (
    BudgetExceededEvent,
    BudgetRow,
    BudgetSummaryEvent,
    SentinelOutput,
    SentinelUnloaded,
    TokenUsageEvent,
    decode_event,
    unpriced_usage,
)
from weft.progress import NANO

if TYPE_CHECKING:
    from weft.store.journal import JournalEvent

__all__ = [
    "JOURNAL_SPEND_TYPES",
    "JournalSpend",
    "earlier_spend",
    "exceeded_event",
    "journal_spend",
    "restore_from_state",
    "summary_event",
]


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
                tokens=row.tokens,
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
        actual_tokens=ledger.spent_tokens,
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
    a, b = ms_from_iso(start), ms_from_iso(end)
    if a is None or b is None:
        return 0.0
    return max(b - a, 0) / 1000


def _spent(record: Mapping[str, Any]) -> float | None:
    """What a codon record's agent spent, whatever its status (a skipped
    attempt's money was spent too): its final, partial or live cost."""
    for key in ("finalCost", "partialCost", "currentCost"):
        value = record.get(key)
        if isinstance(value, int | float):
            return float(value)
    return None


def _sentinels_spent(record: Mapping[str, Any]) -> float:
    """What a codon record's sentinels spent, as sealed with the record."""
    sentinels = record.get("sentinels")
    value = sentinels.get("totalCost") if isinstance(sentinels, Mapping) else None
    return float(value) if isinstance(value, int | float) else 0.0


def _tokens(record: Mapping[str, Any]) -> Mapping[str, Any]:
    found = record.get("finalTokens") or record.get("partialTokens") or record.get("currentTokens")
    return found if isinstance(found, Mapping) else {}


_TOKEN_KEYS: Final = ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")
"""The parts of a record's tokens a ``maxTokens`` budget counts (all of them:
:func:`weft.progress.token_total`)."""


def _all_tokens(record: Mapping[str, Any]) -> int:
    """Every token of a codon record (its final, partial or live figures)."""
    found = _tokens(record)
    return sum(int(v) for k in _TOKEN_KEYS if isinstance(v := found.get(k), int | float))


def _used_tokens(record: Mapping[str, Any]) -> bool:
    return any(isinstance(v, int) and v > 0 for v in _tokens(record).values())


def _in_start_order(state: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(run id, codon record) of every record, in the order the attempts began.

    The state lists its runs newest first and each run's records in the
    order they began: the runs are taken oldest first, then sorted by start
    time (stable: records started in the same millisecond keep that order)."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for run in reversed(list(state.get("runs") or ())):
        run_id = str(run.get("runId"))
        found.extend((run_id, record) for record in run.get("codons") or ())
    return sorted(found, key=lambda item: ms_from_iso(item[1].get("startTime")) or 0)


def earlier_spend(
    state: Mapping[str, Any], journal: JournalSpend | None = None
) -> Iterator[EarlierSpend]:
    """Every codon record of the state's runs, as spending to restore, in the
    order the attempts began; ``journal`` (:func:`journal_spend`) adds what
    only the journal knows."""
    journal = journal if journal is not None else JournalSpend()
    records = _in_start_order(state)
    # The journal's sentinel spend of a codon beyond its records' (calls made
    # after the record was sealed) goes with its last record.
    sealed: dict[tuple[str, str], float] = {}
    last: dict[tuple[str, str], int] = {}
    for i, (run_id, record) in enumerate(records):
        pair = (run_id, str(record.get("codonId")))
        sealed[pair] = sealed.get(pair, 0.0) + _sentinels_spent(record)
        last[pair] = i
    for i, (run_id, record) in enumerate(records):
        codon_id = str(record.get("codonId"))
        pair = (run_id, codon_id)
        sentinels = _sentinels_spent(record)
        if last[pair] == i:
            sentinels += max(journal.sentinel_dollars.get(pair, 0.0) - sealed[pair], 0.0)
        context = record.get("loopContext")
        loop_id = context.get("loopId") if isinstance(context, Mapping) else None
        yield EarlierSpend(
            slot=Slot(codon_id, codon_id.split("#", 1)[0], loop_id),
            dollars=_spent(record) or 0.0,
            seconds=_seconds(record.get("startTime"), record.get("endTime")),
            output_tokens=int(_tokens(record).get("outputTokens", 0) or 0),
            tokens=_all_tokens(record),
            sentinel_dollars=sentinels,
            # An attempt that used no tokens spent nothing, priced or not.
            unpriced=pair in journal.unpriced and _used_tokens(record),
        )


def restore_from_state(
    ledger: Ledger, state: Mapping[str, Any], journal: JournalSpend | None = None
) -> None:
    """Counts the earlier runs of ``state`` (a document of ``core.state_json()``)
    in ``ledger``: their codons' and sentinels' spending and their wall time.

    ``journal`` is what :func:`journal_spend` read from the same execution's
    journal; without it, an attempt without a price counts as a priced $0 and
    sentinel calls made after a codon ended are not counted."""
    runs = state.get("runs") or ()
    seconds = sum(_seconds(r.get("startTime"), r.get("endTime")) for r in runs)
    ledger.restore(earlier_spend(state, journal), seconds)


# -- what only the journal knows ----------------------------------------------


class JournalRows(Protocol):
    """The journal query :func:`journal_spend` needs
    (:class:`weft.store.journal.Journal` has it)."""

    def of_types(self, types: Sequence[str]) -> Sequence[JournalEvent]:
        """Every event of one of ``types``, oldest first."""
        ...


JOURNAL_SPEND_TYPES: Final = (TokenUsageEvent.TYPE, SentinelOutput.TYPE, SentinelUnloaded.TYPE)
"""The journal events :func:`journal_spend` reads."""


@dataclass(frozen=True, slots=True)
class JournalSpend:
    """What the journal knows of earlier runs' spending and state.json does
    not, by (run id, codon id)."""

    unpriced: frozenset[tuple[str, str]] = frozenset()
    """Codons that used a model without a price (state.json keeps their cost as 0.0)."""
    sentinel_dollars: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """What each codon's sentinels spent, every call counted (a record's
    ``sentinels.totalCost`` stops at its terminal move: the calls of the
    second drain come after it)."""


def journal_spend(journal: JournalRows) -> JournalSpend:
    """Reads from the journal what :func:`restore_from_state` cannot find in the state.

    A codon is unpriced when its agent reported usage without a cost (a
    ``token.usage`` with ``totalCost`` null and some tokens: what makes the
    live attempt unpriced in :meth:`Ledger.add`). Its sentinels spent each
    ``sentinel.output``'s cost plus what a ``sentinel.unloaded``'s
    ``finalCost`` adds to them. A sentinel whose ``reportToWebsocket`` turns
    off both outputs and lifecycle journals neither: for it, the record's
    sealed figure is all that is known (the restore never counts less than it).

    Called once, before the run: one query by type (indexed); only the usage
    events without a cost and the sentinel ones are decoded."""
    unpriced: set[tuple[str, str]] = set()
    sentinels: dict[tuple[str, str], float] = {}
    reported: dict[tuple[str, str, str], float] = {}
    for row in journal.of_types(JOURNAL_SPEND_TYPES):
        if row.run_id is None or row.codon_id is None:
            continue
        pair = (row.run_id, row.codon_id)
        if row.type == TokenUsageEvent.TYPE:
            if unpriced_usage(row.payload):  # priced ones are not decoded: the state has them
                unpriced.add(pair)
            continue
        event = decode_event(row.payload.encode())
        if isinstance(event, SentinelOutput):
            key = (*pair, event.sentinel_id)
            reported[key] = reported.get(key, 0.0) + event.cost
            sentinels[pair] = sentinels.get(pair, 0.0) + event.cost
        elif isinstance(event, SentinelUnloaded):
            rest = event.final_cost - reported.pop((*pair, event.sentinel_id), 0.0)
            if rest > 0:
                sentinels[pair] = sentinels.get(pair, 0.0) + rest
    return JournalSpend(frozenset(unpriced), sentinels)
