"""CodonRunner on its own, with a scripted in-process harness.

The harness plays a list of agent events (no agent process), so each case
checks exactly what the runner makes of them: the codon's transitions and the
stream events it queues, through a real StateManager, a real journal and a
real shadow git repository. The run loop, recovery and the server are not
involved: the test plays the supervisor's part (one ``RunStarted``, one
:class:`CodonRequest`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from weft.agents.events import (
    AgentEvent,
    AssistantText,
    SessionExited,
    SessionResult,
    SessionStarted,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.harness import SessionSpec, StopReason
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.repo import run_branch
from weft.clock import utc_now_iso
from weft.config import load_hank
from weft.events.stream import (
    AssistantActionEvent,
    CodonCompletedEvent,
    CodonStartedEvent,
    TokenUsageEvent,
    ToolResultEvent,
)
from weft.events.transitions import CodonTransitioned, Fresh, InitialCheckpointSet, RunStarted
from weft.plan import ExecutionPlan
from weft.progress import NANO, nanos
from weft.runtime.codon.attempt import CodonRequest, CodonResult, Interrupt
from weft.runtime.codon.runner import CodonRunner
from weft.runtime.execution.prepare import prepare_execution
from weft.state import Processed, StateManager
from weft.store import ExecutionStore

RUN = "1700000000000-abcde"
HANG = object()
"""A script step: the session waits here until it is stopped (then ends by signal)."""

_OK = SessionExited(ok=True, exit_code=0, result_seen=True)


def _started(session: str = "s-1") -> SessionStarted:
    return SessionStarted(session_id=session, model="sonnet")


def _usage(cost: float | None, tokens: int = 10) -> UsageDelta:
    return UsageDelta(model="sonnet", tokens=Tokens(input=tokens, output=tokens), cost_usd=cost)


def _result(cost: float | None) -> SessionResult:
    return SessionResult(
        ok=True, session_id="s-1", cost_usd=cost, tokens=Tokens(input=100, output=50)
    )


class _Session:
    """Plays a script; :data:`HANG` waits for :meth:`stop`."""

    def __init__(self, script: Sequence[object]) -> None:
        self._script = script
        self._stopped = asyncio.Event()
        self._exit: SessionExited | None = None
        self.stops: list[StopReason] = []

    @property
    def pid(self) -> int:
        return os.getpid()

    async def events(self) -> AsyncIterator[AgentEvent]:
        for step in self._script:
            if step is HANG:
                await self._stopped.wait()
                self._exit = SessionExited(ok=False, exit_code=None, signal=15)
                yield self._exit
                return
            assert isinstance(step, AgentEvent)
            if isinstance(step, SessionExited):
                self._exit = step
            yield step

    async def stop(self, reason: StopReason = StopReason.OPERATOR) -> None:
        self.stops.append(reason)
        self._stopped.set()

    async def kill(self) -> None:
        self._stopped.set()

    async def wait(self) -> SessionExited:
        assert self._exit is not None
        return self._exit


class _Harness:
    """Starts one scripted session per attempt."""

    name = "claude"

    def __init__(self, script: Sequence[object]) -> None:
        self.script = script
        self.sessions: list[_Session] = []
        self.specs: list[SessionSpec] = []

    def argv(self, spec: SessionSpec) -> list[str]:
        return ["scripted"]

    async def start(self, spec: SessionSpec) -> _Session:
        self.specs.append(spec)
        session = _Session(self.script)
        self.sessions.append(session)
        return session


@dataclass
class _Env:
    runner: CodonRunner
    manager: StateManager
    harness: _Harness
    seen: list[Processed]
    request: CodonRequest

    def moves(self) -> list[str]:
        """The codon's status moves, as ``from>to``."""
        return [
            f"{p.event.from_status}>{p.event.to_status}"
            for p in self.seen
            if isinstance(p.event, CodonTransitioned)
        ]

    def stream(self, kind: type[Any]) -> list[Any]:
        return [p.event for p in self.seen if isinstance(p.event, kind)]

    def rejected(self) -> list[str]:
        return [str(p.outcome.message) for p in self.seen if not p.outcome.ok]


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


