"""Colour in ``weft validate`` and ``weft status``: on a terminal only, never with NO_COLOR."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, write_hank

from weft.cli.colour import paint, wants_colour


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "env", "expected"),
    [
        (Tty(), {}, True),
        (Tty(), {"NO_COLOR": "1"}, False),
        (Tty(), {"NO_COLOR": ""}, True),  # no-color.org: only a non-empty value counts
        (Tty(), {"TERM": "dumb"}, False),
        (io.StringIO(), {}, False),
    ],
)
def test_colour_only_on_a_terminal_without_no_color(
    stream: io.StringIO, env: dict[str, str], expected: bool
) -> None:
    assert wants_colour(stream, env) is expected


def test_paint_is_the_identity_when_off() -> None:
    assert paint("valid", "green", on=False) == "valid"
    assert paint("valid", "green", on=True) == "\x1b[32mvalid\x1b[0m"


def validate_on_a_pty(hank: Path, env: dict[str, str]) -> str:
    leader, follower = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "weft", "validate", str(hank)],
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0
        return os.read(leader, 65536).decode()
    finally:
        os.close(leader)
        os.close(follower)


def test_validate_is_coloured_on_a_pty_unless_no_color(tmp_path: Path) -> None:
    hank = write_hank(tmp_path / "h", codon("a"))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env["TERM"] = "xterm"
    assert "\x1b[32mvalid: 1 codon, 0 loops\x1b[0m" in validate_on_a_pty(hank, env)
    plain = validate_on_a_pty(hank, {**env, "NO_COLOR": "1"})
    assert "valid: 1 codon, 0 loops" in plain
    assert "\x1b[" not in plain
    piped = subprocess.run(
        [sys.executable, "-m", "weft", "validate", str(hank)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "\x1b[" not in piped.stdout
