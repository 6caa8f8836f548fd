"""Stream events: what happens during a run that is not a state change.

Transitions (:mod:`weft.events.transitions`) change the state; these events
tell clients, sentinels and the progress view what is going on (an assistant
message, a tool result, rig output, a finished loop iteration...). Both kinds
go through the same :class:`~weft.state.StateManager` queue, so they share one
order and one journal, and both are encoded once. Field names follow the
reference runtime's event payloads (camelCase) so its clients can read them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

import msgspec

from weft.events.transitions import TRANSITION_CLASSES, Transition


class StreamData(
    msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True, kw_only=True
):
    """Base of every stream event's data. ``TYPE`` is the event type on the wire."""

    TYPE: ClassVar[str]


class CodonStartedEvent(StreamData):
    """The agent reported its session: the codon is running."""

    TYPE: ClassVar[str] = "codon.started"
    codon_id: str
    codon_name: str
    session_id: str
    start_time: str
    codon_description: str | None = None
    previous_session_id: str | None = None
    model: str | None = None
    harness: str | None = None
    prompt_metadata: dict[str, Any] | None = None


class ProcessExit(msgspec.Struct, omit_defaults=True, kw_only=True):
    """How the agent process ended: ``success``, ``error`` (with a code) or ``killed``."""

    type: Literal["success", "error", "killed"]
    code: int | None = None
    signal: int | None = None


class CodonCompletedEvent(StreamData):
    """A codon reached a terminal state."""

    TYPE: ClassVar[str] = "codon.completed"
    codon_id: str
    status: Literal["completed", "failed", "skipped"]
    success: bool
    cost: float | None
    """None when the codon's model has no price (unknown, not $0)."""
    duration: int
    """Milliseconds."""
    exit_status: ProcessExit | None = None
    failure_reason: dict[str, Any] | None = None
    failure_ignored: bool = False
    checkpoint_sha: str | None = None


class TokenUsageEvent(StreamData):
    """Tokens and cost: a live per-message delta, or the final figures."""

    TYPE: ClassVar[str] = "token.usage"
    codon_id: str
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    total_cost: float | None
    final: bool = False
    model_id: str | None = None


class AssistantActionEvent(StreamData):
    """Something the agent said, thought or did."""

    TYPE: ClassVar[str] = "assistant.action"
    codon_id: str
    action: Literal["thinking", "message", "tool_use"]
    content: str
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_use_id: str | None = None


TOOL_RESULT_LIMIT = 2500
"""Characters of a tool result kept in the event (the reference's limit)."""


class ToolResultEvent(StreamData):
    """A tool's result (truncated for the stream; the agent log has it whole)."""

    TYPE: ClassVar[str] = "tool.result"
    codon_id: str
    tool_use_id: str
    tool_name: str | None
    result: str
    truncated: bool
    original_length: int
    execution_time_ms: int | None
    is_error: bool


class RigOutputEvent(StreamData, kw_only=True):
    """Lines a rig command wrote, coalesced: ``line`` holds ``lines`` of them;
    ``droppedLines`` older ones did not fit (see :mod:`weft.runtime.rig.setup`)."""

    TYPE: ClassVar[str] = "rig.output"
    stream: Literal["stdout", "stderr"]
    line: str
    lines: int = 1
    dropped_lines: int = 0
    command_index: int
    codon_id: str | None = None


class RigSetupCompletedEvent(StreamData):
    """A codon's rig setup finished."""

    TYPE: ClassVar[str] = "rig.setup.completed"
    codon_id: str
    operation_count: int
    duration_ms: int
    created_checkpoint: str | None = None


class RigSetupFailedEvent(StreamData):
    """A rig operation failed (``ignored`` when allowFailure let the codon go on)."""

    TYPE: ClassVar[str] = "rig.setup.failed"
    failure_type: str
    """``command_failed``, ``copy_failed``, ``timeout`` or ``other``."""
    operation_type: str
    """``command`` or ``copy``."""
    command_index: int
    """The operation's index in the codon's rigSetup."""
    ignored: bool
    message: str
    codon_id: str | None = None
    exit_code: int | None = None


