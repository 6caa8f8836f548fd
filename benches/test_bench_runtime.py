"""Runtime overhead per codon (issue 6): target at most 10 ms, checkpoint included.

A 200-codon hank runs through the real runtime (store with fsync, shadow git
checkpoints, the eight-state lifecycle, the Claude parser) with an agent that
"finishes at once": an in-process session that replays a recorded one-tool
Claude stream through the real :class:`~weft.agents.claude.ClaudeParser`.
So the figure is Weft's own work per codon, without any agent process.

The baseline, measured in the same run, is the cheapest real agent there is:
the fake Claude CLI spawned through the real harness, doing nothing but its
success stream (its process lifetime, which the overhead figure excludes).
The breakdown splits the overhead into checkpoints, the journal (waiting
for durable commits) and the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvloop

from weft.agents.claude import ClaudeParser
from weft.agents.events import AgentEvent, SessionExited
from weft.agents.harness import ProcessEnd, SessionSpec, StopReason, route
from weft.agents.registry import harness_for
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.cli import main
from weft.config import load_hank
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import Runtime, RuntimeOptions
from weft.store import ExecutionStore

CODONS = 200
GOLDEN = (
    Path(__file__).parent.parent / "tests" / "agents" / "golden" / "claude" / "tool_round.jsonl"
)


class _ReplaySession:
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
        # A real session's stream comes from a pipe, and reading it is a turn
        # of the event loop: here the whole stream is one read, as from the
        # fastest agent, and its lines are parsed as the process harness
        # parses a read's lines (one feed_many). (Without the turn, a codon
        # whose checkpoint is short never lets the loop run, and its events
        # wait for the run's end.)
        await asyncio.sleep(0)
        for event in parser.feed_many(self._lines):
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


class _ReplayHarness:
    name = "claude"

    def __init__(self, lines: list[bytes], *, writes: bool = False) -> None:
        self._lines = lines
        self._writes = writes
        self._count = 0

    def argv(self, spec: SessionSpec) -> list[str]:
        return ["replay"]

    async def start(self, spec: SessionSpec) -> _ReplaySession:
        if self._writes:  # each session leaves a file behind, as agents do
            self._count += 1
            (spec.cwd / "src").mkdir(exist_ok=True)
            (spec.cwd / "src" / f"f{self._count}.py").write_text(f"x = {self._count}\n" * 50)
        return _ReplaySession(self._lines)


def _hank(tmp: Path, count: int = CODONS) -> Path:
    codons = [
        {
            "id": f"c{i}",
            "name": f"codon {i}",
            "model": "fake/sonnet",
            "continuationMode": "fresh",
            "promptText": f"step {i}",
            "checkpointedFiles": ["src/**", "notes.md"],
        }
        for i in range(count)
    ]
    path = tmp / "hank.json"
    path.write_bytes(msgspec.json.encode({"hank": codons}))
    return path


class _Timed:
    """Adds up the time spent inside wrapped coroutines."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Any) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


def _run_hank(
    tmp: Path, lines: list[bytes], *, count: int = CODONS, writes: bool = False
) -> dict[str, float]:
    hank_path = _hank(tmp, count)
    loaded = load_hank(hank_path)
    prepared = prepare_execution(
        hank_path, None, interactive=False, base_dir=tmp / "managed", execution_dir=tmp / "exec"
    )
    runtime = Runtime(prepared, loaded, RuntimeOptions())
    harness = _ReplayHarness(lines, writes=writes)
    runtime._harness = lambda model: (harness, "sonnet")  # type: ignore[method-assign]
    checkpoints = _Timed()
    original_snapshot = AsyncCheckpointRepo.snapshot
    AsyncCheckpointRepo.snapshot = checkpoints.wrap(original_snapshot)  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            outcome = runner.run(runtime.run())
        total = time.perf_counter() - started
    finally:
        AsyncCheckpointRepo.snapshot = original_snapshot  # type: ignore[method-assign]
    assert outcome.status == "completed", outcome
    assert len(outcome.codons) == count
    return {"total": total, "checkpoints": checkpoints.seconds}


