"""The events sentinels add to a run's stream (reference §4.4, category S).

They are typed stream events like every other journaled event, so they live
in :mod:`weft.events.stream`; this module names them for the sentinel code.
Sentinels are never fed these events (nor connection events): a sentinel
that watched sentinel output could wake itself for ever.
"""

from weft.events.stream import (
    SENTINEL_EVENT_TYPES,
    SentinelData,
    SentinelError,
    SentinelErrorType,
    SentinelLoaded,
    SentinelOutput,
    SentinelTokens,
    SentinelTriggered,
    SentinelUnloaded,
    UnloadReason,
)

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