class LoopIterationCompletedEvent(StreamData):
    """The last codon of a loop iteration finished."""

    TYPE: ClassVar[str] = "loop.iteration.completed"
    loop_id: str
    iteration: int
    duration_ms: int
    cost_usd: float
    tokens_used: int
    is_final: bool
    termination_reason: str | None = None


class InfoEvent(StreamData):
    """A message for people watching."""

    TYPE: ClassVar[str] = "info"
    message: str
    command_index: int | None = None
    """The rig operation it is about, if any."""
    codon_id: str | None = None


class ErrorEvent(StreamData):
    """Something went wrong; ``fatal`` when the run cannot go on."""

    TYPE: ClassVar[str] = "error"
    message: str
    fatal: bool = False
    severity: Literal["fatal", "codon", "operation", "warning"] = "operation"
    codon: str | None = None
    code: str | None = None


class ServerIdleEvent(StreamData):
    """The runtime waits for a command."""

    TYPE: ClassVar[str] = "server.idle"
    reason: Literal["startup", "codon-completed", "all-codons-completed", "rollback-completed"]
    message: str


class CodonRetryEvent(StreamData):
    """A failed codon will run again under its retry policy."""

    TYPE: ClassVar[str] = "codon.retry"
    codon_id: str
    attempt: int
    max_attempts: int
    delay_ms: int
    reason: str


class BudgetExceededEvent(StreamData):
    """A budget was crossed: the codon is stopped now, as ``onExceeded`` says."""

    TYPE: ClassVar[str] = "budget.exceeded"
    scope: Literal["codon", "share", "loop", "run"]
    scope_id: str
    """The codon's, the child's (``share``), the loop's id, or ``run``."""
    limit_kind: Literal["dollars", "timeSeconds", "outputTokens", "contextTokens", "tokens"]
    """``tokens``: a run's or a loop's ``maxTokens`` (every token, input and cache ones too)."""
    limit: float
    used: float
    on_exceeded: Literal["complete", "fail"]
    message: str
    codon_id: str | None = None


