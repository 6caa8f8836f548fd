"""The normalised events every agent adapter yields.

Each CLI speaks its own stream format (reference: agent-cli-protocols §1-§3);
an adapter's parser turns those lines into these events, so the codon runner
and the session supervisor never see a vendor format. The last event of every
session is :class:`SessionExited`, which carries the verdict.

The Structs are tagged (``{"kind": "tool.use", ...}``) so they can be logged or
sent over the wire as they are.
"""

from __future__ import annotations

import enum
from typing import Any, TypeAlias

import msgspec


class Tokens(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts. ``cache_creation`` and ``cache_read`` are reported apart
    from ``input`` (Claude's convention; the Codex parser subtracts its cached
    subset so the same prices apply)."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    """All cache writes, whatever their lifetime."""
    cache_read: int = 0
    cache_creation_1h: int = 0
    """The part of ``cache_creation`` written with a one-hour lifetime (Claude
    prices it at 2x input instead of 1.25x). Never more than
    ``cache_creation``; 0 when the CLI does not report the split."""

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_creation=self.cache_creation + other.cache_creation,
            cache_read=self.cache_read + other.cache_read,
            cache_creation_1h=self.cache_creation_1h + other.cache_creation_1h,
        )

    @property
    def total(self) -> int:
        """Every token counted once (the 1-hour writes are inside
        ``cache_creation``)."""
        return self.input + self.output + self.cache_creation + self.cache_read

    def to_state(self) -> dict[str, int]:
        """The state document's shape (``inputTokens``, ...)."""
        return {
            "inputTokens": self.input,
            "outputTokens": self.output,
            "cacheCreationTokens": self.cache_creation,
            "cacheReadTokens": self.cache_read,
        }


class ErrorClass(enum.StrEnum):
    """Why a session did not succeed. The runtime's failure policy reads
    :attr:`SessionExited.retriable`; the class says what to tell the user."""

    RATE_LIMIT = "rate_limit"
    """429 or a rate-limit result after the CLI's own retries (retriable)."""
    OVERLOADED = "overloaded"
    """529 / 5xx after the CLI's own retries (retriable)."""
    AUTH = "auth"
    """Bad or missing credentials (never retriable)."""
    BILLING = "billing"
    """Credit, quota or billing trouble (never retriable)."""
    MAX_TURNS = "max_turns"
    """The turn limit was reached (never retriable)."""
    BUDGET = "budget"
    """The CLI's own spending cap was reached (never retriable)."""
    CONTEXT_EXCEEDED = "context_exceeded"
    """The context window or output token maximum was exhausted."""
    API_ERROR = "api_error"
    """Another API error; ``retriable`` says which kind."""
    CANNOT_RESUME = "cannot_resume"
    """The session to resume does not exist (never retriable as is)."""
    INPUT_ERROR = "input_error"
    """The CLI refused its arguments or prompt (never retriable)."""
    ERROR_RESULT = "error_result"
    """An error result of no more specific class (error_during_execution...)."""
    CRASH_BEFORE_INIT = "crash_before_init"
    """The process died before it reported a session (retriable: seed 002
    cools down on an error while spawning)."""
    CRASH_MID_RUN = "crash_mid_run"
    """The process died after the session started, without a result (retriable)."""
    NO_RESULT = "no_result"
    """Exit 0 without a result: a protocol violation, treated as a crash."""
    TIMEOUT = "timeout"
    """Weft stopped it: no first output, or an idle stream (retriable)."""
    STOPPED = "stopped"
    """Weft stopped it on request (operator stop, interrupt, shutdown)."""
    USAGE_LIMIT = "usage_limit"
    """The account's usage window is closed until the time
    :attr:`SessionExited.window` names: the codon parks until then (never
    retried at once, never counted as an error)."""


class CostSource(enum.StrEnum):
    """Where a session's final cost came from (reference §6 rule 5)."""

    REPORTED = "reported"
    """The CLI's ``total_cost_usd``."""
    MODEL_USAGE = "model_usage"
    """The sum of the CLI's per-model ``costUSD``."""
    COMPUTED = "computed"
    """Tokens times Weft's pricing table."""
    ESTIMATE = "estimate"
    """The live per-message estimate (no final figures were reported)."""
    UNPRICED = "unpriced"
    """A model the pricing table does not know: the cost is not known."""


class ModelUsage(msgspec.Struct, frozen=True, kw_only=True):
    """One model's share of a session."""

    tokens: Tokens
    cost_usd: float | None = None


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of the normalised events."""


class SessionStarted(_Event, frozen=True, tag="session.started"):
    """The agent reported its session (Claude ``system/init``, Codex
    ``thread.started``, Gemini ``init``)."""

    session_id: str
    model: str | None = None
    cwd: str | None = None
    tools: list[str] = msgspec.field(default_factory=list)
    agent_version: str | None = None


class AssistantText(_Event, frozen=True, tag="assistant.text"):
    """Assistant text. ``partial`` marks a streaming delta whose full text
    follows; ``subagent`` marks text from a sub-agent, never the final answer."""

    text: str
    message_id: str | None = None
    partial: bool = False
    subagent: bool = False


class Thinking(_Event, frozen=True, tag="assistant.thinking"):
    """Reasoning or thinking text."""

    text: str
    message_id: str | None = None
    subagent: bool = False


class ToolUse(_Event, frozen=True, tag="tool.use"):
    """A tool call."""

    tool_use_id: str
    name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    message_id: str | None = None
    subagent: bool = False


class ToolResult(_Event, frozen=True, tag="tool.result"):
    """A tool's result, paired with its call by ``tool_use_id``."""

    tool_use_id: str
    content: str
    is_error: bool = False
    subagent: bool = False


class UsageDelta(_Event, frozen=True, tag="usage.delta"):
    """Live usage: what this message added since the last report (per-message
    max-merge, so repeated snapshots never double-count). ``cost_usd`` is the
    live estimate of the delta, ``None`` for an unpriced model."""

    model: str | None
    tokens: Tokens
    cost_usd: float | None
    message_id: str | None = None


class RetryNotice(_Event, frozen=True, tag="retry.notice"):
    """The agent is retrying an API call itself (resets the idle timer)."""

    attempt: int
    max_retries: int | None = None
    delay_ms: int | None = None
    error: str | None = None
    status: int | None = None


class UsageWindow(_Event, frozen=True, tag="usage.window"):
    """The account's usage window as the agent reported it (Claude Code on a
    subscription: ``rate_limit_event``). ``status`` is the worst of the
    overall status and the windows' own: ``allowed``, ``allowed_warning``
    (close to the limit) or ``rejected`` (closed until ``resets_at_ms``)."""

    status: str
    resets_at_ms: int | None = None
    """When the window opens again (epoch milliseconds), if said."""
    window: str | None = None
    """The provider's name for the window that decided (``five_hour``, ``seven_day``)."""
    utilization: float | None = None
    """How much of that window is used, 0 to 1, if said."""


class SessionResult(_Event, frozen=True, tag="session.result"):
    """The agent's own final report (Claude ``result``, Codex
    ``turn.completed``/``turn.failed``, Gemini ``result``). Authoritative for
    cost and usage; :class:`SessionExited` still follows."""

    ok: bool
    subtype: str | None = None
    is_error: bool = False
    text: str | None = None
    errors: list[str] = msgspec.field(default_factory=list)
    session_id: str | None = None
    cost_usd: float | None = None
    cost_source: CostSource = CostSource.UNPRICED
    tokens: Tokens = Tokens()
    model_usage: dict[str, ModelUsage] = msgspec.field(default_factory=dict)
    num_turns: int | None = None
    duration_ms: int | None = None
    error_class: ErrorClass | None = None
    context_exceeded: bool = False


class StderrLine(_Event, frozen=True, tag="stderr.line"):
    """One line the agent wrote to stderr."""

    line: str


class SessionExited(_Event, frozen=True, tag="session.exited"):
    """The process has ended; the verdict of the whole session (reference
    agent-cli-protocols §1.7: a result line wins over the exit code)."""

    ok: bool
    exit_code: int | None
    signal: int | None = None
    error_class: ErrorClass | None = None
    retriable: bool = False
    message: str | None = None
    retry_after_ms: int | None = None
    result_seen: bool = False
    session_id: str | None = None
    """The canonical session id to resume (§1.6 alias rule)."""
    session_aliases: list[str] = msgspec.field(default_factory=list)
    cost_usd: float | None = None
    cost_source: CostSource = CostSource.UNPRICED
    tokens: Tokens = Tokens()
    malformed_lines: int = 0
    """Lines that started with ``{`` but were not valid JSON of a known shape."""
    unknown_types: int = 0
    """Lines of a message type the parser does not know (tolerated)."""
    oversized_lines: int = 0
    """Lines longer than the framer's cap: kept in the raw log, not parsed."""
    context_exceeded: bool = False
    """The context window or the output token maximum ran out (reference
    hankweave-runtime §6.5), whether or not the session succeeded."""
    stderr_tail: str = ""
    log_error: str | None = None
    """Set when the raw log could not be written (a full disk): the session
    failed, and so does the run, whose record would be incomplete."""
    window: UsageWindow | None = None
    """The last usage window the agent reported; with ``error_class``
    ``usage_limit``, the rejected one that ended the session."""


AgentEvent: TypeAlias = (
    SessionStarted
    | AssistantText
    | Thinking
    | ToolUse
    | ToolResult
    | UsageDelta
    | RetryNotice
    | UsageWindow
    | SessionResult
    | StderrLine
    | SessionExited
)
"""Every normalised event."""
