"""Fuzzing a live server: random bytes, JSON and commands never stop it answering.

The server runs on its own thread and loop for the whole module; each
hypothesis example opens a fresh connection, sends its messages and then a
ping, and must get the ping's answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.server.helpers import TOKEN, Recorder, Rollbacks
from websockets.sync.client import connect

from weft.events.stream import InfoEvent
from weft.server import JournalHistory, ProtocolServer, ServerConfig
from weft.server.protocol import COMMANDS
from weft.store import ExecutionStore


@dataclass
class Live:
    url: str
    recorder: Recorder
    errors: list[BaseException]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    ready = threading.Event()
    state: dict[str, Any] = {}
    errors: list[BaseException] = []
    recorder = Recorder()

    async def serve() -> None:
        store = await asyncio.to_thread(ExecutionStore.open, folder / "x")
        manager = store.state_manager()
        for i in range(300):
            manager.emit(InfoEvent(message=f"m{i}"))
        await manager.flush()
        server = await ProtocolServer.start(
            manager,
            JournalHistory(store.journal.path),
            token=TOKEN,
            commands=recorder,
            rollback=Rollbacks(),
            config=ServerConfig(max_message_size=64 * 1024, ring_size=64, ping_interval=None),
        )
        stop = asyncio.Event()
        state.update(url=server.url, stop=stop, loop=asyncio.get_running_loop())
        ready.set()
        await stop.wait()
        await server.close()
        await store.close(manager)

    def main() -> None:
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(serve())
        except BaseException as e:
            errors.append(e)
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(30), "the server did not start"
    if errors:
        raise errors[0]
    yield Live(state["url"], recorder, errors)
    state["loop"].call_soon_threadsafe(state["stop"].set)
    thread.join(30)
    assert not errors


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children)
    ),
    max_leaves=12,
)
field_values = st.one_of(
    json_values,
    st.sampled_from(["readonly", "readandwrite", TOKEN, "completed", "abc123"]),
    st.integers(-5, 400),
)
data_objects = st.dictionaries(
    st.sampled_from(
        [
            "mode",
            "token",
            "afterSeq",
            "pageSize",
            "sendPreviousEvents",
            "liveBatches",
            "codonId",
            "reason",
            "runId",
            "checkpointSha",
            "checkpointType",
            "autoRestart",
        ]
    ),
    field_values,
    max_size=5,
)
commands = st.builds(
    lambda kind, data, ident: json.dumps({"type": kind, "data": data, "id": ident}),
    st.sampled_from([*COMMANDS, "handshake", "codon.teleport", ""]),
    data_objects | json_values,
    st.none() | st.integers() | st.text(max_size=5),
)
messages = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    json_values.map(json.dumps),
    commands,
)


def _is_json_object(message: bytes | str) -> bool:
    try:
        return isinstance(json.loads(message), dict)
    except ValueError:
        return False


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sent=st.lists(messages, max_size=8),
    shake=st.sampled_from([None, "readonly", "readandwrite"]),
)
def test_random_input_never_stops_the_server_answering(
    live: Live, sent: list[bytes | str], shake: str | None
) -> None:
    final = f"final-{uuid.uuid4()}"
    with connect(live.url, max_size=None, open_timeout=10) as ws:
        if shake is not None:
            ws.send(json.dumps({"type": "handshake", "data": {"mode": shake, "token": TOKEN}}))
        for message in sent:
            ws.send(message)
        ws.send(json.dumps({"type": "ping", "id": final}))
        replies = []
        while True:
            reply = json.loads(ws.recv(timeout=10))
            replies.append(reply)
            if (reply.get("data") or {}).get("commandId") == final:
                break
    # The answer to the ping: a pong once handshaken, else the handshake reminder.
    assert reply["type"] in ("pong", "error")
    if reply["type"] == "error":
        assert reply["data"]["code"] == "HANDSHAKE_REQUIRED"
    # Everything that was not a JSON object was answered with an error.
    malformed = sum(not _is_json_object(m) for m in sent)
    invalid = sum(r["type"] == "error" and r["data"]["code"] == "INVALID_COMMAND" for r in replies)
    assert invalid >= malformed
    assert not live.errors


def test_the_server_is_alive_and_steerable_after_the_fuzzing(live: Live) -> None:
    with connect(live.url, max_size=None) as ws:
        ws.send(json.dumps({"type": "handshake", "data": {"mode": "readonly", "token": TOKEN}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "handshake.response"
        assert json.loads(ws.recv(timeout=10))["type"] == "server.ready"
        ws.send(json.dumps({"type": "history.sync", "id": 1, "data": {"afterSeq": 0}}))
        seqs: list[int] = []
        while True:
            page = json.loads(ws.recv(timeout=10))
            if page["type"] != "history.batch":
                continue
            seqs += [e["seq"] for e in page["data"]["events"]]
            if not page["data"]["hasMore"]:
                break
    assert seqs == list(range(1, 301))
