"""Hostile clients against a real server: tokens, nesting, sizes, types, floods.

Two real servers (a strict one, and one started with the anonymous-read
opt-in) run on their own thread and uvloop for the whole module, over a real
journal; clients are real WebSocket connections. After every hostile message
the connection must still be open and answer a ping, and nothing may be
logged with a traceback (a handler failure would be, by weft.server or by
websockets itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvloop
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.server.helpers import READ_TOKEN, TOKEN, Recorder, Rollbacks
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from weft.events.stream import InfoEvent
from weft.server import JournalHistory, ProtocolServer, ServerConfig
from weft.server.protocol import COMMANDS
from weft.server.session import READ_BURST
from weft.store import ExecutionStore

LIMIT = 1 << 20
"""The servers' message size limit (the default)."""
EVENTS = 300


class _Tracebacks(logging.Handler):
    """Every log record that carries an exception (a traceback in the run's log)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@dataclass
class Servers:
    strict: str
    anonymous: str
    recorder: Recorder
    tracebacks: _Tracebacks
    errors: list[BaseException] = field(default_factory=list)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    folder: Path = tmp_path_factory.mktemp("hostile")
    ready = threading.Event()
    state: dict[str, Any] = {}
    errors: list[BaseException] = []
    recorder = Recorder()
    tracebacks = _Tracebacks()
    logging.getLogger().addHandler(tracebacks)

    async def serve() -> None:
        store = await asyncio.to_thread(ExecutionStore.open, folder / "x")
        manager = store.state_manager()
        for i in range(EVENTS):
            manager.emit(InfoEvent(message=f"m{i}"))
        await manager.flush()
        started = [
            await ProtocolServer.start(
                manager,
                JournalHistory(store.journal.path),
                token=TOKEN,
                read_token=READ_TOKEN,
                commands=recorder,
                rollback=Rollbacks(),
                config=ServerConfig(ping_interval=None, allow_anonymous_read=anonymous),
            )
            for anonymous in (False, True)
        ]
        stop = asyncio.Event()
        state.update(
            strict=started[0].url,
            anonymous=started[1].url,
            stop=stop,
            loop=asyncio.get_running_loop(),
        )
        ready.set()
        await stop.wait()
        for server in started:
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
    try:
        assert ready.wait(30), "the servers did not start"
        if errors:
            raise errors[0]
        yield Servers(state["strict"], state["anonymous"], recorder, tracebacks, errors)
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)
        assert not errors
        assert not tracebacks.records, [r.getMessage() for r in tracebacks.records]
    finally:
        logging.getLogger().removeHandler(tracebacks)


# --------------------------------------------------------------------------- helpers


def recv(ws: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(ws.recv(timeout=20))
    return message


def shake(
    ws: ClientConnection, mode: str = "readonly", token: str | None = READ_TOKEN
) -> dict[str, Any]:
    """Sends a handshake; its answer (``handshake.response`` or ``error``)."""
    data: dict[str, Any] = {"mode": mode}
    if token is not None:
        data["token"] = token
    ws.send(json.dumps({"type": "handshake", "data": data}))
    reply = recv(ws)
    if reply["type"] == "handshake.response":
        assert recv(ws)["type"] == "server.ready"
    return reply


def answer_to(ws: ClientConnection, command_id: str) -> dict[str, Any]:
    """Reads until the reply that carries ``command_id``."""
    while True:
        reply = recv(ws)
        if (reply.get("data") or {}).get("commandId") == command_id:
            return reply


def still_answers(ws: ClientConnection) -> dict[str, Any]:
    """Pings; the connection must be open and answer it (a pong, or RATE_LIMITED
    after a flood: an answer all the same)."""
    probe = f"probe-{uuid.uuid4()}"
    ws.send(json.dumps({"type": "ping", "id": probe}))
    reply = answer_to(ws, probe)
    assert reply["type"] == "pong" or reply["data"]["code"] == "RATE_LIMITED", reply
    return reply


# --------------------------------------------------------------------------- tokens


@pytest.mark.parametrize(
    ("anonymous", "mode", "token", "allowed"),
    [
        (False, "readonly", None, False),
        (False, "readonly", "wrong", False),
        (False, "readonly", READ_TOKEN, True),
        (False, "readonly", TOKEN, True),
        (False, "readandwrite", None, False),
        (False, "readandwrite", READ_TOKEN, False),
        (False, "readandwrite", "wrong", False),
        (False, "readandwrite", TOKEN, True),
        (True, "readonly", None, True),
        (True, "readonly", "wrong", False),
        (True, "readandwrite", None, False),
        (True, "readandwrite", READ_TOKEN, False),
    ],
)
def test_every_connection_presents_the_token_its_mode_needs(
    servers: Servers, anonymous: bool, mode: str, token: str | None, allowed: bool
) -> None:
    with connect(servers.anonymous if anonymous else servers.strict, max_size=None) as ws:
        reply = shake(ws, mode, token)
        if not allowed:
            assert reply["type"] == "error"
            assert reply["data"]["code"] == "INVALID_TOKEN"
            # Refused, but open: the client may try again with the right token.
            right = TOKEN if mode == "readandwrite" else READ_TOKEN
            reply = shake(ws, mode, right)
        assert reply["type"] == "handshake.response"
        assert reply["data"]["mode"] == mode


def test_a_read_token_reads_everything_and_steers_nothing(servers: Servers) -> None:
    calls = len(servers.recorder.calls)
    with connect(servers.strict, max_size=None) as ws:
        shake(ws, "readonly", READ_TOKEN)
        ws.send(json.dumps({"type": "history.sync", "id": "h", "data": {"afterSeq": 0}}))
        seqs: list[int] = []
        while True:
            page = answer_to(ws, "h")
            seqs += [e["seq"] for e in page["data"]["events"]]
            if not page["data"]["hasMore"]:
                break
        assert seqs == list(range(1, EVENTS + 1))
        for name, spec in COMMANDS.items():
            if spec.readonly:
                continue
            ws.send(json.dumps({"type": name, "id": name}))
            assert answer_to(ws, name)["data"]["code"] == "INSUFFICIENT_PERMISSIONS", name
    assert len(servers.recorder.calls) == calls
    with connect(servers.strict, max_size=None) as ws:
        shake(ws, "readandwrite", TOKEN)
        ws.send(json.dumps({"type": "codon.next", "id": "n"}))
        assert answer_to(ws, "n")["type"] == "command.ack"
    assert servers.recorder.calls[calls:] == ["codon.next"]


# --------------------------------------------------------------------------- hostile JSON


def nested(depth: int, kind: str) -> str:
    opening, closing = {"list": ("[", "]"), "object": ('{"a":', "}")}[kind]
    return opening * depth + "1" + closing * depth


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    depth=st.integers(1, 170_000),
    kind=st.sampled_from(["list", "object"]),
    where=st.sampled_from(["top", "data", "field", "id", "handshake"]),
)
@example(depth=1_000, kind="list", where="field")  # the reported 2 kB message
@example(depth=170_000, kind="object", where="data")
def test_json_nested_any_depth_is_answered_and_the_connection_stays_open(
    servers: Servers, depth: int, kind: str, where: str
) -> None:
    deep = nested(depth, kind)
    message = {
        "top": deep,
        "data": '{"type":"history.sync","id":"m","data":' + deep + "}",
        "field": '{"type":"history.sync","id":"m","data":{"pad":' + deep + "}}",
        "id": '{"type":"ping","id":' + deep + "}",
        "handshake": '{"type":"handshake","id":"m","data":' + deep + "}",
    }[where]
    with connect(servers.strict, max_size=None) as ws:
        shake(ws)
        ws.send(message)
        reply = recv(ws)
        if reply["type"] == "error":
            # Too deep for the decoder, or the wrong type: INVALID_COMMAND;
            # a second handshake: ALREADY_HANDSHAKEN (its data is never read).
            assert reply["data"]["code"] in ("INVALID_COMMAND", "ALREADY_HANDSHAKEN"), reply
        else:
            # Shallow enough and harmless: history.sync ignores an unknown field.
            assert where in ("field", "data"), reply
            assert reply["type"] == "history.batch", reply
        still_answers(ws)


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children)
    ),
    max_leaves=10,
)
raw_numbers = st.sampled_from(
    ["1e999999", "-1e999999", "1" * 400, "-0", "1.5e-400", "NaN", "Infinity", "0x10", "01"]
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from([*COMMANDS, "handshake", "", "x" * 300]),
    slot=st.sampled_from(["type", "id", "data", "data.afterSeq", "data.pageSize", "data.runId"]),
    value=json_values.map(json.dumps) | raw_numbers,
)
def test_any_value_of_any_type_in_any_field_is_answered(
    servers: Servers, kind: str, slot: str, value: str
) -> None:
    fields = {"type": json.dumps(kind), "id": '"v"', "data": "{}"}
    if slot.startswith("data."):
        fields["data"] = "{" + json.dumps(slot.split(".", 1)[1]) + ":" + value + "}"
    else:
        fields[slot] = value
    message = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"
    with connect(servers.strict, max_size=None) as ws:
        shake(ws, "readandwrite", TOKEN)
        ws.send(message)
        still_answers(ws)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    size=st.integers(0, LIMIT - 200),
    form=st.sampled_from(["id", "padding", "garbage", "binary"]),
)
@example(size=LIMIT - 200, form="padding")
@example(size=LIMIT - 200, form="binary")
def test_messages_up_to_the_size_limit_are_answered(servers: Servers, size: int, form: str) -> None:
    with connect(servers.strict, max_size=None) as ws:
        shake(ws)
        if form == "id":  # a valid ping whose id is huge: echoed back in the pong
            ws.send(json.dumps({"type": "ping", "id": "i" * size}))
            assert recv(ws)["type"] == "pong"
        elif form == "padding":  # an unknown field is ignored
            ws.send(
                json.dumps({"type": "history.sync", "data": {"afterSeq": 0, "pad": "p" * size}})
            )
            assert recv(ws)["type"] == "history.batch"
        elif form == "garbage":
            ws.send("{" * min(size, 1) + "x" * size)
            assert recv(ws)["data"]["code"] == "INVALID_COMMAND"
        else:  # a binary frame of bytes that are not UTF-8
            ws.send(b"\xff\xfe" + b"\x80" * size)
            assert recv(ws)["data"]["code"] == "INVALID_COMMAND"
        still_answers(ws)


def test_a_message_over_the_limit_closes_with_1009_and_the_server_goes_on(
    servers: Servers,
) -> None:
    with connect(servers.strict, max_size=None) as ws:
        shake(ws)
        ws.send(json.dumps({"type": "ping", "id": "i" * LIMIT}))
        with pytest.raises(ConnectionClosed) as closed:
            recv(ws)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
    with connect(servers.strict, max_size=None) as ws:
        shake(ws)
        still_answers(ws)


# --------------------------------------------------------------------------- floods


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    count=st.integers(1, 3 * READ_BURST),
    command=st.sampled_from(["ping", "history.sync", "checkpoint.list"]),
)
@example(count=3 * READ_BURST, command="checkpoint.list")
def test_a_flood_of_read_only_commands_is_limited_and_the_connection_stays_open(
    servers: Servers, count: int, command: str
) -> None:
    with connect(servers.strict, max_size=None) as ws:
        shake(ws)
        data = {"afterSeq": EVENTS - 1} if command == "history.sync" else {}
        for i in range(count):
            ws.send(json.dumps({"type": command, "id": f"f{i}", "data": data}))
        limited = answered = 0
        pending = {f"f{i}" for i in range(count)}
        while pending:
            reply = recv(ws)
            key = (reply.get("data") or {}).get("commandId")
            if reply["type"] == "error" and reply["data"]["code"] == "RATE_LIMITED":
                limited += 1
                pending.discard(key)
            elif reply["type"] in ("pong", "command.ack") or (
                reply["type"] == "history.batch" and not reply["data"]["hasMore"]
            ):
                answered += 1
                pending.discard(key)
        # The burst (and what refilled while the flood was read) passes; the rest is refused.
        assert answered + limited == count
        assert answered >= min(count, READ_BURST)
        if count > 2 * READ_BURST:
            assert limited > 0
        still_answers(ws)
