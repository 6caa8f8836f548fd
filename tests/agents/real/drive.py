"""Run one session through a Weft harness and boil its events down to what
the conformance suites compare between the real CLI and the fake."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.agents.real.mock_http import Billed

from weft.agents.events import (
    AgentEvent,
    AssistantText,
    ErrorClass,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
)
from weft.agents.harness import Harness, SessionSpec, StopReason
from weft.agents.pricing import default_table

KINDS = (SessionStarted, AssistantText, Thinking, ToolUse, ToolResult, RetryNotice, SessionResult)


@dataclass
class Outcome:
    """What Weft made of one session."""

    events: list[AgentEvent]
    exited: SessionExited
    kinds: frozenset[str] = field(default_factory=frozenset)

    @property
    def verdict(self) -> tuple[bool, ErrorClass | None, bool]:
        return self.exited.ok, self.exited.error_class, self.exited.retriable

    def of(self, kind: type[AgentEvent]) -> list[AgentEvent]:
        return [e for e in self.events if isinstance(e, kind)]

    def unpaired_tools(self) -> set[str]:
        uses = {e.tool_use_id for e in self.of(ToolUse)}  # type: ignore[attr-defined]
        results = {e.tool_use_id for e in self.of(ToolResult)}  # type: ignore[attr-defined]
        return uses ^ results

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.of(AssistantText) if not e.partial)  # type: ignore[attr-defined]


async def drive(
    harness: Harness,
    spec: SessionSpec,
    *,
    stop_after: float | None = None,
    kill_after: float | None = None,
    stop_reason: StopReason = StopReason.OPERATOR,
    once: Callable[[], bool] | None = None,
) -> Outcome:
    """Start ``spec``, collect every event (stopping or killing it after a
    delay counted from the session's start, or from ``once`` holding)."""
    session = await harness.start(spec)
    events: list[AgentEvent] = []

    async def collect() -> None:
        async for event in session.events():
            events.append(event)

    task = asyncio.ensure_future(collect())
    if stop_after is not None or kill_after is not None:
        # The delay counts from ``once`` holding (the mock saw the call), so a
        # slow machine cannot stop the CLI before it reached the point tested.
        while once is not None and not once() and not task.done():
            await asyncio.sleep(0.05)
        await asyncio.sleep(stop_after if stop_after is not None else kill_after or 0)
        if stop_after is not None:
            await session.stop(stop_reason)
        else:
            await session.kill()
    await asyncio.wait_for(task, 120)
    exited = events[-1]
    assert isinstance(exited, SessionExited), events[-3:]
    kinds = frozenset(type(e).__name__ for e in events if isinstance(e, KINDS))
    return Outcome(events, exited, kinds)


def billed_usd(model: str, billed: list[Billed]) -> float:
    """What the mock's answers cost by Weft's price table (per request, summed)."""
    table = default_table()
    at = dt.datetime.now(dt.UTC).date()
    nanos = 0
    for b in billed:
        tokens = Tokens(
            input=b.input, output=b.output, cache_read=b.cache_read, cache_creation=b.cache_creation
        )
        cost = table.cost_nanos(model, tokens, at, per_request=True)
        assert cost is not None, f"{model} is unpriced"
        nanos += cost
    return nanos / 1e9
