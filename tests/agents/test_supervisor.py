"""The session supervisor (``weft.agents.supervisor``).

Two kinds of tests:

* **Scheduling** (backoff, thresholds, Retry-After, resume ids, urgent
  messages, stops): a scripted Harness double stands in for the agent and a
  fake clock records every sleep instead of sleeping, so a twenty-error run
  takes milliseconds. The double is the agent, not the thing under test: the
  supervisor and the compiled machine run for real.
* **End to end**: the real Claude harness spawns the real fake agent
  (``fake/sonnet``); these check the interrupt and stop paths against a live
  process group, resume on the command line, and that no process or pipe is
  left behind.

Expected backoff values are computed here from the seed's formula
(``min(2000 * 2^(n-1), 60000)`` ms), not read from the implementation.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from weft.agents.events import (
    AgentEvent,
    ErrorClass,
    SessionExited,
    SessionResult,
    SessionStarted,
    UsageWindow,
)
from weft.agents.harness import AgentStartError, SessionSpec, StopReason, Timeouts, route
from weft.agents.registry import harness_for
from weft.agents.supervisor import (
    CooldownEnded,
    CooldownStarted,
    InterruptForced,
    InterruptRequested,
    PromptReason,
    PromptRequest,
    PromptStored,
    SessionSpawned,
    SessionSupervisor,
    SupervisorEvent,
    SupervisorFatal,
    SupervisorResult,
    SupervisorStopped,
    WindowOpened,
    WindowParked,
)


def seed_backoff_s(n: int) -> float:
    """The seed's cool-down after the n-th consecutive error, in seconds."""
    ms: int = min(2000 * 2 ** (n - 1), 60000)
    return ms / 1000


# -- doubles -------------------------------------------------------------------------


class FakeClock:
    """Records sleeps. ``auto``: a sleep returns at once (time jumps);
    otherwise it waits for :meth:`advance` past its deadline."""

    def __init__(self, *, auto: bool = True) -> None:
        self.auto = auto
        self.now = 0.0
        self.sleeps: list[float] = []
        self._waiters: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.auto:
            self.now += seconds
            await asyncio.sleep(0)
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((self.now + seconds, future))
        await future

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for deadline, future in list(self._waiters):
            if deadline <= self.now and not future.done():
                future.set_result(None)


def verdict(
    *,
    ok: bool = False,
    retriable: bool = True,
    error_class: ErrorClass | None = ErrorClass.OVERLOADED,
    retry_after_ms: int | None = None,
    session_id: str | None = None,
    message: str | None = "overloaded",
) -> SessionExited:
    if ok:
        return SessionExited(ok=True, exit_code=0, session_id=session_id)
    return SessionExited(
        ok=False,
        exit_code=1,
        error_class=error_class,
        retriable=retriable,
        message=message,
        retry_after_ms=retry_after_ms,
        session_id=session_id,
    )


OK = verdict(ok=True)


@dataclass
class Script:
    """What one scripted session does: report ``session_id`` (``None``: it
    fails before its init), then end with ``exited``, or, when that is
    ``None``, run until it is stopped. ``ignore_stop``: SIGTERM is ignored and
    only a kill ends it."""

    session_id: str | None = None
    exited: SessionExited | None = OK
    ignore_stop: bool = False


