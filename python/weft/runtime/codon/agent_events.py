"""An attempt's agent events, turned into transitions and stream events.

One method per agent event class (``StderrLine`` has none: it is kept in the
session's stderr tail and verdict, not journaled line by line). Everything is
submitted fire-and-forget: the hot path of agent events never waits for the
journal.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from weft.agents.events import (
    AgentEvent,
    AssistantText,
    RetryNotice,
    SessionResult,
    SessionStarted,
    Thinking,
    ToolResult,
    ToolUse,
    UsageDelta,
    UsageWindow,
)
from weft.budget.watchdog import Watchdog
from weft.clock import utc_now_iso
from weft.events.stream import (
    AssistantActionEvent,
    CodonStartedEvent,
    InfoEvent,
    StreamData,
    ToolResultEvent,
    UsageWindowEvent,
)
from weft.events.transitions import (
    AssistantMessageCountUpdated,
    CodonFinalCostSet,
    CodonStatus,
    CostsIncremented,
    TransitionMetadata,
)
from weft.runtime.codon.attempt import (
    Attempt,
    builtins_of,
    move,
    shorten,
    token_usage_event,
    usage_of,
)
from weft.runtime.codon.breakers import provider_of
from weft.runtime.codon.file_updates import WRITE_TOOLS
from weft.state import StateManager


class _ProcessEstimate:
    """The live estimates of the attempt's current agent process, summed."""

    __slots__ = ("dollars", "session")

    def __init__(self, session: object) -> None:
        self.session = session
        """The :class:`~weft.agents.harness.AgentSession` they belong to."""
        self.dollars = 0.0


