"""``weft rollback`` on a live ``weft run --no-autostart``: sent through its server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import weft.client
from weft.server import read_token

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_LINE_DELAY_MS": "0"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    return env


async def _weft(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "weft", *args),
        cwd=ROOT,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_rollback_of_a_live_run_goes_through_its_server(tmp_path: Path) -> None:
    execution = tmp_path / "x"
    run = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "weft", "run", "examples/hello", "--no-autostart", "--headless"),
        *("--execution", str(execution)),
        cwd=ROOT,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert run.stdout is not None
    notes = execution / "agentRoot" / "notes.md"
    try:
        async with asyncio.timeout(90):
            url = None
            while url is None:
                line = (await run.stdout.readline()).decode()
                assert line, "weft run ended before it announced its server"
                found = re.search(r"WebSocket server on (ws://\S+)", line)
                url = found and found.group(1)
            token = read_token(execution / ".weft")
            async with weft.client.connect(url, token=token) as c:
                idle = 0
                async for event in c.events(replay=True):
                    if event.type != "server.idle":
                        continue
                    idle += 1
                    if idle == 3:  # greet and polish have run
                        break
                    await c.command("codon.next")
                polished = notes.read_text()
                assert "thank you for trying" in polished
                # Refused targets say why and change nothing.
                code, _, err = await _weft(tmp_path, "rollback", str(execution), "--codon", "nope")
                assert code == 1
                assert "refused" in err
                assert "Traceback" not in err
                notes.write_text(polished + "my own line\n")  # not checkpointed
                code, out, err = await _weft(
                    tmp_path, "rollback", str(execution), "--codon", "greet"
                )
                assert code == 0, err
                assert "Saved 1 uncheckpointed change to recovery/" in out  # kept, as offline
                assert "Rolled back" in out
                assert "Welcome to the Weft demo." in notes.read_text()
                # The run is still up and goes on from greet: polish runs again.
                async for event in c.events():
                    if event.type == "server.idle":
                        if event.data["reason"] == "codon-completed":
                            break
                        await c.command("codon.next")
                assert "thank you for trying" in notes.read_text()
                await c.command("server.shutdown")
            await run.communicate()
    finally:
        if run.returncode is None:
            run.kill()
            await run.wait()
    assert run.returncode == 130  # stopped before its last codon: interrupted, resumable
