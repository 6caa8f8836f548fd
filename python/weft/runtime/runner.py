"""The codon runner: one attempt of one codon, through the eight states.

``preparing`` (rig setup, rig-setup checkpoint) -> ``starting`` (sentinels,
prompt, spawn) -> ``initializing`` (the agent process runs, no session yet)
-> ``running`` (the agent reported its session; its events stream) ->
``completing-sentinels`` -> ``completed``; or ``failed`` / ``skipped`` from
any of them. Every move is a transition with the metadata its target
requires (seed 000), and the checkpoint is taken *before* the terminal
transition, because ``completed`` carries its SHA.

The runner submits transitions fire-and-forget: the StateManager keeps them
in order and the supervisor watches for rejections (a rejection here is a
bug, and stops the run). It only waits where a decision depends on the
state: never on the hot path of agent events.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from weft.agents.events import (
    AgentEvent,
    AssistantText,
    ErrorClass,
    RetryNotice,
    SessionExited,
    SessionResult,
    SessionStarted,
    Thinking,
    Tokens,
    ToolResult,
    ToolUse,
    UsageDelta,
)
from weft.agents.harness import (
    AgentSession,
    AgentStartError,
    Harness,
    SessionSpec,
    StopReason,
    Timeouts,
    session_log_path,
)
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.errors import CheckpointError
from weft.clock import utc_now_iso
from weft.config.loader import LoadedHank
from weft.config.prompt import AssembledPrompt, assemble_prompt, template_variables
from weft.errors import (
    ConfigError,
    PersistenceError,
    StorageFullError,
    UnsafePathError,
)
from weft.events.stream import (
    TOOL_RESULT_LIMIT,
    AssistantActionEvent,
    CodonCompletedEvent,
    CodonStartedEvent,
    ErrorEvent,
    InfoEvent,
    ProcessEndedEvent,
    ProcessExit,
    RigSetupCompletedEvent,
    StreamData,
    TokenUsageEvent,
    ToolResultEvent,
)
from weft.events.transitions import (
    AssistantMessageCountUpdated,
    CodonFinalCostSet,
    CodonStarted,
    CodonStatus,
    CodonTransitioned,
    CostsIncremented,
    FailureReason,
    TokenUsage,
    TransitionMetadata,
)
from weft.plan import PlannedCodon
from weft.progress import NANO, nanos
from weft.runtime.execution import ExecutionLayout
from weft.runtime.rig import RigResult, run_rig
from weft.runtime.survivors import MARK_VAR, new_mark, started_event
from weft.state import StateManager
from weft.store.diskspace import RESUME_HINT, is_storage_failure, storage_error

_FAKE_HOMES = {"CLAUDE_CONFIG_DIR": "claude", "CODEX_HOME": "codex", "GEMINI_CLI_HOME": "gemini"}

DEFAULT_IDLE_TIMEOUT = 180.0
"""Seconds without agent output before the session is ended (reference default)."""


class Interrupt(enum.StrEnum):
    """Why the supervisor cuts a codon short."""

    SKIP = "skip"
    """The user skipped it: ``skipped``, at no cost."""
    FORCE_STOP = "force_stop"
    """The user stopped it: ``failed``, not retriable."""
    SHUTDOWN = "shutdown"
    """Weft is shutting down: ``failed``, retriable, so a later run redoes it."""


class SentinelHost(Protocol):
    """The seam for sentinels (LLM observers of a codon's events).

    Sentinel support is not built yet; :class:`NoSentinels` is what runs
    until it is. The runner calls ``load`` while ``starting`` and ``drain``
    while ``completing-sentinels``, exactly where sentinels belong.
    """

    async def load(self, planned: PlannedCodon, run_id: str) -> None:
        """Loads the codon's sentinels."""
        ...

    async def drain(self, planned: PlannedCodon, run_id: str) -> None:
        """Lets the codon's sentinels finish their work."""
        ...


class NoSentinels:
    """No sentinel runs; a codon that declares some is told so once."""

    def __init__(self, emit: Callable[[StreamData, str, str], None]) -> None:
        self._emit = emit

    async def load(self, planned: PlannedCodon, run_id: str) -> None:
        """Says that the codon's sentinels are not run."""
        if planned.codon.sentinels:
            count = len(planned.codon.sentinels)
            self._emit(
                InfoEvent(
                    message=(
                        f"Codon {planned.codon_id} declares {count} sentinel(s); this version "
                        "of Weft does not run sentinels yet, so they are skipped."
                    )
                ),
                run_id,
                planned.codon_id,
            )

    async def drain(self, planned: PlannedCodon, run_id: str) -> None:
        """Nothing to wait for."""


@dataclass(frozen=True, slots=True)
class CodonRequest:
    """One attempt of one codon, as the supervisor asks for it."""

    run_id: str
    branch: str
    planned: PlannedCodon
    patterns: list[str]
    """The checkpointed-file patterns in force (union up to this codon)."""
    parent_sha: str
    """The tip of the run's checkpoint branch (or the run's starting checkpoint)."""
    previous_session_id: str | None = None
    """For ``continue-previous``: the session to resume."""
    accepts_context_exceeded: bool = False
    """Running out of context completes the codon (an ``exhaustWithPrompt``
    codon, or one inside a ``contextExceeded`` loop)."""
    attempt: int = 1
    skip_rig: bool = False
    """``codon.start`` with ``skipPreCommands``: no rig setup this time."""


@dataclass(slots=True)
class CodonResult:
    """How an attempt ended."""

    codon_id: str
    status: Literal["completed", "failed", "skipped"]
    failure: FailureReason | None = None
    session_id: str | None = None
    cost: float = 0.0
    tokens: Tokens = field(default_factory=Tokens)
    checkpoint_sha: str | None = None
    context_exceeded: bool = False
    duration_ms: int = 0
    exit: SessionExited | None = None
    assistant_messages: int = 0
    start_time: str | None = None

    @property
    def continuable(self) -> bool:
        """Whether a ``continue-previous`` successor may resume this session
        (seed 003: completed, or skipped after at least one assistant message)."""
        if self.session_id is None:
            return False
        return self.status == "completed" or (
            self.status == "skipped" and self.assistant_messages > 0
        )

    @property
    def retriable(self) -> bool:
        """Whether running the codon again may help."""
        return self.failure is not None and self.failure.retriable


def _usage(tokens: Tokens) -> TokenUsage:
    return TokenUsage(
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cache_creation_tokens=tokens.cache_creation,
        cache_read_tokens=tokens.cache_read,
    )


def _token_usage(
    codon_id: str,
    tokens: Tokens,
    cost: float | None,
    *,
    model: str | None = None,
    final: bool = False,
) -> TokenUsageEvent:
    return TokenUsageEvent(
        codon_id=codon_id,
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cache_creation_tokens=tokens.cache_creation,
        cache_read_tokens=tokens.cache_read,
        total_cost=cost,
        final=final,
        model_id=model,
    )


def _exit_code(exit: SessionExited | None) -> int:
    if exit is None:
        return -1
    if exit.exit_code is not None:
        return exit.exit_code
    return 128 + exit.signal if exit.signal is not None else -1


def _process_exit(exit: SessionExited | None) -> ProcessExit | None:
    if exit is None:
        return None
    if exit.signal is not None:
        return ProcessExit(type="killed", signal=exit.signal)
    if exit.exit_code == 0:
        return ProcessExit(type="success")
    return ProcessExit(type="error", code=exit.exit_code)


def _short(text: str, limit: int = TOOL_RESULT_LIMIT) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + "...", True


class _Attempt:
    """The mutable facts of one attempt, kept together so the terminal move
    can be computed from them in one place."""

    def __init__(self, request: CodonRequest) -> None:
        self.request = request
        self.status: CodonStatus = "preparing"
        self.started = time.monotonic()
        self.start_time = utc_now_iso()
        self.session: AgentSession | None = None
        self.session_id: str | None = None
        self.result: SessionResult | None = None
        self.exit: SessionExited | None = None
        self.tokens = Tokens()
        self.prompt: AssembledPrompt | None = None
        self.model = ""
        self.harness = ""
        """The prompt, model and harness of the agent session (once it starts)."""
        self.messages: set[str] = set()
        self.tools: dict[str, tuple[str, float]] = {}
        self.interrupt: Interrupt | None = None
        self.rig: asyncio.Task[RigResult] | None = None
        self.storage: str | None = None
        """Why a write of this attempt found the disk full: the attempt fails
        with kind ``storage`` and the run ends (retrying cannot help)."""
        self.reported_cost: float | None = None
        """The total the agent reported, as submitted in ``CodonFinalCostSet``,
        while no increment followed it: the core's codon cost is then exactly
        this (rounded as the core rounds), so the terminal move can name it
        without waiting for the core to apply the queue. Not a tally: the
        value is the agent's, passed through."""

    @property
    def duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    @property
    def live(self) -> bool:
        """Whether the core takes cost and message updates now (the agent runs)."""
        return self.status in ("running", "completing-sentinels")


class CodonRunner:
    """Runs codon attempts for one execution. One attempt at a time."""

    def __init__(
        self,
        manager: StateManager,
        checkpoints: AsyncCheckpointRepo,
        hank: LoadedHank,
        layout: ExecutionLayout,
        *,
        harness_for: Callable[[str], tuple[Harness, str]],
        sentinels: SentinelHost | None = None,
        ignore_rig_failures: bool = False,
        idle_timeout: float | None = None,
        first_output_timeout: float | None = 60.0,
        stop_grace: float = 5.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.manager = manager
        self.checkpoints = checkpoints
        self.hank = hank
        self.layout = layout
        self._harness_for = harness_for
        self.sentinels = sentinels or NoSentinels(self.emit)
        self.ignore_rig_failures = ignore_rig_failures
        self.idle_timeout = idle_timeout
        self.first_output_timeout = first_output_timeout
        self.stop_grace = stop_grace
        self.env = env
        self._current: _Attempt | None = None
        self._variables = template_variables(layout.workspace)
        self.tips: dict[str, str] = {}
        """The newest checkpoint of each branch this runner committed to."""

    # ------------------------------------------------------------------ plumbing

    def emit(self, event: StreamData, run_id: str | None, codon_id: str | None) -> None:
        """Queues a stream event in the one order of the execution."""
        self.manager.emit(event, run_id=run_id, codon_id=codon_id)

    def _move(self, a: _Attempt, to: CodonStatus, meta: TransitionMetadata | None = None) -> None:
        self.manager.transition(
            CodonTransitioned(
                run_id=a.request.run_id,
                codon_id=a.request.planned.codon_id,
                from_status=a.status,
                to_status=to,
                timestamp=utc_now_iso(),
                metadata=meta,
            )
        )
        a.status = to

    @property
    def current_codon(self) -> str | None:
        """The codon being run, if any."""
        return None if self._current is None else self._current.request.planned.codon_id

    async def interrupt(self, why: Interrupt) -> bool:
        """Cuts the current attempt short (skip, force stop, shutdown).

        Returns False when no codon is running. The agent gets the graceful
        stop sequence; the attempt then ends as ``why`` says.
        """
        a = self._current
        if a is None:
            return False
        if a.interrupt is None:
            a.interrupt = why
        if a.rig is not None:
            a.rig.cancel()  # run_rig kills a running command's process group
        if a.session is not None:
            await a.session.stop(
                StopReason.SHUTDOWN if why is Interrupt.SHUTDOWN else StopReason.OPERATOR
            )
        return True

    async def kill(self) -> None:
        """Kills the current agent at once (a second Ctrl-C)."""
        a = self._current
        if a is not None and a.session is not None:
            await a.session.kill()

    # ------------------------------------------------------------------ the attempt

    async def run(self, request: CodonRequest) -> CodonResult:
        """Runs one attempt of ``request`` to a terminal state."""
        a = _Attempt(request)
        self._current = a
        try:
            return await self._run(a)
        except BaseException:
            # Left by an exception (the journal failed, a full disk): the
            # agent must not outlive the attempt that was recording it.
            if a.session is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(a.session.kill(), self.stop_grace)
            raise
        finally:
            self._current = None

    async def _run(self, a: _Attempt) -> CodonResult:
        req = a.request
        planned = req.planned
        codon = planned.codon
        # Not awaited: recovery never relies on this record being durable
        # before the rig or the agent acts (a restart treats the codon after
        # each run's last recorded codon as possibly started, see
        # rollback.possibly_started), so no codon pays a commit round trip here.
        self.manager.transition(
            CodonStarted(
                run_id=req.run_id,
                codon_id=planned.codon_id,
                start_time=a.start_time,
                loop_context=planned.loop_context,
            )
        )

        rig_sha: str | None = None
        if codon.rig_setup and req.skip_rig:
            self.emit(
                InfoEvent(message=f"Rig setup of {planned.codon_id} skipped (skipPreCommands)"),
                req.run_id,
                planned.codon_id,
            )
        elif codon.rig_setup:
            failed = await self._rig(a)
            if failed is not None:
                return failed
            rig_sha = await self._checkpoint(a, "rig-setup")
            if rig_sha is None:
                return await self._fail(
                    a,
                    "checkpoint",
                    False,
                    f"Rig-setup checkpoint failed for codon {planned.codon_id}",
                )
        if a.interrupt is not None:
            return await self._interrupted(a)
        self._move(a, "starting", TransitionMetadata(checkpoint_sha=rig_sha) if rig_sha else None)

        await self.sentinels.load(planned, req.run_id)
        try:
            prompt = await asyncio.to_thread(
                assemble_prompt, codon, self.hank.directory, self._variables, hank=self.hank.hank
            )
        except ConfigError as exc:
            return await self._fail(a, "config", False, str(exc))
        if codon.continuation_mode == "continue-previous" and req.previous_session_id is None:
            return await self._fail(
                a,
                "no_session",
                False,
                f"Codon {planned.codon_id} continues the previous codon's session, but no "
                "completed previous codon with a session was found.",
            )
        if a.interrupt is not None:
            return await self._interrupted(a)

        try:
            harness, model = self._harness_for(codon.model)
            spec = self._spec(a, prompt, model, harness)
            a.session = await harness.start(spec)
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            return await self._fail(a, "agent_start", False, str(exc))
        self.emit(
            started_event(
                a.session.pid,
                role="agent",
                argv=[harness.name, model],
                mark=spec.env[MARK_VAR],
                codon_id=planned.codon_id,
            ),
            req.run_id,
            planned.codon_id,
        )
        log_path = spec.log_path
        assert log_path is not None
        self._move(
            a,
            "initializing",
            TransitionMetadata(
                claude_pid=a.session.pid,
                claude_log_path=str(log_path.relative_to(self.layout.weft_dir)),
                previous_session_id=req.previous_session_id,
            ),
        )
        if a.interrupt is not None:
            # Asked to stop while spawning: the stop above found no session yet.
            await a.session.stop(StopReason.OPERATOR)
        await self._stream(a, prompt, model, harness.name)
        # The session has exited and its group was SIGKILLed with it.
        self.emit(ProcessEndedEvent(pid=a.session.pid), req.run_id, planned.codon_id)
        return await self._finish(a)

    def _spec(
        self, a: _Attempt, prompt: AssembledPrompt, model: str, harness: Harness
    ) -> SessionSpec:
        req = a.request
        codon = req.planned.codon
        idle = codon.shim_idle_timeout or self.idle_timeout or DEFAULT_IDLE_TIMEOUT
        env = dict(codon.env)
        # Marks every process of the agent's group, so that a later run can
        # tell them from anyone else's if this one dies (weft.runtime.survivors).
        env[MARK_VAR] = new_mark()
        if getattr(harness, "fake", False):
            # The fake agents keep transcripts where the real CLIs do (~/.claude...):
            # give them the execution's own folder unless the user chose one.
            home = self.layout.weft_dir / "fake-agents"
            for name, folder in _FAKE_HOMES.items():
                if name not in env and name not in (self.env or os.environ):
                    env[name] = str(home / folder)
        return SessionSpec(
            prompt=prompt.text,
            model=model,
            cwd=self.layout.workspace,
            resume_session_id=(
                req.previous_session_id if codon.continuation_mode == "continue-previous" else None
            ),
            append_system_prompt=prompt.system_prompt_append,
            env=env,
            log_path=session_log_path(
                self.layout.weft_dir, req.run_id, req.planned.codon_id, harness.name
            ),
            timeouts=Timeouts(
                first_output=self.first_output_timeout,
                idle=float(idle),
                stop_grace=self.stop_grace,
                flush_grace=self.stop_grace,
            ),
        )

    # ------------------------------------------------------------------ rig

    async def _rig(self, a: _Attempt) -> CodonResult | None:
        req = a.request
        codon_id = req.planned.codon_id
        emit = functools.partial(self.manager.emit, run_id=req.run_id, codon_id=codon_id)
        self.emit(
            InfoEvent(
                message=f"Rig setup of {codon_id}: {len(req.planned.codon.rig_setup)} operation(s)"
            ),
            req.run_id,
            codon_id,
        )
        a.rig = asyncio.ensure_future(
            run_rig(
                req.planned.codon.rig_setup,
                hank_dir=self.hank.directory,
                workspace=self.layout.workspace,
                emit=emit,
                ignore_failures=self.ignore_rig_failures,
                codon_id=codon_id,
            )
        )
        try:
            result = await a.rig
        except StorageFullError as exc:
            a.storage = str(exc)
            return await self._fail(a, "storage", False, a.storage)
        except asyncio.CancelledError:
            if a.interrupt is None:
                raise  # cancelled from outside, not by interrupt()
            return await self._interrupted(a)
        finally:
            a.rig = None
        if not result.ok:
            reason = result.reason or "Rig setup failed"
            return await self._fail(a, "rig_setup", True, reason)
        self.emit(
            RigSetupCompletedEvent(
                codon_id=codon_id,
                operation_count=len(result.operations),
                duration_ms=int(result.duration * 1000),
            ),
            req.run_id,
            codon_id,
        )
        return None

    # ------------------------------------------------------------------ agent events

    async def _stream(self, a: _Attempt, prompt: AssembledPrompt, model: str, harness: str) -> None:
        session = a.session
        assert session is not None
        a.prompt, a.model, a.harness = prompt, model, harness
        async for event in session.events():
            if isinstance(event, SessionExited):
                a.exit = event
                break
            self._on_event(a, event)
        if a.exit is None:
            a.exit = await session.wait()

    def _on_event(self, a: _Attempt, event: AgentEvent) -> None:
        """Turns one agent event into transitions and stream events: one method
        per event class (StderrLine has none: it is kept in the session's
        stderr tail and verdict, not journaled line by line)."""
        handler = _AGENT_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, a, event)

    def _session_started(self, a: _Attempt, event: SessionStarted) -> None:
        req = a.request
        a.session_id = event.session_id
        if a.status != "initializing":
            return
        self._move(a, "running", TransitionMetadata(claude_session_id=event.session_id))
        prompt = a.prompt
        self.emit(
            CodonStartedEvent(
                codon_id=req.planned.codon_id,
                codon_name=req.planned.codon.name,
                codon_description=req.planned.codon.description,
                session_id=event.session_id,
                previous_session_id=req.previous_session_id,
                start_time=utc_now_iso(),
                model=event.model or a.model,
                harness=a.harness,
                prompt_metadata=(
                    None
                    if prompt is None or prompt.prompt_metadata is None
                    else _builtins(prompt.prompt_metadata)
                ),
            ),
            req.run_id,
            req.planned.codon_id,
        )

    def _text(self, a: _Attempt, event: AssistantText) -> None:
        if not event.partial:
            codon_id = a.request.planned.codon_id
            action = AssistantActionEvent(codon_id=codon_id, action="message", content=event.text)
            self._action(a, event, action)

    def _thinking(self, a: _Attempt, event: Thinking) -> None:
        codon_id = a.request.planned.codon_id
        action = AssistantActionEvent(codon_id=codon_id, action="thinking", content=event.text)
        self._action(a, event, action)

    def _tool_use(self, a: _Attempt, event: ToolUse) -> None:
        if event.subagent:
            return
        a.tools[event.tool_use_id] = (event.name, time.monotonic())
        action = AssistantActionEvent(
            codon_id=a.request.planned.codon_id,
            action="tool_use",
            content=f"{event.name}",
            tool_name=event.name,
            tool_input=event.input,
            tool_use_id=event.tool_use_id,
        )
        self._action(a, event, action)

    def _action(
        self, a: _Attempt, event: AssistantText | Thinking | ToolUse, action: AssistantActionEvent
    ) -> None:
        """Emits an assistant action; a new message id counts a message."""
        if event.subagent:
            return
        run_id, codon_id = a.request.run_id, a.request.planned.codon_id
        self.emit(action, run_id, codon_id)
        if event.message_id is not None and event.message_id not in a.messages:
            a.messages.add(event.message_id)
            if a.live:
                self.manager.transition(
                    AssistantMessageCountUpdated(
                        run_id=run_id, codon_id=codon_id, new_count=len(a.messages)
                    )
                )

    def _tool_result(self, a: _Attempt, event: ToolResult) -> None:
        if event.subagent:
            return
        codon_id = a.request.planned.codon_id
        name, since = a.tools.pop(event.tool_use_id, (None, None))
        text, truncated = _short(event.content)
        self.emit(
            ToolResultEvent(
                codon_id=codon_id,
                tool_use_id=event.tool_use_id,
                tool_name=name,
                result=text,
                truncated=truncated,
                original_length=len(event.content),
                execution_time_ms=(
                    None if since is None else int((time.monotonic() - since) * 1000)
                ),
                is_error=event.is_error,
            ),
            a.request.run_id,
            codon_id,
        )

    def _usage_delta(self, a: _Attempt, event: UsageDelta) -> None:
        run_id, codon_id = a.request.run_id, a.request.planned.codon_id
        a.tokens = a.tokens + event.tokens
        if a.live:
            a.reported_cost = None  # an increment after the total: ask the core
            self.manager.transition(
                CostsIncremented(
                    run_id=run_id,
                    codon_id=codon_id,
                    cost_delta=event.cost_usd or 0.0,
                    tokens_delta=_usage(event.tokens),
                )
            )
        self.emit(
            _token_usage(codon_id, event.tokens, event.cost_usd, model=event.model),
            run_id,
            codon_id,
        )

    def _result(self, a: _Attempt, event: SessionResult) -> None:
        run_id, codon_id = a.request.run_id, a.request.planned.codon_id
        a.result = event
        if event.session_id:
            a.session_id = event.session_id
        if event.cost_usd is None or not a.live:
            return
        a.tokens = event.tokens
        a.reported_cost = event.cost_usd
        self.manager.transition(
            CodonFinalCostSet(
                run_id=run_id,
                codon_id=codon_id,
                final_cost=event.cost_usd,
                final_tokens=_usage(event.tokens),
            )
        )
        self.emit(
            _token_usage(codon_id, event.tokens, event.cost_usd, final=True), run_id, codon_id
        )

    def _retry_notice(self, a: _Attempt, event: RetryNotice) -> None:
        codon_id = a.request.planned.codon_id
        detail = f" ({event.error})" if event.error else ""
        self.emit(
            InfoEvent(
                message=f"{codon_id}: the agent retries an API call "
                f"(attempt {event.attempt}){detail}"
            ),
            a.request.run_id,
            codon_id,
        )

    # ------------------------------------------------------------------ ending

    async def _finish(self, a: _Attempt) -> CodonResult:
        exit = a.exit
        assert exit is not None
        if exit.log_error is not None:
            a.storage = f"{exit.log_error}; {RESUME_HINT}"
            return await self._fail(a, "storage", False, a.storage)
        if a.interrupt is not None:
            return await self._interrupted(a)
        context_exceeded = exit.context_exceeded or (
            a.result is not None and a.result.context_exceeded
        )
        accepted = context_exceeded and a.request.accepts_context_exceeded
        if (exit.ok or accepted) and a.status == "running":
            self._move(a, "completing-sentinels")
            await self.sentinels.drain(a.request.planned, a.request.run_id)
            sha = await self._checkpoint(a, "completed")
            if sha is None:
                return await self._fail(
                    a,
                    "checkpoint",
                    False,
                    f"Completion checkpoint failed for {a.request.planned.codon_id}",
                )
            self._move(
                a,
                "completed",
                TransitionMetadata(
                    exit_code=0,
                    checkpoint_sha=sha,
                    result_message_received=a.result is not None,
                    context_exceeded=context_exceeded or None,
                ),
            )
            return await self._done(
                a, "completed", checkpoint=sha, context_exceeded=context_exceeded
            )
        error_class = exit.error_class or ErrorClass.ERROR_RESULT
        message = exit.message or f"the agent exited with code {_exit_code(exit)}"
        if exit.ok and a.status != "running":
            error_class, message = ErrorClass.NO_RESULT, "the agent never reported a session"
        return await self._fail(
            a, str(error_class), exit.retriable, message, retry_after_ms=exit.retry_after_ms
        )

    async def _interrupted(self, a: _Attempt) -> CodonResult:
        why = a.interrupt
        if why is Interrupt.SKIP:
            sha = await self._checkpoint(a, "skipped")
            self._move(
                a,
                "skipped",
                TransitionMetadata(skipped_during=a.status, checkpoint_sha=sha),
            )
            return await self._done(a, "skipped", checkpoint=sha)
        if why is Interrupt.FORCE_STOP:
            return await self._fail(a, "force_stopped", False, "Stopped by the user")
        return await self._fail(a, "interrupted", True, "Weft was shut down while the codon ran")

    async def _fail(
        self,
        a: _Attempt,
        kind: str,
        retriable: bool,
        message: str,
        *,
        retry_after_ms: int | None = None,
    ) -> CodonResult:
        sha = await self._checkpoint(a, "error")
        if a.storage is not None:
            kind, retriable, message = "storage", False, a.storage
        reason = FailureReason(
            kind=kind, retriable=retriable, message=message, retry_after_ms=retry_after_ms
        )
        self._move(
            a,
            "failed",
            TransitionMetadata(
                exit_code=_exit_code(a.exit),
                failure_reason=reason,
                failed_during=a.status,
                checkpoint_sha=sha,
            ),
        )
        return await self._done(a, "failed", checkpoint=sha, failure=reason)

    async def _attempt_cost(self, a: _Attempt) -> float | None:
        """The attempt's cost as the core holds it. When the agent reported a
        total, that is it; otherwise the core is asked once the queue is applied
        (the core applies a batch before committing it, so this waits for the
        batch in flight, not for an fsync of this one)."""
        if a.reported_cost is not None:
            return nanos(a.reported_cost) / NANO
        with contextlib.suppress(PersistenceError):
            await self.manager.applied()
        return self.manager.core.codon_cost(a.request.run_id, a.request.planned.codon_id)

    async def _done(
        self,
        a: _Attempt,
        status: Literal["completed", "failed", "skipped"],
        *,
        checkpoint: str | None = None,
        failure: FailureReason | None = None,
        context_exceeded: bool = False,
    ) -> CodonResult:
        req = a.request
        cost = await self._attempt_cost(a)
        result = CodonResult(
            codon_id=req.planned.codon_id,
            status=status,
            failure=failure,
            session_id=a.session_id,
            cost=0.0 if status == "skipped" or cost is None else cost,
            tokens=a.tokens,
            checkpoint_sha=checkpoint,
            context_exceeded=context_exceeded,
            duration_ms=a.duration_ms,
            exit=a.exit,
            assistant_messages=len(a.messages),
            start_time=a.start_time,
        )
        self.emit(
            CodonCompletedEvent(
                codon_id=result.codon_id,
                status=status,
                success=status == "completed",
                cost=result.cost,
                duration=result.duration_ms,
                exit_status=_process_exit(a.exit),
                failure_reason=None if failure is None else _builtins(failure),
                checkpoint_sha=checkpoint,
            ),
            req.run_id,
            result.codon_id,
        )
        return result

    async def _checkpoint(self, a: _Attempt, kind: str) -> str | None:
        """Takes a checkpoint of the covered files; None when it failed (reported)."""
        req = a.request
        try:
            sha = await self.checkpoints.snapshot(
                req.patterns,
                branch=req.branch,
                parent_expected=self._tip(req),
                kind=kind,
                codon_id=req.planned.codon_id,
                run_id=req.run_id,
                codon_name=req.planned.codon.name,
                duration_ms=a.duration_ms,
            )
        except Exception as exc:
            # pygit2 and the OS report a full disk in their own words, not
            # always as a CheckpointError: those end the run like any storage failure.
            storage = is_storage_failure(exc)
            if not (storage or isinstance(exc, CheckpointError)):
                raise
            if storage and a.storage is None:
                a.storage = str(
                    storage_error(f"the {kind} checkpoint of {req.planned.codon_id}", exc)
                )
            self.emit(
                ErrorEvent(
                    message=f"{kind} checkpoint of {req.planned.codon_id} failed: {exc}",
                    codon=req.planned.codon_id,
                    severity="codon",
                ),
                req.run_id,
                req.planned.codon_id,
            )
            return None
        self.tips[req.branch] = sha
        return sha

    def _tip(self, req: CodonRequest) -> str:
        return self.tips.get(req.branch, req.parent_sha)


_AgentHandler = Callable[[CodonRunner, _Attempt, Any], None]
_AGENT_HANDLERS: dict[type[Any], _AgentHandler] = {
    SessionStarted: CodonRunner._session_started,
    AssistantText: CodonRunner._text,
    Thinking: CodonRunner._thinking,
    ToolUse: CodonRunner._tool_use,
    ToolResult: CodonRunner._tool_result,
    UsageDelta: CodonRunner._usage_delta,
    SessionResult: CodonRunner._result,
    RetryNotice: CodonRunner._retry_notice,
}
"""One handler per agent event class the runner acts on."""


def _builtins(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(value)
    return out


__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "CodonRequest",
    "CodonResult",
    "CodonRunner",
    "Interrupt",
    "NoSentinels",
    "SentinelHost",
]
