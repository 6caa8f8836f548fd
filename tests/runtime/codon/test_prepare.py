"""Preparing a codon (rig setup, ``starting``, the spawn): what must hold
before its agent runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import codon, fake_environment, run_hank, write_file, write_hank


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def test_an_agent_starts_only_once_the_codon_before_it_ended_durably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk holds the commit of codon a's end for 1.5 s. Codon b's agent
    (which writes b.md as soon as it runs) must not start before that commit:
    a crash in between would otherwise run a again, though b had spent money.
    Before the gate, b.md existed before a's end was on disk."""
    from weft.store.writer import StoreWriter

    hank = write_hank(
        tmp_path / "hank",
        codon("a", write_file("a.md", "one")),
        codon("b", write_file("b.md", "two")),
    )
    execution = tmp_path / "x"
    agent_ran_first: list[bool] = []
    commit = StoreWriter.commit

    async def slow_commit(self: StoreWriter, batch: Any) -> None:
        ends_a = any(
            b'"codonId":"a"' in item.payload and b'"to":"completed"' in item.payload
            for item in batch
        )
        if ends_a:
            await asyncio.sleep(1.5)
        await commit(self, batch)
        if ends_a:
            agent_ran_first.append((execution / "agentRoot" / "b.md").exists())

    monkeypatch.setattr(StoreWriter, "commit", slow_commit)
    outcome, _ = await run_hank(hank, execution)
    assert outcome.status == "completed", outcome.message
    assert agent_ran_first == [False]
    assert (execution / "agentRoot" / "b.md").read_text() == "two"
