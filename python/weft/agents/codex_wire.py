"""The wire format of ``codex exec --json`` (reference agent-cli-protocols
§2.2), as msgspec Structs :class:`weft.agents.codex.CodexParser` decodes each
stdout line into. Fields the adapter does not depend on are not declared, and
unknown fields are ignored, so additions in newer builds pass through.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec


class Usage(msgspec.Struct):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0


class ErrorBody(msgspec.Struct):
    message: str = ""


class Item(msgspec.Struct):
    id: str = ""
    type: str | None = None
    item_type: str | None = None
    """The pre-0.4x name of ``type``."""
    text: str | None = None
    command: str | None = None
    aggregated_output: str | None = None
    exit_code: int | None = None
    status: str | None = None
    changes: Any = None
    server: str | None = None
    tool: str | None = None
    arguments: Any = None
    result: Any = None
    error: Any = None
    query: str | None = None
    prompt: str | None = None
    message: str | None = None


class Event(msgspec.Struct, tag_field="type"):
    pass


class ThreadStarted(Event, tag="thread.started"):
    thread_id: str


class ItemStarted(Event, tag="item.started"):
    item: Item


class ItemUpdated(Event, tag="item.updated"):
    item: Item


class ItemCompleted(Event, tag="item.completed"):
    item: Item


class TurnCompleted(Event, tag="turn.completed"):
    usage: Usage | None = None


class TurnFailed(Event, tag="turn.failed"):
    error: ErrorBody | None = None


class ErrorEvent(Event, tag="error"):
    message: str = ""


AnyEvent: TypeAlias = (
    ThreadStarted
    | ItemStarted
    | ItemUpdated
    | ItemCompleted
    | TurnCompleted
    | TurnFailed
    | ErrorEvent
)

IGNORED_TYPES = frozenset({"turn.started", "item.plan.delta", "request_user_input"})
KNOWN_TYPES = IGNORED_TYPES | {
    "thread.started",
    "item.started",
    "item.updated",
    "item.completed",
    "turn.completed",
    "turn.failed",
    "error",
}


class Envelope(msgspec.Struct):
    type: str


decoder = msgspec.json.Decoder(AnyEvent)
envelope_decoder = msgspec.json.Decoder(Envelope)


def line_type(line: bytes) -> str:
    """The ``type`` of a line the event union refused (``DecodeError`` when
    it has none)."""
    return envelope_decoder.decode(line).type