class ScriptedSession:
    """An AgentSession that plays a :class:`Script`."""

    def __init__(self, script: Script, pid: int, harness: ScriptedHarness) -> None:
        self.script = script
        self.pid = pid
        self.harness = harness
        self.stops: list[StopReason] = []
        self.kills = 0
        self._end: asyncio.Future[SessionExited] = asyncio.get_running_loop().create_future()
        self.reaped = False

    async def events(self) -> AsyncIterator[AgentEvent]:
        if self.script.session_id is not None:
            yield SessionStarted(session_id=self.script.session_id)
        if self.script.exited is not None:
            await asyncio.sleep(0)
            self._finish(self.script.exited)
        exited = await self._end
        yield exited

    def _finish(self, exited: SessionExited) -> None:
        if not self._end.done():
            self._end.set_result(exited)

    def _signalled(self, signal: int) -> None:
        self._finish(
            SessionExited(
                ok=False,
                exit_code=None,
                signal=signal,
                error_class=ErrorClass.STOPPED,
                session_id=self.script.session_id,
            )
        )

    async def stop(self, reason: StopReason = StopReason.OPERATOR) -> None:
        self.stops.append(reason)
        if not self.script.ignore_stop:
            self._signalled(15)
        await asyncio.shield(self._end)

    async def kill(self) -> None:
        self.kills += 1
        self._signalled(9)
        await asyncio.shield(self._end)

    async def wait(self) -> SessionExited:
        exited = await asyncio.shield(self._end)
        self.reaped = True
        self.harness.live -= 1
        return exited


class ScriptedHarness:
    """A Harness double: one :class:`Script` per start, in order. It fails the
    test if a session starts while the previous one is not reaped."""

    name = "scripted"

    def __init__(self, scripts: list[Script]) -> None:
        self.scripts = list(scripts)
        self.specs: list[SessionSpec] = []
        self.sessions: list[ScriptedSession] = []
        self.live = 0

    def argv(self, spec: SessionSpec) -> list[str]:
        return ["scripted", spec.prompt]

    async def start(self, spec: SessionSpec) -> ScriptedSession:
        assert self.live == 0, "a session started while another was alive"
        if not self.scripts:
            raise AssertionError("the supervisor started more sessions than scripted")
        self.specs.append(spec)
        self.live += 1
        session = ScriptedSession(self.scripts.pop(0), 1000 + len(self.specs), self)
        self.sessions.append(session)
        return session


SPEC = SessionSpec(prompt="do the work", model="sonnet", cwd=Path("."))


@dataclass
class Run:
    """A supervisor under test and everything it reported."""

    supervisor: SessionSupervisor
    harness: ScriptedHarness
    clock: FakeClock
    events: list[AgentEvent | SupervisorEvent] = field(default_factory=list)
    requests: list[PromptRequest] = field(default_factory=list)

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [e for e in self.events if isinstance(e, kind)]


def make(
    scripts: list[Script],
    *,
    clock: FakeClock | None = None,
    spec: SessionSpec = SPEC,
    **kwargs: object,
) -> Run:
    harness = ScriptedHarness(scripts)
    run = Run(None, harness, clock or FakeClock())  # type: ignore[arg-type]

    def build(request: PromptRequest) -> str:
        run.requests.append(request)
        return " | ".join((f"prompt {request.session}", *request.urgent_messages))

    run.supervisor = SessionSupervisor(
        harness,
        spec,
        build,
        clock=run.clock,
        on_event=run.events.append,
        **kwargs,  # type: ignore[arg-type]
    )
    return run


async def bounded(run: Awaitable[SupervisorResult]) -> SupervisorResult:
    """A hung supervisor fails the test instead of blocking the suite."""
    return await asyncio.wait_for(run, 10)


