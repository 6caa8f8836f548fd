"""The server a real run starts: clients steer it through the protocol.

Each test runs real codons on the fake agent with the server the supervisor
starts itself (``Runtime.server``), connects the real client with the token
the run wrote under ``.weft/``, and checks what the run did: the journal, the
state's runs, the files in the workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import websockets.asyncio.client
from tests.runtime.hanks import (
    codon,
    fake_environment,
    read_state,
    runs_oldest_first,
    scenario,
    workspace_files,
    write_file,
    write_hank,
)

import weft.client
from weft.config import load_hank
from weft.events.completed import digest, fold
from weft.events.stream import CodonSummary, StateSnapshotEvent
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions
from weft.server import ProtocolServer, read_token
from weft.server.auth import read_read_token
from weft.server.session import READ_BURST
from weft.store import Journal
from weft.store.execution import DATABASE


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


@dataclass
class Watch:
    """Every event a client received, and a way to wait for the next one that matches."""

    client: weft.client.Client
    events: list[weft.client.Event] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _read: int = 0

    async def follow(self) -> None:
        async for event in self.client.events(replay=True):
            self.events.append(event)
            self._changed.set()

    async def next(
        self, kind: str, where: Callable[[dict[str, Any]], bool] = lambda _: True
    ) -> weft.client.Event:
        """The first event of ``kind`` after the last one returned."""
        async with asyncio.timeout(60):
            while True:
                for index in range(self._read, len(self.events)):
                    event = self.events[index]
                    if event.type == kind and where(event.data):
                        self._read = index + 1
                        return event
                self._changed.clear()
                await self._changed.wait()

    async def idle(self, reason: str) -> weft.client.Event:
        return await self.next("server.idle", lambda d: d["reason"] == reason)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == kind]


@dataclass
class Live:
    runtime: Runtime
    server: ProtocolServer
    execution: Path
    run: asyncio.Task[RunOutcome]


@contextlib.asynccontextmanager
async def live_run(
    tmp_path: Path,
    *codons: dict[str, Any],
    autostart: bool = False,
    files: dict[str, str] | None = None,
) -> AsyncIterator[Live]:
    hank = write_hank(tmp_path / "hank", *codons, files=files)
    prepared = await asyncio.to_thread(
        prepare_execution,
        hank,
        None,
        execution_dir=tmp_path / "x",
        interactive=False,
        base_dir=tmp_path / "managed",
    )
    servers: asyncio.Queue[ProtocolServer] = asyncio.Queue()
    runtime = Runtime(
        prepared,
        load_hank(hank),
        RuntimeOptions(autostart=autostart),
        on_server=servers.put_nowait,
    )
    run = asyncio.get_running_loop().create_task(runtime.run())
    server = await asyncio.wait_for(servers.get(), 30)
    assert runtime.server is server
    try:
        yield Live(runtime, server, prepared.layout.root, run)
    finally:
        if not run.done():
            await runtime.stop(force=True)
        await asyncio.wait_for(run, 60)


@contextlib.asynccontextmanager
async def watching(live: Live) -> AsyncIterator[Watch]:
    token = read_token(live.execution / ".weft")
    async with weft.client.connect(live.server.url, token=token) as c:
        watch = Watch(c)
        task = asyncio.get_running_loop().create_task(watch.follow())
        try:
            yield watch
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, weft.client.ClientError):
                await task


async def shut_down(w: Watch, live: Live) -> RunOutcome:
    await w.client.command("server.shutdown")
    return await asyncio.wait_for(live.run, 60)


async def run_all(w: Watch, codons: int) -> None:
    """Steps a manual run through its ``codons`` with codon.next."""
    await w.idle("startup")
    for _ in range(codons - 1):
        await w.client.command("codon.next")
        await w.idle("codon-completed")
    await w.client.command("codon.next")
    await w.idle("all-codons-completed")


def two_codons() -> tuple[dict[str, Any], dict[str, Any]]:
    return codon("a", write_file("a.md", "from a")), codon("b", write_file("b.md", "from b"))


async def test_manual_mode_runs_each_codon_when_a_client_sends_codon_next(
    tmp_path: Path,
) -> None:
    async with live_run(tmp_path, *two_codons()) as live, watching(live) as w:
        startup = await w.idle("startup")
        await asyncio.sleep(0.2)  # nothing may start until the command comes
        assert w.of("CodonStarted") == []
        await w.client.command("codon.next")
        await w.idle("codon-completed")
        assert [d["codonId"] for d in w.of("CodonStarted")] == ["a"]
        await w.client.command("codon.next")
        done = await w.idle("all-codons-completed")
        # Manual mode stays up when the codons are done, until told to stop.
        await asyncio.sleep(0.2)
        assert not live.run.done()
        outcome = await shut_down(w, live)
    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    assert startup.seq < done.seq
    kinds = [
        (e.type, e.data.get("reason") or e.data.get("codonId"))
        for e in w.events
        if e.type in ("server.idle", "CodonStarted", "RunCompleted")
    ]
    assert kinds == [
        ("server.idle", "startup"),
        ("CodonStarted", "a"),
        ("server.idle", "codon-completed"),
        ("CodonStarted", "b"),
        ("RunCompleted", None),
        ("server.idle", "all-codons-completed"),
    ]
    snapshots = w.of("state.snapshot")
    # Each snapshot carries what changed; folded, they give the whole list.
    assert [[c["codonId"] for c in s["completedCodons"]] for s in snapshots] == [["a"], ["b"]]
    assert [(s["completedFrom"], s["completedCount"]) for s in snapshots[1:]] == [(1, 2)]
    finished: list[CodonSummary] = []
    for s in snapshots:
        finished = fold(finished, msgspec.convert(s, StateSnapshotEvent))
    assert [c.codon_id for c in finished] == ["a", "b"]
    assert snapshots[-1]["completedDigest"] == digest(finished)
    assert snapshots[-1]["totalCost"] == pytest.approx(sum(c.cost for c in finished))
    journal = Journal.open(live.execution / ".weft" / DATABASE, readonly=True, check=False)
    try:
        rows = [(e.seq, e.id) for page in journal.pages() for e in page]
    finally:
        journal.close()
    assert [(e.seq, e.id) for e in w.events] == rows


async def test_the_port_is_in_the_lock_file_while_the_run_lasts(tmp_path: Path) -> None:
    async with live_run(tmp_path, *two_codons()) as live:
        lock = json.loads((live.execution / ".weft" / "runtime.lock").read_text())
        assert lock["port"] == live.server.port > 0
        # A read-only client (the read token) may not steer.
        read = read_read_token(live.execution / ".weft")
        async with weft.client.connect(live.server.url, token=read, mode="readonly") as c:
            with pytest.raises(weft.client.CommandError) as refused:
                await c.command("codon.next")
            assert refused.value.code == "INSUFFICIENT_PERMISSIONS"
        await live.runtime.stop()
    assert not (live.execution / ".weft" / "runtime.lock").exists()


async def test_a_client_rolls_back_to_a_codon_and_runs_the_rest_again(tmp_path: Path) -> None:
    a = codon("a", write_file("a.md", "from a"))
    b = codon("b", write_file("b.md", "from b") + write_file("a.md", "changed by b"))
    async with live_run(tmp_path, a, b) as live, watching(live) as w:
        await run_all(w, 2)
        assert workspace_files(live.execution)["a.md"] == "changed by b"

        listing = await w.client.checkpoint_list()
        assert [(c["codonId"], c["checkpointType"]) for c in listing["checkpoints"]] == [
            ("b", "completed"),
            ("a", "completed"),
        ]
        assert all(c["onThread"] for c in listing["checkpoints"])
        a_end = listing["checkpoints"][1]["sha"]
        # Asking journaled nothing: the list came to this client alone.
        assert not any(e.type == "checkpoint.list" for e in w.events)

        await w.client.command("rollback.toCodon", {"codonId": "a", "checkpointType": "end"})
        started = await w.next("rollback.started")
        completed = await w.next("rollback.completed")
        snapshot = await w.next("state.snapshot")
        await w.idle("rollback-completed")
        # b is superseded: the thread's finished codons are a's alone again
        # (the snapshot keeps the first of the two it had, adds nothing).
        assert snapshot.data["completedFrom"] == snapshot.data["completedCount"] == 1
        assert snapshot.data["completedCodons"] == []
        assert snapshot.data["currentCodon"] == "b"
        files = workspace_files(live.execution)
        assert files["a.md"] == "from a"
        assert "b.md" not in files
        assert started.data["codonsToProcess"] == ["b"]
        assert completed.data["checkpoint"] == a_end
        progress = [d["currentStep"] for d in w.of("rollback.progress")]
        assert progress == [1, 2]

        # The continuation run goes on with b, on command.
        await w.client.command("codon.next")
        await w.idle("all-codons-completed")
        outcome = await shut_down(w, live)
    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    runs = runs_oldest_first(read_state(live.execution))
    assert [r["status"] for r in runs] == ["completed", "completed"]
    source = runs[1]["startingConditions"]
    assert (source["reason"], source["source"]["afterCodon"]) == ("rollback", "a")
    assert [c["codonId"] for c in runs[1]["codons"]] == ["b"]
    assert workspace_files(live.execution)["a.md"] == "changed by b"


async def test_rollback_with_auto_restart_runs_the_next_codon_at_once(tmp_path: Path) -> None:
    async with live_run(tmp_path, *two_codons()) as live, watching(live) as w:
        await run_all(w, 2)
        await w.client.command("rollback.toLastSuccess", {"autoRestart": True})
        # The last success is b's end: nothing is left to run after it.
        await w.next("rollback.completed")
        await w.idle("all-codons-completed")
        await w.client.command(
            "rollback.toCodon", {"codonId": "a", "checkpointType": "completed", "autoRestart": True}
        )
        await w.next("rollback.completed")
        started = await w.next("CodonStarted")
        assert started.data["codonId"] == "b"
        await w.idle("all-codons-completed")
        await shut_down(w, live)
    assert len(read_state(live.execution)["runs"]) == 3


async def test_rollback_is_refused_while_a_codon_runs(tmp_path: Path) -> None:
    slow = codon("a", write_file("a.md", "a") + scenario("hang_after_init"))
    async with live_run(tmp_path, slow, autostart=True) as live, watching(live) as w:
        await w.next("CodonStarted")
        with pytest.raises(weft.client.CommandError) as refused:
            await w.client.command("rollback.toLastSuccess")
        assert refused.value.code == "COMMAND_REJECTED"
        assert str(refused.value).endswith(
            "Cannot rollback while codon is running. Use 'codon.forceStop' first."
        )
        with pytest.raises(weft.client.CommandError) as next_refused:
            await w.client.command("codon.next")
        assert "codon a is running" in str(next_refused.value)
        await w.client.command("codon.forceStop", {"reason": "enough"})
        outcome = await asyncio.wait_for(live.run, 60)
    assert outcome.status == "failed"
    assert read_state(live.execution)["runs"][0]["codons"][0]["status"] == "failed"


async def test_a_rollback_to_an_unknown_checkpoint_is_an_error_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with live_run(tmp_path, *two_codons()) as live, watching(live) as w:
        await w.idle("startup")
        await w.client.command("codon.next")
        await w.idle("codon-completed")
        with pytest.raises(weft.client.CommandError) as unknown:
            await w.client.command("rollback.toCheckpoint", {"checkpointSha": "deadbeef"})
        assert "no confirmed checkpoint starts with 'deadbeef'" in str(unknown.value)
        with pytest.raises(weft.client.CommandError) as no_codon:
            await w.client.command("rollback.toCodon", {"codonId": "b", "checkpointType": "end"})
        assert "not on the execution thread" in str(no_codon.value)
        # The runtime still waits and still obeys.
        await w.client.command("codon.next")
        await w.idle("all-codons-completed")
        await shut_down(w, live)
    assert len(read_state(live.execution)["runs"]) == 1
    assert w.of("rollback.started") == []


async def test_codon_redo_runs_the_newest_codon_again_in_a_retry_run(tmp_path: Path) -> None:
    async with live_run(tmp_path, *two_codons()) as live, watching(live) as w:
        await w.idle("startup")
        with pytest.raises(weft.client.CommandError) as nothing:
            await w.client.command("codon.redo")
        assert "no codon has run yet" in str(nothing.value)
        await w.client.command("codon.next")
        await w.idle("codon-completed")
        await w.client.command("codon.next")
        await w.idle("all-codons-completed")
        with pytest.raises(weft.client.CommandError) as past_end:
            await w.client.command("codon.next")
        assert "every codon has run" in str(past_end.value)
        await w.client.command("codon.redo")
        await w.idle("all-codons-completed")
        await shut_down(w, live)
    runs = runs_oldest_first(read_state(live.execution))
    assert len(runs) == 2
    retry = runs[1]["startingConditions"]
    assert (retry["reason"], retry["source"]["afterCodon"]) == ("retry", "a")
    assert [c["codonId"] for c in runs[1]["codons"]] == ["b"]
    assert [d["codonId"] for d in w.of("CodonStarted")] == ["a", "b", "b"]


async def test_codon_start_goes_back_to_a_finished_codon_and_refuses_to_jump_ahead(
    tmp_path: Path,
) -> None:
    three = (*two_codons(), codon("c", write_file("c.md", "from c")))
    async with live_run(tmp_path, *three) as live, watching(live) as w:
        await w.idle("startup")
        with pytest.raises(weft.client.CommandError) as ahead:
            await w.client.command("codon.start", {"codonId": "c"})
        assert "codons run in plan order and the next one is a" in str(ahead.value)
        with pytest.raises(weft.client.CommandError) as unknown:
            await w.client.command("codon.start", {"codonId": "zz"})
        assert "the plan has no codon 'zz'" in str(unknown.value)
        await w.client.command("codon.start", {"codonId": "a"})
        await w.idle("codon-completed")
        await w.client.command("codon.start", {"codonId": "b"})
        await w.idle("codon-completed")
        assert sorted(workspace_files(live.execution)) == ["a.md", "b.md"]
        # Back to a: a fresh run from the initial state, then a runs again.
        await w.client.command("codon.start", {"codonId": "a"})
        await w.idle("codon-completed")
        assert sorted(workspace_files(live.execution)) == ["a.md"]
        outcome = await shut_down(w, live)
    assert outcome.status == "stopped"  # shut down with b left to do
    runs = runs_oldest_first(read_state(live.execution))
    assert [r["startingConditions"]["type"] for r in runs] == ["fresh", "fresh"]
    assert [c["codonId"] for c in runs[1]["codons"]] == ["a"]


async def test_a_failed_codon_parks_manual_mode_until_it_is_redone(tmp_path: Path) -> None:
    a = codon("a", write_file("a.md", "a"))
    b = codon("b", prompt_file="flaky.md")
    # Not retriable, so the session supervisor does not resume it.
    files = {"flaky.md": scenario("auth_error")}
    async with live_run(tmp_path, a, b, files=files) as live, watching(live) as w:
        await w.idle("startup")
        await w.client.command("codon.next")
        await w.idle("codon-completed")
        await w.client.command("codon.next")
        parked = await w.idle("codon-completed")
        assert parked.data["message"].startswith("Codon b failed")
        with pytest.raises(weft.client.CommandError) as refused:
            await w.client.command("codon.next")
        assert "Send codon.redo to run it again" in str(refused.value)
        (tmp_path / "hank" / "flaky.md").write_text(write_file("b.md", "b"))
        await w.client.command("codon.redo")
        await w.idle("all-codons-completed")
        outcome = await shut_down(w, live)
    assert (outcome.status, outcome.exit_code) == ("completed", 0)
    runs = runs_oldest_first(read_state(live.execution))
    assert [r["status"] for r in runs] == ["failed", "completed"]
    assert workspace_files(live.execution)["b.md"] == "b"


async def test_skip_pre_commands_runs_the_codon_without_its_rig(tmp_path: Path) -> None:
    rigged = codon(
        "a",
        write_file("a.md", "a"),
        rigSetup=[{"type": "command", "command": {"run": "echo rigged > rig.md"}}],
    )
    async with live_run(tmp_path, rigged) as live, watching(live) as w:
        await w.idle("startup")
        await w.client.command("codon.start", {"codonId": "a", "skipPreCommands": True})
        await w.idle("all-codons-completed")
        await shut_down(w, live)
    assert "rig.md" not in workspace_files(live.execution)
    assert any("skipped (skipPreCommands)" in d["message"] for d in w.of("info"))


async def test_a_second_rollback_while_one_runs_is_refused(tmp_path: Path) -> None:
    async with live_run(tmp_path, *two_codons()) as live, watching(live) as w:
        await w.idle("startup")
        await w.client.command("codon.next")
        await w.idle("codon-completed")
        first, second = await asyncio.gather(
            w.client.command("rollback.toLastSuccess"),
            w.client.command("rollback.toCodon", {"codonId": "a", "checkpointType": "end"}),
            return_exceptions=True,
        )
        assert first is None
        assert isinstance(second, weft.client.CommandError)
        assert second.code == "ROLLBACK_IN_PROGRESS"
        await w.idle("rollback-completed")
        assert len(w.of("rollback.started")) == 1
        await shut_down(w, live)


async def test_hank_env_values_reach_the_agent_but_never_the_journal_or_the_wire(
    tmp_path: Path,
) -> None:
    secret = "sk-live-5f1c2a7e8d4b4e0a9b1f"
    record = tmp_path / "record.json"
    a = codon(
        "a", write_file("a.md", "from a"), env={"FAKE_AGENT_HANK_VALUE": secret}, record=record
    )
    async with live_run(tmp_path, a, codon("b", env={"OTHER": secret + "-2"})) as live:
        async with watching(live) as w:
            await run_all(w, 2)
            wire = msgspec.json.encode([(e.type, e.data) for e in w.events])
            listing = await w.client.checkpoint_list()
        await live.runtime.stop()
    # The agent got the value: redaction is for what is kept and sent.
    assert json.loads(record.read_text())["env"]["FAKE_AGENT_HANK_VALUE"] == secret
    started = next(data for kind, data in msgspec.json.decode(wire) if kind == "RunStarted")
    assert started["executionPlan"][0]["codon"]["env"] == {
        "FAKE_AGENT_HANK_VALUE": "***",
        "FAKE_AGENT_RECORD": "***",
    }
    assert secret.encode() not in wire
    assert secret.encode() not in msgspec.json.encode(listing)
    # Nothing Weft keeps has it: the journal (db, WAL), state.json, logs, tokens.
    kept = [p for p in (live.execution / ".weft").rglob("*") if p.is_file()]
    assert any(p.name == DATABASE for p in kept)
    for path in kept:
        assert secret.encode() not in path.read_bytes(), path


async def test_a_flood_of_checkpoint_lists_journals_nothing_and_is_rate_limited(
    tmp_path: Path,
) -> None:
    async with live_run(tmp_path, *two_codons()) as live:
        async with watching(live) as w:
            await run_all(w, 2)
            before = w.events[-1].seq
        read = read_read_token(live.execution / ".weft")
        async with websockets.asyncio.client.connect(live.server.url, max_size=None) as ws:
            shake = {"mode": "readonly", "token": read}
            await ws.send(json.dumps({"type": "handshake", "data": shake}))
            for _ in range(2):
                await ws.recv()
            flood = 2000  # the figure: +2.2 MB of journal before
            for i in range(flood):
                await ws.send(json.dumps({"type": "checkpoint.list", "id": i}))
            kinds: dict[str, int] = {}
            answered: set[int] = set()
            while len(answered) < flood:
                reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
                kind = reply["type"] if reply["type"] != "error" else reply["data"]["code"]
                kinds[kind] = kinds.get(kind, 0) + 1
                if kind in ("command.ack", "RATE_LIMITED"):
                    answered.add(reply["data"]["commandId"])
        journal = Journal.open(live.execution / ".weft" / DATABASE, readonly=True, check=False)
        try:
            types = [e.type for page in journal.pages() for e in page]
        finally:
            journal.close()
        await live.runtime.stop()
    assert len(types) == before  # not one event journaled for 2,000 requests
    assert "checkpoint.list" not in types
    assert kinds["checkpoint.list"] == kinds["command.ack"] >= READ_BURST
    assert kinds["RATE_LIMITED"] >= flood - 2 * READ_BURST


async def test_an_urgent_message_over_the_websocket_resumes_the_agent_with_it(
    tmp_path: Path,
) -> None:
    long = codon("a", scenario("sigterm,lines=200,interval_ms=50") + "Work slowly.")
    async with live_run(tmp_path, long) as live, watching(live) as w:
        await w.idle("startup")
        with pytest.raises(weft.client.CommandError, match="no agent session is running"):
            await w.client.message("too early", urgent=True)
        await w.client.command("codon.next")
        await w.next("assistant.action")
        await w.client.message("Say hi now.", urgent=True)
        resumed = await w.next("session.resumed")
        assert resumed.data["reason"] == "urgent"
        await w.idle("all-codons-completed")
        outcome = await shut_down(w, live)
    assert outcome.status == "completed"
    assert [m["message"] for m in w.of("session.message")] == ["Say hi now."]
