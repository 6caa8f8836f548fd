"""A long run's journal grows linearly: each codon adds about the same bytes,
and no event Weft writes itself grows with the run (issue 20).

A loop of one codon runs through the real runtime (store with fsync, shadow
git checkpoints, the Claude parser) with an in-process agent that replays a
recorded Claude stream, so a few hundred codons take a second or two.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import uvloop

from weft.agents.claude import ClaudeParser
from weft.agents.events import AgentEvent, SessionExited
from weft.agents.harness import ProcessEnd, SessionSpec, StopReason
from weft.config import load_hank
from weft.events.completed import digest, fold
from weft.events.stream import CodonSummary, StateSnapshotEvent
from weft.plan import ExecutionPlan
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import Runtime, RuntimeOptions
from weft.state import Processed

Listener = Callable[[Processed], None]

GOLDEN = Path(__file__).parents[2] / "agents" / "golden" / "claude" / "tool_round.jsonl"
CODONS = 150
MAX_EVENT = 16 * 1024
"""The issue's bound for an event Weft writes itself (an agent's may be larger)."""


class ReplaySession:
    """An agent session that is over as soon as it is read: a recorded stream
    fed through the real parser, no process."""

    def __init__(self, lines: list[bytes]) -> None:
        self._lines = lines
        self._exit: SessionExited | None = None

    @property
    def pid(self) -> int:
        return os.getpid()

    async def events(self) -> AsyncIterator[AgentEvent]:
        parser = ClaudeParser()
        for line in self._lines:
            for event in parser.feed(line):
                yield event
        for event in parser.finish(ProcessEnd(0, None, "", None)):
            if isinstance(event, SessionExited):
                self._exit = event
            yield event

    async def stop(self, reason: StopReason = StopReason.OPERATOR) -> None:
        return None

    async def kill(self) -> None:
        return None

    async def wait(self) -> SessionExited:
        assert self._exit is not None
        return self._exit


class ReplayHarness:
    name = "claude"

    def __init__(self, lines: list[bytes]) -> None:
        self._lines = lines

    def argv(self, spec: SessionSpec) -> list[str]:
        return ["replay"]

    async def start(self, spec: SessionSpec) -> ReplaySession:
        return ReplaySession(self._lines)


def run_loop(tmp: Path, iterations: int, listeners: tuple[Listener, ...] = ()) -> Path:
    """Runs a one-codon loop ``iterations`` times; returns the journal's path."""
    hank = {
        "hank": [
            {
                "type": "loop",
                "id": "l",
                "name": "loop",
                "terminateOn": {"type": "iterationLimit", "limit": iterations},
                "codons": [
                    {
                        "id": "c",
                        "name": "codon",
                        "model": "fake/sonnet",
                        "continuationMode": "fresh",
                        "promptText": "step",
                        "checkpointedFiles": ["src/**"],
                    }
                ],
            }
        ]
    }
    path = tmp / "hank.json"
    path.write_bytes(msgspec.json.encode(hank))
    prepared = prepare_execution(
        path, None, interactive=False, base_dir=tmp / "managed", execution_dir=tmp / "exec"
    )
    runtime = Runtime(prepared, load_hank(path), RuntimeOptions(serve=False), listeners=listeners)
    harness = ReplayHarness([line for line in GOLDEN.read_bytes().splitlines() if line.strip()])
    runtime._harness = lambda model: (harness, "sonnet")  # type: ignore[method-assign]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        outcome = runner.run(runtime.run())
    assert outcome.status == "completed", outcome
    return tmp / "exec" / ".weft" / "weft.db"


def test_each_codon_adds_the_same_journal_bytes_and_no_event_grows(tmp_path: Path) -> None:
    db = sqlite3.connect(run_loop(tmp_path, CODONS))
    try:
        rows = db.execute("SELECT seq, type, payload FROM events ORDER BY seq").fetchall()
    finally:
        db.close()
    ends = [seq for seq, kind, _ in rows if kind == "state.snapshot"]
    assert len(ends) == CODONS
    sizes = {seq: len(payload.encode()) for seq, _, payload in rows}

    def between(first: int, last: int) -> int:
        return sum(size for seq, size in sizes.items() if ends[first] < seq <= ends[last])

    third = CODONS // 3
    early, late = between(0, third), between(CODONS - 1 - third, CODONS - 1)
    assert late <= 1.05 * early, (early, late)
    biggest = max(rows, key=lambda r: len(r[2].encode()))
    assert len(biggest[2].encode()) <= MAX_EVENT, biggest[1]
    # The snapshots, folded, still give every finished codon.
    finished: list[CodonSummary] = []
    for _, kind, payload in rows:
        if kind == "state.snapshot":
            data = msgspec.json.decode(payload)["data"]
            finished = fold(finished, msgspec.convert(data, StateSnapshotEvent))
    assert [c.codon_id for c in finished] == [f"c#{i}" for i in range(CODONS)]
    assert data["completedDigest"] == digest(finished)


def test_a_long_loop_keeps_no_old_plan_alive(tmp_path: Path) -> None:
    """Each plan keeps how to undo the change that made the next one: a
    reference to the first plan, held for the whole run, kept every plan alive
    (three objects per codon)."""
    alive: dict[int, int] = {}
    ends = 0

    def count_plans(item: Processed) -> None:
        nonlocal ends
        if item.stream is not None and item.stream.type == "state.snapshot":
            ends += 1
            if ends in (10, 70):
                gc.collect()
                alive[ends] = sum(isinstance(o, ExecutionPlan) for o in gc.get_objects())

    run_loop(tmp_path, 70, listeners=(count_plans,))
    assert alive[70] <= alive[10] + 2, alive