async def until(predicate: Callable[[], bool], what: str, within: float = 20.0) -> None:
    """Wait until ``predicate()``: a few loop turns suffice for the doubles,
    a real process needs real time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    turns = 0
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {within} s: {what}")
        turns += 1
        await asyncio.sleep(0 if turns < 1000 else 0.005)


# -- backoff and thresholds ------------------------------------------------------------


async def test_failed_spawns_back_off_on_the_seed_schedule_until_five_in_a_row() -> None:
    run = make([Script(None, verdict()) for _ in range(5)])
    result = await bounded(run.supervisor.run())
    assert run.clock.sleeps == [seed_backoff_s(n) for n in (1, 2, 3, 4)]
    assert result.state == "Stopped"
    assert result.sessions == 5
    assert (result.errors, result.consecutive_errors) == (5, 5)
    assert result.fatal is not None
    assert "consecutive_errors 5/5" in result.fatal
    assert [f.message for f in run.of(SupervisorFatal)] == [result.fatal]
    started = run.of(CooldownStarted)
    assert [c.duration_ms for c in started] == [2000, 4000, 8000, 16000]
    assert [c.consecutive_errors for c in started] == [1, 2, 3, 4]
    assert [c.session for c in run.of(CooldownEnded)] == [1, 2, 3, 4]


async def test_raised_thresholds_let_the_backoff_reach_its_cap() -> None:
    run = make([Script(None, verdict()) for _ in range(9)], max_consecutive_errors=9)
    result = await bounded(run.supervisor.run())
    assert run.clock.sleeps == [seed_backoff_s(n) for n in range(1, 9)]
    assert run.clock.sleeps[-3:] == [60.0, 60.0, 60.0]
    assert result.sessions == 9
    assert result.fatal is not None
    assert "consecutive_errors 9/9" in result.fatal


async def test_sessions_that_start_then_fail_stop_at_the_total_threshold() -> None:
    # Each session reports its init, which resets the consecutive count, so
    # the cool-down never grows and only the total threshold (20) stops it.
    run = make([Script(f"s{i}", verdict()) for i in range(20)])
    result = await bounded(run.supervisor.run())
    assert run.clock.sleeps == [seed_backoff_s(1)] * 19
    assert result.sessions == 20
    assert (result.errors, result.consecutive_errors) == (20, 1)
    assert result.fatal is not None
    assert "total_errors 20/20" in result.fatal
    assert run.harness.scripts == []


async def test_a_success_after_errors_completes_the_run() -> None:
    run = make([Script(None, verdict()), Script(None, verdict()), Script("s3", OK)])
    result = await bounded(run.supervisor.run())
    assert result.ok
    assert result.state == "SessionComplete"
    assert run.clock.sleeps == [seed_backoff_s(1), seed_backoff_s(2)]
    assert (result.sessions, result.errors, result.consecutive_errors) == (3, 2, 0)
    assert result.fatal is None
    assert result.last_exit == OK
    assert [r.reason for r in run.requests] == [
        PromptReason.INITIAL,
        PromptReason.RETRY,
        PromptReason.RETRY,
    ]


async def test_a_timeout_is_counted_and_cooled_down_as_a_timeout() -> None:
    timed_out = verdict(error_class=ErrorClass.TIMEOUT, message="idle for 180 s")
    run = make([Script("s1", timed_out), Script("s1", OK)])
    result = await bounded(run.supervisor.run())
    assert result.ok
    (cooldown,) = run.of(CooldownStarted)
    assert (cooldown.outcome, cooldown.duration_ms) == ("Timeout", 2000)


@pytest.mark.parametrize(
    "error_class", [ErrorClass.AUTH, ErrorClass.BILLING, ErrorClass.MAX_TURNS, None]
)
async def test_a_non_retriable_verdict_is_fatal_at_once(error_class: ErrorClass | None) -> None:
    bad = verdict(retriable=False, error_class=error_class, message="Invalid API key")
    run = make([Script("s1", bad)])
    result = await bounded(run.supervisor.run())
    assert result.state == "Stopped"
    assert run.clock.sleeps == []
    assert result.errors == 0
    assert result.fatal is not None
    assert "not retriable" in result.fatal
    assert "Invalid API key" in result.fatal
    assert result.last_exit == bad


@pytest.mark.parametrize(
    ("hint_ms", "first_sleep_s"),
    [
        (7_000, 7.0),  # longer than the 2 s backoff: the hint wins
        (1_000, 2.0),  # shorter: the backoff wins
        (3_600_001, 2.0),  # over an hour: ignored as implausible
    ],
)
async def test_a_retry_after_hint_longer_than_the_backoff_wins(
    hint_ms: int, first_sleep_s: float
) -> None:
    run = make([Script("s1", verdict(retry_after_ms=hint_ms)), Script("s1", OK)])
    await bounded(run.supervisor.run())
    assert run.clock.sleeps == [first_sleep_s]
    (cooldown,) = run.of(CooldownStarted)
    assert cooldown.backoff_ms == 2000
    assert cooldown.duration_ms == first_sleep_s * 1000
    assert cooldown.retry_after_ms == (hint_ms if hint_ms <= 3_600_000 else None)


# -- usage windows -------------------------------------------------------------------


def refused(resets_at_ms: int) -> SessionExited:
    """A session a closed usage window refused, as the Claude parser reports it."""
    return SessionExited(
        ok=False,
        exit_code=1,
        error_class=ErrorClass.USAGE_LIMIT,
        message="You've hit your 5-hour limit",
        session_id="s1",
        window=UsageWindow(status="rejected", resets_at_ms=resets_at_ms, window="five_hour"),
    )


async def test_a_closed_usage_window_parks_without_counting_then_resumes() -> None:
    # Six refusals in a row would pass the consecutive threshold (5) were they errors.
    now = 1_800_000_000_000
    scripts = [Script("s1", refused(now + 3_600_000)) for _ in range(6)] + [Script("s1", OK)]
    run = make(scripts, wall_ms=lambda: now, window_margin_ms=10_000)
    result = await bounded(run.supervisor.run())
    assert result.state == "SessionComplete"
    assert (result.errors, result.sessions) == (0, 7)
    assert run.clock.sleeps == [3610.0] * 6
    parked = run.of(WindowParked)
    assert [(p.session, p.resume_at_ms, p.window) for p in parked] == [
        (n, now + 3_610_000, "five_hour") for n in range(1, 7)
    ]
    assert [o.session for o in run.of(WindowOpened)] == list(range(1, 7))
    assert run.of(CooldownStarted) == []
    assert all(r.resume_session_id == "s1" for r in run.requests[1:])


async def test_a_usage_window_further_off_than_allowed_is_fatal() -> None:
    now = 1_800_000_000_000
    run = make(
        [Script("s1", refused(now + 9 * 3_600_000))],
        wall_ms=lambda: now,
        max_window_wait_ms=3_600_000,
    )
    result = await bounded(run.supervisor.run())
    assert result.state == "Stopped"
    assert result.fatal is not None
    assert "max_window_wait_ms" in result.fatal
    assert run.clock.sleeps == []


# -- resume --------------------------------------------------------------------------


async def test_after_an_error_the_next_session_resumes_the_last_session_id() -> None:
    run = make(
        [
            Script("first", verdict()),
            Script(None, verdict()),  # fails before its init: no new id
            Script("first", verdict(session_id="canonical")),  # the verdict's id wins
            Script("canonical", OK),
        ]
    )
    result = await bounded(run.supervisor.run())
    assert result.ok
    assert [s.resume_session_id for s in run.harness.specs] == [
        None,
        "first",
        "first",
        "canonical",
    ]
    assert [r.resume_session_id for r in run.requests] == [None, "first", "first", "canonical"]
    assert result.session_ids == ("first", "canonical")
    assert [s.prompt for s in run.harness.specs] == [f"prompt {n}" for n in (1, 2, 3, 4)]


async def test_a_template_resume_id_is_used_until_the_agent_reports_one() -> None:
    spec = SessionSpec(prompt="p", model="sonnet", cwd=Path("."), resume_session_id="earlier")
    run = make([Script(None, verdict()), Script("earlier", OK)], spec=spec)
    await bounded(run.supervisor.run())
    assert [s.resume_session_id for s in run.harness.specs] == ["earlier", "earlier"]


# -- urgent messages ------------------------------------------------------------------


async def test_an_urgent_message_interrupts_and_a_stuck_session_is_force_stopped() -> None:
    run = make(
        [Script("s1", None, ignore_stop=True), Script("s1", OK)],
        interrupt_grace=3.0,
    )
    task = asyncio.create_task(run.supervisor.run())
    await until(lambda: run.supervisor.state == "Running", "session 1 running")
    assert await run.supervisor.urgent("stop editing main.py")
    result = await bounded(task)

    first, second = run.harness.sessions
    assert first.stops == [StopReason.INTERRUPT]
    assert first.kills == 1
    assert 3.0 in run.clock.sleeps  # the grace period, on the injected clock
    (requested,) = run.of(InterruptRequested)
    assert (requested.session, requested.messages) == (1, ("stop editing main.py",))
    (forced,) = run.of(InterruptForced)
    assert forced.session == 1
    # Rebuilt with the message, resuming the interrupted session.
    assert run.requests[1].reason is PromptReason.INTERRUPT
    assert run.requests[1].urgent_messages == ("stop editing main.py",)
    assert run.harness.specs[1].prompt == "prompt 2 | stop editing main.py"
    assert run.harness.specs[1].resume_session_id == "s1"
    assert result.ok
    assert (result.interrupts, result.errors) == (1, 0)
    assert first.reaped
    assert second.reaped


async def test_an_interrupted_session_that_exits_within_its_grace_is_not_killed() -> None:
    clock = FakeClock(auto=False)  # the grace period never runs out
    run = make([Script("s1", None), Script("s1", OK)], clock=clock)
    task = asyncio.create_task(run.supervisor.run())
    await until(lambda: run.supervisor.state == "Running", "session 1 running")
    await run.supervisor.urgent("look at the failing test")
    result = await bounded(task)
    first = run.harness.sessions[0]
    assert (first.stops, first.kills) == ([StopReason.INTERRUPT], 0)
    assert run.of(InterruptForced) == []
    assert result.ok
    assert result.errors == 0  # an exit the supervisor asked for is no error
    assert run.harness.specs[1].prompt == "prompt 2 | look at the failing test"


async def test_an_urgent_message_during_a_cooldown_waits_for_the_backoff() -> None:
    clock = FakeClock(auto=False)
    run = make([Script("s1", verdict()), Script("s1", OK)], clock=clock)
    task = asyncio.create_task(run.supervisor.run())
    await until(lambda: run.supervisor.state == "CoolingDown", "cooling down")
    await run.supervisor.urgent("use the staging database")
    await until(lambda: clock.sleeps == [2.0], "backoff sleep")
    assert run.of(InterruptRequested) == []
    assert len(run.harness.specs) == 1
    clock.advance(2.0)
    result = await bounded(task)
    assert result.ok
    assert run.requests[1].reason is PromptReason.RETRY
    assert run.requests[1].urgent_messages == ("use the staging database",)


async def test_an_urgent_message_after_success_starts_a_follow_up_session() -> None:
    run = make([Script("s1", OK), Script("s1", OK)])
    # The message arrives with session 1's verdict, too late to interrupt it.
    late: list[asyncio.Task[bool]] = []

    def on_event(event: AgentEvent | SupervisorEvent) -> None:
        run.events.append(event)
        if isinstance(event, SessionExited) and not late:
            late.append(asyncio.get_running_loop().create_task(run.supervisor.urgent("also")))

    run.supervisor._on_event = on_event
    result = await bounded(run.supervisor.run())
    assert await late[0]
    assert result.ok
    assert result.sessions == 2
    assert run.requests[1].reason is PromptReason.FOLLOW_UP
    assert run.of(InterruptRequested) == []
    assert run.requests[1].urgent_messages == ("also",)
    assert run.harness.specs[1].resume_session_id == "s1"


async def test_urgent_messages_before_the_run_go_into_the_first_prompt() -> None:
    run = make([Script("s1", OK)])
    assert await run.supervisor.urgent("hello first")
    result = await bounded(run.supervisor.run())
    assert result.ok
    assert run.harness.specs[0].prompt == "prompt 1 | hello first"
    assert run.of(InterruptRequested) == []
    assert not await run.supervisor.urgent("too late")


# -- stops and failures ----------------------------------------------------------------


async def test_operator_stop_ends_a_running_session_and_the_run() -> None:
    run = make([Script("s1", None)])
    task = asyncio.create_task(run.supervisor.run())
    await until(lambda: run.supervisor.state == "Running", "session 1 running")
    await run.supervisor.stop()
    assert task.done()
    result = task.result()
    assert result.state == "Stopped"
    assert result.stopped_by_operator
    assert result.fatal is None
    (session,) = run.harness.sessions
    assert session.stops == [StopReason.OPERATOR]
    assert session.reaped
    assert [e.state for e in run.of(SupervisorStopped)] == ["Running"]
    assert result.last_exit is not None
    assert result.last_exit.error_class is ErrorClass.STOPPED


async def test_operator_stop_during_a_cooldown_spawns_nothing_more() -> None:
    clock = FakeClock(auto=False)
    run = make([Script("s1", verdict()), Script("s1", OK)], clock=clock)
    task = asyncio.create_task(run.supervisor.run())
    await until(lambda: run.supervisor.state == "CoolingDown", "cooling down")
    await run.supervisor.stop()
    result = await bounded(task)
    assert result.state == "Stopped"
    assert len(run.harness.specs) == 1
    assert result.errors == 1


async def test_stop_before_run_returns_without_spawning() -> None:
    run = make([Script("s1", OK)])
    await run.supervisor.stop()
    result = await bounded(run.supervisor.run())
    assert result.state == "Stopped"
    assert result.sessions == 0
    assert run.harness.specs == []
    with pytest.raises(RuntimeError, match="only once"):
        await bounded(run.supervisor.run())


async def test_a_harness_that_cannot_start_is_fatal() -> None:
    class Broken(ScriptedHarness):
        async def start(self, spec: SessionSpec) -> ScriptedSession:
            raise AgentStartError("cannot start claude: not on PATH")

    harness = Broken([])
    supervisor = SessionSupervisor(harness, SPEC, clock=FakeClock())
    result = await bounded(supervisor.run())
    assert result.state == "Stopped"
    assert result.fatal is not None
    assert "not on PATH" in result.fatal
    assert result.sessions == 1


async def test_a_prompt_builder_that_raises_is_fatal() -> None:
    def build(request: PromptRequest) -> str:
        raise FileNotFoundError("prompts/missing.md")

    harness = ScriptedHarness([Script("s1", OK)])
    supervisor = SessionSupervisor(harness, SPEC, build, clock=FakeClock())
    result = await bounded(supervisor.run())
    assert result.state == "Stopped"
    assert result.fatal is not None
    assert "prompts/missing.md" in result.fatal
    assert harness.specs == []


async def test_an_async_prompt_builder_and_the_default_builder() -> None:
    async def build(request: PromptRequest) -> str:
        await asyncio.sleep(0)
        return f"async {request.session}"

    harness = ScriptedHarness([Script("s1", OK)])
    await SessionSupervisor(harness, SPEC, build, clock=FakeClock()).run()
    assert harness.specs[0].prompt == "async 1"

    harness = ScriptedHarness([Script("s1", OK)])
    supervisor = SessionSupervisor(harness, SPEC, clock=FakeClock())
    await supervisor.urgent("note")
    await supervisor.run()
    assert harness.specs[0].prompt == "do the work\n\nnote"


async def test_a_failing_event_sink_ends_the_run_and_still_reaps() -> None:
    def sink(event: AgentEvent | SupervisorEvent) -> None:
        if isinstance(event, SessionStarted):
            raise KeyError("sink broke")

    harness = ScriptedHarness([Script("s1", None)])
    supervisor = SessionSupervisor(harness, SPEC, clock=FakeClock(), on_event=sink)
    with pytest.raises(KeyError, match="sink broke"):
        await supervisor.run()
    (session,) = harness.sessions
    assert session.stops == [StopReason.SHUTDOWN]
    assert session.reaped


async def test_cancelling_run_stops_the_live_session() -> None:
    run = make([Script("s1", None)])
    task = asyncio.create_task(run.supervisor.run())
    await until(lambda: run.supervisor.state == "Running", "session 1 running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (session,) = run.harness.sessions
    assert session.stops == [StopReason.SHUTDOWN]
    assert session.reaped


async def test_one_session_at_a_time_through_errors_and_interrupts() -> None:
    scripts = [
        Script("a", verdict()),
        Script("a", None, ignore_stop=True),
        Script(None, verdict()),
        Script("a", None),
        Script("a", OK),
    ]
    run = make(scripts, interrupt_grace=1.0)
    task = asyncio.create_task(run.supervisor.run())
    for n in (2, 4):
        await until(
            lambda n=n: run.supervisor.state == "Running" and len(run.harness.specs) == n,  # type: ignore[misc]
            f"session {n} running",
        )
        await run.supervisor.urgent(f"message {n}")
    result = await bounded(task)
    # ScriptedHarness.start asserts that no session started while one lived.
    assert result.ok
    assert result.sessions == 5
    assert result.interrupts == 2
    assert result.errors == 2
    assert all(s.reaped for s in run.harness.sessions)
    spawned = [e.session for e in run.of(SessionSpawned)]
    assert spawned == [1, 2, 3, 4, 5]
    assert [p.session for p in run.of(PromptStored)] == spawned


# -- end to end: the real Claude harness and the real fake agent ------------------------


def gone(pid: int) -> bool:
    """Whether ``pid`` is neither running nor a zombie, and its group is empty."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        pass
    else:
        return False
    return not Path(f"/proc/{pid}").exists()