async def _run(
    tmp: Path,
    script: Sequence[object],
    *,
    interrupt: Interrupt | None = None,
    skip_rig: bool = False,
    **codon: Any,
) -> tuple[_Env, CodonResult]:
    """Runs one attempt of a one-codon hank with ``script`` as the agent;
    ``interrupt`` is sent once the agent has started its session."""
    spec = {
        "id": "c1",
        "name": "one codon",
        "model": "fake/sonnet",
        "continuationMode": "fresh",
        "promptText": "go",
    } | codon
    spec.setdefault("checkpointedFiles", ["src/**"])
    hank_path = tmp / "hank.json"
    hank_path.write_bytes(msgspec.json.encode({"hank": [spec]}))
    loaded = load_hank(hank_path)
    prepared = prepare_execution(
        hank_path, None, interactive=False, base_dir=tmp / "managed", execution_dir=tmp / "exec"
    )
    layout = prepared.layout
    store = await asyncio.to_thread(ExecutionStore.open, layout.weft_dir)
    checkpoints = await AsyncCheckpointRepo.open(layout.checkpoints, layout.workspace)
    manager = store.state_manager()
    seen: list[Processed] = []
    manager.add_listener(seen.append)
    try:
        plan = ExecutionPlan.from_hank(loaded.hank)
        manager.transition(InitialCheckpointSet(sha=checkpoints.initial_sha))
        manager.transition(
            RunStarted(
                run_id=RUN,
                run_folder=str(layout.runs / RUN),
                git_branch=run_branch(RUN),
                starting_conditions=Fresh(initial_checkpoint_sha=checkpoints.initial_sha),
                server_pid=os.getpid(),
                start_time=utc_now_iso(),
                execution_plan=plan.to_entries(),
            )
        )
        harness = _Harness(script)
        runner = CodonRunner(
            manager,
            checkpoints,
            loaded,
            layout,
            harness_for=lambda model: (harness, "sonnet"),
            stop_grace=0.5,
            # The supervisor's cool-downs (2 s doubling to 60 s) pass at once: a
            # retriable verdict resumes until the thresholds give up, in no time.
            sleep=_no_wait,
        )
        planned = plan.next_codon(None)
        assert planned is not None
        request = CodonRequest(
            run_id=RUN,
            branch=run_branch(RUN),
            planned=planned,
            patterns=plan.checkpoint_patterns(planned.codon_id),
            parent_sha=checkpoints.initial_sha,
            skip_rig=skip_rig,
        )
        task = asyncio.ensure_future(runner.run(request))
        if interrupt is not None:
            while not harness.sessions:
                await asyncio.sleep(0.005)
            assert await runner.interrupt(interrupt)
        result = await task
        await manager.flush()
        assert runner.current_codon is None
        assert not await runner.interrupt(Interrupt.SKIP)  # nothing runs any more
        env = _Env(runner, manager, harness, seen, request)
        # The runner's transitions are all accepted: a rejection is a bug.
        assert env.rejected() == []
        return env, result
    finally:
        await checkpoints.close()
        await store.close(manager)


async def test_success_walks_the_eight_states_and_records_the_stream(tmp_path: Path) -> None:
    script = [
        _started(),
        AssistantText(text="Looking", message_id="m1"),
        ToolUse(tool_use_id="t1", name="Read", input={"path": "a"}, message_id="m1"),
        ToolResult(tool_use_id="t1", content="x" * 5000),
        AssistantText(text="Done", message_id="m2"),
        _result(0.25),
        _OK,
    ]
    env, result = await _run(tmp_path, script)
    assert result.status == "completed"
    assert result.failure is None
    assert env.moves() == [
        "preparing>starting",
        "starting>initializing",
        "initializing>running",
        "running>completing-sentinels",
        "completing-sentinels>completed",
    ]
    assert result.session_id == "s-1"
    assert result.continuable
    assert result.assistant_messages == 2
    assert result.checkpoint_sha is not None
    assert env.runner.tips[env.request.branch] == result.checkpoint_sha
    (started,) = env.stream(CodonStartedEvent)
    assert (started.codon_id, started.session_id, started.harness) == ("c1", "s-1", "claude")
    actions = [(e.action, e.content) for e in env.stream(AssistantActionEvent)]
    assert actions == [("message", "Looking"), ("tool_use", "Read"), ("message", "Done")]
    (tool,) = env.stream(ToolResultEvent)
    assert (tool.tool_name, tool.truncated, tool.original_length) == ("Read", True, 5000)
    (completed,) = env.stream(CodonCompletedEvent)
    assert completed.success
    assert completed.checkpoint_sha == result.checkpoint_sha
    assert completed.cost == result.cost == 0.25