class AgentEvents:
    """Records one attempt's agent events through ``manager``."""

    def __init__(self, manager: StateManager, budget: Watchdog | None = None) -> None:
        self.manager = manager
        self.budget = budget
        """Fed every figure the core is fed (the codon's, over all its sessions),
        so a budget trips on the message that crosses it."""
        self._estimates: weakref.WeakKeyDictionary[Attempt, _ProcessEstimate] = (
            weakref.WeakKeyDictionary()
        )
        """Per attempt, what its current agent process was seen to spend live."""
        self._windows: dict[str, str] = {}
        """Per provider, the usage-window status last journaled (the agent
        reports it at every turn; the journal keeps the changes)."""

    def _estimate(self, a: Attempt) -> _ProcessEstimate:
        """The estimates of ``a``'s current process (a new session starts at 0)."""
        estimate = self._estimates.get(a)
        if estimate is None or estimate.session is not a.session:
            estimate = self._estimates[a] = _ProcessEstimate(a.session)
        return estimate

    def emit(self, event: StreamData, run_id: str | None, codon_id: str | None) -> None:
        """Queues a stream event in the one order of the execution."""
        self.manager.emit(event, run_id=run_id, codon_id=codon_id)

    def _move(self, a: Attempt, to: CodonStatus, meta: TransitionMetadata | None = None) -> None:
        move(self.manager, a, to, meta)

    def on_event(self, a: Attempt, event: AgentEvent) -> None:
        """Turns one agent event into transitions and stream events: one method
        per event class (StderrLine has none: it is kept in the session's
        stderr tail and verdict, not journaled line by line)."""
        handler = _AGENT_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, a, event)

    def _session_started(self, a: Attempt, event: SessionStarted) -> None:
        req = a.request
        a.session_id = event.session_id
        a.session_reported = True
        if a.status != "initializing":
            return
        self._move(a, "running", TransitionMetadata(claude_session_id=event.session_id))
        prompt = a.prompt
        self.emit(
            CodonStartedEvent(
                codon_id=req.planned.codon_id,
                codon_name=req.planned.codon.name,
                codon_description=req.planned.codon.description,
                session_id=event.session_id,
                previous_session_id=a.resumed_from,
                start_time=utc_now_iso(),
                model=event.model or a.model,
                harness=a.harness,
                prompt_metadata=(
                    None
                    if prompt is None or prompt.prompt_metadata is None
                    else builtins_of(prompt.prompt_metadata)
                ),
            ),
            req.run_id,
            req.planned.codon_id,
        )

    def _text(self, a: Attempt, event: AssistantText) -> None:
        if not event.partial:
            codon_id = a.request.planned.codon_id
            action = AssistantActionEvent(codon_id=codon_id, action="message", content=event.text)
            self._action(a, event, action)

    def _thinking(self, a: Attempt, event: Thinking) -> None:
        codon_id = a.request.planned.codon_id
        action = AssistantActionEvent(codon_id=codon_id, action="thinking", content=event.text)
        self._action(a, event, action)

    def _tool_use(self, a: Attempt, event: ToolUse) -> None:
        if event.subagent:
            return
        a.tools[event.tool_use_id] = (event.name, time.monotonic())
        if event.name in WRITE_TOOLS:
            a.wrote_files = True
        action = AssistantActionEvent(
            codon_id=a.request.planned.codon_id,
            action="tool_use",
            content=f"{event.name}",
            tool_name=event.name,
            tool_input=event.input,
            tool_use_id=event.tool_use_id,
        )
        self._action(a, event, action)

    def _action(
        self, a: Attempt, event: AssistantText | Thinking | ToolUse, action: AssistantActionEvent
    ) -> None:
        """Emits an assistant action; a new message id counts a message."""
        if event.subagent:
            return
        run_id, codon_id = a.request.run_id, a.request.planned.codon_id
        self.emit(action, run_id, codon_id)
        if event.message_id is not None and event.message_id not in a.messages:
            a.messages.add(event.message_id)
            if a.live:
                self.manager.transition(
                    AssistantMessageCountUpdated(
                        run_id=run_id, codon_id=codon_id, new_count=len(a.messages)
                    )
                )

    def _tool_result(self, a: Attempt, event: ToolResult) -> None:
        if event.subagent:
            return
        codon_id = a.request.planned.codon_id
        name, since = a.tools.pop(event.tool_use_id, (None, None))
        text, truncated = shorten(event.content)
        self.emit(
            ToolResultEvent(
                codon_id=codon_id,
                tool_use_id=event.tool_use_id,
                tool_name=name,
                result=text,
                truncated=truncated,
                original_length=len(event.content),
                execution_time_ms=(
                    None if since is None else int((time.monotonic() - since) * 1000)
                ),
                is_error=event.is_error,
            ),
            a.request.run_id,
            codon_id,
        )

    def _usage_delta(self, a: Attempt, event: UsageDelta) -> None:
        run_id, codon_id = a.request.run_id, a.request.planned.codon_id
        a.tokens = a.tokens + event.tokens
        if a.live:
            a.reported_cost = None  # an increment after the total: ask the core
            if event.cost_usd is not None:
                self._estimate(a).dollars += event.cost_usd
            self.manager.transition(
                CostsIncremented(
                    run_id=run_id,
                    codon_id=codon_id,
                    cost_delta=event.cost_usd or 0.0,
                    tokens_delta=usage_of(event.tokens),
                )
            )
            if self.budget is not None:
                self.budget.usage(event.cost_usd, event.tokens)
        self.emit(
            token_usage_event(codon_id, event.tokens, event.cost_usd, model=event.model),
            run_id,
            codon_id,
        )

    def _result(self, a: Attempt, event: SessionResult) -> None:
        run_id, codon_id = a.request.run_id, a.request.planned.codon_id
        a.result = event
        if event.session_id:
            a.session_id = event.session_id
        if event.cost_usd is None or not a.live:
            return
        # A resumed or extended session's result is its own process's; a.*_base
        # holds the attempt's earlier sessions, so the codon's figure is the sum.
        a.tokens = a.tokens_base + event.tokens
        a.reported_cost = a.cost_base + own_cost(event.cost_usd, self._estimate(a).dollars)
        self.manager.transition(
            CodonFinalCostSet(
                run_id=run_id,
                codon_id=codon_id,
                final_cost=a.reported_cost,
                final_tokens=usage_of(a.tokens),
            )
        )
        if self.budget is not None:
            # The attempt's running total, as the core now holds it: each
            # session adds to the ones before (never one session's figure alone).
            self.budget.total(a.reported_cost, a.tokens)
        self.emit(
            token_usage_event(codon_id, a.tokens, a.reported_cost, final=True), run_id, codon_id
        )

    def _usage_window(self, a: Attempt, event: UsageWindow) -> None:
        provider = provider_of(a.harness)
        if self._windows.get(provider) == event.status:
            return
        self._windows[provider] = event.status
        codon_id = a.request.planned.codon_id
        self.emit(
            UsageWindowEvent(
                provider=provider,
                status=event.status,
                codon_id=codon_id,
                window=event.window,
                resets_at=event.resets_at_ms,
                utilization=event.utilization,
            ),
            a.request.run_id,
            codon_id,
        )

    def _retry_notice(self, a: Attempt, event: RetryNotice) -> None:
        codon_id = a.request.planned.codon_id
        detail = f" ({event.error})" if event.error else ""
        self.emit(
            InfoEvent(
                message=f"{codon_id}: the agent retries an API call "
                f"(attempt {event.attempt}){detail}"
            ),
            a.request.run_id,
            codon_id,
        )


def own_cost(reported: float, estimated: float) -> float:
    """What one agent process cost: its result's figure, never less than the
    live estimates of its messages.

    The result is normally the larger: it covers the same API calls and counts
    every output token, where the streamed lines undercount them (Claude Code
    2.1.330's carry ``output_tokens: 1``). A result below the estimates is
    missing calls whose usage the agent already reported, message by message
    (a stopped session's result that left out what an unprinted result had
    counted). That money was spent, so the estimate is the honest lower bound:
    billing the smaller figure would erase real spend and let a budget be
    crossed again on resume."""
    return max(reported, estimated)


_AgentHandler = Callable[[AgentEvents, Attempt, Any], None]
_AGENT_HANDLERS: dict[type[Any], _AgentHandler] = {
    SessionStarted: AgentEvents._session_started,
    AssistantText: AgentEvents._text,
    Thinking: AgentEvents._thinking,
    ToolUse: AgentEvents._tool_use,
    ToolResult: AgentEvents._tool_result,
    UsageDelta: AgentEvents._usage_delta,
    SessionResult: AgentEvents._result,
    RetryNotice: AgentEvents._retry_notice,
    UsageWindow: AgentEvents._usage_window,
}
"""One handler per agent event class the runner acts on."""
