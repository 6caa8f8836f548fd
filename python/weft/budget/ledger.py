"""The spending of a run, counted against its budgets (sans-I/O).

:class:`Ledger` is told what happens (a codon attempt begins, its agent
reports usage, the attempt ends, a sentinel spent money) and answers, each
time, whether a budget is now crossed (a :class:`Verdict`). It reads time only
from the clock it is given, so every limit can be tested without waiting, and
it keeps running totals, so a check is a handful of comparisons whatever the
length of the run (the watchdog asks after every usage event).

Money is counted in whole nano-dollars, rounded as the core rounds
(:func:`weft.progress.nanos`), so the ledger's run total is the core's.
Money already spent is never taken back: a failed or skipped attempt, a retry,
a rolled-back run and earlier runs of the execution (:meth:`Ledger.restore`)
all count. A model without pricing reports no dollars: its attempt is counted
as ``unpriced`` (the totals are then a lower bound) rather than as free.

Tokens (a container's ``maxTokens``) are counted like money: every token of
every attempt (input, output, cache writes and cache reads, what the progress
fold calls ``tokens``: :func:`weft.progress.token_total`), never taken back,
earlier runs included. An agent's per-message figures are summed live, then its
own total replaces them when it is larger.

Limits and when they are crossed: dollars and tokens when the amount used is
*more* than the cap (spending exactly the cap is allowed); time when it is
reached; a container whose dollars or tokens are used up lets no further codon
start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from weft.budget.limits import BudgetBook, Caps, Container, LimitKind, OnExceeded
from weft.plan import PlannedCodon
from weft.progress import NANO, nanos

__all__ = ["EarlierSpend", "Ledger", "Row", "Slot", "Verdict"]

Scope = Literal["codon", "share", "loop", "run"]


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a codon attempt sits: its runtime id, its hank id, its loop."""

    codon_id: str
    """The runtime id (``draft#2`` inside a loop)."""
    base_id: str
    """The id in the hank (``draft``)."""
    loop_id: str | None = None

    @classmethod
    def of(cls, planned: PlannedCodon) -> Slot:
        """The slot of a planned codon."""
        context = planned.loop_context
        loop_id = None if context is None else context.loop_id
        return cls(planned.codon_id, planned.codon.id, loop_id)

    def child_of(self, container: Container) -> str:
        """The child of ``container`` this slot draws for."""
        if container.scope == "loop":
            return self.base_id
        return self.loop_id if self.loop_id is not None else self.base_id


@dataclass(frozen=True, slots=True)
class Verdict:
    """A crossed budget: which, by how much, and what it does."""

    scope: Scope
    scope_id: str
    """The codon's id, the child's id (``share``), the loop's id, or ``run``."""
    kind: LimitKind
    limit: float
    used: float
    on_exceeded: OnExceeded
    codon_id: str | None
    """The codon that was running (or about to start) when it was crossed."""
    source: str = ""

    @property
    def stops_run(self) -> bool:
        """Whether nothing more may run (the run's own ceiling)."""
        return self.scope == "run"

    @property
    def message(self) -> str:
        """``Budget exceeded: ...`` in words a person reads."""
        what = {
            "codon": f"codon {self.scope_id}",
            "share": f"the share of {self.scope_id}",
            "loop": f"loop {self.scope_id}",
            "run": "the run",
        }[self.scope]
        source = f" ({self.source})" if self.source else ""
        if self.kind == "tokens":
            # "120,000 of 100,000 tokens": the unit once, as a subscriber reads it.
            amounts = f"{int(self.used):,} of {int(self.limit):,} tokens"
            return f"Budget exceeded: {what} used {amounts}{source}"
        used, limit = _amount(self.kind, self.used), _amount(self.kind, self.limit)
        return f"Budget exceeded: {what} used {used} of its {limit} cap{source}"


def _amount(kind: LimitKind, value: float) -> str:
    if kind == "dollars":
        return f"${value:.4f}"
    if kind == "timeSeconds":
        return f"{value:.1f}s"
    unit = "output tokens" if kind == "outputTokens" else "context tokens"
    return f"{int(value):,} {unit}"


