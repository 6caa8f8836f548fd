"""The trace of a run: a pure fold of its journaled events into span records.

Live (:mod:`weft.telemetry.sink`) and afterwards (``weft export-trace``) the same
events in the same order make the same spans: :class:`TraceFold` is fed typed
events with their commit time (to the millisecond, what the journal keeps) and
returns the spans each event finished. It does no I/O, reads no clock and never
imports the SDK; :mod:`weft.telemetry.export` turns records into OTLP spans.

The tree of one run (one trace)::

    weft run <workflow>                 gen_ai.operation.name=invoke_workflow, weft.cost_usd
      weft codon <id>                   every attempt of the codon in this run
        invoke_agent <id>               one attempt: provider, models, tokens, cost
          weft rig_setup                its rig setup (the agent has not started yet)
          weft session <n>              one agent process (a resumed session is another)
            execute_tool <name>         each tool call, from its tool_use to its result
          weft checkpoint               each checkpoint of the attempt
          chat <model>                  each sentinel call (sentinel.triggered -> output)

Budget, breaker, retry, cool-down and error events become span events of the
innermost open span they are about (the run's when none is open).

Figures come from the one fold: each attempt's cost and tokens are
:class:`weft.progress.CodonProgress`'s at its end, the codon's cost is its
:attr:`~weft.progress.CodonProgress.cost` (the seed's rule), the run's is
:attr:`~weft.progress.RunProgress.total_cost`, so a backend shows what
``weft status`` shows. Only the split of tokens by kind (input, output, cache),
which the fold does not keep, is tallied here, by the fold's own rule (increments
add, an agent's reported total replaces).

Content: prompts, assistant messages, tool arguments and results and sentinel
outputs are attributes only when :data:`~weft.telemetry.settings.CAPTURE_VAR`
asks for them in spans; rig output, user messages, environments and headers never
are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from weft.events.stream import (
    AssistantActionEvent,
    BreakerChangedEvent,
    BreakerWaitingEvent,
    BudgetExceededEvent,
    CodonRetryEvent,
    CodonStartedEvent,
    ErrorEvent,
    Event,
    ProcessEndedEvent,
    ProcessStartedEvent,
    RigSetupCompletedEvent,
    RigSetupFailedEvent,
    SentinelError,
    SentinelOutput,
    SentinelTriggered,
    SessionCooldownEvent,
    SessionGaveUpEvent,
    SessionResumedEvent,
    TokenUsageEvent,
    ToolResultEvent,
)
from weft.events.transitions import (
    CheckpointCreated,
    CodonFinalCostSet,
    CodonStarted,
    CodonTransitioned,
    CostsIncremented,
    CostsUpdated,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    RunStopped,
    TokenUsage,
)
from weft.money import NANO
from weft.progress import RunProgress
from weft.telemetry.settings import TraceParent, attempt_key, run_scope, span_id, trace_id

Scalar = str | int | float | bool

COST = "weft.cost_usd"
"""Dollars, by Weft's pricing (the GenAI conventions have no cost attribute)."""
RUN_ID = "weft.run.id"
CODON_ID = "weft.codon.id"
ATTEMPT = "weft.codon.attempt"
STATUS = "weft.status"

PROVIDERS = {
    "claude": gen_ai.GenAiProviderNameValues.ANTHROPIC.value,
    "codex": gen_ai.GenAiProviderNameValues.OPENAI.value,
    "gemini": gen_ai.GenAiProviderNameValues.GCP_GEMINI.value,
}
"""The ``gen_ai.provider.name`` of each harness (the fake agents stand in for them)."""

OPEN_TOOL_CALLS = 256
"""Tool calls kept open per session at most; an agent that never reports results
cannot grow the fold (the oldest is closed, marked unfinished)."""