class BudgetRow(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """One codon of the run in ``budget.summary``: its caps and what it used."""

    codon_id: str
    status: str
    """``completed``, ``failed``, ``skipped``, ``exceeded`` or ``running``."""
    budget: dict[str, float] = msgspec.field(default_factory=dict)
    dollars: float | None
    """None when its model has no price (unknown, not zero)."""
    time_seconds: float
    output_tokens: int
    tokens: int = 0
    """Every token of its attempts (input, output, cache writes and reads)."""
    loop_id: str | None = None


class BudgetSummaryEvent(StreamData, kw_only=True):
    """The run's budgets and spending, emitted once before the run ends."""

    TYPE: ClassVar[str] = "budget.summary"
    ceiling: dict[str, float] = msgspec.field(default_factory=dict)
    """The run ceiling that was in force (``maxDollars``, ``maxTimeSeconds``, ``maxTokens``)."""
    allocation: str = "shared"
    rows: list[BudgetRow] = msgspec.field(default_factory=list)
    omitted_rows: int = 0
    """Codons left out of ``rows`` in a long run (the budgeted, exceeded and
    unpriced ones are kept first, then the latest); the totals count them."""
    actual_dollars: float
    """Every dollar the execution spent, earlier runs, failed and skipped attempts included."""
    actual_time_seconds: float
    actual_tokens: int = 0
    """Every token the execution used (what ``maxTokens`` counts); 0 in journals
    written before token budgets."""
    unpriced_codons: int = 0
    """Attempts whose model has no price: ``actualDollars`` is then a lower bound."""
    exceeded: list[str] = msgspec.field(default_factory=list)
    """The messages of the budgets crossed in this run."""


class CodonSummary(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A finished codon of the execution thread, in ``state.snapshot``."""

    codon_id: str
    run_id: str
    status: str
    cost: float = 0.0
    start_time: str | None = None
    end_time: str | None = None


class StateSnapshotEvent(StreamData):
    """Where the execution stands: sent after every codon and every rollback.

    The finished codons of the execution thread (oldest first) come as a
    delta, so a snapshot's size does not grow with the run
    (:mod:`weft.events.completed`): the previous snapshot's first
    ``completedFrom`` entries stay and ``completedCodons`` follow them;
    ``completedCount`` and ``completedDigest`` describe the whole list. A
    snapshot without ``completedFrom`` holds the whole list (older journals).
    ``fileTree`` stays empty (``file.updated`` carries file changes);
    ``totalTime`` is milliseconds since this process started.
    """

    TYPE: ClassVar[str] = "state.snapshot"
    completed_codons: list[CodonSummary]
    total_cost: float
    total_time: int
    is_rolling_back: bool = False
    current_codon: str | None = None
    file_tree: list[Any] = msgspec.field(default_factory=list)
    completed_from: int = 0
    completed_count: int | None = None
    completed_digest: str | None = None


class CheckpointEntry(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """One checkpoint in a ``checkpoint.list`` event."""

    codon_id: str
    codon_name: str
    checkpoint_type: Literal["rig-setup", "completed", "error", "skipped"]
    sha: str
    status: str
    run_id: str
    on_thread: bool
    timestamp: str | None = None


class CheckpointListEvent(StreamData):
    """The checkpoints of every run (or of ``runId``), newest first, as asked
    for by a ``checkpoint.list`` command."""

    TYPE: ClassVar[str] = "checkpoint.list"
    checkpoints: list[CheckpointEntry]
    current_branch: str | None
    run_id: str | None = None


class RollbackStartedEvent(StreamData):
    """A rollback began: where from, where to, and the codons it undoes."""

    TYPE: ClassVar[str] = "rollback.started"
    from_run: str | None
    to_run: str
    to_codon: str
    to_checkpoint: str
    checkpoint_type: str
    codons_to_process: list[str]


class RollbackProgressEvent(StreamData):
    """One step of a rollback (``totalSteps`` = codons undone + the final restore)."""

    TYPE: ClassVar[str] = "rollback.progress"
    current_step: int
    total_steps: int
    message: str


class RollbackCompletedEvent(StreamData):
    """A rollback finished; ``toRun`` is the continuation run it started."""

    TYPE: ClassVar[str] = "rollback.completed"
    from_run: str | None
    to_run: str
    checkpoint: str
    codon_id: str
    checkpoint_type: str


class ProcessStartedEvent(StreamData):
    """Weft started a process group (an agent CLI or a rig command).

    Journaled so that a later ``weft run`` can end whatever a dead run left
    behind (:mod:`weft.runtime.run.survivors`), and only that: ``startTicks``
    (field 22 of ``/proc/<pid>/stat``) and ``bootId`` tell the leader from a
    later process that reuses its pid, and ``mark`` is the value of
    ``WEFT_RUNTIME_PROCESS_MARK`` in the environment of every process of the
    group, so members are recognised after the leader is gone.
    """

    TYPE: ClassVar[str] = "process.started"
    pid: int
    """The leader's pid, which is also the group id."""
    role: Literal["agent", "rig"]
    command: str
    """The program and its first arguments, shortened (for people, not checks)."""
    mark: str
    start_ticks: int | None = None
    """None where ``/proc`` is not readable (the leader is then never signalled)."""
    boot_id: str | None = None
    codon_id: str | None = None


class ProcessEndedEvent(StreamData):
    """A process group Weft started is gone: it ended with its codon or rig
    command (``how: "exited"``), or recovery ended it (``"ended"``) or found
    it gone (``"gone"``). Groups without this event are checked at the next start."""

    TYPE: ClassVar[str] = "process.ended"
    pid: int
    how: Literal["exited", "ended", "gone"] = "exited"


class CodonExtendedEvent(StreamData):
    """An ``exhaustWithPrompt`` codon's session was resumed with the exhaust
    prompt once more (reference §6.7); the figures are the codon's so far."""

    TYPE: ClassVar[str] = "codon.extended"
    codon_id: str
    codon_name: str
    extension_number: int
    exhaust_with_prompt: str
    cumulative_tokens: int
    cumulative_cost: float | None


class SessionCooldownEvent(StreamData):
    """A codon's agent session failed transiently (rate limit, overload,
    timeout, crash): the session supervisor waits ``durationMs`` (the seed 002
    backoff, or a longer ``Retry-After``) before it resumes the session."""

    TYPE: ClassVar[str] = "session.cooldown"
    codon_id: str
    session: int
    """The failed session's number in this attempt (1 = the first)."""
    duration_ms: int
    backoff_ms: int
    error_class: str
    consecutive_errors: int
    total_errors: int
    retry_after_ms: int | None = None
    message: str | None = None


class SessionResumedEvent(StreamData):
    """The session supervisor starts the codon's next agent session: it resumes
    ``resumeSessionId``, or starts afresh when no session was reported yet."""

    TYPE: ClassVar[str] = "session.resumed"
    codon_id: str
    session: int
    """The new session's number in this attempt."""
    reason: Literal["retry", "urgent", "window"]
    """``window``: the provider's usage window opened after a ``codon.parked``."""
    resume_session_id: str | None = None


class CodonParkedEvent(StreamData):
    """The codon waits for its provider's usage window (a subscription's
    five-hour or weekly limit) to open: its agent session is resumed at
    ``resumeAt``. Nothing counts as an error while it waits."""

    TYPE: ClassVar[str] = "codon.parked"
    codon_id: str
    provider: str
    resets_at: int
    """When the provider said the window opens (epoch milliseconds)."""
    resume_at: int
    """When the session is resumed: ``resetsAt`` plus ``usageWindow.marginMs``
    (epoch milliseconds)."""
    session: int
    """The number of the session that was refused (0: none was started: an
    earlier session or run had seen the window closed)."""
    window: str | None = None
    """The provider's name for the window (``five_hour``, ``seven_day``)."""
    message: str | None = None


class UsageWindowEvent(StreamData):
    """The provider's usage window changed status as the agent reported it
    (``allowed``, ``allowed_warning`` when close to the limit, ``rejected``);
    journaled at each change, not at every turn."""

    TYPE: ClassVar[str] = "usage.window"
    provider: str
    status: str
    codon_id: str | None = None
    window: str | None = None
    resets_at: int | None = None
    """When the window resets (epoch milliseconds)."""
    utilization: float | None = None
    """How much of the window is used, 0 to 1."""


class SessionMessageEvent(StreamData):
    """A user's message for the running codon's agent (``codon.message``).
    Urgent: the session is interrupted and resumed with it at once; queued:
    it joins the next prompt built (the next resume, or the next codon's)."""

    TYPE: ClassVar[str] = "session.message"
    message: str
    urgent: bool
    codon_id: str | None = None
    """The codon running when it arrived (None between codons)."""


class SessionGaveUpEvent(StreamData):
    """A threshold of the session supervisor was reached: no more sessions;
    the codon fails and its ``onFailure`` / ``retryConfig`` apply."""

    TYPE: ClassVar[str] = "session.gave-up"
    codon_id: str
    sessions: int
    consecutive_errors: int
    total_errors: int
    max_consecutive_errors: int
    max_total_errors: int
    message: str


class BreakerChangedEvent(StreamData):
    """An agent provider's circuit breaker (seed 004) changed state: ``open``
    after ``failureThreshold`` provider failures in a row (across codons),
    ``half_open`` when a probe session goes after the cool-down, ``closed``
    when the probe succeeded or an operator reset it (``breaker.reset``)."""

    TYPE: ClassVar[str] = "breaker.changed"
    provider: str
    """``anthropic``, ``openai`` or ``google``."""
    state: Literal["closed", "open", "half_open"]
    previous: Literal["closed", "open", "half_open"]
    reason: Literal["failure", "success", "probe", "reset"]
    consecutive_failures: int
    failure_threshold: int
    cooldown_ms: int
    codon_id: str | None = None
    """The codon whose session (or operator command) changed it."""


class BreakerWaitingEvent(StreamData):
    """A codon needs a provider whose breaker is open: it waits
    ``retryInMs`` (the rest of the cool-down) instead of failing."""

    TYPE: ClassVar[str] = "breaker.waiting"
    provider: str
    codon_id: str
    retry_in_ms: int
    message: str
    """The seed's words: ``anthropic circuit is open, retry in 58 seconds``."""


class ArchiveFailure(msgspec.Struct, rename="camel", kw_only=True):
    """One ``archiveOnSuccess`` path that could not be archived, and why."""

    path: str
    error: str


class ArchiveCompletedEvent(StreamData):
    """Every ``archiveOnSuccess`` path of a codon (or of a loop, ``loopId``)
    was moved from the workspace into ``rigArchive/``."""

    TYPE: ClassVar[str] = "archive.completed"
    codon_id: str
    archived_paths: list[str]
    archive_dir: str
    """Where they went, relative to the execution directory."""
    loop_id: str | None = None


class ArchivePartialEvent(StreamData):
    """Some ``archiveOnSuccess`` paths were archived, others were not (``failedPaths``)."""

    TYPE: ClassVar[str] = "archive.partial"
    codon_id: str
    archived_paths: list[str]
    failed_paths: list[ArchiveFailure]
    archive_dir: str
    loop_id: str | None = None


class RollbackArchiveRestoreEvent(StreamData):
    """A rollback moved what the codons it undid had archived back into the workspace."""

    TYPE: ClassVar[str] = "rollback.archiveRestore"
    codon_id: str
    restored_paths: list[str]
    status: Literal["completed", "partial", "failed"]
    failed_paths: list[ArchiveFailure] | None = None


# ---------------------------------------------------------------- sentinels

UnloadReason = Literal["codon-complete", "fatal-error", "consecutive-failures", "shutdown"]
SentinelErrorType = Literal[
    "llm-call-failed",
    "template-render-failed",
    "file-write-failed",
    "output-invalid",
    "load-failed",
]


class SentinelData(StreamData):
    """Base of the sentinel events' data (reference §4.4, category S).

    Journaled like every stream event; sentinels are never fed them (nor
    connection events): a sentinel that watched sentinel output could wake
    itself for ever.
    """

    sentinel_id: str
    codon_id: str


class SentinelLoaded(SentinelData):
    """A sentinel is attached to its codon and watching."""

    TYPE: ClassVar[str] = "sentinel.loaded"
    model: str
    trigger_type: Literal["event", "sequence"]
    execution_strategy: Literal["immediate", "debounce", "count", "timeWindow"]
    conversational: bool
    source: Literal["file", "inline"]
    source_path: str | None = None


class SentinelTriggered(SentinelData):
    """A sentinel's trigger fired (its model is about to be called)."""

    TYPE: ClassVar[str] = "sentinel.triggered"
    trigger_number: int
    strategy: str
    event_count: int
    queue_size: int
    """Triggers still waiting behind this one."""


class SentinelTokens(msgspec.Struct, kw_only=True):
    """Tokens of one model call."""

    input: int
    output: int


class SentinelOutput(SentinelData):
    """What a sentinel's model said about a trigger."""

    TYPE: ClassVar[str] = "sentinel.output"
    trigger_number: int
    output_type: Literal["text", "structured"]
    content: Any
    """The text, or the structured value (validated against the schema)."""
    cost: float
    """What the call cost (US dollars): sentinel spend, kept apart from the
    agent's cost (budgets count it from here and from ``SentinelState``)."""
    tokens: SentinelTokens
    event_count: int
    model: str | None = None


class SentinelError(SentinelData):
    """A sentinel failed to render, call its model or write its output."""

    TYPE: ClassVar[str] = "sentinel.error"
    error_type: SentinelErrorType
    message: str
    retriable: bool
    consecutive_failure_count: int
    trigger_number: int | None = None


class SentinelUnloaded(SentinelData):
    """A sentinel stopped watching, and why."""

    TYPE: ClassVar[str] = "sentinel.unloaded"
    reason: UnloadReason
    final_cost: float
    llm_call_count: int
    error_type: str | None = None


SENTINEL_EVENT_TYPES: Final = frozenset(
    c.TYPE
    for c in (SentinelLoaded, SentinelTriggered, SentinelOutput, SentinelError, SentinelUnloaded)
)


class FileUpdateSource(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """What revealed a file change: an agent tool call, or the scan at the end."""

    kind: Literal["tool_use", "scan"]
    tool_use_id: str | None = None


class FileUpdatedEvent(StreamData):
    """A checkpointed or agent-touched file changed during a codon (seed 001's
    agentic backbone; reference §4.4 ``file.updated``).

    Found from the agent's own tool calls (``Write``, ``Edit``, ``MultiEdit``,
    ``apply_patch``...) and a scan of the checkpointed files when the agent
    exits; one event per change of content (the same path with the same
    ``sha256`` is not reported twice in a codon). The file's text is not in
    the event (journals stay small); sentinel conditions may still test it
    through the virtual field ``content``, read when a sentinel watches.
    """

    TYPE: ClassVar[str] = "file.updated"
    path: str
    """Relative to the agent's workspace, with ``/``."""
    filename: str
    action: Literal["created", "modified", "deleted"]
    source: FileUpdateSource
    sha256: str | None = None
    """None for a deleted file."""
    bytes: int = 0
    codon_id: str | None = None


class RejectedTransition(msgspec.Struct, rename="camel", kw_only=True):
    """The data of the ``error`` event a refused transition is journaled as.

    Not a :class:`StreamData`: the runtime never emits it; the StateManager
    makes it, once, from the core's verdict (see :attr:`weft.state.Processed.journal`).
    """

    TYPE: ClassVar[str] = "error"
    code: str | None
    message: str | None
    transition_type: str | None
    transition: str
    """The refused transition's bytes, as text."""


def _stream_classes() -> dict[str, type[StreamData]]:
    found: dict[str, type[StreamData]] = {}
    pending = list(StreamData.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "TYPE" in vars(cls):  # not a base such as SentinelData
            found[cls.TYPE] = cls
    return dict(sorted(found.items()))


STREAM_CLASSES: dict[str, type[StreamData]] = _stream_classes()
"""Every stream event class by its wire ``type``."""

Event = Transition | StreamData | RejectedTransition
"""Any journaled event, typed: what :mod:`weft.progress` and the views dispatch on."""


def typed(event_type: str, data: Any) -> Event | None:
    """The typed event of a decoded ``type`` and ``data`` (a wire event's);
    None when it is not one Weft knows (an older or newer version's event).

    ``msgspec.convert`` walks the builtins once: no JSON is encoded or parsed.
    """
    cls: type[Any] | None = TRANSITION_CLASSES.get(event_type) or STREAM_CLASSES.get(event_type)
    try:
        if cls is None:
            return None
        if cls is ErrorEvent and isinstance(data, dict) and "transitionType" in data:
            cls = RejectedTransition
        out: Event = msgspec.convert(data, cls)
        return out
    except msgspec.ValidationError:
        return None


class _Envelope(msgspec.Struct):
    type: str
    data: msgspec.Raw = msgspec.Raw(b"null")


_envelope = msgspec.json.Decoder(_Envelope)
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def decode_event(payload: bytes) -> Event | None:
    """The typed event of journal bytes ``{"type": ..., "data": ...}``; None
    when they are not an event Weft knows."""
    try:
        env = _envelope.decode(payload)
        cls: type[Any] | None = TRANSITION_CLASSES.get(env.type) or STREAM_CLASSES.get(env.type)
        if cls is None:
            return None
        if cls is ErrorEvent and b'"transitionType"' in bytes(env.data):
            cls = RejectedTransition
        decoder = _decoders.get(cls)
        if decoder is None:
            decoder = _decoders[cls] = msgspec.json.Decoder(cls)
        out: Event = decoder.decode(env.data)
        return out
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def unpriced_usage(payload: str) -> bool:
    """Whether a journaled ``token.usage`` (its JSON) reports tokens without a
    cost: the codon's dollars are then unknown, not zero (the rule that makes
    a live attempt unpriced). Decodes only a payload whose cost is null."""
    if '"totalCost":null' not in payload:
        return False
    event = decode_event(payload.encode())
    if not isinstance(event, TokenUsageEvent) or event.total_cost is not None:
        return False
    used = (
        event.input_tokens
        + event.output_tokens
        + event.cache_creation_tokens
        + event.cache_read_tokens
    )
    return used > 0
