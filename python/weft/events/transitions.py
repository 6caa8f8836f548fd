"""The seventeen state transitions, as msgspec Structs.

A transition is encoded once, by :func:`encode`, into
``{"type": "<Name>", "data": {...}}`` (camelCase). Those bytes are what the
compiled core validates and applies, what the journal stores and what
clients receive. Times are ISO-8601 strings chosen by the caller: the core
never reads a clock, so replaying a journal rebuilds the same state.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

CodonStatus: TypeAlias = Literal[
    "preparing",
    "starting",
    "initializing",
    "running",
    "completing-sentinels",
    "completed",
    "failed",
    "skipped",
]
CheckpointType: TypeAlias = Literal["rig-setup", "completed", "error", "skipped"]


class _Data(
    msgspec.Struct,
    rename="camel",
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """Base of every structure inside a transition."""


class TokenUsage(_Data):
    """Token counts."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0


class FailureReason(_Data):
    """Why a codon failed: an error class, whether a retry may help, details."""

    kind: str = msgspec.field(name="type")
    retriable: bool
    message: str | None = None
    retry_after_ms: int | None = None
    sentinel_refs: list[str] | None = None


class BudgetExceeded(_Data):
    """A budget that ran out."""

    currency: str
    limit: float
    used: float


class LoopContext(_Data):
    """Where a codon sits in a loop."""

    loop_id: str
    iteration: int
    codon_index_in_loop: int
    loop_budget: Any = None


class SentinelState(_Data):
    """One sentinel's activity during a codon."""

    id: str
    model: str
    loaded_at: str
    llm_call_count: int
    failed_llm_calls: int = msgspec.field(name="failedLLMCalls")
    total_cost: float
    status: Literal["active", "unloaded"]
    unloaded_at: str | None = None
    last_llm_call_at: str | None = None
    total_triggers: int = 0
    unload_reason: Literal["codon-complete", "fatal-error", "consecutive-failures"] | None = None


class ContinuationSource(_Data, omit_defaults=False):
    """The checkpoint a continuation run resumes from."""

    run_id: str
    after_codon: str | None
    checkpoint_sha: str


class Fresh(_Data, tag="fresh", tag_field="type"):
    """A run from scratch."""

    initial_checkpoint_sha: str | None = None


class Continuation(_Data, tag="continuation", tag_field="type"):
    """A run continuing from a checkpoint of an earlier run."""

    source: ContinuationSource
    reason: Literal["retry", "rollback", "continue"] | None = None


StartingConditions: TypeAlias = Fresh | Continuation


class PlanEntry(_Data):
    """One codon of the execution plan (its resolved configuration kept as-is)."""

    codon: dict[str, Any]
    codon_id: str
    loop_context: dict[str, Any] | None = None


class TransitionMetadata(_Data):
    """What a codon transition carries; the target state decides what is required."""

    claude_pid: int | None = None
    claude_log_path: str | None = None
    previous_session_id: str | None = None
    claude_session_id: str | None = None
    exit_code: int | None = None
    failure_reason: FailureReason | None = None
    failed_during: str | None = None
    skipped_during: str | None = None
    result_message_received: bool | None = None
    checkpoint_sha: str | None = None
    context_exceeded: bool | None = None
    extension_count: int | None = None
    budget_exceeded: BudgetExceeded | None = None


class Transition(_Data):
    """Base of the seventeen transition types."""


class RunStarted(Transition):
    """Creates a run and makes it current (a fresh run may carry the plan)."""

    run_id: str
    run_folder: str
    git_branch: str
    starting_conditions: StartingConditions
    server_pid: int
    start_time: str
    execution_plan: list[PlanEntry] | None = None


class RunCompleted(Transition):
    """Ends a run whose codons are all terminal."""

    run_id: str
    end_time: str


class RunFailed(Transition):
    """Ends a run, as failed, once its codons are all terminal: which codon
    (none for a run-wide failure, a full disk say) and why. The seed's event
    has only ``run_id`` and ``end_time``; journals without the rest still load."""

    run_id: str
    end_time: str
    codon_id: str | None = None
    reason: str | None = None


class BudgetStop(_Data):
    """The budget ceiling that stopped a run."""

    scope: str
    """``run`` (the ceiling of ``--max-cost``, ``--max-time``, ``--max-tokens``, the
    runtime config)."""
    kind: Literal["dollars", "timeSeconds", "outputTokens", "contextTokens", "tokens"]
    """``tokens``: every token of the run's attempts (``--max-tokens``, ``maxTokens``)."""
    limit: float
    used: float
    source: str = ""
    """Where the cap came from (``--max-cost``, ``WEFT_RUNTIME_BUDGET_MAX_DOLLARS``...)."""


