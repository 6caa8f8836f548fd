"""The events' JSON Schema and docs/protocol.md, checked against the types that encode messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.server.helpers import running

from weft.cli import main
from weft.events.stream import InfoEvent
from weft.events.transitions import TRANSITION_CLASSES, decode
from weft.server.history import JournalHistory
from weft.server.protocol import COMMANDS, CONNECTION_MESSAGES
from weft.server.schema import RejectedTransition, events_json_schema, stream_event_types
from weft.server.seed import SEED_EVENT_TYPES, SEED_MESSAGES
from weft.server.session import Join, Reply, ServerView, Session

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def examples() -> list[dict[str, Any]]:
    """Every ```json block of docs/protocol.md that is a message."""
    blocks = re.findall(r"```json\n(.*?)\n```", DOC.read_text(encoding="utf-8"), re.S)
    docs = [json.loads(b) for b in blocks]
    return [d for d in docs if "type" in d]


def kind_of(example: dict[str, Any]) -> str:
    if "seq" in example:
        return "journaled"
    if "sourceSeq" in example:
        return "seed"
    return "connection" if "timestamp" in example else "command"


def test_every_command_and_event_has_an_example_in_the_protocol_doc() -> None:
    by_kind: dict[str, set[str]] = {
        "journaled": set(),
        "connection": set(),
        "command": set(),
        "seed": set(),
    }
    for example in examples():
        by_kind[kind_of(example)].add(example["type"])
    assert by_kind["command"] >= {*COMMANDS, "handshake"}
    assert by_kind["journaled"] >= {*TRANSITION_CLASSES, *stream_event_types()}
    assert by_kind["connection"] >= set(CONNECTION_MESSAGES)
    assert by_kind["seed"] >= set(SEED_EVENT_TYPES)


def test_every_example_decodes_with_the_types_that_encode_it() -> None:
    stream = stream_event_types()
    token = "t"
    for example in examples():
        kind, name = kind_of(example), example["type"]
        if kind == "command":
            # The doc's handshake shows a (shortened) read token.
            session = Session("c", token=token, read_token="Jb8p...q3Y")
            if name != "handshake":
                shake = {"type": "handshake", "data": {"mode": "readandwrite", "token": token}}
                session.receive(json.dumps(shake), ServerView())
            action = session.receive(json.dumps(example), ServerView())
            assert not isinstance(action, Reply), (example, action)
            if name == "handshake":
                assert isinstance(action, Join)
        elif kind == "journaled":
            data = json.dumps(example["data"]).encode()
            assert re.fullmatch(rf"\d{{13}}-{example['seq']:09x}", example["id"]), example["id"]
            if name in TRANSITION_CLASSES:
                decode(json.dumps({"type": name, "data": example["data"]}).encode())
            elif "transitionType" in example["data"]:
                msgspec.json.decode(data, type=RejectedTransition)
            else:
                msgspec.json.decode(data, type=stream[name])
        elif kind == "seed":
            assert example["sourceSeq"] >= 1
            msgspec.json.decode(json.dumps(example["data"]).encode(), type=SEED_MESSAGES[name])
        else:
            data = json.dumps(example["data"]).encode()
            msgspec.json.decode(data, type=CONNECTION_MESSAGES[name])


def test_the_doc_s_server_messages_validate_against_the_generated_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(events_json_schema())
    checked = 0
    for example in examples():
        if kind_of(example) != "command":
            validator.validate(example)
            checked += 1
    assert checked > 30
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"id": "1-2", "seq": 1, "timestamp": "t", "type": "info", "data": {}})


async def test_what_a_real_server_sends_validates_against_the_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(events_json_schema())
    async with running(tmp_path, transitions=True) as h:
        h.manager.emit(InfoEvent(message="hello"))
        await h.manager.flush()
        history = JournalHistory(h.store.journal.path)
        try:
            page = await history.page(0, h.manager.last_seq, 1000, 1 << 30)
        finally:
            await history.close()
    events = json.loads(b"[" + page.events + b"]")
    assert {e["type"] for e in events} >= {"RunStarted", "CodonTransitioned", "error", "info"}
    for event in events:
        validator.validate(event)


def test_the_schema_names_every_message_once() -> None:
    schema = events_json_schema()
    refs = [entry["$ref"].removeprefix("#/$defs/") for entry in schema["oneOf"]]
    assert len(refs) == len(set(refs))
    expected = {
        *(f"event:{t}" for t in (*TRANSITION_CLASSES, *stream_event_types())),
        *(f"connection:{t}" for t in CONNECTION_MESSAGES),
        *(f"seed:{t}" for t in SEED_EVENT_TYPES),
    }
    assert set(refs) == expected
    for ref in refs:
        assert schema["$defs"][ref]["properties"]["type"] == {"const": ref.split(":", 1)[1]}


def test_weft_schema_events_prints_the_generated_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["schema", "--events"]) == 0
    assert json.loads(capsys.readouterr().out) == events_json_schema()
    target = tmp_path / "events.schema.json"
    assert main(["schema", "--events", "-o", str(target)]) == 0
    assert json.loads(target.read_text()) == events_json_schema()
    assert main(["schema"]) == 0
    assert "Codon" in json.loads(capsys.readouterr().out)["$defs"]  # the hank schema is unchanged
