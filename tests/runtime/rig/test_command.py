"""The pure parts of a rig command: its label in messages and the verdict on its exit."""

from __future__ import annotations

import signal

import pytest

from weft.runtime.rig.command import CommandOutcome, command_label, verdict


@pytest.mark.parametrize(
    ("run", "label"),
    [
        ("npm ci", '"npm ci"'),
        ("  npm ci  \n", '"npm ci"'),
        ("make\nmake install", '"make ..."'),
        ("x" * 80, '"' + "x" * 80 + '"'),
        ("x" * 81, '"' + "x" * 77 + '..."'),
        ("x" * 200 + "\nsecond", '"' + "x" * 77 + '..."'),
        ("", '""'),
    ],
)
def test_command_label_shows_the_first_line_shortened(run: str, label: str) -> None:
    assert command_label(run) == label


@pytest.mark.parametrize(
    ("code", "timed_out", "timeout", "expected"),
    [
        (0, False, 10.0, CommandOutcome(None, None, 0, "tail")),
        (7, False, 10.0, CommandOutcome("command_failed", "exit code 7", 7, "tail")),
        (
            -signal.SIGKILL,
            False,
            10.0,
            CommandOutcome("command_failed", "killed by SIGKILL", -signal.SIGKILL, "tail"),
        ),
        # A signal number Python does not name is still a failure, with its code.
        (-200, False, 10.0, CommandOutcome("command_failed", "exit code -200", -200, "tail")),
        # A timeout wins over whatever code the stopped shell left.
        (
            -signal.SIGTERM,
            True,
            0.5,
            CommandOutcome("timeout", "timed out after 0.5 s", -15, "tail"),
        ),
        (0, True, 1800.0, CommandOutcome("timeout", "timed out after 1800 s", 0, "tail")),
        (None, False, 10.0, CommandOutcome("command_failed", "exit code None", None, "tail")),
    ],
)
def test_verdict_by_case(
    code: int | None, timed_out: bool, timeout: float, expected: CommandOutcome
) -> None:
    assert verdict(code, timed_out, timeout, "tail") == expected
