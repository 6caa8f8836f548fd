"""An attempt's money through :class:`AgentEvents`: what the core is told and
what the budget is told stay one figure, across every session of a codon
(``exhaustWithPrompt`` extensions, resumes after a cool-down or an urgent
message), and a stopped session's result never erases spend seen live."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.budget.test_ledger import codon, hank, ledger

from weft.agents.events import SessionResult, Tokens, UsageDelta
from weft.budget import Slot, Verdict, Watchdog
from weft.events.transitions import CodonFinalCostSet, CostsIncremented
from weft.progress import NANO, nanos
from weft.runtime.codon.agent_events import AgentEvents

A = Slot("a", "a")


class Core:
    """The core's codon cost as the reducer keeps it: an increment adds to
    the current cost, the agent's total replaces it."""

    def __init__(self) -> None:
        self.cost = 0
        self.finals: list[float] = []

    def transition(self, t: Any) -> None:
        if isinstance(t, CostsIncremented):
            self.cost += nanos(t.cost_delta)
        elif isinstance(t, CodonFinalCostSet):
            self.cost = nanos(t.final_cost)
            self.finals.append(t.final_cost)

    def emit(self, *_: Any, **__: Any) -> None:
        pass


@dataclass
class Request:
    run_id: str = "run-1"
    planned: Any = field(default_factory=lambda: type("P", (), {"codon_id": "a"})())


class Attempt:
    """The facts :class:`AgentEvents` reads, moved between sessions as the runner moves them."""

    def __init__(self) -> None:
        self.request = Request()
        self.live = True
        self.tokens = Tokens()
        self.tokens_base = Tokens()
        self.cost_base = 0.0
        self.reported_cost: float | None = None
        self.result: SessionResult | None = None
        self.session_id: str | None = None
        self.session: object = object()

    def next_session(self, core: Core) -> None:
        """What the runner does before an extension or a resume: the codon's
        figures so far (the core's) become the base the next session adds to."""
        self.cost_base = core.cost / NANO
        self.tokens_base = self.tokens
        self.result, self.reported_cost = None, None
        self.session = object()


class Stops:
    def __init__(self) -> None:
        self.verdicts: list[Verdict] = []

    async def __call__(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)


def attempt_under(cap: float | None = None) -> tuple[AgentEvents, Attempt, Core, Watchdog]:
    core = Core()
    book = hank(codon("a")) if cap is None else hank(codon("a", maxDollars=cap))
    dog = Watchdog(ledger(book), lambda *_: None)
    dog.begin(A, "run-1", Stops())
    events = AgentEvents(core, dog)  # type: ignore[arg-type]
    return events, Attempt(), core, dog


def message(cost: float, output: int = 1) -> UsageDelta:
    return UsageDelta(model="m", tokens=Tokens(input=10, output=output), cost_usd=cost)


def result(cost: float, output: int = 40) -> SessionResult:
    return SessionResult(ok=True, cost_usd=cost, tokens=Tokens(input=10, output=output))


async def test_every_extension_counts_in_the_budget_once() -> None:
    events, a, core, dog = attempt_under(cap=0.003)
    # Three sessions, each reporting its own process's figures (as Claude's
    # model_usage_since_last_result and every fake do).
    for estimate, final in [(0.0006, 0.0008), (0.0007, 0.0009), (0.0008, 0.0010)]:
        events.on_event(a, message(estimate))
        events.on_event(a, result(final))
        a.next_session(core)
    assert core.finals == pytest.approx([0.0008, 0.0017, 0.0027])
    # The budget holds the codon's figure, not the last session's.
    assert dog.ledger.spent == pytest.approx(0.0027)
    assert dog.ledger.spent_nanos == core.cost
    assert dog.verdict is None
    events.on_event(a, message(0.0004))  # the fourth session's first message crosses $0.003
    assert dog.verdict is not None
    assert dog.verdict.used == pytest.approx(0.0031)
    await asyncio.sleep(0)


async def test_a_session_without_a_result_counts_its_estimates_then_the_resume_adds() -> None:
    # A session killed before its result (a cool-down follows), then resumed.
    events, a, core, dog = attempt_under()
    events.on_event(a, message(0.002))
    events.on_event(a, message(0.003))
    a.next_session(core)
    events.on_event(a, message(0.001))
    events.on_event(a, result(0.0015))
    assert core.cost == nanos(0.0065)
    assert dog.ledger.spent_nanos == core.cost


async def test_a_stopped_sessions_result_below_what_was_seen_live_does_not_erase_it() -> None:
    # A budget stop: the message was seen live ($0.0063), then the stopped
    # session's result reported a smaller figure (fake-claude said $0 here).
    events, a, core, dog = attempt_under(cap=0.001)
    events.on_event(a, message(0.0063))
    assert dog.verdict is not None
    events.on_event(a, result(0.0))
    assert core.finals == [pytest.approx(0.0063)]
    assert dog.ledger.spent == pytest.approx(0.0063)
    # A larger result (the output tokens the live lines undercount) is taken as is.
    a.next_session(core)
    events.on_event(a, message(0.001))
    events.on_event(a, result(0.004))
    assert core.finals[-1] == pytest.approx(0.0103)
    assert dog.ledger.spent == pytest.approx(0.0103)
    await asyncio.sleep(0)


sessions = st.lists(
    st.tuples(
        st.lists(st.integers(min_value=0, max_value=10**6), max_size=4),
        st.one_of(st.none(), st.integers(min_value=0, max_value=3 * 10**6)),
    ),
    min_size=1,
    max_size=8,
)
"""Per session: its messages' live estimates (nano-dollars) and its result
(None: the session ended without one, as a killed or crashed one does)."""


@given(sessions)
def test_the_budget_and_the_core_hold_the_same_figure_over_any_sessions(
    shape: list[tuple[list[int], int | None]],
) -> None:
    async def body() -> None:
        events, a, core, dog = attempt_under()
        expected = 0
        for estimates, final in shape:
            for amount in estimates:
                events.on_event(a, message(amount / NANO))
            if final is not None:
                events.on_event(a, result(final / NANO))
            expected += sum(estimates) if final is None else max(final, sum(estimates))
            a.next_session(core)
        # Every session once, none dropped, no result below what was seen live.
        assert abs(core.cost - expected) <= len(shape)
        assert dog.ledger.spent_nanos == core.cost
        await dog.end("completed")

    asyncio.run(body())