@dataclass(frozen=True, slots=True)
class EarlierSpend:
    """What one codon record of an earlier run spent (read from the state)."""

    slot: Slot
    dollars: float | None
    """The agent's dollars; None when none of them is known (a model without a price)."""
    seconds: float = 0.0
    output_tokens: int = 0
    tokens: int = 0
    """Every token of the attempt (input, output, cache writes and reads)."""
    sentinel_dollars: float = 0.0
    """What the codon's sentinels spent: the run's and the loop's money, never
    the codon's own (as :meth:`Ledger.add_sentinel` counts it)."""
    unpriced: bool = False
    """The attempt used a model without a price: ``dollars`` is a lower bound."""


@dataclass(slots=True)
class Row:
    """One codon of this run in the ``budget.summary``: every attempt summed."""

    slot: Slot
    status: str = "running"
    dollar_nanos: int = 0
    unpriced: bool = False
    seconds: float = 0.0
    output_tokens: int = 0
    tokens: int = 0
    exceeded: bool = False


@dataclass(slots=True)
class _Live:
    """The attempt being run."""

    slot: Slot
    started: float
    nanos: int = 0
    output_tokens: int = 0
    context_tokens: int = 0
    tokens: int = 0
    """Every token of the attempt so far (input, output, cache writes and reads)."""
    unpriced: bool = False


@dataclass(slots=True)
class _Totals:
    """Committed spending (attempts that ended, earlier runs, sentinels)."""

    nanos: int = 0
    seconds: float = 0.0
    tokens: int = 0
    unpriced: int = 0
    by_loop: dict[str, int] = field(default_factory=dict)
    loop_tokens: dict[str, int] = field(default_factory=dict)
    loop_seconds: dict[str, float] = field(default_factory=dict)
    by_child: dict[tuple[str, str], int] = field(default_factory=dict)
    """(container id, child id) -> nano-dollars."""


