"""What the session supervisor costs per session, in the same run.

Two groups, each comparing a supervised session with the same session
started directly through the harness (start, read every event, wait):

* ``supervisor-process``: the real Claude harness and the real fake agent
  (``fake/sonnet``, ``success`` scenario, ``FAKE_AGENT_LINE_DELAY_MS=0``), one
  process per session. This is what a codon pays; the process start dominates.
* ``supervisor-overhead``: the same events replayed by an in-memory session,
  so the supervisor's own work (machine calls, prompt building, tasks, event
  forwarding) is measured without the noise of process start-up.

Besides the ratio that ``benches/conftest.py`` prints, each supervised
benchmark reports the per-session difference in milliseconds against its
group's baseline (median against median).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvloop

from weft.agents.events import AgentEvent, SessionExited
from weft.agents.harness import AgentSession, SessionSpec, StopReason, Timeouts, route
from weft.agents.registry import harness_for
from weft.agents.supervisor import PromptRequest, SessionSupervisor

PROCESS_ROUNDS = 25
REPLAYS_PER_ROUND = 500

_medians: dict[str, float] = {}
"""Baseline medians per group (seconds per session)."""


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
        yield r


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> SessionSpec:
    root = tmp_path_factory.mktemp("supervisor-bench")
    return SessionSpec(
        prompt="benchmark @@fake:scenario=success@@",
        model="sonnet",
        cwd=root,
        env={"CLAUDE_CONFIG_DIR": str(root / "claude"), "FAKE_AGENT_LINE_DELAY_MS": "0"},
        timeouts=Timeouts(first_output=30, idle=30),
    )


def _prompt(spec: SessionSpec) -> Any:
    def build(request: PromptRequest) -> str:
        return spec.prompt

    return build


async def _direct(harness: Any, spec: SessionSpec) -> SessionExited:
    session = await harness.start(spec)
    count = 0
    async for _event in session.events():
        count += 1
    exited: SessionExited = await session.wait()
    assert exited.ok, exited
    return exited


async def _supervised(harness: Any, spec: SessionSpec) -> SessionExited:
    forwarded: list[object] = []
    supervisor = SessionSupervisor(harness, spec, _prompt(spec), on_event=forwarded.append)
    result = await supervisor.run()
    assert result.ok, result
    assert result.last_exit is not None
    return result.last_exit


def _report(benchmark: Any, group: str, baseline: bool) -> None:
    median = benchmark.stats.stats.median / benchmark.extra_info.get("items", 1)
    if baseline:
        _medians[group] = median
        return
    base = _medians.get(group)
    if base is not None:
        diff_ms = (median - base) * 1000
        benchmark.extra_info["summary"] = f"supervisor overhead {diff_ms:+.3f} ms per session"
        print(f"\n{group}: {benchmark.extra_info['summary']}")


# -- real processes ---------------------------------------------------------------------


@pytest.mark.benchmark(group="supervisor-process")
def test_process_session_direct_baseline(
    benchmark: Any, runner: asyncio.Runner, spec: SessionSpec
) -> None:
    harness = harness_for(route("fake/sonnet"))
    runner.run(_direct(harness, spec))  # warm the page cache and the loop
    benchmark.pedantic(
        lambda: runner.run(_direct(harness, spec)), rounds=PROCESS_ROUNDS, warmup_rounds=1
    )
    _report(benchmark, "supervisor-process", baseline=True)


@pytest.mark.benchmark(group="supervisor-process")
def test_process_session_supervised(
    benchmark: Any, runner: asyncio.Runner, spec: SessionSpec
) -> None:
    harness = harness_for(route("fake/sonnet"))
    runner.run(_supervised(harness, spec))
    benchmark.pedantic(
        lambda: runner.run(_supervised(harness, spec)), rounds=PROCESS_ROUNDS, warmup_rounds=1
    )
    _report(benchmark, "supervisor-process", baseline=False)
    # Process start-up varies by a few ms from one run to the next, more than
    # the supervisor costs; pairs run back to back cancel most of that drift.
    diffs = [_paired(runner, harness, spec, i % 2 == 0) for i in range(PROCESS_ROUNDS)]
    paired_ms = statistics.median(diffs) * 1000
    benchmark.extra_info["paired_overhead_ms"] = paired_ms
    benchmark.extra_info["summary"] = (
        benchmark.extra_info.get("summary", "") + f"; paired median {paired_ms:+.3f} ms"
    )
    print(f"supervisor-process: paired median overhead {paired_ms:+.3f} ms per session")


def _paired(
    runner: asyncio.Runner, harness: Any, spec: SessionSpec, supervised_first: bool
) -> float:
    """One direct and one supervised session back to back; the supervised
    one's extra seconds."""
    order = [_supervised, _direct] if supervised_first else [_direct, _supervised]
    timings: dict[Any, float] = {}
    for one in order:
        start = time.perf_counter()
        runner.run(one(harness, spec))
        timings[one] = time.perf_counter() - start
    return timings[_supervised] - timings[_direct]


# -- the supervisor's own work ----------------------------------------------------------


class _Replay:
    """An AgentSession that replays recorded events at once."""

    pid = 0

    def __init__(self, events: list[AgentEvent]) -> None:
        self._events = events

    async def events(self) -> AsyncIterator[AgentEvent]:
        for event in self._events:
            yield event

    async def wait(self) -> SessionExited:
        last = self._events[-1]
        assert isinstance(last, SessionExited)
        return last

    async def stop(self, reason: StopReason = StopReason.OPERATOR) -> None:
        return None

    async def kill(self) -> None:
        return None


class _ReplayHarness:
    name = "replay"

    def __init__(self, events: list[AgentEvent]) -> None:
        self.events = events

    def argv(self, spec: SessionSpec) -> list[str]:
        return ["replay"]

    async def start(self, spec: SessionSpec) -> AgentSession:
        return _Replay(self.events)


@pytest.fixture(scope="module")
def recorded(runner: asyncio.Runner, spec: SessionSpec) -> list[AgentEvent]:
    """The events of one real fake-agent session."""

    async def record() -> list[AgentEvent]:
        session = await harness_for(route("fake/sonnet")).start(spec)
        events = [event async for event in session.events()]
        await session.wait()
        return events

    return runner.run(record())


def _many(runner: asyncio.Runner, one: Any, harness: _ReplayHarness, spec: SessionSpec) -> None:
    async def go() -> None:
        for _ in range(REPLAYS_PER_ROUND):
            await one(harness, spec)

    runner.run(go())


@pytest.mark.benchmark(group="supervisor-overhead")
def test_replayed_session_direct_baseline(
    benchmark: Any, runner: asyncio.Runner, spec: SessionSpec, recorded: list[AgentEvent]
) -> None:
    harness = _ReplayHarness(recorded)
    benchmark.extra_info["items"] = REPLAYS_PER_ROUND
    benchmark.pedantic(_many, args=(runner, _direct, harness, spec), rounds=20, warmup_rounds=2)
    _report(benchmark, "supervisor-overhead", baseline=True)


@pytest.mark.benchmark(group="supervisor-overhead")
def test_replayed_session_supervised(
    benchmark: Any, runner: asyncio.Runner, spec: SessionSpec, recorded: list[AgentEvent]
) -> None:
    harness = _ReplayHarness(recorded)
    benchmark.extra_info["items"] = REPLAYS_PER_ROUND
    benchmark.extra_info["events_per_session"] = len(recorded)
    benchmark.pedantic(_many, args=(runner, _supervised, harness, spec), rounds=20, warmup_rounds=2)
    _report(benchmark, "supervisor-overhead", baseline=False)