class RunStopped(Transition):
    """Ends a run, as stopped, once its codons are all terminal: stopped by the
    user (a signal, ``q``, ``server.shutdown``; ``forced`` when the agent was
    killed) or by its budget ceiling. Nothing failed: the stopped codon stays
    to do, and running the same command again goes on from it. Weft's own
    (the seed knows completed, failed and crashed runs)."""

    run_id: str
    end_time: str
    by: Literal["user", "budget"]
    reason: str
    forced: bool = False
    codon_id: str | None = None
    """The codon that was stopped, if one was running."""
    budget: BudgetStop | None = None


class RunCrashed(Transition):
    """Marks a run found dead; its active codon fails with "Server crashed"."""

    run_id: str
    detected_at: str
    last_codon_status: str


class CodonStarted(Transition):
    """Appends a ``preparing`` record for a codon."""

    run_id: str
    codon_id: str
    start_time: str
    loop_context: LoopContext | None = None


class CodonTransitioned(Transition):
    """Moves a codon's latest record from ``from_status`` to ``to_status``."""

    run_id: str
    codon_id: str
    from_status: CodonStatus = msgspec.field(name="from")
    to_status: CodonStatus = msgspec.field(name="to")
    timestamp: str
    metadata: TransitionMetadata | None = None


class CostsUpdated(Transition):
    """Sets a live codon's cost and tokens."""

    run_id: str
    codon_id: str
    cost: float
    tokens: TokenUsage


class CostsIncremented(Transition):
    """Adds to a live codon's cost and tokens."""

    run_id: str
    codon_id: str
    cost_delta: float
    tokens_delta: TokenUsage


class AssistantMessageCountUpdated(Transition):
    """Sets a live codon's assistant message count."""

    run_id: str
    codon_id: str
    new_count: int


class ExtensionCountUpdated(Transition):
    """Sets a live codon's extension count."""

    run_id: str
    codon_id: str
    extension_count: int


class CodonFinalCostSet(Transition):
    """Records the agent's own total for a live codon."""

    run_id: str
    codon_id: str
    final_cost: float
    final_tokens: TokenUsage


class SentinelStatesUpdated(Transition):
    """Replaces the sentinel states of a codon that is not terminal."""

    run_id: str
    codon_id: str
    sentinel_states: list[SentinelState]
    total_cost: float


class CheckpointCreated(Transition):
    """Records a checkpoint on a codon's latest record."""

    run_id: str
    codon_id: str
    checkpoint_type: CheckpointType
    sha: str
    branch: str


class InitialCheckpointSet(Transition):
    """Records the project's checkpoint before any codon ran."""

    sha: str


class PlanExtended(Transition):
    """Inserts plan entries (a loop's next iteration, or a changed hank's codons
    on resume) right after the entry ``after_codon_id``, while ``run_id`` is running."""

    run_id: str
    after_codon_id: str
    entries: list[PlanEntry]


class PlanTrimmed(Transition):
    """Removes plan entries (the rest of a loop that ended early, or what a changed
    hank replaces on resume), while ``run_id`` is running."""

    run_id: str
    codon_ids: list[str]


TRANSITION_CLASSES: dict[str, type[Transition]] = {
    cls.__name__: cls
    for cls in (
        RunStarted,
        RunCompleted,
        RunFailed,
        RunStopped,
        RunCrashed,
        CodonStarted,
        CodonTransitioned,
        CostsUpdated,
        CostsIncremented,
        AssistantMessageCountUpdated,
        ExtensionCountUpdated,
        CodonFinalCostSet,
        SentinelStatesUpdated,
        CheckpointCreated,
        InitialCheckpointSet,
        PlanExtended,
        PlanTrimmed,
    )
}

_encoder = msgspec.json.Encoder()
_PREFIXES = {name: b'{"type":"' + name.encode() + b'","data":' for name in TRANSITION_CLASSES}


def encode(transition: Transition) -> bytes:
    """The transition's wire bytes: ``{"type": ..., "data": ...}``, encoded once."""
    return _PREFIXES[type(transition).__name__] + _encoder.encode(transition) + b"}"


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    data: msgspec.Raw


def decode(payload: bytes) -> Transition:
    """Parses wire bytes back into a transition.

    Raises ``msgspec.ValidationError`` (or ``msgspec.DecodeError``) naming the
    offending field when the payload is not a transition.
    """
    envelope = msgspec.json.decode(payload, type=_Envelope)
    cls = TRANSITION_CLASSES.get(envelope.type)
    if cls is None:
        raise msgspec.ValidationError(f"unknown transition type {envelope.type!r}")
    return msgspec.json.decode(envelope.data, type=cls)
