"""Whether a person can answer, the one CI detector, and the [y/N] question."""

from __future__ import annotations

import io
import os

import pytest

from weft.cli.prompts import CI_ENV_VARS, ask_yes_no, in_ci, is_interactive


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("environ", "headless", "expected"),
    [
        ({}, False, True),
        ({}, True, False),
        ({"CI": "true"}, False, False),
        ({"CI": "false"}, False, True),
        ({"GITHUB_ACTIONS": "1"}, False, False),
        ({"JENKINS_URL": "http://ci"}, False, False),
        ({"GITLAB_CI": "0"}, False, True),
    ],
)
def test_interactive_detection(environ: dict[str, str], headless: bool, expected: bool) -> None:
    assert is_interactive(headless=headless, env=environ, stdin=Tty(), stdout=Tty()) is expected


def test_a_pipe_is_not_interactive() -> None:
    assert not is_interactive(env={}, stdin=io.StringIO(), stdout=Tty())
    assert not is_interactive(env={}, stdin=Tty(), stdout=io.StringIO())


@pytest.mark.parametrize(("typed", "expected"), [("y\n", True), ("YES\n", True), ("n\n", False)])
def test_ask_yes_no_reads_an_answer(typed: str, expected: bool) -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, typed.encode())
    out = io.StringIO()
    with os.fdopen(read_fd) as source:
        assert ask_yes_no("Go on?", stdin=source, stdout=out, timeout=5) is expected
    os.close(write_fd)
    assert out.getvalue() == "Go on? [y/N] "


def test_ask_yes_no_takes_silence_as_no() -> None:
    read_fd, write_fd = os.pipe()
    out = io.StringIO()
    with os.fdopen(read_fd) as source:
        assert ask_yes_no("Go on?", stdin=source, stdout=out, timeout=0.05) is False
    os.close(write_fd)
    assert "taken as no" in out.getvalue()


@pytest.mark.parametrize("name", [*CI_ENV_VARS, "JENKINS_HOME"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), (" 0 ", False), ("", False), ("Off", False)],
)
def test_in_ci_reads_every_ci_variable(name: str, value: str, expected: bool) -> None:
    assert in_ci({name: value}) is expected


def test_in_ci_ignores_unrelated_variables() -> None:
    assert not in_ci({"PATH": "/bin", "CIRCLE": "1", "MY_CI": "1"})
