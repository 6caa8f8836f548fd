"""The progress of a run: one fold of its committed events.

This is the one place where a run's figures are tallied from its events: per
codon its status, attempts, time, tokens, cost, last action, checkpoint and
failure; per run the totals and how it ended; per loop iteration the sum of
its codons. Every view of ``weft run`` and ``weft attach``, the end summary
and the ``loop.iteration.completed`` figures read it; anything else reads the
core's cost cache (:meth:`weft._core.Core.total_cost` and friends). Costs
follow the core's rules to the nano-dollar, so :attr:`RunProgress.total_cost`
equals the core's cost of the run (``tests/test_progress.py`` checks both
against a real run's journal and against random spending).

It is fed typed events (:data:`weft.events.stream.Event`), never dicts: a
:class:`~weft.state.Processed` item of the StateManager (:meth:`RunProgress.apply`)
or a wire event :func:`weft.events.stream.typed` converted
(:meth:`RunProgress.fold`). Each event class has one small handler. The fold
does no I/O, reads no clock (elapsed times take ``now_ns``) and formats
nothing: :mod:`weft.cli.view` turns it into text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from weft.events.stream import (
    AssistantActionEvent,
    BreakerWaitingEvent,
    BudgetExceededEvent,
    BudgetSummaryEvent,
    CodonParkedEvent,
    CodonRetryEvent,
    CodonStartedEvent,
    ErrorEvent,
    Event,
    LoopIterationCompletedEvent,
    ProcessStartedEvent,
    RejectedTransition,
    RigOutputEvent,
    RigSetupFailedEvent,
    RollbackStartedEvent,
    SentinelOutput,
    SessionCooldownEvent,
    SessionResumedEvent,
    TokenUsageEvent,
    ToolResultEvent,
)
from weft.events.transitions import (
    AssistantMessageCountUpdated,
    CheckpointCreated,
    CodonFinalCostSet,
    CodonStarted,
    CodonTransitioned,
    Continuation,
    CostsIncremented,
    CostsUpdated,
    PlanEntry,
    PlanExtended,
    PlanTrimmed,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    RunStopped,
    TokenUsage,
    decode,
)
from weft.money import NANO, nanos
from weft.outcome import Ending, Kind
from weft.state import Processed

TERMINAL = frozenset({"completed", "failed", "skipped"})
PENDING = "pending"
"""The status of a planned codon that has not started in this run."""

LastAction = (
    AssistantActionEvent
    | ToolResultEvent
    | RigOutputEvent
    | RigSetupFailedEvent
    | CodonRetryEvent
    | SessionCooldownEvent
    | SessionResumedEvent
    | BreakerWaitingEvent
    | CodonParkedEvent
)
"""What a codon did last, kept as the event itself: the views word it."""


def token_total(tokens: TokenUsage) -> int:
    """Every token of a usage: input, output, cache writes and cache reads."""
    return (
        tokens.input_tokens
        + tokens.output_tokens
        + tokens.cache_creation_tokens
        + tokens.cache_read_tokens
    )


@dataclass(slots=True)
class CodonProgress:
    """What is known of one codon in this run (all attempts; figures of skipped ones too)."""

    codon_id: str
    name: str | None = None
    model: str | None = None
    config: Mapping[str, Any] | None = None
    """The resolved codon of the plan entry (rigSetup labels come from it)."""
    loop: tuple[str, int] | None = None
    """``(loop id, iteration)`` of a loop's codon."""
    status: str = PENDING
    earlier: str | None = None
    """The terminal status it reached in an earlier run of the execution, if any."""
    attempts: int = 0
    started_ns: int | None = None
    """When the latest attempt started."""
    ended_ns: int | None = None
    tokens: int = 0
    """Every token of every attempt (input, output, cache writes and reads)."""
    last: LastAction | None = None
    checkpoint: str | None = None
    failure: str | None = None
    """``<type>: <message>`` of the latest failure."""
    failure_kind: str | None = None
    """The latest failure's type (``interrupted``: a stop cut it short; it stays to do)."""
    failed_during: str | None = None
    parked: CodonParkedEvent | None = None
    """Set while the codon waits for its provider's usage window to open."""
    messages: int = 0
    sentinel_cost: float = 0.0
    """What its sentinels' model calls cost (US dollars), apart from :attr:`cost`."""
    sentinel_outputs: int = 0
    unpriced: bool = False
    """An attempt used a model without a price: :attr:`cost` is a lower bound
    (``unpriced`` when nothing priced was spent), never a real zero."""
    _cost_before: int = 0
    _cost_now: int = 0
    _tokens_now: int = 0
    _spent_before: int = 0

    @property
    def active(self) -> bool:
        """Started in this run and not terminal."""
        return self.status != PENDING and self.status not in TERMINAL

    @property
    def finished(self) -> bool:
        """Terminal in this run."""
        return self.status in TERMINAL

    @property
    def to_do(self) -> bool:
        """The run has still to run it: not started in this run and not completed in
        an earlier one (a rollback undid what it did then), or cut short by a stop."""
        return (self.status == PENDING and self.earlier != "completed") or self.stopped

    @property
    def stopped(self) -> bool:
        """Failed because a stop (yours, the run's budget) cut it short: not a
        failure of its own; it stays to do."""
        return self.status == "failed" and self.failure_kind == "interrupted"

    @property
    def cost(self) -> float:
        """Dollars this codon counts for in the run: every attempt, by the seed's
        getCodonCost (a skipped attempt counts nothing)."""
        return self.cost_nanos / NANO

    @property
    def cost_nanos(self) -> int:
        """:attr:`cost` in nano-dollars."""
        return self._cost_before + self._counted_now()

    @property
    def spent_nanos(self) -> int:
        """Every nano-dollar its attempts spent, skipped ones included: the
        money that left, which :attr:`cost` (the seed's rule) may not count."""
        return self._spent_before + self._cost_now

    @property
    def spent(self) -> float:
        """:attr:`spent_nanos` in dollars."""
        return self.spent_nanos / NANO

    @property
    def attempt_cost_nanos(self) -> int:
        """What the latest attempt spent, in nano-dollars (its ``codon.completed`` cost)."""
        return self._cost_now

    @property
    def attempt_tokens(self) -> int:
        """Every token of the latest attempt (:attr:`tokens` counts every attempt's)."""
        return self._tokens_now

    def elapsed(self, now_ns: int) -> float | None:
        """Seconds of the latest attempt (up to ``now_ns`` while it runs)."""
        if self.started_ns is None:
            return None
        end = self.ended_ns if self.ended_ns is not None else now_ns
        return max(end - self.started_ns, 0) / NANO

    def _counted_now(self) -> int:
        return 0 if self.status in (PENDING, "skipped") else self._cost_now

    def _new_attempt(self, at_ns: int) -> None:
        self._cost_before += self._counted_now()
        self._spent_before += self._cost_now
        self._cost_now = 0
        self._tokens_now = 0
        self.attempts += 1
        self.started_ns = at_ns
        self.ended_ns = None
        self.failure = None
        self.failure_kind = None
        self.failed_during = None
        self.parked = None
        self.messages = 0
        self.status = "preparing"

    def _spend(self, nanos: int, tokens: int) -> None:
        self._cost_now += nanos
        self._tokens_now += tokens
        self.tokens += tokens

    def _set_spent(self, nanos: int, tokens: int) -> None:
        # A figure that replaces the attempt's running total (the agent's own).
        self._cost_now = nanos
        self.tokens += tokens - self._tokens_now
        self._tokens_now = tokens

    def _reset_for_new_run(self) -> None:
        if self.status in TERMINAL:
            self.earlier = self.status
        self.status = PENDING
        self.attempts = 0
        self.started_ns = self.ended_ns = None
        self.tokens = self._tokens_now = 0
        self._cost_before = self._cost_now = self._spent_before = 0
        self.unpriced = False
        self.last = None
        self.failure = self.failure_kind = self.failed_during = None
        self.parked = None
        self.checkpoint = None
        self.messages = 0


