"""``weft run --no-autostart``: each codon waits for a command, typed on the
terminal or sent by a WebSocket client."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import weft.client
from weft.server import read_token

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
        return output.count(b"Waiting: press Enter to start")

    for expected in range(1, 7):
        deadline = time.monotonic() + 20
        while waiting() < expected and time.monotonic() < deadline:
            read(0.1)
        assert waiting() == expected, output.decode(errors="replace")[-800:]
        started = output.count(b": preparing")
        assert started == expected - 1  # nothing starts before Enter
        os.write(fd, b"\n")
    # Manual mode stays up when the codons are done, until told to stop.
    deadline = time.monotonic() + 20
    while b"All codons completed" not in output and time.monotonic() < deadline:
        read(0.1)
    assert b"All codons completed" in output, output.decode(errors="replace")[-800:]
    # One more Enter: refused with a reason, not a traceback.
    os.write(fd, b"\n")
    deadline = time.monotonic() + 20
    while b"every codon has run" not in output and time.monotonic() < deadline:
        read(0.1)
    assert b"every codon has run" in output, output.decode(errors="replace")[-800:]
    assert b"Traceback" not in output
    os.write(fd, b"q\n")
    read(0)
    _, status = os.waitpid(pid, 0)
    read(0.2)
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")[-800:]
    assert output.count(b": preparing") == 6


async def test_manual_mode_without_a_terminal_is_steered_over_the_websocket(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_LINE_DELAY_MS": "0"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    execution = tmp_path / "x"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "weft", "run", "examples/hello", "--no-autostart", "--headless"),
        *("--execution", str(execution)),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        async with asyncio.timeout(60):
            url = None
            while url is None:
                line = (await child.stdout.readline()).decode()
                assert line, "weft run ended before it announced its server"
                found = re.search(r"WebSocket server on (ws://\S+)", line)
                url = found and found.group(1)
            token = read_token(execution / ".weft")
            started = []
            async with weft.client.connect(url, token=token) as c:
                async for event in c.events(replay=True):
                    if event.type == "CodonStarted":
                        started.append(event.data["codonId"])
                    if event.type != "server.idle":
                        continue
                    if event.data["reason"] == "all-codons-completed":
                        await c.command("server.shutdown")
                        break
                    await c.command("codon.next")
            stdout, stderr = await child.communicate()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == 0, stderr.decode()[-800:]
    assert len(started) == 6
    assert b"All codons completed" in stdout