EVENT_FIELDS: dict[type[Any], tuple[str, ...]] = {
    BudgetExceededEvent: ("scope", "scope_id", "limit_kind", "limit", "used", "on_exceeded"),
    BreakerChangedEvent: ("provider", "state", "previous", "reason", "consecutive_failures"),
    BreakerWaitingEvent: ("provider", "retry_in_ms"),
    SessionCooldownEvent: ("session", "duration_ms", "error_class", "consecutive_errors"),
    SessionResumedEvent: ("session", "reason"),
    SessionGaveUpEvent: ("sessions", "consecutive_errors", "total_errors"),
    CodonRetryEvent: ("attempt", "max_attempts", "delay_ms", "reason"),
    RigSetupFailedEvent: ("failure_type", "checkpoint_type"),
    ErrorEvent: ("message", "severity", "fatal", "code"),
    SentinelError: ("sentinel_id", "error_type", "retriable"),
}
"""The stream events that become span events, and the fields each carries (an
allow-list: nothing a person wrote or a command printed)."""


@dataclass(slots=True)
class SpanRecord:
    """One finished span, in Weft's terms (ids are ints, times ns since the epoch)."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, Scalar] = field(default_factory=dict)
    events: list[tuple[str, int, dict[str, Scalar]]] = field(default_factory=list)
    error: str | None = None
    """Set: the span's status is ERROR with this description."""
    remote_parent: bool = False
    """The parent is the caller's span (``TRACEPARENT``), not one of Weft's."""


@dataclass(slots=True)
class _Attempt:
    key: str
    codon_id: str
    span: SpanRecord
    usage: TokenUsage = field(default_factory=TokenUsage)
    sessions: int = 0
    session: SpanRecord | None = None
    session_pid: int | None = None
    tools: dict[str, SpanRecord] = field(default_factory=dict)
    sentinels: dict[tuple[str, int], SpanRecord] = field(default_factory=dict)
    output: str | None = None


def _usage_sum(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_creation_tokens=a.cache_creation_tokens + b.cache_creation_tokens,
        cache_read_tokens=a.cache_read_tokens + b.cache_read_tokens,
    )


def usage_attributes(usage: TokenUsage) -> dict[str, Scalar]:
    """The GenAI usage attributes of a token count. ``gen_ai.usage.input_tokens``
    counts every input token, cached ones included, as the conventions ask; the
    cache attributes say how many of them were cache writes and reads."""
    return {
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens
        + usage.cache_creation_tokens
        + usage.cache_read_tokens,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
        gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_creation_tokens,
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
    }