@pytest.mark.benchmark(group="codon-overhead")
def test_runtime_overhead_per_codon(benchmark: Any, tmp_path: Path) -> None:
    lines = [line for line in GOLDEN.read_bytes().splitlines() if line.strip()]
    runs = iter(range(1000))
    figures: list[dict[str, float]] = []

    def one() -> None:
        root = tmp_path / f"r{next(runs)}"
        root.mkdir()
        figures.append(_run_hank(root, lines))

    benchmark.pedantic(one, rounds=3, iterations=1)
    best = min(figures, key=lambda f: f["total"])
    per_codon_ms = best["total"] / CODONS * 1000
    checkpoint_ms = best["checkpoints"] / CODONS * 1000
    benchmark.extra_info["items"] = CODONS
    benchmark.extra_info["summary"] = (
        f"{per_codon_ms:.2f} ms/codon (checkpoints {checkpoint_ms:.2f} ms, "
        f"everything else {per_codon_ms - checkpoint_ms:.2f} ms; 200-codon hank, startup included)"
    )
    assert per_codon_ms > 0


@pytest.mark.benchmark(group="codon-overhead")
def test_baseline_fake_agent_process_lifetime(
    benchmark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cheapest real agent session: the fake Claude CLI, spawned and read to its end."""
    monkeypatch.setenv("FAKE_AGENT_LINE_DELAY_MS", "0")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    target = route("fake/sonnet")
    harness = harness_for(target)
    spec = SessionSpec(prompt="hello", model=target.model, cwd=tmp_path)

    async def session() -> None:
        running = await harness.start(spec)
        async for _ in running.events():
            pass
        exited = await running.wait()
        assert exited.ok, exited

    def one() -> None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(session())

    benchmark.pedantic(one, rounds=10, iterations=1)
    benchmark.extra_info["items"] = 1


def _history(tmp: Path) -> tuple[Path, str]:
    """A 50-codon execution whose codons each added a file; the first codon's checkpoint."""
    lines = [line for line in GOLDEN.read_bytes().splitlines() if line.strip()]
    _run_hank(tmp, lines, count=50, writes=True)
    execution = tmp / "exec"
    store = ExecutionStore.open(execution, readonly=True)
    try:
        state = json.loads(store.core.state_json())
    finally:
        store.journal.close()
    first = state["runs"][0]["codons"][0]
    assert first["codonId"] == "c0"
    return execution, first["completionCheckpoint"]


@pytest.mark.benchmark(group="rollback across 50 codons")
def test_rollback_50_codons(benchmark: Any, tmp_path: Path) -> None:
    runs = iter(range(1000))

    def setup() -> tuple[tuple[Path], dict[str, Any]]:
        root = tmp_path / f"r{next(runs)}"
        root.mkdir()
        execution, _ = _history(root)
        return (execution,), {}

    def rollback(execution: Path) -> None:
        assert main(["rollback", str(execution), "--codon", "c0"]) == 0

    benchmark.pedantic(rollback, setup=setup, rounds=3, iterations=1)
    benchmark.extra_info["summary"] = (
        "weft rollback --codon c0 (whole command: lock, thread, restore, run)"
    )


@pytest.mark.benchmark(group="rollback across 50 codons")
def test_rollback_baseline_git_cli_read_tree(benchmark: Any, tmp_path: Path) -> None:
    """The git CLI restoring the same tree in the same repository: the work of
    step 2 alone, without the thread, the lock or the journal."""
    runs = iter(range(1000))

    def setup() -> tuple[tuple[Path, str], dict[str, Any]]:
        root = tmp_path / f"r{next(runs)}"
        root.mkdir()
        execution, sha = _history(root)
        return (execution, sha), {}

    def restore(execution: Path, sha: str) -> None:
        git_dir = execution / ".weft" / "checkpoints" / ".weftcheckpoints"
        work_tree = execution / "agentRoot"
        subprocess.run(
            [
                "git",
                f"--git-dir={git_dir}",
                f"--work-tree={work_tree}",
                "read-tree",
                "-u",
                "--reset",
                sha,
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)},
        )

    benchmark.pedantic(restore, setup=setup, rounds=3, iterations=1)
