"""The JSON Schema of everything a Weft server sends (``weft schema --events``).

Generated from the msgspec types that encode the messages, so it cannot
drift from them: the transitions (:mod:`weft.events.transitions`), the stream
events (every :class:`~weft.events.stream.StreamData` subclass), the
``error`` event a refused transition is journaled as, and the connection
messages of :mod:`weft.server.protocol`, and the seed's shapes a
``seedEvents`` connection gets (:mod:`weft.server.seed`). Journaled events are
``{id, seq, timestamp, type, data}``; connection messages have no ``seq``; seed
messages have ``sourceSeq`` instead.
"""

from __future__ import annotations

from typing import Any

import msgspec

from weft.events.stream import STREAM_CLASSES, RejectedTransition, StreamData
from weft.events.transitions import TRANSITION_CLASSES
from weft.server.protocol import CONNECTION_MESSAGES, PROTOCOL_VERSION
from weft.server.seed import SEED_MESSAGES, StateTransition

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
EVENT_ID = r"^\d{13}-[0-9a-z]{9}$"


def stream_event_types() -> dict[str, type[StreamData]]:
    """Every stream event type by its wire name (subclasses of subclasses too)."""
    return dict(STREAM_CLASSES)


def _journaled(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": name,
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": EVENT_ID},
            "seq": {"type": "integer", "minimum": 1},
            "timestamp": {"type": "string", "format": "date-time"},
            "type": {"const": name},
            "data": data,
        },
        "required": ["id", "seq", "timestamp", "type", "data"],
        "additionalProperties": False,
    }


def _connection(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": name,
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": EVENT_ID},
            "timestamp": {"type": "string", "format": "date-time"},
            "type": {"const": name},
            "data": data,
        },
        "required": ["id", "timestamp", "type", "data"],
        "additionalProperties": False,
    }


def _seed(name: str, data: dict[str, Any]) -> dict[str, Any]:
    schema = _connection(name, data)
    schema["properties"]["sourceSeq"] = {"type": "integer", "minimum": 1}
    schema["required"].append("sourceSeq")
    return schema


def events_json_schema() -> dict[str, Any]:
    """The schema: ``oneOf`` every message, each a ``$defs`` entry named
        ``event:<type>`` (journaled), ``connection:<type>`` or ``seed:<type>``
    (with ``seedEvents``)."""
    stream = stream_event_types()
    data_types: list[Any] = [
        *TRANSITION_CLASSES.values(),
        *stream.values(),
        RejectedTransition,
        *CONNECTION_MESSAGES.values(),
        StateTransition,
    ]
    refs, components = msgspec.json.schema_components(data_types, ref_template="#/$defs/{name}")
    by_type = dict(zip(data_types, refs, strict=True))
    defs: dict[str, Any] = dict(components)
    entries: list[str] = []

    def add(key: str, schema: dict[str, Any]) -> None:
        defs[key] = schema
        entries.append(key)

    for name, cls in TRANSITION_CLASSES.items():
        add(f"event:{name}", _journaled(name, by_type[cls]))
    for name, scls in stream.items():
        data = by_type[scls]
        if name == "error":
            data = {"anyOf": [data, by_type[RejectedTransition]]}
        add(f"event:{name}", _journaled(name, data))
    for name, ccls in CONNECTION_MESSAGES.items():
        add(f"connection:{name}", _connection(name, by_type[ccls]))
    for name, kls in SEED_MESSAGES.items():
        add(f"seed:{name}", _seed(name, by_type[kls]))
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "Weft WebSocket server messages",
        "description": (
            "Every message a Weft server sends (protocol version "
            f"{PROTOCOL_VERSION}): journaled events carry their journal seq; "
            "connection messages go to one client and are not journaled. "
            "See docs/protocol.md."
        ),
        "oneOf": [{"$ref": f"#/$defs/{key}"} for key in entries],
        "$defs": defs,
    }
