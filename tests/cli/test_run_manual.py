"""``weft run --no-autostart``: each codon waits for a command typed on the terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_manual_mode_starts_each_codon_on_enter(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_LINE_DELAY_MS": "0"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    command = ["run", "examples/hello", "--no-autostart", "--headless"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: weft on a terminal
        os.chdir(ROOT)
        os.execvpe(
            sys.executable,
            [sys.executable, "-m", "weft", *command, "--execution", str(tmp_path / "x")],
            env,
        )
    output = b""

    def read(seconds: float) -> None:
        nonlocal output
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                try:
                    output += os.read(fd, 65536)
                except OSError:
                    return

    def waiting() -> int:
        return output.count(b"Waiting for codon.next")

    for expected in range(1, 7):
        deadline = time.monotonic() + 20
        while waiting() < expected and time.monotonic() < deadline:
            read(0.1)
        assert waiting() == expected, output.decode(errors="replace")[-800:]
        started = output.count(b": preparing")
        assert started == expected - 1  # nothing starts before Enter
        os.write(fd, b"\n")
    read(0)
    _, status = os.waitpid(pid, 0)
    read(0.2)
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")[-800:]
    assert output.count(b": preparing") == 6


def test_manual_mode_without_a_terminal_is_a_usage_error(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "weft", "run", "examples/hello", "--no-autostart"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--no-autostart needs a terminal" in done.stderr
    assert not (tmp_path / ".weft-executions").exists() or not any(
        (tmp_path / ".weft-executions").iterdir()
    )
