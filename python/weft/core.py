"""Weft's embedding API: the compiled core, typed and documented.

Services that embed Weft use this module. It has three layers:

* **Pure functions** of the codon state machine: :func:`validate_transition`
  (raises :class:`~weft.errors.InvalidTransitionError` or
  :class:`~weft.errors.MetadataValidationError`), :func:`allowed_transitions`,
  :func:`is_terminal`, and :func:`validate_state` for a state document.
* :class:`Core`: one execution's state, its ordered transition queue and its
  cost cache, synchronous and thread-safe. ``submit`` returns a sequence
  number at once; ``drain`` applies pending transitions in order; costs are
  O(1) queries; ``state_json`` gives the state.json document.
* :class:`StateManager`: the asyncio driver around a ``Core``: fire-and-forget
  ``transition``, ``transition_and_wait``, listeners that see applied
  transitions in order once they are durable, and a persistence seam.
* :class:`SessionMachine`: the agent-session machine of seed 002 (prompt,
  spawn, run, interrupt, cool down, stop), a pure decider: one method per
  event, each returning the :class:`SessionEffect` values the caller performs;
  an event its state does not accept raises
  :class:`~weft.errors.SessionTransitionError`. :func:`backoff_ms` is its
  cool-down formula. :class:`weft.agents.supervisor.SessionSupervisor` drives
  it with real agent processes.

* **The execution thread** (seed 003): :func:`analyze_execution_thread` of a
  state document, or :meth:`Core.execution_thread` of the live state (through
  a :class:`StateManager`: ``manager.core.execution_thread()``), walks the
  continuation chain from the latest (or a target) run back to a fresh run
  and returns an :class:`ExecutionThread`: its codons newest first
  (:class:`ThreadCodon`, each with its run, its positions and its
  :class:`CheckpointInfo` list of checkpoints confirmed to exist in git),
  ``total_runs``, ``has_running_codon``, ``next_codon_id`` and ``failed``.
  :func:`find_continuation_session_id` finds the session a continue-previous
  codon resumes. The analysis releases the GIL and copies no record, so a
  history of 100,000 codons is analysed in milliseconds; ``codons`` is a lazy
  sequence (:class:`ThreadCodons`) and each codon's dict and checkpoints are
  built when read. See ``docs/thread.md``.

* **Seed 004** (``weft batch``): :class:`Workstream` and :class:`Step`, driven
  by target state (``transition("S_RUNNING", ...)``), raise
  :class:`~weft.errors.InvalidTransitionError` with the seed's text
  (``Cannot transition from S_SUCCESS to S_RUNNING``) and change nothing when
  refused; :func:`retry_delay_ms` is their exponential backoff.
  :class:`CircuitBreaker` guards one tool or provider with an injected clock
  (``allow_request(now_ms)`` returns ``None`` or the wait in ms); its state and
  counters are visible and ``restore`` rebuilds any of the three machines
  from stored values. :mod:`weft.batch` drives them.

Transitions are the msgspec Structs re-exported here (``RunStarted``,
``CodonTransitioned``, ...); :func:`encode` turns one into the bytes the core,
the journal and clients share. See ``docs/embedding.md`` for a walk-through.
"""

from __future__ import annotations

from weft._core import (
    BACKOFF_BASE_MS,
    BACKOFF_CAP_MS,
    BUILD_PROFILE,
    CIRCUIT_STATES,
    CODON_STATUSES,
    DEFAULT_MAX_CONSECUTIVE_ERRORS,
    DEFAULT_MAX_TOTAL_ERRORS,
    SESSION_STATES,
    STEP_STATES,
    TRANSITION_TYPES,
    WORKSTREAM_STATES,
    BatchResult,
    CheckpointInfo,
    CircuitBreaker,
    Core,
    ExecutionThread,
    Issue,
    Outcome,
    SessionEffect,
    SessionMachine,
    StateValidation,
    Step,
    ThreadCodon,
    ThreadCodons,
    Workstream,
    allowed_transitions,
    analyze_execution_thread,
    backoff_ms,
    circuit_open_message,
    find_continuation_session_id,
    is_terminal,
    retry_delay_ms,
    validate_state,
    validate_transition,
)
from weft.events.transitions import (
    AssistantMessageCountUpdated,
    BudgetExceeded,
    BudgetStop,
    CheckpointCreated,
    CodonFinalCostSet,
    CodonStarted,
    CodonStatus,
    CodonTransitioned,
    Continuation,
    ContinuationSource,
    CostsIncremented,
    CostsUpdated,
    ExtensionCountUpdated,
    FailureReason,
    Fresh,
    InitialCheckpointSet,
    LoopContext,
    PlanEntry,
    PlanExtended,
    PlanTrimmed,
    RunCompleted,
    RunCrashed,
    RunFailed,
    RunStarted,
    RunStopped,
    SentinelState,
    SentinelStatesUpdated,
    TokenUsage,
    Transition,
    TransitionMetadata,
    decode,
    encode,
)
from weft.state import InMemoryPersistence, Persistence, Processed, StateManager

__all__ = [
    "BACKOFF_BASE_MS",
    "BACKOFF_CAP_MS",
    "BUILD_PROFILE",
    "CIRCUIT_STATES",
    "CODON_STATUSES",
    "DEFAULT_MAX_CONSECUTIVE_ERRORS",
    "DEFAULT_MAX_TOTAL_ERRORS",
    "SESSION_STATES",
    "STEP_STATES",
    "TRANSITION_TYPES",
    "WORKSTREAM_STATES",
    "AssistantMessageCountUpdated",
    "BatchResult",
    "BudgetExceeded",
    "BudgetStop",
    "CheckpointCreated",
    "CheckpointInfo",
    "CircuitBreaker",
    "CodonFinalCostSet",
    "CodonStarted",
    "CodonStatus",
    "CodonTransitioned",
    "Continuation",
    "ContinuationSource",
    "Core",
    "CostsIncremented",
    "CostsUpdated",
    "ExecutionThread",
    "ExtensionCountUpdated",
    "FailureReason",
    "Fresh",
    "InMemoryPersistence",
    "InitialCheckpointSet",
    "Issue",
    "LoopContext",
    "Outcome",
    "Persistence",
    "PlanEntry",
    "PlanExtended",
    "PlanTrimmed",
    "Processed",
    "RunCompleted",
    "RunCrashed",
    "RunFailed",
    "RunStarted",
    "RunStopped",
    "SentinelState",
    "SentinelStatesUpdated",
    "SessionEffect",
    "SessionMachine",
    "StateManager",
    "StateValidation",
    "Step",
    "ThreadCodon",
    "ThreadCodons",
    "TokenUsage",
    "Transition",
    "TransitionMetadata",
    "Workstream",
    "allowed_transitions",
    "analyze_execution_thread",
    "backoff_ms",
    "circuit_open_message",
    "decode",
    "encode",
    "find_continuation_session_id",
    "is_terminal",
    "retry_delay_ms",
    "validate_state",
    "validate_transition",
]