async def test_a_failed_verdict_fails_the_codon_with_its_reason(tmp_path: Path) -> None:
    failure = SessionExited(
        ok=False, exit_code=1, message="rate limited", retriable=True, retry_after_ms=1500
    )
    env, result = await _run(tmp_path, [_started(), failure])
    assert result.status == "failed"
    assert result.retriable
    assert result.failure is not None
    assert (result.failure.message, result.failure.retry_after_ms) == ("rate limited", 1500)
    assert env.moves()[-1] == "running>failed"
    assert result.checkpoint_sha is not None  # the error checkpoint
    (completed,) = env.stream(CodonCompletedEvent)
    assert not completed.success
    assert completed.exit_status is not None
    assert completed.exit_status.code == 1


async def test_a_clean_exit_without_a_session_is_a_failure(tmp_path: Path) -> None:
    env, result = await _run(tmp_path, [_OK])
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.message == "the agent never reported a session"
    assert env.moves()[-1] == "initializing>failed"


async def test_skip_stops_the_agent_and_skips_at_no_cost(tmp_path: Path) -> None:
    script = [_started(), _usage(0.1), HANG]
    env, result = await _run(tmp_path, script, interrupt=Interrupt.SKIP)
    assert env.harness.sessions[0].stops == [StopReason.OPERATOR]
    assert result.status == "skipped"
    assert result.cost == 0.0
    assert env.moves()[-1] == "running>skipped"
    (completed,) = env.stream(CodonCompletedEvent)
    assert completed.status == "skipped"
    assert completed.cost == 0.0


async def test_force_stop_fails_the_codon_not_retriable(tmp_path: Path) -> None:
    env, result = await _run(tmp_path, [_started(), HANG], interrupt=Interrupt.FORCE_STOP)
    assert result.status == "failed"
    assert not result.retriable
    assert result.failure is not None
    assert result.failure.kind == "force_stopped"
    assert env.moves()[-1] == "running>failed"


async def test_shutdown_fails_the_codon_retriable(tmp_path: Path) -> None:
    env, result = await _run(tmp_path, [_started(), HANG], interrupt=Interrupt.SHUTDOWN)
    assert env.harness.sessions[0].stops == [StopReason.SHUTDOWN]
    assert result.failure is not None
    assert result.failure.kind == "interrupted"
    assert result.retriable


async def test_a_rig_failure_fails_the_codon_before_any_agent_starts(tmp_path: Path) -> None:
    env, result = await _run(
        tmp_path,
        [_started(), _OK],
        rigSetup=[{"type": "command", "command": {"run": "echo boom >&2; exit 4"}}],
    )
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.kind == "rig_setup"
    assert result.retriable
    assert env.harness.sessions == []
    assert env.moves() == ["preparing>failed"]


async def test_skip_rig_runs_the_agent_without_the_rig(tmp_path: Path) -> None:
    # The rig would fail; codon.start's skipPreCommands does not run it.
    rig = [{"type": "command", "command": {"run": "exit 4"}}]
    env, result = await _run(tmp_path, [_started(), _result(0.0), _OK], rigSetup=rig, skip_rig=True)
    assert result.status == "completed"
    assert env.moves()[0] == "preparing>starting"
    assert env.harness.sessions


async def test_the_reported_total_is_the_cost_and_matches_the_core(tmp_path: Path) -> None:
    # Increments first, then the agent's total: the total wins (it is the
    # agent's own figure), rounded as the core rounds.
    script = [_started(), _usage(0.1), _usage(0.2), _result(1.0 / 3), _OK]
    env, result = await _run(tmp_path, script)
    assert result.cost == nanos(1.0 / 3) / NANO
    assert env.manager.core.codon_cost(RUN, "c1") == result.cost
    final = [e for e in env.stream(TokenUsageEvent) if e.final]
    assert [e.total_cost for e in final] == [1.0 / 3]


async def test_an_increment_after_the_total_is_added_by_the_core(tmp_path: Path) -> None:
    script = [_started(), _result(0.5), _usage(0.125), _OK]
    env, result = await _run(tmp_path, script)
    assert result.cost == 0.625
    assert env.manager.core.codon_cost(RUN, "c1") == 0.625


async def test_increments_alone_add_up(tmp_path: Path) -> None:
    script = [_started(), _usage(0.1), _usage(0.2), _usage(None), _OK]
    env, result = await _run(tmp_path, script)
    assert result.cost == env.manager.core.codon_cost(RUN, "c1")
    assert abs(result.cost - 0.3) < 1e-9
    assert result.tokens == Tokens(input=30, output=30)
