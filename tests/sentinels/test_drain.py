"""The drain in ``completing-sentinels`` and what it costs a codon: it waits
for the agent's events to be committed and fed, not for the move that started
it; it submits the states it changed once; a sentinel attached to many codons
is read and checked once per run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import codon, fake_environment, journal, write_file, write_hank
from tests.sentinels.offline import without_model_keys
from tests.sentinels.test_host import run, sentinel

import weft.sentinels.manager as manager_module
from weft.config import load_hank
from weft.events.stream import InfoEvent, ToolResultEvent
from weft.plan import ExecutionPlan
from weft.sentinels.host import RuntimeSentinels
from weft.state import Processed, StateManager


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fast fake agent, and no model key: nothing here may reach a network."""
    fake_environment(monkeypatch, tmp_path)
    without_model_keys(monkeypatch)


class GatedPersistence:
    """Commits at once, except a batch holding a seq at or above ``gate``,
    which waits until :attr:`opened` is set."""

    def __init__(self) -> None:
        self.gate: int | None = None
        self.opened = asyncio.Event()
        self.committed: list[Processed] = []

    async def commit(self, batch: Sequence[Processed]) -> None:
        if self.gate is not None and batch[-1].seq >= self.gate:
            await self.opened.wait()
        self.committed.extend(batch)


def _tool_result(codon_id: str, text: str) -> ToolResultEvent:
    return ToolResultEvent(
        codon_id=codon_id,
        tool_use_id=f"t-{text}",
        tool_name="Bash",
        result=text,
        truncated=False,
        original_length=len(text),
        execution_time_ms=None,
        is_error=False,
    )


async def test_wait_dispatched_waits_for_that_event_not_for_later_ones() -> None:
    persistence = GatedPersistence()
    state = StateManager(persistence=persistence)
    first = state.emit(InfoEvent(message="one"))
    await state.flush()
    persistence.gate = state.emit(InfoEvent(message="two"))
    await asyncio.wait_for(state.wait_dispatched(first), 5)  # dispatched already
    assert state.last_seq == first
    waiting = asyncio.ensure_future(state.wait_dispatched(persistence.gate))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    persistence.opened.set()
    await asyncio.wait_for(waiting, 5)
    # A seq never submitted means the newest one: nothing to wait for here.
    await asyncio.wait_for(state.wait_dispatched(10**9), 5)
    await state.close()


async def test_the_first_drain_does_not_wait_for_the_move_to_be_committed(
    tmp_path: Path,
) -> None:
    """The agent's events were committed; the move to completing-sentinels
    (here any event submitted right before the drain) is stuck in its commit.
    The drain still gives the agent's events to the sentinels and finishes
    their work; the move reaches them later, for the second drain."""
    watch = sentinel(
        "watch",
        userPromptText="@@sentinel:say <%= it.events.map(e => e.data.result).join(' ') %>@@",
        output={"format": "text", "file": "said.md"},
    )
    hank_path = write_hank(tmp_path / "hank", codon("a", "x", sentinels=[watch]))
    hank = load_hank(hank_path, check_environment=False)
    (planned,) = ExecutionPlan.from_hank(hank.hank).entries
    persistence = GatedPersistence()
    state = StateManager(persistence=persistence)
    weft_dir = tmp_path / "x" / ".weft"
    host = RuntimeSentinels(state, hank, workspace=tmp_path / "x" / "ws", weft_dir=weft_dir)
    assert await host.load(planned, "run-1") is None
    state.emit(_tool_result("a", "first"), run_id="run-1", codon_id="a")
    state.emit(_tool_result("a", "last"), run_id="run-1", codon_id="a")
    while True:  # the states the load submitted (a loop turn later) too
        await state.flush()
        await asyncio.sleep(0.01)
        if state.last_seq == state.core.next_seq - 1:
            break
    persistence.gate = state.emit(InfoEvent(message="the move"), run_id="run-1", codon_id="a")
    await asyncio.wait_for(host.drain(planned, "run-1", upto=persistence.gate - 1), 5)
    log = weft_dir / "sentinels" / "outputs" / "watch" / "said.md"
    assert log.read_text() == "first\n---\nlast"
    assert persistence.committed[-1].seq < persistence.gate  # still stuck
    persistence.opened.set()
    host.seal(planned, "run-1")
    await host.finish(planned, "run-1")
    await host.aclose()
    await state.close()


async def test_a_drain_submits_the_states_it_changed_once(tmp_path: Path) -> None:
    """Five sentinels each finish a call in the drain, each in its own loop
    turn: one SentinelStatesUpdated for them all, then the sealed one."""
    counting = [
        sentinel(f"s{i}", execution={"strategy": "count", "threshold": 1000}) for i in range(5)
    ]
    work = write_file("a.txt", "a") + write_file("b.txt", "b")
    hank = write_hank(tmp_path / "hank", codon("a", work, sentinels=counting))
    execution = tmp_path / "x"
    outcome, _ = await run(hank, execution)
    assert outcome.status == "completed", outcome.message
    entries = journal(execution)
    moves = [
        i
        for i, (kind, data) in enumerate(entries)
        if kind == "CodonTransitioned" and data.get("to") in ("completing-sentinels", "completed")
    ]
    start, end = moves
    updates = [data for kind, data in entries[start:end] if kind == "SentinelStatesUpdated"]
    # The drain's, with the five calls, then the seal's (each unloaded).
    assert len(updates) == 2, updates
    assert [s["llmCallCount"] for s in updates[0]["sentinelStates"]] == [1] * 5
    assert {s["status"] for s in updates[1]["sentinelStates"]} == {"unloaded"}


async def test_a_sentinel_on_every_codon_is_prepared_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared: list[str] = []
    real = manager_module.prepare

    def counting(config: Any, base: Path) -> manager_module.Prepared:
        prepared.append(config.id)
        return real(config, base)

    monkeypatch.setattr(manager_module, "prepare", counting)
    hank_dir = tmp_path / "hank"
    (hank_dir / "sentinels").mkdir(parents=True)
    config = sentinel("shared")["sentinelConfig"]
    (hank_dir / "sentinels" / "shared.json").write_text(json.dumps(config))
    entry = {"sentinelConfig": "sentinels/shared.json"}
    inline = sentinel("inline")
    codons = [codon(name, "x", sentinels=[entry, inline]) for name in ("a", "b", "c")]
    hank = write_hank(hank_dir, *codons)
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.status == "completed", outcome.message
    assert len(seen.of("sentinel.loaded")) == 6
    # The file's config is one object for the run; each codon's inline config
    # is its own.
    assert sorted(prepared) == ["inline", "inline", "inline", "shared"]