class TraceFold:
    """Folds one execution's events, run after run, into finished span records.

    ``parent``: the caller's context, which every run's span joins.
    ``workflow``: the execution's id (its folder's name): what runs are shown
    under, and, with each run's id, what their ids derive from.
    ``capture``: prompt and output content go into spans (the opt-in).
    """

    def __init__(
        self, *, workflow: str, parent: TraceParent | None = None, capture: bool = False
    ) -> None:
        self.workflow = workflow
        self.parent = parent
        self.capture = capture
        self.progress = RunProgress()
        self._run_id: str | None = None
        self._scope = ""
        self._trace = 0
        self._run: SpanRecord | None = None
        self._codons: dict[str, SpanRecord] = {}
        self._attempts: dict[str, _Attempt] = {}
        """The open attempt of each codon."""
        self._latest: dict[str, str] = {}
        """codon id -> the span key of its latest attempt (open or not)."""
        self._orphans: dict[tuple[str, int], SpanRecord] = {}
        """Sentinel calls triggered after their codon's attempt ended."""
        self._out: list[SpanRecord] = []

    # -- feeding ---------------------------------------------------------------

    def feed(
        self, event: Event | None, at_ns: int, seq: int, codon_id: str | None = None
    ) -> list[SpanRecord]:
        """Folds one event committed at ``at_ns``; returns the spans it finished."""
        self.progress.fold(event, at_ns, seq, codon_id)
        if event is None:
            return []
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, at_ns, codon_id)
        elif type(event) in EVENT_FIELDS:
            self._span_event(event, at_ns, codon_id)
        out, self._out = self._out, []
        return out

    def finish(self, at_ns: int) -> list[SpanRecord]:
        """Ends what is still open (a run whose end is not journaled: the process
        died, or the live run is closing); the spans say they are unfinished."""
        if self._run is not None:
            self._run.attributes["weft.unfinished"] = True
            self._end_run(at_ns, None)
        out, self._out = self._out, []
        return out

    @property
    def run_id(self) -> str | None:
        """The run being folded (the latest ``RunStarted``)."""
        return self._run_id

    # -- the run ---------------------------------------------------------------

    def _id(self, key: str) -> int:
        return span_id(self._scope, key)

    def _span(self, key: str, name: str, parent: SpanRecord | None, at: int) -> SpanRecord:
        return SpanRecord(
            name=name,
            trace_id=self._trace,
            span_id=self._id(key),
            parent_id=None if parent is None else parent.span_id,
            start_ns=at,
        )

    def _run_started(self, event: RunStarted, at: int, _: str | None) -> None:
        if self._run is not None:  # the previous run's end was never journaled
            self._run.attributes["weft.unfinished"] = True
            self._end_run(at, None)
        self._run_id = event.run_id
        self._scope = run_scope(self.workflow, event.run_id)
        self._trace = trace_id(self._scope, self.parent)
        run = self._span("run", f"weft run {self.workflow}", None, at)
        if self.parent is not None:
            run.parent_id, run.remote_parent = self.parent.span_id, True
        run.attributes.update(
            {
                gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.INVOKE_WORKFLOW.value,
                gen_ai.GEN_AI_WORKFLOW_NAME: self.workflow,
                RUN_ID: event.run_id,
            }
        )
        if self.progress.continuation:
            run.attributes["weft.run.continuation"] = self.progress.continuation
        self._run = run

    def _run_ended(self, event: Any, at: int, _: str | None) -> None:
        if self._run is None or getattr(event, "run_id", self._run_id) != self._run_id:
            return
        ending = self.progress.ending
        error = None
        if ending is not None and ending.kind in ("failed", "crashed"):
            error = ending.reason or ending.kind
        self._end_run(at, error)

    def _end_run(self, at: int, error: str | None) -> None:
        run = self._run
        assert run is not None
        for codon_id in list(self._attempts):
            self._end_attempt(codon_id, at, "unfinished")
        for codon_id in list(self._codons):
            self._end_codon(codon_id)
        progress = self.progress
        run.attributes.update(
            {
                STATUS: progress.run_status or "unfinished",
                COST: progress.total_cost_nanos / NANO,
                "weft.spent_usd": progress.spent_nanos / NANO,
                "weft.sentinel_cost_usd": progress.sentinel_cost,
                "weft.tokens": progress.total_tokens,
                "weft.codons.completed": progress.counts()["completed"],
                "weft.codons.failed": progress.counts()["failed"],
            }
        )
        run.error = error
        run.end_ns = at
        self._out.append(run)
        self._run = None

    # -- codons and attempts ---------------------------------------------------

    def _codon_started(self, event: CodonStarted, at: int, _: str | None) -> None:
        if self._run is None or event.run_id != self._run_id:
            return
        for other in list(self._codons):
            if other != event.codon_id and other not in self._attempts:
                self._end_codon(other)  # Weft runs one codon at a time: it is done
        if event.codon_id in self._attempts:  # a second start without an end
            self._end_attempt(event.codon_id, at, "unfinished")
        codon = self._codons.get(event.codon_id)
        c = self.progress.codon(event.codon_id)
        if codon is None:
            # Keyed by its first attempt's start too: a codon run again later in the
            # same run (after its span closed) is another span, never the same id twice.
            codon = self._span(
                f"codon\0{event.codon_id}\0{event.start_time}",
                f"weft codon {event.codon_id}",
                self._run,
                at,
            )
            codon.attributes.update(
                {
                    CODON_ID: event.codon_id,
                    gen_ai.GEN_AI_AGENT_NAME: (c.name if c and c.name else event.codon_id),
                }
            )
            if event.loop_context is not None:
                codon.attributes["weft.loop.id"] = event.loop_context.loop_id
                codon.attributes["weft.loop.iteration"] = event.loop_context.iteration
            self._codons[event.codon_id] = codon
        key = attempt_key(event.codon_id, event.start_time)
        span = self._span(key, f"invoke_agent {event.codon_id}", codon, at)
        span.attributes.update(
            {
                gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value,
                gen_ai.GEN_AI_AGENT_ID: event.codon_id,
                gen_ai.GEN_AI_AGENT_NAME: str(codon.attributes[gen_ai.GEN_AI_AGENT_NAME]),
                CODON_ID: event.codon_id,
                ATTEMPT: c.attempts if c is not None else 1,
            }
        )
        # The plan's model (the fold's ``model`` becomes what the agent reported).
        model = None if c is None or c.config is None else c.config.get("model")
        if isinstance(model, str) and model:
            span.attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
        self._attempts[event.codon_id] = _Attempt(key, event.codon_id, span)
        self._latest[event.codon_id] = key

    def _moved(self, event: CodonTransitioned, at: int, _: str | None) -> None:
        if event.to_status not in ("completed", "failed", "skipped"):
            return
        meta = event.metadata
        error = None
        if event.to_status == "failed":
            c = self.progress.codon(event.codon_id)
            error = (c.failure if c is not None else None) or "failed"
        a = self._attempts.get(event.codon_id)
        if a is not None and meta is not None and meta.claude_session_id:
            a.span.attributes.setdefault(gen_ai.GEN_AI_CONVERSATION_ID, meta.claude_session_id)
        if meta is not None and meta.checkpoint_sha and self._run is not None:
            kind = "completion" if event.to_status == "completed" else event.to_status
            self._checkpoint_span(event.codon_id, meta.checkpoint_sha, kind, at)
        self._end_attempt(event.codon_id, at, event.to_status, error)

    def _end_attempt(self, codon_id: str, at: int, status: str, error: str | None = None) -> None:
        a = self._attempts.pop(codon_id, None)
        if a is None:
            return
        self._end_session(a, at)
        for sentinel in a.sentinels.values():  # a call the codon's end cut short
            sentinel.attributes["weft.unfinished"] = True
            sentinel.end_ns = at
            self._out.append(sentinel)
        c = self.progress.codon(codon_id)
        span = a.span
        span.attributes.update(usage_attributes(a.usage))
        span.attributes[STATUS] = status
        if c is not None:
            span.attributes[COST] = c.attempt_cost_nanos / NANO
            span.attributes["weft.tokens"] = c.attempt_tokens
            if c.unpriced:
                span.attributes["weft.unpriced"] = True
        if self.capture and a.output is not None:
            span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": a.output}]}]
            )
        span.error = error
        span.end_ns = at
        self._out.append(span)
        codon = self._codons.get(codon_id)
        if codon is not None:
            codon.end_ns = at
            codon.error = error
            codon.attributes[STATUS] = status

    def _end_codon(self, codon_id: str) -> None:
        codon = self._codons.pop(codon_id)
        c = self.progress.codon(codon_id)
        if c is not None:
            codon.attributes[COST] = c.cost_nanos / NANO
            codon.attributes["weft.tokens"] = c.tokens
            codon.attributes["weft.attempts"] = c.attempts
        if not codon.end_ns:
            codon.end_ns = codon.start_ns
        self._out.append(codon)

    def _attempt(self, codon_id: str | None) -> _Attempt | None:
        return None if codon_id is None else self._attempts.get(codon_id)

    # -- what an attempt did ---------------------------------------------------

    def _agent_reported(self, event: CodonStartedEvent, at: int, codon_id: str | None) -> None:
        a = self._attempt(codon_id or event.codon_id)
        if a is None:
            return
        attrs = a.span.attributes
        attrs[gen_ai.GEN_AI_CONVERSATION_ID] = event.session_id
        if event.model:
            attrs[gen_ai.GEN_AI_RESPONSE_MODEL] = event.model
        if event.harness:
            attrs["weft.harness"] = event.harness
            provider = PROVIDERS.get(event.harness.removeprefix("fake-"))
            if provider is not None:
                attrs[gen_ai.GEN_AI_PROVIDER_NAME] = provider
        if a.session is not None:
            a.session.attributes[gen_ai.GEN_AI_CONVERSATION_ID] = event.session_id

    def _tokens(self, event: TokenUsageEvent, at: int, codon_id: str | None) -> None:
        a = self._attempt(codon_id or event.codon_id)
        if a is not None and event.model_id:
            a.span.attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = event.model_id

    def _costs_incremented(self, event: CostsIncremented, at: int, _: str | None) -> None:
        a = self._attempt(event.codon_id)
        if a is not None:
            a.usage = _usage_sum(a.usage, event.tokens_delta)

    def _costs_set(self, event: CodonFinalCostSet | CostsUpdated, at: int, _: str | None) -> None:
        a = self._attempt(event.codon_id)
        if a is not None:
            a.usage = event.final_tokens if isinstance(event, CodonFinalCostSet) else event.tokens

    def _process_started(self, event: ProcessStartedEvent, at: int, codon_id: str | None) -> None:
        a = self._attempt(codon_id or event.codon_id)
        if a is None or event.role != "agent":
            return
        self._end_session(a, at)
        a.sessions += 1
        session = self._span(
            f"session\0{a.key}\0{a.sessions}", f"weft session {a.sessions}", a.span, at
        )
        session.attributes["weft.session.number"] = a.sessions
        conversation = a.span.attributes.get(gen_ai.GEN_AI_CONVERSATION_ID)
        if conversation is not None and a.sessions > 1:
            session.attributes["weft.session.resumes"] = conversation
        a.session, a.session_pid = session, event.pid

    def _process_ended(self, event: ProcessEndedEvent, at: int, codon_id: str | None) -> None:
        for a in self._attempts.values():
            if a.session_pid == event.pid:
                self._end_session(a, at)
                return

    def _end_session(self, a: _Attempt, at: int) -> None:
        for tool in a.tools.values():  # no result came: the session ended under it
            tool.attributes["weft.unfinished"] = True
            tool.end_ns = at
            self._out.append(tool)
        a.tools = {}
        if a.session is not None:
            a.session.end_ns = at
            self._out.append(a.session)
        a.session, a.session_pid = None, None

    def _action(self, event: AssistantActionEvent, at: int, codon_id: str | None) -> None:
        a = self._attempt(codon_id or event.codon_id)
        if a is None:
            return
        if event.action == "message":
            a.output = event.content
            return
        if event.action != "tool_use" or not event.tool_use_id:
            return
        parent = a.session or a.span
        name = event.tool_name or "tool"
        tool = self._span(f"tool\0{a.key}\0{event.tool_use_id}", f"execute_tool {name}", parent, at)
        tool.attributes.update(
            {
                gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value,
                gen_ai.GEN_AI_TOOL_NAME: name,
                gen_ai.GEN_AI_TOOL_CALL_ID: event.tool_use_id,
            }
        )
        if self.capture and event.tool_input is not None:
            tool.attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(event.tool_input)
        if len(a.tools) >= OPEN_TOOL_CALLS:
            oldest = a.tools.pop(next(iter(a.tools)))
            oldest.attributes["weft.unfinished"] = True
            oldest.end_ns = at
            self._out.append(oldest)
        a.tools[event.tool_use_id] = tool

    def _tool_result(self, event: ToolResultEvent, at: int, codon_id: str | None) -> None:
        a = self._attempt(codon_id or event.codon_id)
        tool = None if a is None else a.tools.pop(event.tool_use_id, None)
        if tool is None:
            return
        if event.is_error:
            tool.error = "the tool reported an error"
        if self.capture:
            tool.attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = event.result
        tool.end_ns = at
        self._out.append(tool)

    def _rig_completed(self, event: RigSetupCompletedEvent, at: int, codon_id: str | None) -> None:
        a = self._attempt(codon_id or event.codon_id)
        if a is None:
            return
        rig = self._span(
            f"rig\0{a.key}",
            "weft rig_setup",
            a.span,
            max(at - event.duration_ms * 1_000_000, a.span.start_ns),
        )
        rig.attributes["weft.rig.operations"] = event.operation_count
        rig.end_ns = at
        self._out.append(rig)
        if event.created_checkpoint:
            self._checkpoint_span(a.codon_id, event.created_checkpoint, "rig", at)

    def _rig_failed(self, event: RigSetupFailedEvent, at: int, codon_id: str | None) -> None:
        self._span_event(event, at, codon_id)
        a = self._attempt(codon_id or event.codon_id)
        if a is None:
            return
        rig = self._span(f"rig\0{a.key}", "weft rig_setup", a.span, a.span.start_ns)
        rig.attributes["weft.rig.failure"] = event.failure_type
        rig.error = f"rig setup failed: {event.failure_type}"
        rig.end_ns = at
        self._out.append(rig)

    def _checkpoint(self, event: CheckpointCreated, at: int, _: str | None) -> None:
        if self._run is not None and event.run_id == self._run_id:
            self._checkpoint_span(event.codon_id, event.sha, event.checkpoint_type, at)

    def _checkpoint_span(self, codon_id: str, sha: str, kind: str, at: int) -> None:
        """A checkpoint, as a moment under the attempt that made it (under the run
        when no attempt of the codon is known)."""
        assert self._run is not None
        key = self._latest.get(codon_id)
        self._out.append(
            SpanRecord(
                name="weft checkpoint",
                trace_id=self._trace,
                span_id=self._id(f"checkpoint\0{key}\0{kind}\0{sha}"),
                parent_id=self._run.span_id if key is None else self._id(key),
                start_ns=at,
                end_ns=at,
                attributes={
                    "weft.checkpoint.sha": sha,
                    "weft.checkpoint.type": kind,
                    CODON_ID: codon_id,
                },
            )
        )

    def _sentinel_triggered(self, event: SentinelTriggered, at: int, _: str | None) -> None:
        span = self._sentinel_span(event.codon_id, event.sentinel_id, event.trigger_number, at)
        if span is None:
            return
        a = self._attempts.get(event.codon_id)
        if a is not None:
            a.sentinels[(event.sentinel_id, event.trigger_number)] = span
        else:  # triggered after its codon ended (a sealed codon's last batch)
            self._orphans[(event.sentinel_id, event.trigger_number)] = span

    def _sentinel_span(
        self, codon_id: str, sentinel_id: str, trigger: int, at: int
    ) -> SpanRecord | None:
        """A sentinel's model call, under the latest attempt of its codon."""
        key = self._latest.get(codon_id)
        if self._run is None or key is None:
            return None
        return SpanRecord(
            name="chat sentinel",
            trace_id=self._trace,
            span_id=self._id(f"sentinel\0{key}\0{sentinel_id}\0{trigger}"),
            parent_id=self._id(key),
            start_ns=at,
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.CHAT.value,
                "weft.sentinel.id": sentinel_id,
                "weft.sentinel.trigger": trigger,
                CODON_ID: codon_id,
            },
        )

    def _sentinel_output(self, event: SentinelOutput, at: int, _: str | None) -> None:
        span = self._take_sentinel(event.codon_id, event.sentinel_id, event.trigger_number, at)
        if span is None:
            return
        model = event.model or ""
        if model:
            span.name = f"chat {model}"
            provider, _, name = model.partition("/")
            span.attributes[gen_ai.GEN_AI_REQUEST_MODEL] = name or provider
            if name:
                span.attributes[gen_ai.GEN_AI_PROVIDER_NAME] = provider
        span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = event.tokens.input
        span.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = event.tokens.output
        span.attributes[COST] = event.cost
        if self.capture:
            content = event.content if isinstance(event.content, str) else json.dumps(event.content)
            span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": content}]}]
            )
        span.end_ns = at
        self._out.append(span)

    def _sentinel_error(self, event: SentinelError, at: int, codon_id: str | None) -> None:
        span = (
            None
            if event.trigger_number is None
            else self._take_sentinel(event.codon_id, event.sentinel_id, event.trigger_number, at)
        )
        if span is None:
            self._span_event(event, at, codon_id)
            return
        span.error = f"{event.error_type}: {event.message}"
        span.end_ns = at
        self._out.append(span)

    def _take_sentinel(
        self, codon_id: str, sentinel_id: str, trigger: int, at: int
    ) -> SpanRecord | None:
        """The call's span opened by its ``sentinel.triggered``; a sentinel that does
        not report triggers (the default) journals only the answer: then the span is
        the moment the answer came (``weft.sentinel.started`` false)."""
        a = self._attempts.get(codon_id)
        found = None if a is None else a.sentinels.pop((sentinel_id, trigger), None)
        if found is None:
            found = self._orphans.pop((sentinel_id, trigger), None)
        if found is None:
            found = self._sentinel_span(codon_id, sentinel_id, trigger, at)
            if found is not None:
                found.attributes["weft.sentinel.started"] = False
        return found

    # -- span events -----------------------------------------------------------

    def _span_event(self, event: Any, at: int, codon_id: str | None) -> None:
        fields = EVENT_FIELDS.get(type(event), ())
        values = msgspec.structs.asdict(event)
        attrs: dict[str, Scalar] = {
            f"weft.{name}": values[name]
            for name in fields
            if isinstance(values.get(name), str | int | float | bool)
        }
        about = codon_id or getattr(event, "codon_id", None) or getattr(event, "codon", None)
        a = self._attempt(about)
        if isinstance(event, BudgetExceededEvent) and event.scope == "run":
            a = None
        target = a.span if a is not None else self._run
        if target is not None:
            target.events.append((event.TYPE, at, attrs))


