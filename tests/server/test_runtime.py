"""The server beside a real run: manual mode driven by codon.next from a client.

The runtime runs real codons on the fake agent. The server is started the way
the supervisor starts it (after the journal, before the first codon) from the
``on_state`` hook, which the supervisor calls at exactly that point.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import codon, fake_environment, write_file, write_hank
from tests.server.helpers import TOKEN

import weft.client
from weft.config import load_hank
from weft.runtime.execution import prepare_execution
from weft.runtime.supervisor import Runtime, RuntimeOptions
from weft.server import JournalHistory, ProtocolServer
from weft.store import Journal
from weft.store.execution import DATABASE


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def test_manual_mode_runs_each_codon_when_a_client_sends_codon_next(
    tmp_path: Path,
) -> None:
    hank = write_hank(
        tmp_path / "hank", codon("a", write_file("a.md", "a")), codon("b", write_file("b.md", "b"))
    )
    prepared = await asyncio.to_thread(
        prepare_execution,
        hank,
        None,
        execution_dir=tmp_path / "x",
        interactive=False,
        base_dir=tmp_path / "managed",
    )
    journal_path = prepared.layout.weft_dir / DATABASE
    servers: asyncio.Queue[ProtocolServer] = asyncio.Queue()
    runtime: Runtime | None = None

    def on_state(_: Any) -> None:
        assert runtime is not None
        manager = runtime._manager  # the seam the supervisor will wire the server to
        assert manager is not None

        async def start() -> None:
            server = await ProtocolServer.start(
                manager, JournalHistory(journal_path), token=TOKEN, commands=runtime
            )
            servers.put_nowait(server)

        asyncio.get_running_loop().create_task(start())

    runtime = Runtime(prepared, load_hank(hank), RuntimeOptions(autostart=False), on_state=on_state)
    run = asyncio.get_running_loop().create_task(runtime.run())
    server = await asyncio.wait_for(servers.get(), 30)
    seen: list[weft.client.Event] = []
    nexts = 0
    commanded_at: list[int] = []
    try:
        async with weft.client.connect(server.url, token=TOKEN) as c:
            async with asyncio.timeout(60):
                async for event in c.events(replay=True):
                    seen.append(event)
                    if event.type != "server.idle":
                        continue
                    if event.data["reason"] == "all-codons-completed":
                        break
                    # The runtime waits: nothing may start until the command comes.
                    await asyncio.sleep(0.2)
                    assert runtime._manager is not None
                    commanded_at.append(runtime._manager.last_seq)
                    nexts += 1
                    await c.command("codon.next")
        outcome = await asyncio.wait_for(run, 60)
    finally:
        await server.close()
    assert outcome.status == "completed", outcome.message
    assert nexts == 2
    kinds = [
        (e.type, e.data.get("codonId")) for e in seen if e.type in ("server.idle", "CodonStarted")
    ]
    started = [e.seq for e in seen if e.type == "CodonStarted"]
    assert all(start > at for start, at in zip(started, commanded_at, strict=True))
    assert kinds == [
        ("server.idle", None),
        ("CodonStarted", "a"),
        ("server.idle", None),
        ("CodonStarted", "b"),
        ("server.idle", None),
    ]
    journal = Journal.open(journal_path, readonly=True, check=False)
    try:
        rows = [(e.seq, e.id) for page in journal.pages() for e in page]
    finally:
        journal.close()
    assert [(e.seq, e.id) for e in seen] == rows[: len(seen)]
