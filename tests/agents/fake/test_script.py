"""Script mode: FAKE_AGENT_SCRIPT plays exactly the steps it lists."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from .support import BASE_ARGS, Fake
from .wire import TOOL_ID, UUID4


def script(tmp_path: Path, steps: Any) -> dict[str, str]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(steps))
    return {"FAKE_AGENT_SCRIPT": str(path)}


def test_steps_and_placeholders(fake: Fake, tmp_path: Path) -> None:
    steps = [
        {"raw": "plain text"},
        {
            "emit": {
                "type": "system",
                "subtype": "init",
                "session_id": "{session_id}",
                "cwd": "{cwd}",
                "uuid": "{new_uuid}",
            }
        },
        {"emit": {"type": "tool", "id": "{new_tool_id}", "again": "{tool_id}", "model": "{model}"}},
        {"partial": '{"type":"half', "then_sleep_ms": 5},
        {"raw": '"}'},
        {"stderr": "to stderr"},
        {"sleep_ms": 1},
        {"exit": 7},
        {"emit": {"never": True}},
    ]
    done = fake.claude("the prompt", "--model", "opus", env=script(tmp_path, steps))
    assert done.code == 7
    assert done.stderr == "to stderr\n"
    raw = done.text.split("\n")
    assert raw[0] == "plain text"
    assert raw[3] == '{"type":"half"}'
    assert raw[4] == ""
    init, tool = json.loads(raw[1]), json.loads(raw[2])
    assert UUID4.match(init["session_id"])
    assert UUID4.match(init["uuid"])
    assert init["cwd"] == str(fake.cwd)
    assert TOOL_ID.match(tool["id"])
    assert tool["again"] == tool["id"]
    assert tool["model"] == "claude-opus-5-5"


def test_script_ends_with_exit_zero_and_signal_steps(fake: Fake, tmp_path: Path) -> None:
    done = fake.codex(
        "x",
        env=script(tmp_path, [{"emit": {"type": "thread.started", "thread_id": "{thread_id}"}}]),
    )
    assert done.code == 0
    assert done.lines[0]["thread_id"]
    killed = fake.gemini("x", env=script(tmp_path, [{"signal": "SIGKILL"}]))
    assert killed.code == -signal.SIGKILL


def test_start_checks_still_apply(fake: Fake, tmp_path: Path) -> None:
    done = fake.run(
        "claude", "-p", "--output-format", "stream-json", stdin="x", env=script(tmp_path, [])
    )
    assert done.code == 1
    assert "requires --verbose" in done.stderr


@pytest.mark.parametrize(
    ("steps", "needle"),
    [
        ({"emit": {}}, "must be a list"),
        ([{"emit": {}, "raw": "x"}], "exactly one of"),
        ([{"wait": 1}], "exactly one of"),
        ([{"sleep_ms": -1}], "must not be negative"),
        ([{"exit": "1"}], "wrong type"),
        ([{"signal": "SIGNOPE"}], "signal name"),
        ([{"raw": "x", "then_sleep_ms": 1}], "only goes with partial"),
    ],
)
def test_bad_scripts_are_rejected_before_any_output(
    fake: Fake, tmp_path: Path, steps: Any, needle: str
) -> None:
    done = fake.claude("x", env=script(tmp_path, steps))
    assert done.code == 2
    assert done.out == b""
    assert needle in done.stderr


def test_missing_and_invalid_files(fake: Fake, tmp_path: Path) -> None:
    missing = fake.claude("x", env={"FAKE_AGENT_SCRIPT": str(tmp_path / "none.json")})
    assert missing.code == 2
    assert "no such file" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    invalid = fake.claude("x", env={"FAKE_AGENT_SCRIPT": str(bad)})
    assert invalid.code == 2
    assert "not JSON" in invalid.stderr


def test_every_flavour_plays_scripts(fake: Fake, tmp_path: Path) -> None:
    for flavour in BASE_ARGS:
        env = script(tmp_path, [{"emit": {"flavour": flavour, "id": "{session_id}"}}])
        done = fake.run(flavour, *BASE_ARGS[flavour], stdin="x", env=env)
        assert done.code == 0
        assert done.lines[0]["flavour"] == flavour
        assert done.lines[0]["id"]
