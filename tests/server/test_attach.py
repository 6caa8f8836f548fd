"""``weft attach``: a real ``python -m weft attach`` process against a real server.

(The command lives in weft/cli/attach.py; its tests sit with the server's
because they need the server harness.)
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import sys
import time
from pathlib import Path

from tests.builders import run_started
from tests.runtime.hanks import codon, recorded, scenario, subprocess_environment, write_hank
from tests.server.helpers import Recorder, running

from weft import core
from weft.server import start_server
from weft.store.lock import LOCK

ROOT = Path(__file__).resolve().parents[2]


async def weft(*args: str, stdin: int | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "weft",
        *args,
        stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def line_with(process: asyncio.subprocess.Process, text: str, lines: list[str]) -> str:
    assert process.stdout is not None
    async with asyncio.timeout(30):
        while True:
            raw = await process.stdout.readline()
            if not raw:
                raise AssertionError(f"attach ended before {text!r}: {lines}")
            line = raw.decode()
            lines.append(line)
            if text in line:
                return line


async def lines_with(
    process: asyncio.subprocess.Process, texts: list[str], lines: list[str]
) -> dict[str, str]:
    """Waits for a line with each of ``texts``, in any order, and returns them
    by text. Attach prints a command's acknowledgement when the server's reply
    comes, and the events the command caused as they come: the server may
    send those before its reply."""
    found: dict[str, str] = {}
    assert process.stdout is not None
    async with asyncio.timeout(30):
        while len(found) < len(texts):
            raw = await process.stdout.readline()
            if not raw:
                missing = [t for t in texts if t not in found]
                raise AssertionError(f"attach ended before {missing!r}: {lines}")
            line = raw.decode()
            lines.append(line)
            found.update((t, line) for t in texts if t in line and t not in found)
    return found


async def shut_down(
    master: int,
    attach: asyncio.subprocess.Process,
    run: asyncio.subprocess.Process,
    seen: list[str],
) -> tuple[bytes, bytes]:
    """``x`` then ``y`` in attach: the run shuts down; both end. Their stderr."""
    os.write(master, b"x")
    await line_with(attach, "press y to confirm", seen)
    os.write(master, b"y")
    _, err = await asyncio.wait_for(attach.communicate(), 30)
    _, run_err = await asyncio.wait_for(run.communicate(), 30)
    return err, run_err


async def test_attach_json_replays_the_journal_then_follows_until_the_run_ends(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, events=20, transitions=True) as h:
        server = await start_server(h.manager, h.store)
        try:
            attach = await weft("attach", str(h.store.weft_dir.parent), "--json")
            lines: list[str] = []
            await line_with(attach, '"before19"', lines)  # the replay reached the end
            h.emit(5, "live")
            await h.manager.transition_and_wait(core.RunCompleted(run_id="r1", end_time="t"))
            await line_with(attach, '"RunCompleted"', lines)
            await server.close()  # the run ended: attach prints the summary and exits
            out, err = await asyncio.wait_for(attach.communicate(), 30)
            lines += out.decode().splitlines(keepends=True)
            journal = h.journal()
        finally:
            await server.close()
    assert attach.returncode == 0, err.decode()
    docs = [json.loads(line) for line in lines]
    events = [d for d in docs if "seq" in d]
    assert [(d["seq"], d["id"]) for d in events] == journal
    summary = docs[-1]
    assert summary["type"] == "run.summary"
    assert (summary["data"]["status"], summary["data"]["codons"]["completed"]) == ("completed", 2)


async def test_attach_keys_steer_the_run_with_the_execution_s_token(tmp_path: Path) -> None:
    recorder = Recorder()
    async with running(tmp_path, events=3) as h:
        server = await start_server(h.manager, h.store, commands=recorder)
        master, slave = pty.openpty()
        try:
            attach = await weft("attach", str(h.store.weft_dir.parent), "--headless", stdin=slave)
            lines: list[str] = []
            await line_with(attach, "read-write", lines)
            await line_with(attach, "keys:", lines)
            for key, expected in (("n", "next codon requested"), ("s", "skip requested")):
                os.write(master, key.encode())
                await line_with(attach, expected, lines)
            os.write(master, b"r")
            await line_with(attach, "press y to confirm", lines)
            os.write(master, b"n")  # anything but y cancels
            await line_with(attach, "cancelled", lines)
            os.write(master, b"x")
            await line_with(attach, "press y to confirm", lines)
            os.write(master, b"y")
            await line_with(attach, "stop requested", lines)
            os.write(master, b"q")
            out, err = await asyncio.wait_for(attach.communicate(), 30)
        finally:
            os.close(master)
            os.close(slave)
            await server.close()
    assert attach.returncode == 0, err.decode()
    assert "detached" in out.decode()
    assert recorder.calls == ["codon.next", "codon.skip", "server.shutdown"]


async def test_attach_read_only_can_watch_but_not_steer(tmp_path: Path) -> None:
    recorder = Recorder()
    async with running(tmp_path) as h:
        server = await start_server(h.manager, h.store, commands=recorder)
        master, slave = pty.openpty()
        try:
            attach = await weft(
                "attach", str(h.store.weft_dir.parent), "--headless", "--readonly", stdin=slave
            )
            lines: list[str] = []
            await line_with(attach, "read-only", lines)
            await line_with(attach, "keys:", lines)
            h.manager.transition(run_started("r9"))
            await line_with(attach, "run r9 started", lines)
            os.write(master, b"n")
            await line_with(attach, "steering needs the execution's token", lines)
            os.write(master, b"q")
            await asyncio.wait_for(attach.communicate(), 30)
        finally:
            os.close(master)
            os.close(slave)
            await server.close()
    assert attach.returncode == 0
    assert recorder.calls == []


async def test_attach_says_why_there_is_nothing_to_attach_to(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    dead = tmp_path / "dead" / ".weft"
    dead.mkdir(parents=True)
    (dead / LOCK).write_text(
        json.dumps(
            {"pid": 2**22 + 17, "lockId": "x", "startTime": "t", "lastHeartbeat": time.time()}
        )
    )
    idle = tmp_path / "idle" / ".weft"
    idle.mkdir(parents=True)
    for where, expected in (
        (plain, "not an execution (no .weft/ inside)"),
        (dead.parent, "is gone"),
        (idle.parent, "no run is active"),
    ):
        attach = await weft("attach", str(where))
        _, err = await asyncio.wait_for(attach.communicate(), 30)
        assert attach.returncode == 2
        assert expected in err.decode()
        assert "Traceback" not in err.decode()


async def test_a_read_token_given_with_token_attaches_read_only(tmp_path: Path) -> None:
    async with running(tmp_path, events=2) as h:
        server = await start_server(h.manager, h.store)
        try:
            attach = await weft(
                "attach", str(h.store.weft_dir.parent), "--headless", "--token", server.read_token
            )
            lines: list[str] = []
            await line_with(attach, "refused for read-write; attaching read-only", lines)
            await line_with(attach, "(read-only)", lines)
        finally:
            await server.close()
        await asyncio.wait_for(attach.communicate(), 30)
    assert attach.returncode == 1  # the run never started, so it did not complete


async def test_a_wrong_token_is_a_clear_error(tmp_path: Path) -> None:
    async with running(tmp_path, events=2) as h:
        server = await start_server(h.manager, h.store)
        try:
            attach = await weft(
                "attach", str(h.store.weft_dir.parent), "--headless", "--token", "not-it"
            )
            _, err = await asyncio.wait_for(attach.communicate(), 30)
        finally:
            await server.close()
    assert attach.returncode == 2
    assert "a wrong token was given" in err.decode()
    assert "Traceback" not in err.decode()


async def test_attach_steers_a_real_manual_run_to_the_end_and_back(tmp_path: Path) -> None:
    execution = tmp_path / "x"
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_LINE_DELAY_MS": "0"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    run = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "weft", "run", "examples/hello", "--no-autostart", "--headless"),
        *("--execution", str(execution)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    lines: list[str] = []
    await line_with(run, "WebSocket server on ws://", lines)
    await line_with(run, "Waiting for codon.next", lines)
    master, slave = pty.openpty()
    try:
        attach = await weft("attach", str(execution), "--headless", stdin=slave)
        seen: list[str] = []
        await line_with(attach, "read-write", seen)
        await line_with(attach, "keys:", seen)  # the replayed history is folded in quietly
        os.write(master, b"n")
        for _ in range(5):
            await line_with(attach, "Waiting for codon.next", seen)
            os.write(master, b"n")
        await line_with(attach, "All codons completed", seen)
        os.write(master, b"l")
        await line_with(attach, "checkpoints of the thread, newest first", seen)
        newest = await line_with(attach, " 1. ", seen)
        assert "(review) completed" in newest
        await line_with(attach, "type a number and Enter", seen)
        os.write(master, b"\x1b")  # Esc: the picker closes, keys steer again
        await line_with(attach, "rollback cancelled", seen)
        os.write(master, b"r")
        await line_with(attach, "press y to confirm", seen)
        os.write(master, b"y")
        await line_with(attach, "rolling back to the completed checkpoint", seen)
        await line_with(attach, "rolled back: run", seen)
        await line_with(attach, "All codons completed", seen)
        err, run_err = await shut_down(master, attach, run, seen)
    finally:
        os.close(master)
        os.close(slave)
        for process in (run,):
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert run.returncode == 0, run_err.decode()[-800:]
    assert attach.returncode == 0, err.decode()[-800:]
    state = json.loads((execution / ".weft" / "state.json").read_text())
    # The rollback to the last success started a continuation run with nothing left to run.
    assert len(state["runs"]) == 2
    kinds = sorted(r["startingConditions"].get("reason", "fresh") for r in state["runs"])
    assert kinds == ["fresh", "rollback"]
    assert sum(1 for line in seen if "Waiting for " in line or "All codons completed" in line) == 7


async def test_attach_rolls_a_manual_run_back_to_a_picked_checkpoint_and_it_goes_on(
    tmp_path: Path,
) -> None:
    """``l``, a number, Enter, ``y``: the work tree is the picked codon's again,
    the run waits for next (n), and ``n`` runs the next codon from there."""
    execution = tmp_path / "x"
    notes = execution / "agentRoot" / "notes.md"
    env = {**os.environ, "HOME": str(tmp_path), "FAKE_AGENT_LINE_DELAY_MS": "0"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    run = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "weft", "run", "examples/hello", "--no-autostart", "--headless"),
        *("--execution", str(execution)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    lines: list[str] = []
    await line_with(run, "WebSocket server on ws://", lines)
    master, slave = pty.openpty()
    try:
        attach = await weft("attach", str(execution), "--headless", stdin=slave)
        seen: list[str] = []
        await line_with(attach, "keys:", seen)
        await line_with(attach, "waiting for next (n): greet", seen)  # said even if replayed
        os.write(master, b"n")
        await line_with(attach, "waiting for next (n): polish", seen)
        os.write(master, b"n")
        await line_with(attach, "waiting for next (n): draft", seen)
        assert "thank you for trying" in notes.read_text()
        os.write(master, b"l")
        await line_with(attach, "checkpoints of the thread, newest first", seen)
        greet = await line_with(attach, "(greet) completed", seen)
        found = re.search(r"\s(\d+)\. ", greet)
        assert found, greet
        number = found.group(1)
        await line_with(attach, "type a number and Enter", seen)
        os.write(master, b"99\n")  # out of range: said, and the picker stays open
        await line_with(attach, "no checkpoint 99", seen)
        os.write(master, number.encode() + b"\r")
        await line_with(attach, "press y to confirm", seen)
        os.write(master, b"y")
        await line_with(attach, "rolled back: run", seen)
        await line_with(attach, "waiting for next (n): polish", seen)
        assert "Welcome to the Weft demo." in notes.read_text()  # greet's version again
        os.write(master, b"n")  # the run goes on: polish again, from greet's files
        await line_with(attach, "waiting for next (n): draft", seen)
        assert "thank you for trying" in notes.read_text()
        err, run_err = await shut_down(master, attach, run, seen)
        # Nothing typed was echoed to the terminal (cbreak without echo).
        ready, _, _ = select.select([master], [], [], 0)
        echoed = os.read(master, 4096) if ready else b""
    finally:
        os.close(master)
        os.close(slave)
        if run.returncode is None:
            run.kill()
            await run.wait()
    assert echoed == b""
    assert attach.returncode == 130, err.decode()[-800:]  # stopped by you, as weft run says
    assert run.returncode == 130, run_err.decode()[-800:]  # stopped before its last codon
    state = json.loads((execution / ".weft" / "state.json").read_text())
    kinds = [r["startingConditions"].get("reason", "fresh") for r in state["runs"]]
    assert sorted(kinds) == ["fresh", "rollback"]
    assert "Traceback" not in "".join(seen)


async def start_run(
    hank: Path, execution: Path, env: dict[str, str], *extra: str
) -> asyncio.subprocess.Process:
    """A real ``weft run`` of ``hank`` (headless), its server up."""
    run = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "weft", "run", str(hank), "--headless", "--execution", str(execution), *extra),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    await line_with(run, "WebSocket server on ws://", [])
    return run


async def test_an_urgent_message_typed_in_attach_interrupts_the_agent_which_resumes_with_it(
    tmp_path: Path,
) -> None:
    """Issue 19's Done-when: ``u``, the message, Enter, in a terminal attached
    to a running codon; the agent is interrupted, its session resumes, and the
    agent answers the message."""
    # A long session (its resume has no directive: it ends at once).
    long = scenario("sigterm,lines=400,interval_ms=50")
    hank = write_hank(
        tmp_path / "hank", codon("slow", long + "Work slowly.", record=tmp_path / "slow.json")
    )
    execution = tmp_path / "x"
    run = await start_run(hank, execution, subprocess_environment(tmp_path))
    master, slave = pty.openpty()
    try:
        attach = await weft("attach", str(execution), "-v", stdin=slave)
        seen: list[str] = []
        await line_with(attach, "keys:", seen)
        await line_with(attach, "slow: says: Working on step", seen)  # the agent is at work
        os.write(master, b"u")
        await line_with(attach, "type the urgent message", seen)
        os.write(master, b"Say hi now.\r")
        await lines_with(
            attach,
            ["urgent message (the agent is interrupted)", "urgent message sent: Say hi now."],
            seen,
        )
        resumed = await line_with(attach, "session 2 resumes", seen)
        answer = await line_with(attach, "You asked:", seen)
        await line_with(attach, "slow: completed", seen)
        out, err = await asyncio.wait_for(attach.communicate(), 30)
        seen += out.decode().splitlines(keepends=True)
        _, run_err = await asyncio.wait_for(run.communicate(), 30)
    finally:
        os.close(master)
        os.close(slave)
        if run.returncode is None:
            run.kill()
            await run.wait()
    assert attach.returncode == 0, err.decode()[-800:]  # the run completed
    assert run.returncode == 0, run_err.decode()[-800:]
    assert '"Say hi now."' in answer
    argv = recorded(tmp_path / "slow.json")  # the resumed session's command line
    assert argv["prompt"] == "Say hi now."
    assert "--resume" in " ".join(argv["argv"])
    assert resumed.split("session 2 resumes ")[1].split()[0] in " ".join(argv["argv"])
    assert "Traceback" not in "".join(seen)


async def test_attach_redoes_a_codon_and_force_stops_a_running_one_in_a_manual_run(
    tmp_path: Path,
) -> None:
    """``d`` ``y`` runs the last codon again (a new run, from the checkpoint it
    started from); ``f`` stops the running codon, which fails, and the run
    waits for what to do next."""
    hank = write_hank(
        tmp_path / "hank",
        codon("a", "First."),
        codon("b", "Second."),
        codon("c", scenario("sigterm,lines=600,interval_ms=50") + "Work slowly."),
    )
    execution = tmp_path / "x"
    run = await start_run(hank, execution, subprocess_environment(tmp_path), "--no-autostart")
    master, slave = pty.openpty()
    try:
        attach = await weft("attach", str(execution), "--headless", stdin=slave)
        seen: list[str] = []
        await line_with(attach, "waiting for next (n): a", seen)
        for codon_id in ("b", "c"):
            os.write(master, b"n")
            await line_with(attach, f"waiting for next (n): {codon_id}", seen)
        os.write(master, b"d")
        await line_with(attach, "redo the last codon from the checkpoint it started from", seen)
        os.write(master, b"y")
        await lines_with(attach, ["redo requested", "b: completed"], seen)  # b ran again
        await line_with(attach, "waiting for next (n): c", seen)
        os.write(master, b"n")
        await line_with(attach, "c: running", seen)
        os.write(master, b"f")  # no confirmation: it stops one codon, not the run
        stopped = await lines_with(attach, ["force stop requested", "c: FAILED"], seen)
        failed = stopped["c: FAILED"]
        await line_with(attach, "send codon.redo, rollback.* or server.shutdown", seen)
        err, run_err = await shut_down(master, attach, run, seen)
    finally:
        os.close(master)
        os.close(slave)
        if run.returncode is None:
            run.kill()
            await run.wait()
    assert "Stopped by the user" in failed
    assert attach.returncode == 1, err.decode()[-800:]  # the run did not complete
    assert run.returncode != 0, run_err.decode()[-800:]
    state = json.loads((execution / ".weft" / "state.json").read_text())
    runs = sorted(state["runs"], key=lambda r: r["startTime"])
    assert [r["startingConditions"].get("reason", "fresh") for r in runs] == ["fresh", "retry"]
    assert [c["codonId"] for c in runs[0]["codons"]] == ["a", "b"]
    redo = {c["codonId"]: c for c in runs[1]["codons"]}
    assert redo["b"]["status"] == "completed"
    assert (redo["c"]["status"], redo["c"]["failureReason"]["type"]) == ("failed", "force_stopped")
    assert "Traceback" not in "".join(seen)
