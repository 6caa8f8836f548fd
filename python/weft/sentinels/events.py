"""The events sentinels add to a run's stream (reference §4.4, category S).

Shaped like :mod:`weft.events.stream` (camelCase on the wire, defaults left
out, ``TYPE`` the event type) and kept here while the event modules are
being reorganised; they move beside the others when the runtime journals
them. Sentinels are never fed these events (nor connection events): a
sentinel that watched sentinel output could wake itself for ever.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

import msgspec

__all__ = [
    "SENTINEL_EVENT_TYPES",
    "SentinelData",
    "SentinelError",
    "SentinelErrorType",
    "SentinelLoaded",
    "SentinelOutput",
    "SentinelTokens",
    "SentinelTriggered",
    "SentinelUnloaded",
    "UnloadReason",
]

UnloadReason = Literal["codon-complete", "fatal-error", "consecutive-failures", "shutdown"]
SentinelErrorType = Literal[
    "llm-call-failed",
    "template-render-failed",
    "file-write-failed",
    "output-invalid",
    "load-failed",
]


class SentinelData(
    msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True, kw_only=True
):
    """Base of the sentinel events' data. ``TYPE`` is the event type on the wire."""

    TYPE: ClassVar[str]
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