def open_pipes() -> int:
    """Pipes and sockets this process holds (the event loop opens other
    descriptors lazily on its first subprocess, such as /dev/null)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used
        count += target.startswith(("pipe:", "socket:"))
    return count


@dataclass
class RealRun:
    result: SupervisorResult
    events: list[AgentEvent | SupervisorEvent]
    record: dict[str, object]

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [e for e in self.events if isinstance(e, kind)]


async def run_fake(
    tmp_path: Path,
    scenarios: list[str],
    *,
    env: dict[str, str] | None = None,
    timeouts: Timeouts | None = None,
    during: Callable[[SessionSupervisor], object] | None = None,
    **kwargs: object,
) -> RealRun:
    """Supervise ``fake/sonnet``; session n plays ``scenarios[n-1]``."""
    record = tmp_path / "record.json"
    spec = SessionSpec(
        prompt="unused",
        model="sonnet",
        cwd=tmp_path,
        env={
            "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
            "FAKE_AGENT_LINE_DELAY_MS": "0",
            "FAKE_AGENT_RECORD": str(record),
            **(env or {}),
        },
        timeouts=timeouts or Timeouts(first_output=10, idle=10, flush_grace=0.1, stop_grace=10),
    )
    events: list[AgentEvent | SupervisorEvent] = []
    pids: list[int] = []

    def sink(event: AgentEvent | SupervisorEvent) -> None:
        events.append(event)
        if isinstance(event, SessionSpawned):
            # One session at a time, and the previous one fully reaped.
            assert all(gone(pid) for pid in pids), "a session started beside a live one"
            pids.append(event.pid)

    def build(request: PromptRequest) -> str:
        scenario = scenarios[min(request.session, len(scenarios)) - 1]
        lines = [f"session {request.session}", *request.urgent_messages]
        return "\n".join([*lines, f"@@fake:scenario={scenario}@@"])

    supervisor = SessionSupervisor(
        harness_for(route("fake/sonnet")),
        spec,
        build,
        on_event=sink,
        **kwargs,  # type: ignore[arg-type]
    )
    pipes = open_pipes()
    task = asyncio.create_task(supervisor.run())
    if during is not None:
        await during(supervisor)  # type: ignore[misc]
    result = await asyncio.wait_for(task, 60)
    assert pids
    assert all(gone(pid) for pid in pids), "a process or zombie outlived run()"
    assert open_pipes() <= pipes, "run() leaked pipes"
    return RealRun(result, events, json.loads(record.read_text()))


async def wait_for_output(supervisor: SessionSupervisor, events: int = 1) -> None:
    await until(lambda: supervisor.state == "Running", "the agent reported its session")


async def test_real_agent_error_cools_down_then_resumes_the_same_session(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    real = await run_fake(tmp_path, ["api_error,delay_ms=0", "success"], clock=clock)
    assert real.result.ok
    assert clock.sleeps == [seed_backoff_s(1)]
    (first_id,) = real.result.session_ids
    (cooldown,) = real.of(CooldownStarted)
    assert cooldown.message is not None
    assert "429" in cooldown.message
    # The second process was started with --resume of the first session.
    argv = real.record["argv"]
    assert isinstance(argv, list)
    assert f"--resume={first_id}" in argv
    assert real.result.sessions == 2


async def test_real_agent_non_retriable_error_is_fatal(tmp_path: Path) -> None:
    clock = FakeClock()
    real = await run_fake(tmp_path, ["auth_error"], clock=clock)
    assert real.result.state == "Stopped"
    assert real.result.sessions == 1
    assert clock.sleeps == []
    assert real.result.last_exit is not None
    assert real.result.last_exit.error_class is ErrorClass.AUTH


async def test_real_agent_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    async def interrupt(supervisor: SessionSupervisor) -> None:
        await wait_for_output(supervisor)
        await supervisor.urgent("URGENT: the spec changed")

    real = await run_fake(
        tmp_path,
        ["sigterm,interval_ms=20", "success"],
        env={"FAKE_AGENT_SIGTERM": "ignore"},
        during=interrupt,
        interrupt_grace=0.3,
    )
    assert real.result.ok
    (forced,) = real.of(InterruptForced)
    assert forced.session == 1
    exits = real.of(SessionExited)
    assert exits[0].signal == 9  # killed, since it ignored SIGTERM
    assert real.result.interrupts == 1
    assert real.result.errors == 0
    stdin = real.record["stdin"]
    assert isinstance(stdin, str)
    assert "URGENT: the spec changed" in stdin
    assert f"--resume={real.result.session_ids[0]}" in real.record["argv"]  # type: ignore[operator]


async def test_real_agent_that_obeys_sigterm_is_not_killed(tmp_path: Path) -> None:
    async def interrupt(supervisor: SessionSupervisor) -> None:
        await wait_for_output(supervisor)
        await supervisor.urgent("please also update the docs")

    real = await run_fake(
        tmp_path,
        ["sigterm,interval_ms=20", "success"],
        env={"FAKE_AGENT_SIGTERM": "graceful"},
        during=interrupt,
        interrupt_grace=10.0,
    )
    assert real.result.ok
    assert real.of(InterruptForced) == []
    assert real.of(SessionExited)[0].signal != 9
    assert real.result.sessions == 2


async def test_real_agent_operator_stop_leaves_no_process(tmp_path: Path) -> None:
    async def stop(supervisor: SessionSupervisor) -> None:
        await wait_for_output(supervisor)
        await supervisor.stop()

    real = await run_fake(tmp_path, ["hang_after_init"], during=stop)
    assert real.result.state == "Stopped"
    assert real.result.stopped_by_operator
    assert real.result.last_exit is not None
    assert real.result.last_exit.error_class is ErrorClass.STOPPED
    # The stop is a SIGINT: the only result is the CLI's aborted one.
    assert [r.subtype for r in real.of(SessionResult)] == ["error_during_execution"]


@pytest.mark.parametrize(
    ("scenario", "timeouts", "resumes"),
    [
        ("hang_after_init", Timeouts(first_output=10, idle=0.3, stop_grace=2), True),
        ("hang_before_init", Timeouts(first_output=0.3, idle=10, stop_grace=2), False),
    ],
    ids=["idle", "first_output"],
)
async def test_real_agent_timeouts_are_retried_as_timeouts(
    tmp_path: Path, scenario: str, timeouts: Timeouts, resumes: bool
) -> None:
    clock = FakeClock()
    real = await run_fake(tmp_path, [scenario, "success"], timeouts=timeouts, clock=clock)
    assert real.result.ok
    (cooldown,) = real.of(CooldownStarted)
    assert cooldown.outcome == "Timeout"
    assert clock.sleeps == [seed_backoff_s(1)]
    assert real.result.errors == 1
    # Resumed only when the timed-out session had reported its id.
    argv = real.record["argv"]
    assert isinstance(argv, list)
    assert any(a.startswith("--resume=") for a in argv) == resumes
