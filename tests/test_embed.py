"""weft.embed: a hank run in-process is an ordinary execution, events in order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.runtime.hanks import subprocess_environment

from weft import embed
from weft.errors import CommandRejectedError

ROOT = Path(__file__).resolve().parents[1]
HANK = ROOT / "examples" / "batch" / "hank"
DATA = ROOT / "examples" / "batch" / "data" / "alpha"


@pytest.fixture(autouse=True)
def fast_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in subprocess_environment(tmp_path).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)


async def test_run_in_process_streams_every_event_then_the_outcome(tmp_path: Path) -> None:
    execution = embed.open_execution(HANK, DATA, execution=tmp_path / "ex")
    assert not execution.resumed
    seqs = []
    kinds = set()
    async with execution:
        async for item in execution.events():
            seqs.append(item.seq)
            if item.stream is not None:
                kinds.add(item.stream.type)
        outcome = await execution.outcome()
    assert outcome.status == "completed"
    assert outcome.exit_code == 0
    assert set(outcome.codons.values()) == {"completed"}
    assert outcome.cost > 0
    assert seqs == sorted(seqs)
    assert seqs
    assert (tmp_path / "ex" / ".weft" / "state.json").is_file()

    again = await embed.run(HANK, DATA, execution=tmp_path / "ex")
    assert again.status == "nothing_to_do"


async def test_manual_mode_runs_one_codon_per_next_and_stops_on_request(
    tmp_path: Path,
) -> None:
    execution = embed.open_execution(HANK, DATA, execution=tmp_path / "ex", autostart=False)
    await execution.wait_idle()
    with pytest.raises(CommandRejectedError):
        await execution.skip()
    with pytest.raises(ValueError, match="unknown command"):
        await execution.command("codon.dance")
    await execution.next()
    await execution.wait_idle()
    outcome = await execution.stop()
    assert outcome.codons == {"read": "completed"}