class Ledger:
    """Counts a run's spending against a :class:`BudgetBook`."""

    def __init__(self, book: BudgetBook, clock: Callable[[], float] = time.monotonic) -> None:
        self.book = book
        self._clock = clock
        self._run_started = clock()
        self._earlier_seconds = 0.0
        self._totals = _Totals()
        self._live: _Live | None = None
        self._rows: dict[str, Row] = {}
        self._last_child: dict[str, str] = {}
        """Container id -> the child that began last: a child is finished once
        another one began (what it left rolls over, allocation proportional)."""
        self._finished: set[tuple[str, str]] = set()
        self.exceeded: list[Verdict] = []
        """Every budget crossed in this run, in order."""
        self._chains: dict[str | None, tuple[Container, ...]] = {}

    # -- feeding -------------------------------------------------------------

    def restore(self, earlier: Iterable[EarlierSpend], run_seconds: float = 0.0) -> None:
        """Counts what earlier runs of the execution spent (a resumed run keeps
        its budget): their codons' dollars, their sentinels' and the runs' wall time.

        ``earlier`` is every attempt in the order they began, each followed
        as :meth:`begin` follows one: a child of a container is finished once
        another child began after it, so what it left still rolls over
        (allocation ``proportional``) when the run is continued. The child
        that began last is not finished, whatever its record says: its attempt
        may not have ended, and the continued run may start it again."""
        self._earlier_seconds += run_seconds
        for spend in earlier:
            if spend.unpriced or spend.dollars is None:
                self._totals.unpriced += 1
            # Sentinel money counts like add_sentinel's: against the run, the
            # loop and the share, never the codon's own cap (only the live
            # attempt is held to that, and an earlier one is not live).
            amount = nanos(spend.dollars or 0.0) + nanos(spend.sentinel_dollars)
            self._commit(spend.slot, amount, spend.seconds, spend.tokens)
            self._began(spend.slot)

    def begin(self, slot: Slot) -> Verdict | None:
        """An attempt of ``slot`` starts; a verdict when a container it draws
        on is already used up (the attempt should not run)."""
        self._live = _Live(slot, self._clock())
        row = self._rows.setdefault(slot.codon_id, Row(slot))
        row.status = "running"
        self._began(slot)
        return self._used_up(slot)

    def add(
        self,
        dollars: float | None,
        output_tokens: int = 0,
        context_tokens: int = 0,
        tokens: int = 0,
    ) -> Verdict | None:
        """One message's usage (a live estimate); a verdict when a budget is crossed.

        ``tokens`` is every token of the message (input, output, cache writes
        and reads); ``context_tokens`` its context (all but the output)."""
        live = self._live
        if live is None:
            return None
        if dollars is None:
            live.unpriced = live.unpriced or output_tokens > 0 or context_tokens > 0
        else:
            live.nanos += nanos(dollars)
        live.output_tokens += output_tokens
        live.context_tokens = max(live.context_tokens, context_tokens)
        live.tokens += tokens
        return self.check()

    def set_total(
        self, dollars: float | None, output_tokens: int, tokens: int = 0
    ) -> Verdict | None:
        """The agent's own figures for the attempt so far, replacing the estimates.

        ``dollars`` and ``output_tokens`` are the attempt's running totals:
        every session of it (an ``exhaustWithPrompt`` extension, a resume after
        a cool-down or an urgent message) added to the ones before, as the
        codon is billed; never one session's own figure, which would drop the
        earlier sessions' spend. They never lower what was counted: money
        seen spent is not taken back, so a result reporting less than the
        messages already did (a stopped session's) leaves the estimate."""
        live = self._live
        if live is None:
            return None
        if dollars is None:
            live.unpriced = True
        else:
            live.nanos = max(live.nanos, nanos(dollars))
            live.unpriced = False
        live.output_tokens = max(live.output_tokens, output_tokens)
        live.tokens = max(live.tokens, tokens)
        return self.check()

    def add_sentinel(self, codon_id: str | None, dollars: float) -> Verdict | None:
        """Money a sentinel spent watching ``codon_id``: it counts against the
        run (and the codon's loop), never against the codon's own cap."""
        amount = nanos(dollars)
        live = self._live
        # Sentinels name the codon by its runtime id or by its hank id (``d`` for ``d#2``).
        running = live is not None and codon_id in (live.slot.codon_id, live.slot.base_id)
        slot = live.slot if live is not None and running else None
        if slot is None and codon_id is not None and codon_id in self._rows:
            slot = self._rows[codon_id].slot
        self._totals.nanos += amount
        if slot is not None:
            self._add_containers(slot, amount, 0.0)
            self._rows[slot.codon_id].dollar_nanos += amount
        return self.check()

    def end(self, status: str) -> None:
        """The attempt ended (``completed``, ``failed``, ``skipped``): its
        spending is committed, whatever the status."""
        live = self._live
        if live is None:
            return
        self._live = None
        seconds = max(self._clock() - live.started, 0.0)
        self._commit(live.slot, live.nanos, seconds, live.tokens)
        row = self._rows[live.slot.codon_id]
        row.status = status if not row.exceeded else "exceeded"
        row.dollar_nanos += live.nanos
        row.unpriced = row.unpriced or live.unpriced
        if live.unpriced:
            self._totals.unpriced += 1
        row.seconds += seconds
        row.output_tokens += live.output_tokens
        row.tokens += live.tokens

    def note(self, verdict: Verdict) -> None:
        """Records that ``verdict`` was acted on (once per crossing)."""
        self.exceeded.append(verdict)
        if verdict.codon_id is not None and verdict.codon_id in self._rows:
            self._rows[verdict.codon_id].exceeded = True

    # -- reading -------------------------------------------------------------

    @property
    def spent_nanos(self) -> int:
        """Every nano-dollar the execution spent, the live attempt included."""
        live = self._live
        return self._totals.nanos + (live.nanos if live is not None else 0)

    @property
    def spent(self) -> float:
        """:attr:`spent_nanos` in dollars (a lower bound when :attr:`unpriced`)."""
        return self.spent_nanos / NANO

    @property
    def spent_tokens(self) -> int:
        """Every token the execution used, the live attempt included."""
        live = self._live
        return self._totals.tokens + (live.tokens if live is not None else 0)

    @property
    def unpriced(self) -> int:
        """How many attempts spent without a price (their dollars are unknown)."""
        live = self._live
        return self._totals.unpriced + (1 if live is not None and live.unpriced else 0)

    @property
    def attempt_unpriced(self) -> bool:
        """Whether the attempt being run used a model without a price."""
        return self._live is not None and self._live.unpriced

    def elapsed(self) -> float:
        """Seconds of the run so far, earlier runs of the execution included."""
        return self._earlier_seconds + max(self._clock() - self._run_started, 0.0)

    @property
    def rows(self) -> list[Row]:
        """This run's codons, in the order they started."""
        return list(self._rows.values())

    def check(self) -> Verdict | None:
        """The first crossed budget of the live attempt, innermost first; None when all hold."""
        live = self._live
        if live is None:
            return None
        slot, now = live.slot, self._clock()
        elapsed = max(now - live.started, 0.0)
        own = self.book.codons.get(slot.base_id)
        if own is not None:
            verdict = self._codon(live, own.caps, own.on_exceeded, elapsed)
            if verdict is not None:
                return verdict
        for container in self._containers(slot):
            verdict = self._share(container, slot, live.nanos) or self._pool(
                container, slot, live, elapsed
            )
            if verdict is not None:
                return verdict
        return None

    # -- the rules -------------------------------------------------------------

    def _began(self, slot: Slot) -> None:
        """Follows the children of ``slot``'s containers: the one that began
        before it, when another, is now finished."""
        for container in self._containers(slot):
            child = slot.child_of(container)
            last = self._last_child.get(container.scope_id)
            if last is not None and last != child:
                self._finished.add((container.scope_id, last))
            self._last_child[container.scope_id] = child

    def _containers(self, slot: Slot) -> tuple[Container, ...]:
        """The containers ``slot`` draws on, innermost first (the check after
        every message asks: kept per loop, not rebuilt)."""
        chain = self._chains.get(slot.loop_id)
        if chain is None:
            loop = None if slot.loop_id is None else self.book.loops.get(slot.loop_id)
            chain = (self.book.run,) if loop is None else (loop, self.book.run)
            self._chains[slot.loop_id] = chain
        return chain

    def _codon(
        self, live: _Live, caps: Caps, on_exceeded: OnExceeded, elapsed: float
    ) -> Verdict | None:
        slot = live.slot
        checks: list[tuple[LimitKind, float | None, float, bool]] = [
            ("dollars", caps.dollars, live.nanos / NANO, False),
            ("outputTokens", caps.output_tokens, live.output_tokens, False),
            ("contextTokens", caps.context_tokens, live.context_tokens, False),
            ("timeSeconds", caps.seconds, elapsed, True),
        ]
        for kind, limit, used, reached in checks:
            if limit is not None and (used >= limit if reached else used > limit):
                return Verdict(
                    "codon", slot.codon_id, kind, limit, used, on_exceeded, slot.codon_id,
                    "codon budget",
                )  # fmt: skip
        return None

    def _child_nanos(self, container: Container, child: str) -> int:
        return self._totals.by_child.get((container.scope_id, child), 0)

    def _allowance(self, container: Container, child: str) -> float:
        """The dollars ``child`` may spend in a proportional container."""
        pool = container.caps.dollars
        assert pool is not None
        mine = container.share(child) * pool
        if container.allocation == "proportional-strict":
            return mine
        rollover = 0.0
        for other in container.children:
            if other != child and (container.scope_id, other) in self._finished:
                left = container.share(other) * pool - self._child_nanos(container, other) / NANO
                rollover += max(0.0, left)
        return mine + rollover

    def _share(self, container: Container, slot: Slot, live_nanos: int) -> Verdict | None:
        if not container.proportional:
            return None
        child = slot.child_of(container)
        used = (self._child_nanos(container, child) + live_nanos) / NANO
        allowance = self._allowance(container, child)
        if used > allowance:
            return Verdict(
                "share", child, "dollars", allowance, used, container.on_exceeded,
                slot.codon_id, f"{container.allocation} share of {_where(container)}",
            )  # fmt: skip
        return None

    def _pool(
        self, container: Container, slot: Slot, live: _Live, elapsed: float
    ) -> Verdict | None:
        caps = container.caps
        if container.scope == "run":
            dollars, seconds = (self._totals.nanos + live.nanos) / NANO, self.elapsed()
            tokens = self._totals.tokens + live.tokens
        else:
            loop = container.scope_id
            dollars = (self._totals.by_loop.get(loop, 0) + live.nanos) / NANO
            seconds = self._totals.loop_seconds.get(loop, 0.0) + elapsed
            tokens = self._totals.loop_tokens.get(loop, 0) + live.tokens
        if caps.dollars is not None and dollars > caps.dollars:
            return Verdict(
                container.scope, container.scope_id, "dollars", caps.dollars, dollars,
                container.on_exceeded, slot.codon_id, container.source,
            )  # fmt: skip
        if caps.tokens is not None and tokens > caps.tokens:
            return Verdict(
                container.scope, container.scope_id, "tokens", caps.tokens, tokens,
                container.on_exceeded, slot.codon_id, container.source,
            )  # fmt: skip
        if caps.seconds is not None and seconds >= caps.seconds:
            return Verdict(
                container.scope, container.scope_id, "timeSeconds", caps.seconds, seconds,
                container.on_exceeded, slot.codon_id, container.source,
            )  # fmt: skip
        return None

    def check_run_left(self, slot: Slot) -> Verdict | None:
        """The run's ceiling, when nothing of it is left for ``slot`` to start."""
        return self._used_up(slot, (self.book.run,))

    def _used_up(
        self, slot: Slot, containers: tuple[Container, ...] | None = None
    ) -> Verdict | None:
        """A container ``slot`` draws on with nothing left (checked before it starts)."""
        for container in containers if containers is not None else self._containers(slot):
            caps = container.caps
            if container.scope == "run":
                dollars, seconds = self._totals.nanos / NANO, self.elapsed()
                tokens = self._totals.tokens
            else:
                dollars = self._totals.by_loop.get(container.scope_id, 0) / NANO
                seconds = self._totals.loop_seconds.get(container.scope_id, 0.0)
                tokens = self._totals.loop_tokens.get(container.scope_id, 0)
            for kind, limit, used in (
                ("dollars", caps.dollars, dollars),
                ("timeSeconds", caps.seconds, seconds),
                ("tokens", caps.tokens, tokens),
            ):
                if limit is not None and used >= limit:
                    return Verdict(
                        container.scope, container.scope_id, kind, limit, used,  # type: ignore[arg-type]
                        container.on_exceeded, slot.codon_id, container.source,
                    )  # fmt: skip
        return None

    def _commit(self, slot: Slot, amount: int, seconds: float, tokens: int = 0) -> None:
        self._totals.nanos += amount
        self._totals.tokens += tokens
        if slot.loop_id is not None:
            loops = self._totals.loop_tokens
            loops[slot.loop_id] = loops.get(slot.loop_id, 0) + tokens
        self._add_containers(slot, amount, seconds)

    def _add_containers(self, slot: Slot, amount: int, seconds: float) -> None:
        totals = self._totals
        if slot.loop_id is not None:
            totals.by_loop[slot.loop_id] = totals.by_loop.get(slot.loop_id, 0) + amount
            totals.loop_seconds[slot.loop_id] = totals.loop_seconds.get(slot.loop_id, 0.0) + seconds
        for container in self._containers(slot):
            key = (container.scope_id, slot.child_of(container))
            totals.by_child[key] = totals.by_child.get(key, 0) + amount


def _where(container: Container) -> str:
    return "the run" if container.scope == "run" else f"loop {container.scope_id}"