@dataclass(frozen=True, slots=True)
class Figures:
    """What some codons of a run added up to (a loop iteration's)."""

    cost_nanos: int
    tokens: int
    duration_ms: int
    """The latest attempt of each, summed."""

    @property
    def cost(self) -> float:
        """Dollars."""
        return self.cost_nanos / NANO


_Handler = Callable[["RunProgress", Any, int, "str | None"], None]


class RunProgress:
    """The run as a person follows it, folded from committed events (no I/O).

    Codons are kept in plan order: the plan of a fresh ``RunStarted``, changed
    by ``PlanExtended`` and ``PlanTrimmed``; a continuation run keeps the plan
    given at construction (see :meth:`from_state`).
    """

    def __init__(self, plan: Iterable[Mapping[str, Any] | PlanEntry] = ()) -> None:
        self._codons: dict[str, CodonProgress] = {}
        self._order: list[str] = []
        self.run_id: str | None = None
        self.run_status: str | None = None
        """The ending's kind (:mod:`weft.outcome`): ``running``, ``completed``,
        ``failed``, ``stopped`` (by you), ``budget`` (by the run's ceiling) or
        ``crashed``; None before RunStarted."""
        self.ending: Ending | None = None
        """How the run ended, as journaled (None while it runs)."""
        self.started_ns: int | None = None
        self.ended_ns: int | None = None
        self.continuation: str | None = None
        """``<run>`` or ``<run> after <codon>`` for a continuation run."""
        self.checkpoints: set[str] = set()
        """Checkpoints made in this run (shas)."""
        self.failures: list[tuple[str, str]] = []
        """``(codon id, reason)`` of every codon that failed in this run, once per
        codon (its latest failure; a retried codon's attempts are not repeated),
        in the order of those latest failures."""
        self.failed_attempts: dict[str, int] = {}
        """codon id -> how many of its attempts failed in this run."""
        self.errors = 0
        self.rejected = 0
        self.last_seq = 0
        self.crashed: str | None = None
        """The codon the run's crash failed (set by ``RunCrashed``)."""
        self.plan_added: list[str] = []
        """The codons the latest ``PlanExtended`` added."""
        self.budget_exceeded: list[BudgetExceededEvent] = []
        """The budgets crossed in this run, in order."""
        self.budget: BudgetSummaryEvent | None = None
        """The run's ``budget.summary``, once emitted."""
        self.loops_cut: list[tuple[str, int]] = []
        """``(loop id, iterations run)`` of each loop a budget of the hank ended
        early (its ``onExceeded: complete``), in order."""
        self._active: str | None = None
        self._undone: set[str] = set()
        """Codons a rollback undid: the run it starts has them to do again."""
        self._stopped_by: str | None = None
        """What ends the run as failed if it ends now: the newest codon's own
        failure, a fatal error, the run's budget; None when only a stop would."""
        self._replace_plan(plan)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RunProgress:
        """A fold seeded from a state document (see :meth:`seed`)."""
        progress = cls()
        progress.seed(state)
        return progress

    def seed(self, state: Mapping[str, Any]) -> None:
        """Takes the plan of a state document (``json.loads(core.state_json())``)
        and what earlier runs finished. A continuation run's ``RunStarted``
        carries no plan, so without this its pending codons are not shown."""
        self._replace_plan(state.get("executionPlan") or ())
        for run in reversed(state.get("runs") or ()):  # oldest first: newer wins
            for record in run.get("codons") or ():
                codon = self._codons.get(record.get("codonId"))
                if codon is not None and record.get("status") in TERMINAL:
                    codon.earlier = record["status"]

    # -- reading -------------------------------------------------------------

    @property
    def codons(self) -> list[CodonProgress]:
        """Every codon, in plan order (codons run outside the plan come last)."""
        return [self._codons[c] for c in self._order]

    def codon(self, codon_id: str) -> CodonProgress | None:
        """One codon's progress."""
        return self._codons.get(codon_id)

    @property
    def active(self) -> CodonProgress | None:
        """The codon being run, if any (Weft runs one at a time)."""
        return None if self._active is None else self._codons.get(self._active)

    @property
    def ended(self) -> bool:
        """Whether the run ended (completed, failed or crashed)."""
        return self.run_status not in (None, "running")

    @property
    def total_cost_nanos(self) -> int:
        """:attr:`total_cost` in nano-dollars."""
        return sum(c.cost_nanos for c in self._codons.values())

    @property
    def total_cost(self) -> float:
        """Dollars spent in this run."""
        return self.total_cost_nanos / NANO

    @property
    def sentinel_cost(self) -> float:
        """What every codon's sentinels cost in this run (not in :attr:`total_cost`)."""
        return math.fsum(c.sentinel_cost for c in self._codons.values())

    @property
    def spent_nanos(self) -> int:
        """Every nano-dollar this run spent, skipped attempts included (never
        less than :attr:`total_cost_nanos`)."""
        return sum(c.spent_nanos for c in self._codons.values())

    @property
    def spent(self) -> float:
        """:attr:`spent_nanos` in dollars."""
        return self.spent_nanos / NANO

    @property
    def unpriced(self) -> int:
        """How many codons used a model without a price (the totals are lower bounds)."""
        return sum(1 for c in self._codons.values() if c.unpriced)

    @property
    def total_tokens(self) -> int:
        """Tokens used in this run."""
        return sum(c.tokens for c in self._codons.values())

    def counts(self) -> dict[str, int]:
        """How many codons are in each status (``pending`` = not started in this
        run; ``stopped`` = cut short by a stop, to do again, not ``failed``)."""
        counts = dict.fromkeys(("completed", "failed", "stopped", "skipped", "active", PENDING), 0)
        for c in self._codons.values():
            counts["active" if c.active else "stopped" if c.stopped else c.status] += 1
        return counts

    def elapsed(self, now_ns: int) -> float | None:
        """Seconds since the run started (to its end once it ended)."""
        if self.started_ns is None:
            return None
        end = self.ended_ns if self.ended_ns is not None else now_ns
        return max(end - self.started_ns, 0) / NANO

    def figures(self, codon_ids: Iterable[str], now_ns: int) -> Figures:
        """The sum of some codons: what a loop iteration's summary reports, so
        it agrees with the codons' own lines (same cost, same token count)."""
        cost = tokens = ms = 0
        for codon_id in codon_ids:
            c = self._codons.get(codon_id)
            if c is None:
                continue
            cost += c.cost_nanos
            tokens += c.tokens
            ms += round((c.elapsed(now_ns) or 0.0) * 1000)
        return Figures(cost, tokens, ms)

    def iteration(self, loop_id: str, iteration: int) -> list[str]:
        """The codons of one loop iteration, in plan order."""
        key = (loop_id, iteration)
        return [c for c in self._order if self._codons[c].loop == key]

    # -- folding -------------------------------------------------------------

    def apply(self, item: Processed) -> Event | None:
        """Folds one processed event; returns it typed (None when it is not
        an event this version knows)."""
        event = item.event
        if event is None:
            try:
                event = decode(item.payload)
            except ValueError:  # msgspec's errors are ValueErrors
                event = None
        stream = item.stream
        self.fold(event, item.time_ns, item.seq, None if stream is None else stream.codon_id)
        return event

    def fold(self, event: Event | None, at_ns: int, seq: int, codon_id: str | None = None) -> None:
        """Folds one typed event, committed at ``at_ns`` with sequence ``seq``;
        ``codon_id`` is the codon a stream event is about when it says so
        outside its data (the journal's column)."""
        self.last_seq = seq
        if event is None:
            return
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, at_ns, codon_id)

    # -- transitions ---------------------------------------------------------

    def _costs_incremented(self, event: CostsIncremented, at: int, _: str | None) -> None:
        self._get(event.codon_id)._spend(nanos(event.cost_delta), token_total(event.tokens_delta))

    def _final_cost(self, event: CodonFinalCostSet, at: int, _: str | None) -> None:
        c = self._get(event.codon_id)
        c._set_spent(nanos(event.final_cost), token_total(event.final_tokens))

    def _costs_updated(self, event: CostsUpdated, at: int, _: str | None) -> None:
        self._get(event.codon_id)._set_spent(nanos(event.cost), token_total(event.tokens))

    def _messages(self, event: AssistantMessageCountUpdated, at: int, _: str | None) -> None:
        self._get(event.codon_id).messages = event.new_count

    def _codon_started(self, event: CodonStarted, at: int, _: str | None) -> None:
        c = self._get(event.codon_id)
        c._new_attempt(at)
        self._active = c.codon_id
        if self._stopped_by is not None and self._stopped_by.startswith("codon"):
            self._stopped_by = None  # its failure was ignored: the run went on

    def _checkpoint(self, event: CheckpointCreated, at: int, _: str | None) -> None:
        self._get(event.codon_id).checkpoint = event.sha
        self.checkpoints.add(event.sha)

    def _moved(self, event: CodonTransitioned, at: int, _: str | None) -> None:
        c = self._get(event.codon_id)
        to = event.to_status
        meta = event.metadata
        if meta is not None and meta.checkpoint_sha:
            c.checkpoint = meta.checkpoint_sha
            self.checkpoints.add(meta.checkpoint_sha)
        if to not in TERMINAL:
            c.status = to
            return
        c.parked = None
        self._finish(c, to, at)
        if to != "failed":
            return
        reason = meta.failure_reason if meta is not None else None
        if reason is None:
            c.failure = "unknown reason"
        else:
            c.failure = f"{reason.kind}: {reason.message}" if reason.message else reason.kind
            c.failure_kind = reason.kind
        c.failed_during = meta.failed_during if meta is not None else None
        if c.stopped:
            return  # a stop (yours, the run's budget) ended it: not a failure; it stays to do
        self._failed(c.codon_id, c.failure)
        # Any other failure ends the run as failed (unless its onFailure ignores it).
        self._stopped_by = f"codon {c.codon_id}"

    def _run_started(self, event: RunStarted, at: int, _: str | None) -> None:
        if self.run_id is not None:
            for c in self._codons.values():
                c._reset_for_new_run()
                if c.codon_id in self._undone:
                    c.earlier = None
        self._undone = set()
        self.run_id = event.run_id
        self.run_status = "running"
        self.ending = None
        self.started_ns, self.ended_ns = at, None
        self.checkpoints = set()
        self.failures = []
        self.failed_attempts = {}
        self.crashed = None
        self.budget_exceeded = []
        self.budget = None
        self.loops_cut = []
        self._active = None
        self._stopped_by = None
        if event.execution_plan is not None:
            self._replace_plan(event.execution_plan)
        self.continuation = None
        if isinstance(event.starting_conditions, Continuation):
            source = event.starting_conditions.source
            after = f" after {source.after_codon}" if source.after_codon else ""
            self.continuation = f"{source.run_id}{after}"

    def _run_completed(self, event: RunCompleted, at: int, _: str | None) -> None:
        self._run_ended(Ending("completed"), at)

    def _run_failed(self, event: RunFailed, at: int, _: str | None) -> None:
        if event.reason is None and not self._stopped_by:
            # A journal from before RunStopped: a run that was stopped was
            # journaled as failed; nothing failed, so it reads as stopped.
            self._run_ended(Ending("stopped", reason="stopped"), at)
            return
        self._run_ended(Ending("failed", codon_id=event.codon_id, reason=event.reason), at)

    def _run_stopped(self, event: RunStopped, at: int, _: str | None) -> None:
        budget = None if event.budget is None else msgspec.structs.asdict(event.budget)
        kind: Kind = "budget" if event.by == "budget" else "stopped"
        ending = Ending(
            kind, forced=event.forced, codon_id=event.codon_id, reason=event.reason, budget=budget
        )
        self._run_ended(ending, at)

    def _run_crashed(self, event: RunCrashed, at: int, _: str | None) -> None:
        if event.run_id != self.run_id:
            # An earlier run a dead process left running, marked at start:
            # not this fold's run (the runtime says it in a note).
            return
        # The reducer fails the active codon of a crashed run; so does the fold
        # (the same rule, seen from the events: the active codon is the fold's).
        crashed = self.active
        if crashed is not None:
            during = crashed.status
            self._finish(crashed, "failed", at)
            crashed.failure = "crash: Server crashed"
            crashed.failed_during = during
            self._failed(crashed.codon_id, crashed.failure)
            self.crashed = crashed.codon_id
        self._run_ended(Ending("crashed", codon_id=self.crashed), at)

    def _extend(self, event: PlanExtended, at: int, _: str | None) -> None:
        # A long loop's plan has thousands of entries and grows at its end (the
        # next iteration follows the codon that just finished): no list scans.
        known = {e.codon_id for e in event.entries if e.codon_id in self._codons}
        added = [self._entry(e) for e in event.entries]
        order = self._order
        where = len(order)
        for i in range(len(order) - 1, -1, -1):
            if order[i] == event.after_codon_id:
                where = i + 1
                break
        added = [a for a in dict.fromkeys(added) if a not in known or a not in order]
        order[where:where] = added
        self.plan_added = added

    def _trim(self, event: PlanTrimmed, at: int, _: str | None) -> None:
        dropped = set(event.codon_ids)
        kept = []
        for codon_id in self._order:
            c = self._codons[codon_id]
            if codon_id in dropped and c.status == PENDING:
                del self._codons[codon_id]
            else:
                kept.append(codon_id)
        self._order = kept

    # -- stream events -------------------------------------------------------

    def _did(self, event: LastAction, at: int, codon_id: str | None) -> None:
        c = self._codons.get(codon_id or event.codon_id or "")
        if c is not None:
            c.last = event

    def _parked(self, event: CodonParkedEvent, at: int, codon_id: str | None) -> None:
        c = self._codons.get(codon_id or event.codon_id)
        if c is not None:
            c.last = c.parked = event

    def _unparked(
        self, event: SessionResumedEvent | ProcessStartedEvent, at: int, codon_id: str | None
    ) -> None:
        """The wait is over: the next session was resumed or the agent started."""
        c = self._codons.get(codon_id or event.codon_id or "")
        if c is None:
            return
        c.parked = None
        if isinstance(event, SessionResumedEvent):
            c.last = event

    def _tool_result(self, event: ToolResultEvent, at: int, codon_id: str | None) -> None:
        if event.is_error:
            self._did(event, at, codon_id)

    def _agent_started(self, event: CodonStartedEvent, at: int, codon_id: str | None) -> None:
        c = self._codons.get(codon_id or event.codon_id)
        if c is not None and event.model:
            c.model = event.model  # what the agent reported, not the hank's alias

    def _sentinel_output(self, event: SentinelOutput, at: int, _: str | None) -> None:
        c = self._get(event.codon_id)
        c.sentinel_cost += event.cost
        c.sentinel_outputs += 1

    def _token_usage(self, event: TokenUsageEvent, at: int, codon_id: str | None) -> None:
        if event.total_cost is not None:
            return
        c = self._codons.get(codon_id or event.codon_id)
        used = event.input_tokens + event.output_tokens + event.cache_read_tokens
        if c is not None and used + event.cache_creation_tokens > 0:
            c.unpriced = True

    def _budget_exceeded(self, event: BudgetExceededEvent, at: int, _: str | None) -> None:
        self.budget_exceeded.append(event)
        if event.scope == "run":
            self._stopped_by = "budget"

    def _iteration(self, event: LoopIterationCompletedEvent, at: int, _: str | None) -> None:
        if event.is_final and event.termination_reason == "budget_exceeded":
            self.loops_cut.append((event.loop_id, event.iteration + 1))

    def _rollback_started(self, event: RollbackStartedEvent, at: int, _: str | None) -> None:
        # What the rollback undoes is to do again: not done in an earlier run. The
        # new run starts after this event; its start makes that so.
        self._undone.update(event.codons_to_process)
        for codon_id in event.codons_to_process:
            c = self._codons.get(codon_id)
            if c is not None:
                c.earlier = None

    def _budget_summary(self, event: BudgetSummaryEvent, at: int, _: str | None) -> None:
        self.budget = event

    def _error(self, event: ErrorEvent, at: int, _: str | None) -> None:
        self.errors += 1
        if event.fatal:
            self._stopped_by = "error"

    def _rejected(self, event: RejectedTransition, at: int, _: str | None) -> None:
        self.rejected += 1

    # -- helpers ---------------------------------------------------------------

    def _failed(self, codon_id: str, reason: str) -> None:
        count = self.failed_attempts.get(codon_id, 0)
        if count:  # an earlier attempt's failure gives way to this one
            self.failures = [f for f in self.failures if f[0] != codon_id]
        self.failed_attempts[codon_id] = count + 1
        self.failures.append((codon_id, reason))

    def _finish(self, c: CodonProgress, status: str, at: int) -> None:
        c.status = status
        c.ended_ns = at
        if self._active == c.codon_id:
            self._active = None

    def _run_ended(self, ending: Ending, at: int) -> None:
        self.ending = ending
        self.run_status = ending.kind
        self.ended_ns = at

    def _replace_plan(self, plan: Iterable[Mapping[str, Any] | PlanEntry]) -> None:
        order = [self._entry(e) for e in plan]
        # Codons that ran but are no longer planned stay visible, after the plan.
        planned = set(order)
        extra = [c for c in self._order if c not in planned and self._codons[c].status != PENDING]
        self._order = order + extra
        for codon_id in list(self._codons):
            if codon_id not in planned and codon_id not in extra:
                del self._codons[codon_id]

    def _entry(self, entry: Mapping[str, Any] | PlanEntry) -> str:
        if isinstance(entry, PlanEntry):
            codon_id, config, context = entry.codon_id, entry.codon, entry.loop_context
        else:
            codon_id, config = str(entry["codonId"]), entry.get("codon") or {}
            context = entry.get("loopContext")
        c = self._codons.get(codon_id)
        if c is None:
            c = self._codons[codon_id] = CodonProgress(codon_id)
        c.config = config
        name, model = config.get("name"), config.get("model")
        c.name = name if isinstance(name, str) else c.name
        c.model = model if isinstance(model, str) else c.model
        if isinstance(context, Mapping):
            loop, iteration = context.get("loopId"), context.get("iteration")
            if isinstance(loop, str) and isinstance(iteration, int):
                c.loop = (loop, iteration)
        return codon_id

    def _get(self, codon_id: str) -> CodonProgress:
        c = self._codons.get(codon_id)
        if c is None:
            c = self._codons[codon_id] = CodonProgress(codon_id)
            self._order.append(codon_id)
        return c


