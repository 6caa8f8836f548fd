"""fake-claude with ``--input-format stream-json``: one result per stdin turn (§1.8)."""

from __future__ import annotations

import json
from typing import Any

from .support import Fake
from .wire import check_claude

ARGS = ["-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]


def user(content: Any) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": content}}) + "\n"


def test_one_result_per_user_message_and_one_init(fake: Fake) -> None:
    stdin = user("first question") + "\n" + user([{"type": "text", "text": "second question"}])
    done = fake.run("claude", *ARGS, stdin=stdin)
    assert done.code == 0, done.stderr
    results = [line for line in done.lines if line["type"] == "result"]
    assert len(results) == 2
    assert "first question" in results[0]["result"]
    assert "second question" in results[1]["result"]
    assert [line["type"] for line in done.lines].count("system") == 1
    # Each result reports the session's running totals.
    assert results[1]["num_turns"] > results[0]["num_turns"]
    assert results[1]["total_cost_usd"] > results[0]["total_cost_usd"]
    check_claude(done.lines[: done.lines.index(results[0]) + 1])


def test_each_turn_does_its_own_work(fake: Fake) -> None:
    stdin = user("@@fake:write path=a.txt@@1@@end@@") + user("@@fake:write path=b.txt@@2@@end@@")
    done = fake.run("claude", *ARGS, "--dangerously-skip-permissions", stdin=stdin)
    assert done.code == 0
    assert (fake.cwd / "a.txt").read_text() == "1"
    assert (fake.cwd / "b.txt").read_text() == "2"
    prompts = [
        e["message"]["content"]
        for e in fake.transcript(done.lines[0]["session_id"])
        if e["type"] == "user" and isinstance(e["message"]["content"], str)
    ]
    assert len(prompts) == 2


def test_control_requests_are_answered_and_replay_echoes(fake: Fake) -> None:
    control = {"type": "control_request", "request_id": "r1", "request": {"subtype": "initialize"}}
    stdin = json.dumps(control) + "\n" + user("hello")
    done = fake.run("claude", *ARGS, "--replay-user-messages", stdin=stdin)
    first, echo = done.lines[0], done.lines[1]
    assert first["type"] == "control_response"
    assert first["response"]["request_id"] == "r1"
    assert first["response"]["subtype"] == "success"
    assert echo["type"] == "user"
    assert echo["message"]["content"] == "hello"


def test_eof_without_messages_exits_quietly(fake: Fake) -> None:
    done = fake.run("claude", *ARGS, stdin="")
    assert done.code == 0
    assert done.out == b""


def test_a_line_that_is_not_json_is_an_error(fake: Fake) -> None:
    done = fake.run("claude", *ARGS, stdin="not json\n")
    assert done.code == 1
    assert "Error parsing streaming input line" in done.stderr


def test_stream_input_needs_stream_output(fake: Fake) -> None:
    done = fake.run("claude", "-p", "--input-format", "stream-json", stdin=user("x"))
    assert done.code == 1
    assert "requires output-format=stream-json" in done.stderr
