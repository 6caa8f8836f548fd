"""The run's figures as the server publishes them: the one fold, kept, and its snapshot.

The server keeps one :class:`weft.progress.RunProgress` (the fold every view
reads) and sends what it holds as ``progress.snapshot`` messages
(:class:`~weft.server.protocol.ProgressSnapshot`) to the clients that ask for
them in their handshake, so a client such as the dashboard renders the run's
codon states, outcome, costs and totals instead of folding the events again.

:class:`ProgressFeed` is the fold's keeper, without I/O: it is handed journal
rows while it is seeded (:meth:`~ProgressFeed.fold_row`, on the journal reader's
thread) and the StateManager's processed items after that
(:meth:`~ProgressFeed.on_processed`; items that arrive while it is being seeded
wait, so none is folded twice or missed), and makes a snapshot for a given time
(:meth:`~ProgressFeed.snapshot`). The figures are the fold's own, read through
its public API; the words of money and outcomes are :mod:`weft.money`'s and
:mod:`weft.outcome`'s. Besides the fold it keeps two things the fold forgets
when a new run starts: each run's ending (the fold's :attr:`~weft.progress.RunProgress.ending`,
noted as it changes) and the totals over time for the chart, thinned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from weft.clock import iso_from_ms
from weft.events.stream import Event, decode_event
from weft.events.transitions import BudgetStop
from weft.money import NANO, known, known_dollars, total_cost
from weft.outcome import Ending
from weft.progress import PENDING, CodonProgress, RunProgress
from weft.server.protocol import (
    CodonCounts,
    CodonFigures,
    LoopCut,
    LoopPlace,
    ProgressSnapshot,
    ProgressTotals,
    RunEnding,
)
from weft.state import Processed
from weft.windows.park import until_words

SERIES_POINTS: Final = 300
"""Points of the totals-over-time series a snapshot carries at most (about
the chart's width; older points are thinned, every other one dropped)."""

POINT_EVERY: Final = 16
"""Events between two points of the series, at least; a run with more codons
takes a point every as many events as it has codons, so the series costs
O(1) per event (a point sums every codon)."""

_MISSING: Final = object()


def _iso(ns: int | None) -> str | None:
    return None if ns is None else iso_from_ms(ns // 1_000_000)


def _dollars(nano_dollars: int, unpriced: bool) -> float | None:
    """Dollars as the JSON of every view says them (:func:`weft.money.known_dollars`)."""
    return known_dollars(nano_dollars / NANO, unpriced)


def _loop(c: CodonProgress | None) -> LoopPlace | None:
    if c is None or c.loop is None:
        return None
    return LoopPlace(loop_id=c.loop[0], iteration=c.loop[1])


def _time_ns(event_id: str) -> int:
    """When a journaled event was committed: its id starts with the milliseconds."""
    try:
        return int(event_id[:13]) * 1_000_000
    except ValueError:
        return 0


class ProgressFeed:
    """One :class:`~weft.progress.RunProgress` of the journal, seeded, then live."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        """``on_change`` is called after each live item folded (the server
        schedules a coalesced snapshot)."""
        self.fold = RunProgress()
        self._on_change = on_change
        self._seeded = False
        self._early: list[Processed] = []
        self._runs: dict[str, Ending | None] = {}
        """Run id -> the fold's ending for it (None while it runs), oldest first."""
        self._series: list[tuple[int, float, int]] = []
        """(ms, dollars, tokens) points of the newest totals, oldest first."""
        self._point_every = POINT_EVERY
        self._since_point = 0
        self._last_ms = 0
        """When the newest folded event was committed (the series' clock: a
        replayed run's chart ends with its events, not today)."""

    @property
    def seeded(self) -> bool:
        """Whether the journal up to the server's start has been folded."""
        return self._seeded

    # -- feeding ----------------------------------------------------------------

    def fold_row(self, seq: int, event_id: str, codon_id: str | None, payload: bytes) -> None:
        """Folds one journal row (while seeding): its payload is decoded here."""
        self._fold(decode_event(payload), _time_ns(event_id), seq, codon_id)

    def seed_done(self) -> None:
        """The journal up to the start is folded: the live items that came
        meanwhile are folded now (those the journal already had are not)."""
        early, self._early = self._early, []
        for item in early:
            if item.seq > self.fold.last_seq:
                self._apply(item)
        self._seeded = True
        self._point(self._last_ms)

    def on_processed(self, item: Processed) -> None:
        """The StateManager listener: called in seq order, after commit."""
        if not self._seeded:
            self._early.append(item)
            return
        self._apply(item)
        if self._on_change is not None:
            self._on_change()

    def _apply(self, item: Processed) -> None:
        self.fold.apply(item)
        self._after(item.time_ns)

    def _fold(self, event: Event | None, at_ns: int, seq: int, codon_id: str | None) -> None:
        self.fold.fold(event, at_ns, seq, codon_id)
        self._after(at_ns)

    def _after(self, at_ns: int) -> None:
        fold = self.fold
        self._last_ms = at_ns // 1_000_000
        run_id = fold.run_id
        if run_id is not None and self._runs.get(run_id, _MISSING) is not fold.ending:
            if run_id not in self._runs:
                self._series.clear()  # a new run: its totals start again
            self._runs[run_id] = fold.ending
        self._since_point += 1
        if self._since_point >= self._point_every:
            self._point(self._last_ms)

    def _point(self, at_ms: int) -> None:
        self._since_point = 0
        fold = self.fold
        if fold.run_id is None:
            return
        codons = fold.codons
        self._point_every = max(POINT_EVERY, len(codons))
        point = (at_ms, fold.total_cost, fold.total_tokens)
        series = self._series
        if series and series[-1][1:] == point[1:]:
            return
        series.append(point)
        if len(series) > 2 * SERIES_POINTS:
            del series[1:-1:2]  # every other point, keeping the first and the newest

    # -- the figures ------------------------------------------------------------

    def snapshot(self) -> ProgressSnapshot:
        """The figures as they are now."""
        fold = self.fold
        self._point(self._last_ms)
        codons = fold.codons
        figures = [self._codon(c) for c in codons]
        counts = fold.counts()
        earlier = sum(1 for c in codons if c.status == PENDING and c.earlier == "completed")
        unpriced = fold.unpriced
        cost = _dollars(fold.total_cost_nanos, bool(unpriced))
        spent = _dollars(fold.spent_nanos, bool(unpriced))
        totals = ProgressTotals(
            cost=cost,
            cost_text=total_cost(cost, unpriced, spent),
            unpriced_codons=unpriced,
            spent=spent,
            tokens=fold.total_tokens,
            sentinel_cost=fold.sentinel_cost,
            codons=CodonCounts(
                completed=counts["completed"],
                failed=counts["failed"],
                stopped=counts["stopped"],
                skipped=counts["skipped"],
                active=counts["active"],
                pending=counts[PENDING],
                to_do=sum(1 for f in figures if f.to_do),
                done_earlier=earlier,
            ),
        )
        runs = [self._ending(run_id, ending) for run_id, ending in self._runs.items()]
        return ProgressSnapshot(
            seq=fold.last_seq,
            run_id=fold.run_id,
            ending=runs[-1] if runs and fold.run_id is not None else None,
            runs=runs,
            started_at=_iso(fold.started_ns),
            ended_at=_iso(fold.ended_ns),
            codons=figures,
            totals=totals,
            loops_cut=[LoopCut(loop_id=loop, iterations=n) for loop, n in fold.loops_cut],
            series=[(iso_from_ms(ms), usd, tokens) for ms, usd, tokens in self._series],
        )

    def _codon(self, c: CodonProgress) -> CodonFigures:
        status = "stopped" if c.stopped else c.status
        return CodonFigures(
            codon_id=c.codon_id,
            name=c.name,
            model=c.model,
            status=status,
            earlier=c.earlier,
            to_do=c.to_do,
            attempts=c.attempts,
            cost=_dollars(c.cost_nanos, c.unpriced),
            cost_text=known(c.cost_nanos, c.unpriced),
            unpriced=c.unpriced,
            spent=_dollars(c.spent_nanos, c.unpriced),
            tokens=c.tokens,
            started_at=_iso(c.started_ns),
            ended_at=_iso(c.ended_ns),
            failure=c.failure,
            loop=_loop(c),
            parked=None
            if c.parked is None
            else until_words(c.parked.resume_at, c.parked.provider, c.parked.window),
        )

    def _ending(self, run_id: str, ending: Ending | None) -> RunEnding:
        said = ending if ending is not None else Ending("running")
        budget = None if said.budget is None else msgspec.convert(dict(said.budget), BudgetStop)
        at = None if said.codon_id is None else self.fold.codon(said.codon_id)
        return RunEnding(
            run_id=run_id,
            kind=said.kind,
            word=said.word,
            codon_id=said.codon_id,
            reason=said.reason,
            forced=said.forced,
            budget=budget,
            loop=_loop(at) if run_id == self.fold.run_id else None,
        )


__all__ = ["POINT_EVERY", "SERIES_POINTS", "ProgressFeed"]