_HANDLERS: dict[type[Any], Any] = {
    RunStarted: TraceFold._run_started,
    RunCompleted: TraceFold._run_ended,
    RunFailed: TraceFold._run_ended,
    RunStopped: TraceFold._run_ended,
    RunCrashed: TraceFold._run_ended,
    CodonStarted: TraceFold._codon_started,
    CodonTransitioned: TraceFold._moved,
    CostsIncremented: TraceFold._costs_incremented,
    CodonFinalCostSet: TraceFold._costs_set,
    CostsUpdated: TraceFold._costs_set,
    CheckpointCreated: TraceFold._checkpoint,
    CodonStartedEvent: TraceFold._agent_reported,
    TokenUsageEvent: TraceFold._tokens,
    ProcessStartedEvent: TraceFold._process_started,
    ProcessEndedEvent: TraceFold._process_ended,
    AssistantActionEvent: TraceFold._action,
    ToolResultEvent: TraceFold._tool_result,
    RigSetupCompletedEvent: TraceFold._rig_completed,
    RigSetupFailedEvent: TraceFold._rig_failed,
    SentinelTriggered: TraceFold._sentinel_triggered,
    SentinelOutput: TraceFold._sentinel_output,
    SentinelError: TraceFold._sentinel_error,
}
"""One handler per event class; the other classes of :data:`EVENT_FIELDS` become
span events, and the rest change no span."""


def capture_content() -> bool:
    """Whether the GenAI opt-in asks for content in spans (``SPAN_ONLY`` or
    ``SPAN_AND_EVENT`` in :data:`~weft.telemetry.settings.CAPTURE_VAR`, read by
    ``opentelemetry-util-genai``'s own parser, which says when a value is wrong)."""
    from opentelemetry.util.genai.types import ContentCapturingMode
    from opentelemetry.util.genai.utils import get_content_capturing_mode

    return get_content_capturing_mode() in (
        ContentCapturingMode.SPAN_ONLY,
        ContentCapturingMode.SPAN_AND_EVENT,
    )


__all__ = [
    "COST",
    "EVENT_FIELDS",
    "PROVIDERS",
    "SpanRecord",
    "TraceFold",
    "capture_content",
    "usage_attributes",
]