_HANDLERS: dict[type[Any], _Handler] = {
    CostsIncremented: RunProgress._costs_incremented,
    CodonTransitioned: RunProgress._moved,
    AssistantMessageCountUpdated: RunProgress._messages,
    CodonFinalCostSet: RunProgress._final_cost,
    CostsUpdated: RunProgress._costs_updated,
    CodonStarted: RunProgress._codon_started,
    CheckpointCreated: RunProgress._checkpoint,
    RunStarted: RunProgress._run_started,
    RunCompleted: RunProgress._run_completed,
    RunFailed: RunProgress._run_failed,
    RunStopped: RunProgress._run_stopped,
    RunCrashed: RunProgress._run_crashed,
    PlanExtended: RunProgress._extend,
    PlanTrimmed: RunProgress._trim,
    AssistantActionEvent: RunProgress._did,
    RigOutputEvent: RunProgress._did,
    RigSetupFailedEvent: RunProgress._did,
    CodonRetryEvent: RunProgress._did,
    SessionCooldownEvent: RunProgress._did,
    SessionResumedEvent: RunProgress._unparked,
    ProcessStartedEvent: RunProgress._unparked,
    BreakerWaitingEvent: RunProgress._did,
    CodonParkedEvent: RunProgress._parked,
    ToolResultEvent: RunProgress._tool_result,
    CodonStartedEvent: RunProgress._agent_started,
    TokenUsageEvent: RunProgress._token_usage,
    BudgetExceededEvent: RunProgress._budget_exceeded,
    BudgetSummaryEvent: RunProgress._budget_summary,
    RollbackStartedEvent: RunProgress._rollback_started,
    LoopIterationCompletedEvent: RunProgress._iteration,
    ErrorEvent: RunProgress._error,
    SentinelOutput: RunProgress._sentinel_output,
    RejectedTransition: RunProgress._rejected,
}
"""One handler per event class; classes not here change nothing the fold keeps."""

__all__ = [
    "NANO",
    "PENDING",
    "TERMINAL",
    "CodonProgress",
    "Figures",
    "LastAction",
    "RunProgress",
    "nanos",
    "token_total",
]
