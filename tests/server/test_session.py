"""The protocol rules without I/O: a Session fed messages, its actions checked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.server.protocol import COMMANDS, ReasonData, RollbackToCodonData
from weft.server.session import (
    READ_BURST,
    Join,
    Ping,
    Reply,
    Run,
    SendHistory,
    ServerView,
    Session,
    TokenBucket,
)

TOKEN = "s3cret"
READ = "r3ad"
IDLE = ServerView()


def session(*, anonymous: bool = False) -> Session:
    return Session("c1", token=TOKEN, read_token=READ, anonymous_read=anonymous, page_size=500)


def send(s: Session, message: Any, view: ServerView = IDLE) -> Any:
    return s.receive(json.dumps(message) if not isinstance(message, str | bytes) else message, view)


def error_of(action: Any) -> dict[str, Any]:
    assert isinstance(action, Reply), action
    doc = json.loads(action.message)
    assert doc["type"] == "error"
    data: dict[str, Any] = doc["data"]
    return data


def joined(mode: str = "readonly", **data: Any) -> Session:
    s = session()
    payload: dict[str, Any] = {"mode": mode, "token": TOKEN if mode == "readandwrite" else READ}
    payload.update(data)
    action = send(s, {"type": "handshake", "data": payload})
    assert isinstance(action, Join)
    s.joined(101)
    return s


def test_every_command_needs_the_handshake_first() -> None:
    s = session()
    for name in COMMANDS:
        error = error_of(send(s, {"id": name, "type": name}))
        assert (error["code"], error["commandId"], error["command"]) == (
            "HANDSHAKE_REQUIRED",
            name,
            name,
        )
    assert not s.handshaken


def test_a_handshake_joins_with_what_the_client_asked_for() -> None:
    s = session()
    action = send(
        s,
        {
            "type": "handshake",
            "data": {
                "mode": "readonly",
                "token": READ,
                "sendPreviousEvents": True,
                "afterSeq": 7,
                "liveBatches": True,
                "pageSize": 25,
                "somethingNew": 1,  # unknown fields are ignored, for newer clients
            },
        },
    )
    assert action == Join("readonly", True, 7, True, 25)
    assert s.mode == "readonly"
    plain = session()
    assert send(plain, {"type": "handshake", "data": {"mode": "readonly", "token": READ}}) == Join(
        "readonly", False, None, False, 500
    )


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (None, "$.data"),
        ({}, "mode"),
        ({"mode": "admin"}, "$.data.mode"),
        ({"mode": "readonly", "afterSeq": -3}, "$.data.afterSeq"),
        ({"mode": "readonly", "pageSize": 0}, "$.data.pageSize"),
        ({"mode": "readonly", "sendPreviousEvents": "yes"}, "$.data.sendPreviousEvents"),
    ],
)
def test_a_malformed_handshake_says_which_field_is_wrong(data: Any, where: str) -> None:
    s = session()
    error = error_of(send(s, {"type": "handshake", "data": data}))
    assert error["code"] == "INVALID_COMMAND"
    assert where in error["message"]
    assert not s.handshaken


@pytest.mark.parametrize(
    ("mode", "anonymous", "token", "allowed"),
    [
        # Reading needs a token: the read token or the read-write one.
        ("readonly", False, None, False),
        ("readonly", False, "nope", False),
        ("readonly", False, READ, True),
        ("readonly", False, TOKEN, True),
        # The opt-in lets token-less reads in, never a wrong token.
        ("readonly", True, None, True),
        ("readonly", True, "nope", False),
        ("readonly", True, READ, True),
        # Steering needs the read-write token, opt-in or not.
        ("readandwrite", False, None, False),
        ("readandwrite", True, None, False),
        ("readandwrite", False, "nope", False),
        ("readandwrite", False, READ, False),
        ("readandwrite", True, READ, False),
        ("readandwrite", False, TOKEN, True),
    ],
)
def test_tokens_and_the_anonymous_read_opt_in(
    mode: str, anonymous: bool, token: str | None, allowed: bool
) -> None:
    s = session(anonymous=anonymous)
    data: dict[str, Any] = {"mode": mode}
    if token is not None:
        data["token"] = token
    action = send(s, {"type": "handshake", "data": data})
    if allowed:
        assert isinstance(action, Join)
        assert action.mode == mode
    else:
        assert error_of(action)["code"] == "INVALID_TOKEN"
        assert not s.handshaken


def test_a_second_handshake_is_refused_and_changes_nothing() -> None:
    s = joined("readonly")
    error = error_of(
        send(s, {"type": "handshake", "data": {"mode": "readandwrite", "token": TOKEN}})
    )
    assert error["code"] == "ALREADY_HANDSHAKEN"
    assert s.mode == "readonly"


def test_read_only_clients_get_only_the_read_only_commands() -> None:
    s = joined("readonly")
    for name, spec in COMMANDS.items():
        action = send(s, {"type": name})
        if spec.readonly:
            assert not isinstance(action, Reply), name
        else:
            assert error_of(action)["code"] == "INSUFFICIENT_PERMISSIONS", name


def test_a_rollback_in_progress_refuses_steering_but_not_reading() -> None:
    s = joined("readandwrite")
    view = ServerView(rolling_back=True)
    for name, spec in COMMANDS.items():
        action = send(s, {"type": name}, view)
        if spec.readonly:
            assert not isinstance(action, Reply), name
        else:
            assert error_of(action)["code"] == "ROLLBACK_IN_PROGRESS", name


def test_while_shutting_down_only_a_forced_shutdown_gets_through() -> None:
    s = joined("readandwrite")
    view = ServerView(shutting_down=True)
    assert isinstance(send(s, {"type": "server.force_shutdown"}, view), Run)
    assert error_of(send(s, {"type": "codon.next"}, view))["code"] == "SHUTTING_DOWN"
    assert isinstance(send(s, {"type": "ping"}, view), Ping)


def test_commands_are_routed_with_their_typed_data() -> None:
    s = joined("readandwrite")
    action = send(s, {"id": 9, "type": "server.shutdown", "data": {"reason": "done"}})
    assert action == Run("server.shutdown", ReasonData(reason="done"), 9, "runtime")
    action = send(
        s,
        {
            "id": "r",
            "type": "rollback.toCodon",
            "data": {"codonId": "a", "checkpointType": "completed", "autoRestart": True},
        },
    )
    assert action == Run(
        "rollback.toCodon",
        RollbackToCodonData(codon_id="a", checkpoint_type="completed", auto_restart=True),
        "r",
        "rollback",
    )
    for no_data in ({"type": "codon.next"}, {"type": "codon.next", "data": None}):
        assert isinstance(send(s, no_data), Run)
    assert send(s, {"type": "ping.broadcast", "id": 3}) == Ping(3, everyone=True)


def test_bad_data_is_reported_at_its_path_with_the_command_id() -> None:
    s = joined("readandwrite")
    error = error_of(
        send(s, {"id": "x", "type": "rollback.toCheckpoint", "data": {"autoRestart": True}})
    )
    assert error["code"] == "INVALID_COMMAND"
    assert "checkpointSha" in error["message"]
    assert error["commandId"] == "x"


def test_history_sync_sends_only_what_is_older_than_what_was_given() -> None:
    s = joined("readonly")  # joined at 100: live from 101
    assert send(s, {"type": "history.sync", "data": {"afterSeq": 60}}) == SendHistory(
        60, 100, 500, None
    )
    assert send(s, {"type": "history.sync", "data": {"pageSize": 9}}) == SendHistory(0, 60, 9, None)
    assert send(s, {"id": 1, "type": "history.sync"}) == SendHistory(0, 0, 500, 1)


@given(
    st.integers(0, 300),
    st.lists(st.integers(0, 400), max_size=8),
)
def test_history_syncs_and_the_stream_never_overlap_and_leave_no_gap(
    joined_at: int, cursors: list[int]
) -> None:
    s = session()
    handshake = {"type": "handshake", "data": {"mode": "readonly", "token": READ}}
    assert isinstance(send(s, handshake), Join)
    s.joined(joined_at + 1)
    given_seqs = set(range(joined_at + 1, joined_at + 50))  # the live stream
    for cursor in [*cursors, 0]:
        action = send(s, {"type": "history.sync", "data": {"afterSeq": cursor}})
        assert isinstance(action, SendHistory)
        sent = set(range(action.after + 1, action.upto + 1))
        assert not sent & given_seqs
        assert all(seq > cursor for seq in sent)
        given_seqs |= sent
    # After a sync from 0, the client holds the whole journal, contiguous.
    assert given_seqs == set(range(1, joined_at + 50))


@given(st.binary(max_size=200) | st.text(max_size=200))
def test_any_bytes_get_an_answer_never_an_exception(message: bytes | str) -> None:
    for s in (session(), joined("readandwrite")):
        action = s.receive(message, IDLE)
        assert isinstance(action, Reply | Join | Run | SendHistory | Ping)


def test_a_refused_token_says_where_the_tokens_are() -> None:
    error = error_of(send(session(), {"type": "handshake", "data": {"mode": "readonly"}}))
    assert error["code"] == "INVALID_TOKEN"
    assert "none was given" in error["message"]
    assert ".weft/server-read.token" in error["message"]
    error = error_of(
        send(session(), {"type": "handshake", "data": {"mode": "readandwrite", "token": READ}})
    )
    assert "a wrong token was given" in error["message"]
    assert ".weft/server.token" in error["message"]


def test_read_only_commands_are_rate_limited_per_connection() -> None:
    s = joined("readonly")
    at = ServerView(now=100.0)
    answered = [send(s, {"id": i, "type": "ping"}, at) for i in range(READ_BURST + 5)]
    assert all(isinstance(a, Ping) for a in answered[:READ_BURST])
    for i, action in enumerate(answered[READ_BURST:], READ_BURST):
        error = error_of(action)
        assert (error["code"], error["commandId"], error["command"]) == ("RATE_LIMITED", i, "ping")
        assert "retry in" in error["message"]
    # Steering is not counted, and the bucket refills with time.
    rw = joined("readandwrite")
    for _ in range(READ_BURST):
        assert isinstance(send(rw, {"type": "ping"}, at), Ping)
    assert isinstance(send(rw, {"type": "codon.next"}, at), Run)
    assert error_of(send(s, {"type": "history.sync"}, at))["code"] == "RATE_LIMITED"
    assert isinstance(send(s, {"type": "history.sync"}, ServerView(now=100.1)), SendHistory)
    # Another connection has its own bucket.
    assert isinstance(send(joined("readonly"), {"type": "ping"}, at), Ping)


@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=300))
def test_a_token_bucket_never_allows_more_than_burst_plus_rate_times_time(
    gaps: list[float],
) -> None:
    bucket = TokenBucket(rate=20.0, burst=30)
    now, allowed = 0.0, 0
    for gap in gaps:
        now += gap
        allowed += bucket.take(now)
    assert allowed <= 30 + 20.0 * now + 1e-6
    # A bucket left alone long enough is full again.
    assert all(bucket.take(now + 10) for _ in range(30))


@pytest.mark.parametrize("depth", [2_000, 100_000])
@pytest.mark.parametrize(
    "wrap",
    [
        lambda x: x,
        lambda x: b'{"type":"handshake","data":' + x + b"}",
        lambda x: b'{"type":"history.sync","id":1,"data":{"extra":' + x + b"}}",
        lambda x: b'{"type":"ping","id":' + x + b"}",
    ],
)
def test_deeply_nested_json_is_an_invalid_command(depth: int, wrap: Any) -> None:
    # 2,000 levels is a 4 kB message; msgspec gives up past the interpreter's
    # recursion limit, which the session answers instead of raising.
    nested = b"[" * depth + b"]" * depth
    for s in (session(), joined("readonly")):
        error = error_of(s.receive(wrap(nested), IDLE))
        assert error["code"] == "INVALID_COMMAND"
    error = error_of(joined("readonly").receive(wrap(nested), IDLE))
    assert b'"extra"' not in wrap(b"") or "nested too deeply" in error["message"]


@pytest.mark.parametrize(
    "message",
    [
        b'{"type":"ping","id":1e999999}',
        b'{"type":"ping","id":"\\ud800"}',
        '{"type":"\ud800"}',
        b'{"type":"history.sync","data":{"afterSeq":1e400}}',
        b'{"type":"history.sync","data":{"afterSeq":99999999999999999999999999}}',
        b'{"type":"history.sync","data":{"pageSize":-1}}',
        b'{"type":"ping","data":[1,2]}',
        b"\xff\xfe{}",
        b'{"type":"ping"}' * 3,
    ],
)
def test_hostile_values_are_invalid_commands(message: bytes | str) -> None:
    action = joined("readonly").receive(message, IDLE)
    assert error_of(action)["code"] == "INVALID_COMMAND"
