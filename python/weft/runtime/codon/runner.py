"""The codon runner: one attempt of one codon, through the eight states.

``preparing`` (rig setup, rig-setup checkpoint) -> ``starting`` (sentinels,
prompt, spawn) -> ``initializing`` (the agent process runs, no session yet)
-> ``running`` (the agent reported its session; its events stream) ->
``completing-sentinels`` -> ``completed``; or ``failed`` / ``skipped`` from
any of them. Every move is a transition with the metadata its target
requires (seed 000), and the checkpoint is taken *before* the terminal
transition, because ``completed`` carries its SHA.

The runner submits transitions fire-and-forget: the StateManager keeps them
in order and the runtime watches for rejections (a rejection here is a
bug, and stops the run). It only waits where a decision depends on the
state: never on the hot path of agent events.

Two things happen between ``running`` and the end. An ``exhaustWithPrompt``
codon whose session succeeded without filling its context is resumed, same
session, with the exhaust prompt (``codon.extended``, ``ExtensionCountUpdated``)
up to ``maxExtensions`` times; a full context then completes it (reference
§6.7). In ``completing-sentinels`` the codon's ``outputFiles`` are copied when
the run has an output directory (:mod:`weft.runtime.codon.outputs`), before the
completion checkpoint so that what ``beforeCopy`` changed is in it. The
codon's ``env`` reaches its rig and ``beforeCopy`` commands as it reaches the
agent. Archives (``archiveOnSuccess``) are the run loop's, after the codon ends.

The attempt's records live in :mod:`weft.runtime.codon.attempt`; its agent events
are turned into transitions and stream events by :mod:`weft.runtime.codon.agent_events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from weft.agents.events import ErrorClass, SessionExited
from weft.agents.harness import (
    AgentStartError,
    Harness,
    SessionSpec,
    StopReason,
    Timeouts,
    session_log_name,
)
from weft.budget.ledger import Slot, Verdict
from weft.budget.watchdog import Watchdog
from weft.checkpoints.aio import AsyncCheckpointRepo
from weft.checkpoints.errors import CheckpointError
from weft.config.loader import LoadedHank
from weft.config.prompt import (
    AssembledPrompt,
    assemble_prompt,
    prompt_reads_files,
    template_variables,
)
from weft.config.runtime import RuntimeSessionSettings
from weft.errors import ConfigError, PersistenceError, StorageFullError, UnsafePathError
from weft.events.stream import (
    CodonCompletedEvent,
    CodonExtendedEvent,
    ErrorEvent,
    InfoEvent,
    ProcessEndedEvent,
    RigSetupCompletedEvent,
    SessionCooldownEvent,
    SessionGaveUpEvent,
    SessionMessageEvent,
    SessionResumedEvent,
    StreamData,
)
from weft.events.transitions import (
    BudgetExceeded,
    CodonStarted,
    CodonStatus,
    ExtensionCountUpdated,
    FailureReason,
    TransitionMetadata,
)
from weft.paths import inside
from weft.progress import NANO, nanos
from weft.runtime.codon.agent_events import AgentEvents
from weft.runtime.codon.attempt import (
    Attempt,
    CodonRequest,
    CodonResult,
    Interrupt,
    NoSentinels,
    SentinelHost,
    builtins_of,
    exit_code_of,
    move,
    process_exit_of,
)
from weft.runtime.codon.breakers import ProviderBreakers, provider_of
from weft.runtime.codon.outputs import copy_outputs
from weft.runtime.codon.sessions import (
    RETRY_PROMPT,
    GaveUp,
    SessionRetries,
    Sleep,
    cool_down,
    with_messages,
)
from weft.runtime.execution.prepare import ExecutionLayout
from weft.runtime.rig.setup import run_rig
from weft.runtime.run.survivors import MARK_VAR, new_mark, started_event
from weft.state import StateManager
from weft.store.diskspace import RESUME_HINT, is_storage_failure, storage_error
from weft.terminal import plural

_FAKE_HOMES = {"CLAUDE_CONFIG_DIR": "claude", "CODEX_HOME": "codex", "GEMINI_CLI_HOME": "gemini"}

DEFAULT_IDLE_TIMEOUT = 180.0
"""Seconds without agent output before the session is ended (reference default)."""


@functools.cache
def auto_compact_args(harness: str, auto_compact: bool) -> tuple[str, ...]:
    """Claude Code's auto-compaction, switched as the codon's ``autoCompact``
    says (off by default, as in the reference): compaction would otherwise
    silently shrink the context that ``contextExceeded`` loops and
    ``exhaustWithPrompt`` codons wait to fill. Other CLIs have no such switch
    (``weft validate`` warns when ``autoCompact`` is set for them)."""
    if harness != "claude":
        return ()
    return ("--settings", json.dumps({"autoCompactEnabled": auto_compact}))


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
        output_dir: Path | None = None,
        overwrite_output: bool = False,
        anthropic_base_url: str | None = None,
        budget: Watchdog | None = None,
        sessions: RuntimeSessionSettings | None = None,
        sleep: Sleep | None = None,
        breakers: ProviderBreakers | None = None,
    ) -> None:
        self.manager = manager
        self.checkpoints = checkpoints
        self.hank = hank
        self.layout = layout
        # Built once: a codon's spawn reads them (pathlib joins cost microseconds each).
        self._weft_dir = layout.weft_dir
        self._workspace = layout.workspace
        self._harness_for = harness_for
        self.sentinels = sentinels or NoSentinels(self.emit)
        self.ignore_rig_failures = ignore_rig_failures
        self.idle_timeout = idle_timeout
        self.first_output_timeout = first_output_timeout
        self.stop_grace = stop_grace
        self.env = env
        self.anthropic_base_url = anthropic_base_url
        """``anthropicBaseUrl``: Claude Code's ``ANTHROPIC_BASE_URL``, unless the
        codon's ``env`` sets one."""
        self.output_dir = output_dir
        """Where ``outputFiles`` are copied (``-o``); None: they are not."""
        self.overwrite_output = overwrite_output
        self._current: Attempt | None = None
        self._variables = template_variables(layout.workspace)
        self.tips: dict[str, str] = {}
        """The newest checkpoint of each branch this runner committed to."""
        self.budget = budget
        """Counts each attempt's spending and stops it when a budget is crossed."""
        self._events = AgentEvents(manager, budget)
        self.sessions = sessions or RuntimeSessionSettings()
        """The session supervisor's thresholds and schedule (``session.*``)."""
        self._sleep: Sleep = sleep or asyncio.sleep
        self._inbox: list[str] = []
        """User messages not yet in a prompt (``codon.message``)."""
        self.breakers = breakers or ProviderBreakers()
        """The agent providers' circuit breakers, shared across codons (and
        with other executions when the caller shares them)."""
        self._gated: str | None = None
        """The provider the running session was let through to (to report its end)."""

    # ------------------------------------------------------------------ plumbing

    def emit(self, event: StreamData, run_id: str | None, codon_id: str | None) -> None:
        """Queues a stream event in the one order of the execution."""
        self.manager.emit(event, run_id=run_id, codon_id=codon_id)

    def _move(self, a: Attempt, to: CodonStatus, meta: TransitionMetadata | None = None) -> int:
        if to in ("completed", "failed", "skipped"):
            # The core takes no sentinel state once the codon is terminal.
            self.sentinels.seal(a.request.planned, a.request.run_id)
        return move(self.manager, a, to, meta)

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
        a.woken.set()  # ends a cool-down between sessions
        if a.rig is not None:
            a.rig.cancel()  # run_rig kills a running command's process group
        if a.session is not None:
            await a.session.stop(_STOP_REASONS.get(why, StopReason.OPERATOR))
        return True

    async def message(self, text: str, *, urgent: bool) -> bool:
        """A user's message for the agent. Queued, it joins the next prompt
        built (the next resume of this codon's session, or the next codon's
        prompt). Urgent, it also stops the running session gracefully, which
        is then resumed with it. Returns False (nothing done) for an urgent
        message when no agent session is running."""
        a = self._current
        live = (
            a is not None
            and a.session is not None
            and a.exit is None
            and a.interrupt is None
            and a.extensions == 0
        )
        if urgent and not live:
            return False
        self._inbox.append(text)
        codon_id = None if a is None else a.request.planned.codon_id
        run_id = None if a is None else a.request.run_id
        self.emit(
            SessionMessageEvent(message=text, urgent=urgent, codon_id=codon_id), run_id, codon_id
        )
        if urgent and a is not None and a.session is not None:
            a.urgent = True
            await a.session.stop(StopReason.INTERRUPT)
        return True

    def _take_messages(self) -> list[str]:
        taken, self._inbox = self._inbox, []
        return taken

    async def kill(self) -> None:
        """Kills the current agent at once (a second Ctrl-C)."""
        a = self._current
        if a is not None and a.session is not None:
            await a.session.kill()

    # ------------------------------------------------------------------ the attempt

    async def run(self, request: CodonRequest) -> CodonResult:
        """Runs one attempt of ``request`` to a terminal state."""
        a = Attempt(request)
        self._current = a
        if self.budget is not None and self.budget.begin(
            Slot.of(request.planned), request.run_id, self._over_budget
        ):
            a.interrupt = Interrupt.BUDGET  # nothing left: it ends before the agent starts
        try:
            result = await self._run(a)
            if self.budget is not None:
                await self.budget.end(result.status)
            return result
        except BaseException:
            # Left by an exception (the journal failed, a full disk): the
            # agent must not outlive the attempt that was recording it.
            if a.session is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(a.session.kill(), self.stop_grace)
            raise
        finally:
            self._current = None

    async def _over_budget(self, verdict: Verdict) -> None:
        """The watchdog's stop: the attempt ends as the budget's ``onExceeded`` says."""
        await self.interrupt(Interrupt.BUDGET)

    async def _run(self, a: Attempt) -> CodonResult:
        """The attempt step by step: each step moves it on (None) or ends it."""
        self._record_start(a)
        if a.interrupt is not None:
            return await self._interrupted(a)
        for step in (self._preparing, self._starting, self._spawning):
            ended = await step(a)
            if ended is not None:
                return ended
        session = a.session
        assert session is not None
        await self._stream(a)
        self._provider_ended(a)
        # The session has exited and its group was SIGKILLed with it.
        self.emit(ProcessEndedEvent(pid=session.pid), a.request.run_id, a.request.planned.codon_id)
        ended = await self._supervise(a)
        if ended is not None:
            return ended
        while self._extends(a):
            ended = await self._extend(a)
            if ended is not None:
                return ended
        return await self._finish(a)

    def _record_start(self, a: Attempt) -> None:
        req, planned = a.request, a.request.planned
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

    async def _preparing(self, a: Attempt) -> CodonResult | None:
        """``preparing``: the rig setup and its checkpoint, then ``starting``."""
        req, planned = a.request, a.request.planned
        rig_sha: str | None = None
        if planned.codon.rig_setup and req.skip_rig:
            self.emit(
                InfoEvent(message=f"Rig setup of {planned.codon_id} skipped (skipPreCommands)"),
                req.run_id,
                planned.codon_id,
            )
        elif planned.codon.rig_setup:
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
        meta = TransitionMetadata(checkpoint_sha=rig_sha) if rig_sha else None
        a.starting_seq = self._move(a, "starting", meta)
        return None

    async def _starting(self, a: Attempt) -> CodonResult | None:
        """``starting``: the sentinels and the prompt."""
        req, planned = a.request, a.request.planned
        codon = planned.codon
        refused = await self.sentinels.load(planned, req.run_id, since=a.starting_seq)
        if refused is not None:
            return await self._fail(a, "sentinel_load_failure", False, refused)
        try:
            if prompt_reads_files(codon, self.hank.hank):
                a.prompt = await asyncio.to_thread(
                    assemble_prompt,
                    codon,
                    self.hank.directory,
                    self._variables,
                    hank=self.hank.hank,
                )
            else:  # text only: a thread hop would cost more than the work
                a.prompt = assemble_prompt(
                    codon, self.hank.directory, self._variables, hank=self.hank.hank
                )
        except ConfigError as exc:
            return await self._fail(a, "config", False, str(exc))
        if self._inbox:  # queued messages join the next codon's prompt
            text = with_messages(a.prompt.text, self._take_messages())
            a.prompt = dataclasses.replace(a.prompt, text=text)
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
        return None

    async def _spawning(self, a: Attempt) -> CodonResult | None:
        """The agent process starts: ``initializing``."""
        req, planned = a.request, a.request.planned
        assert a.prompt is not None
        try:
            harness, model = self._harness_for(planned.codon.model)
        except ValueError as exc:
            return await self._fail(a, "agent_start", False, str(exc))
        if not await self._provider_gate(a, harness.name):
            return await self._interrupted(a)
        try:
            spec = self._spec(a, a.prompt, model, harness)
            a.session = await harness.start(spec)
            a.resumed_from = spec.resume_session_id
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            self._gated = None
            return await self._fail(a, "agent_start", False, str(exc))
        a.model, a.harness = model, harness.name
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
        self._move(
            a,
            "initializing",
            TransitionMetadata(
                claude_pid=a.session.pid,
                claude_log_path=session_log_name(req.run_id, planned.codon_id, harness.name),
                previous_session_id=a.resumed_from,
            ),
        )
        if a.interrupt is not None:
            # Asked to stop while spawning: the stop above found no session yet.
            await a.session.stop(StopReason.OPERATOR)
        return None

    def _spec(
        self, a: Attempt, prompt: AssembledPrompt, model: str, harness: Harness
    ) -> SessionSpec:
        req = a.request
        codon = req.planned.codon
        idle = codon.shim_idle_timeout or self.idle_timeout or DEFAULT_IDLE_TIMEOUT
        env = dict(codon.env)
        if self.anthropic_base_url and harness.name == "claude":
            # The setting is explicit configuration, so it wins over an inherited
            # variable; the codon's own env is more specific still.
            env.setdefault("ANTHROPIC_BASE_URL", self.anthropic_base_url)
        # Marks every process of the agent's group, so that a later run can
        # tell them from anyone else's if this one dies (weft.runtime.run.survivors).
        env[MARK_VAR] = new_mark()
        if getattr(harness, "fake", False):
            # The fake agents keep transcripts where the real CLIs do (~/.claude...):
            # give them the execution's own folder unless the user chose one.
            home = self._weft_dir / "fake-agents"
            for name, folder in _FAKE_HOMES.items():
                if name not in env and name not in (self.env or os.environ):
                    env[name] = str(home / folder)
        return SessionSpec(
            prompt=prompt.text,
            model=model,
            cwd=self._workspace,
            resume_session_id=(
                req.previous_session_id if codon.continuation_mode == "continue-previous" else None
            ),
            append_system_prompt=prompt.system_prompt_append,
            env=env,
            extra_args=auto_compact_args(harness.name, codon.auto_compact),
            log_path=inside(
                self._weft_dir,
                session_log_name(req.run_id, req.planned.codon_id, harness.name),
                what=f'the agent log of codon "{req.planned.codon_id}"',
            ),
            timeouts=Timeouts(
                first_output=self.first_output_timeout,
                idle=float(idle),
                stop_grace=self.stop_grace,
                flush_grace=self.stop_grace,
            ),
        )

    # ------------------------------------------------------------------ rig

    def _command_env(self, codon_env: Mapping[str, str]) -> dict[str, str]:
        """The environment of the codon's rig and ``beforeCopy`` commands: Weft's
        own (or the runtime's) with the codon's ``env`` applied last, as for its agent."""
        return {**(os.environ if self.env is None else self.env), **codon_env}

    async def _rig(self, a: Attempt) -> CodonResult | None:
        req = a.request
        codon_id = req.planned.codon_id
        emit = functools.partial(self.manager.emit, run_id=req.run_id, codon_id=codon_id)
        self.emit(
            InfoEvent(
                message=f"Rig setup of {codon_id}: "
                + plural(len(req.planned.codon.rig_setup), "operation")
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
                env=self._command_env(req.planned.codon.env),
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

    async def _stream(self, a: Attempt) -> None:
        """Feeds the session's agent events to the handlers until it exits."""
        session = a.session
        assert session is not None
        async for event in session.events():
            if isinstance(event, SessionExited):
                a.exit = event
                break
            self._events.on_event(a, event)
        if a.exit is None:
            a.exit = await session.wait()

    # ------------------------------------------------------------------ ending

    async def _finish(self, a: Attempt) -> CodonResult:
        exit = a.exit
        assert exit is not None
        if exit.log_error is not None:
            a.storage = f"{exit.log_error}; {RESUME_HINT}"
            return await self._fail(a, "storage", False, a.storage)
        if a.interrupt is None and self.budget is not None and self.budget.verdict is not None:
            # Crossed on the last lines, before the watchdog's stop got here.
            a.interrupt = Interrupt.BUDGET
        if a.interrupt is not None:
            return await self._interrupted(a)
        return await self._ended(a)

    async def _ended(self, a: Attempt, *, budget: Verdict | None = None) -> CodonResult:
        """The attempt's end by how the agent ended (or by the budget it crossed)."""
        exit = a.exit
        assert exit is not None
        context_exceeded = exit.context_exceeded or (
            a.result is not None and a.result.context_exceeded
        )
        accepted = context_exceeded and a.request.accepts_context_exceeded
        if (exit.ok or accepted or budget is not None) and a.status == "running":
            # The sentinels wait for the agent's events, not for the move's commit.
            upto = self.manager.core.next_seq - 1
            self._move(a, "completing-sentinels")
            await self.sentinels.drain(
                a.request.planned, a.request.run_id, upto=upto, files_written=a.wrote_files
            )
            copied = await self._outputs(a)
            if copied is not None:
                return copied
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
                    extension_count=a.extensions or None,
                    budget_exceeded=None if budget is None else budget_of(budget),
                ),
            )
            return await self._done(
                a, "completed", checkpoint=sha, context_exceeded=context_exceeded
            )
        error_class = exit.error_class or ErrorClass.ERROR_RESULT
        message = exit.message or f"the agent exited with code {exit_code_of(exit)}"
        if exit.ok and a.status != "running":
            error_class, message = ErrorClass.NO_RESULT, "the agent never reported a session"
        return await self._fail(
            a, str(error_class), exit.retriable, message, retry_after_ms=exit.retry_after_ms
        )

    async def _outputs(self, a: Attempt) -> CodonResult | None:
        """Copies the codon's ``outputFiles`` (see :mod:`weft.runtime.codon.outputs`);
        a failed copy fails the codon."""
        req, codon = a.request, a.request.planned.codon
        if not codon.output_files or self.output_dir is None:
            return None
        codon_id = req.planned.codon_id
        result = await copy_outputs(
            codon.output_files,
            workspace=self.layout.workspace,
            output_dir=self.output_dir,
            overwrite=self.overwrite_output,
            env=self._command_env(codon.env),
            emit=functools.partial(self.manager.emit, run_id=req.run_id, codon_id=codon_id),
            codon_id=codon_id,
        )
        if result.error is not None:
            return await self._fail(a, "output_copy", False, result.error)
        return None

    # ------------------------------------------------------------------ session supervisor

    async def _supervise(self, a: Attempt) -> CodonResult | None:
        """Resumes the session after transient failures, as the seed 002
        machine decides (:mod:`weft.runtime.codon.sessions`); None when the sessions
        are over and the attempt finishes as the last one ended."""
        req, codon_id = a.request, a.request.planned.codon_id
        assert a.prompt is not None
        retries = SessionRetries(self.sessions)
        retries.spawning(a.prompt.text)
        while a.exit is not None and a.interrupt is None:
            if a.urgent:
                # Seed 002: UrgentMessage -> Interrupting -> BuildingPrompt; the
                # same session goes on with the message as its prompt.
                a.urgent = False
                retries.interrupted(started=a.session_reported)
                messages = self._take_messages()
                prompt = (
                    "\n\n".join(messages)
                    if a.session_id
                    else with_messages(a.prompt.text, messages)
                )
                ended = await self._resume(a, retries, prompt, "urgent")
                if ended is not None:
                    return ended
                continue
            decision = retries.exited(a.exit, started=a.session_reported)
            if decision is None:
                return None
            if isinstance(decision, GaveUp):
                self.emit(
                    SessionGaveUpEvent(
                        codon_id=codon_id,
                        sessions=retries.sessions,
                        consecutive_errors=decision.consecutive_errors,
                        total_errors=decision.total_errors,
                        max_consecutive_errors=self.sessions.max_consecutive_errors,
                        max_total_errors=self.sessions.max_total_errors,
                        message=decision.message,
                    ),
                    req.run_id,
                    codon_id,
                )
                return None
            self.emit(
                SessionCooldownEvent(
                    codon_id=codon_id,
                    session=retries.sessions,
                    duration_ms=decision.duration_ms,
                    backoff_ms=decision.backoff_ms,
                    retry_after_ms=decision.retry_after_ms,
                    error_class=decision.error_class,
                    message=decision.message,
                    consecutive_errors=decision.consecutive_errors,
                    total_errors=decision.total_errors,
                ),
                req.run_id,
                codon_id,
            )
            if not await cool_down(decision.duration_ms / 1000, self._sleep, a.woken):
                return None  # interrupted: the attempt ends as the interrupt says
            retries.elapsed()
            what = decision.message or decision.error_class
            prompt = RETRY_PROMPT.format(what=what) if a.session_id else a.prompt.text
            prompt = with_messages(prompt, self._take_messages())
            ended = await self._resume(a, retries, prompt, "retry")
            if ended is not None:
                return ended
        return None

    async def _resume(
        self, a: Attempt, retries: SessionRetries, prompt: str, reason: Literal["urgent", "retry"]
    ) -> CodonResult | None:
        """The supervisor's next session of ``a`` with ``prompt``: counted,
        journaled as ``session.resumed`` (why: ``reason``), then started."""
        codon_id = a.request.planned.codon_id
        number = retries.spawning(prompt)
        self.emit(
            SessionResumedEvent(
                codon_id=codon_id,
                session=number,
                reason=reason,
                resume_session_id=a.session_id,
            ),
            a.request.run_id,
            codon_id,
        )
        return await self._respawn(a, prompt, a.session_id)

    async def _respawn(
        self, a: Attempt, prompt: str, resume_session_id: str | None
    ) -> CodonResult | None:
        """Starts the attempt's next session (resuming ``resume_session_id``,
        or as the first one did when None) and streams it. As for extensions,
        the earlier sessions' figures become the base the next one adds to."""
        planned = a.request.planned
        assert a.prompt is not None
        if a.harness is not None and not await self._provider_gate(a, a.harness):
            return None  # interrupted while waiting: the attempt ends as the last session did
        cost = await self._attempt_cost(a)
        a.cost_base, a.tokens_base = cost or 0.0, a.tokens
        a.result, a.exit, a.reported_cost = None, None, None
        a.session_reported = False
        try:
            harness, model = self._harness_for(planned.codon.model)
            spec = self._spec(a, a.prompt, model, harness)
            spec = dataclasses.replace(
                spec,
                prompt=prompt,
                resume_session_id=resume_session_id or spec.resume_session_id,
            )
            a.session = await harness.start(spec)
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            self._gated = None
            return await self._fail(a, "agent_start", False, str(exc))
        if a.resumed_from is None:
            a.resumed_from = spec.resume_session_id
        await self._follow(a, harness.name, model, spec)
        return None

    # ------------------------------------------------------------------ provider breakers

    async def _provider_gate(self, a: Attempt, harness: str) -> bool:
        """Waits while the provider's breaker is open (journaled); False when
        an interrupt ended the wait. The session that follows is reported
        with :meth:`_provider_ended`."""
        provider, codon_id = provider_of(harness), a.request.planned.codon_id
        run_id = a.request.run_id
        ok = await self.breakers.gate(
            provider,
            codon_id,
            lambda event, codon: self.emit(event, run_id, codon),
            self._sleep,
            a.woken,
        )
        self._gated = provider if ok else None
        return ok

    def _provider_ended(self, a: Attempt) -> None:
        """Tells the provider's breaker how the session let through ended."""
        provider, self._gated = self._gated, None
        if provider is None:
            return
        run_id = a.request.run_id
        self.breakers.record(
            provider,
            a.exit,
            a.request.planned.codon_id,
            lambda event, codon: self.emit(event, run_id, codon),
        )

    # ------------------------------------------------------------------ extensions

    def _extends(self, a: Attempt) -> bool:
        """Whether the session is resumed once more with ``exhaustWithPrompt``
        (reference §6.7): a clean success that did not fill the context, not
        interrupted, below ``maxExtensions``."""
        codon, exit = a.request.planned.codon, a.exit
        if codon.exhaust_with_prompt is None or exit is None or a.interrupt is not None:
            return False
        if not exit.ok or exit.log_error is not None or exit.context_exceeded:
            return False
        if a.result is None or a.result.is_error or a.result.context_exceeded:
            return False
        return a.status == "running" and a.extensions < codon.max_extensions

    async def _extend(self, a: Attempt) -> CodonResult | None:
        """Resumes the same session with the exhaust prompt and streams it."""
        req, planned = a.request, a.request.planned
        codon = planned.codon
        assert a.prompt is not None
        assert a.session_id is not None
        if a.harness is not None and not await self._provider_gate(a, a.harness):
            return None  # interrupted while waiting: no more extensions
        a.extensions += 1
        cost = await self._attempt_cost(a)
        self.manager.transition(
            ExtensionCountUpdated(
                run_id=req.run_id, codon_id=planned.codon_id, extension_count=a.extensions
            )
        )
        self.emit(
            CodonExtendedEvent(
                codon_id=planned.codon_id,
                codon_name=codon.name,
                extension_number=a.extensions,
                exhaust_with_prompt=a.prompt.exhaust_prompt or codon.exhaust_with_prompt or "",
                cumulative_tokens=a.tokens.input + a.tokens.output,
                cumulative_cost=cost,
            ),
            req.run_id,
            planned.codon_id,
        )
        # The next session's result is its own process's: the codon's figures
        # are what came before plus it (agent_events adds the base).
        a.cost_base, a.tokens_base = cost or 0.0, a.tokens
        a.result, a.exit, a.reported_cost = None, None, None
        try:
            harness, model = self._harness_for(codon.model)
            spec = dataclasses.replace(
                self._spec(a, a.prompt, model, harness),
                prompt=a.prompt.exhaust_prompt or codon.exhaust_with_prompt or "",
                resume_session_id=a.session_id,
            )
            a.session = await harness.start(spec)
        except (AgentStartError, UnsafePathError, ValueError) as exc:
            self._gated = None
            return await self._fail(a, "agent_start", False, str(exc))
        await self._follow(a, harness.name, model, spec)
        return None

    async def _follow(self, a: Attempt, harness: str, model: str, spec: SessionSpec) -> None:
        """A resumed or extended session that started: journals its process,
        streams it to its end and reports it to the provider's breaker."""
        assert a.session is not None
        req, codon_id = a.request, a.request.planned.codon_id
        self.emit(
            started_event(
                a.session.pid,
                role="agent",
                argv=[harness, model],
                mark=spec.env[MARK_VAR],
                codon_id=codon_id,
            ),
            req.run_id,
            codon_id,
        )
        if a.interrupt is not None:
            await a.session.stop(StopReason.OPERATOR)
        await self._stream(a)
        self._provider_ended(a)
        self.emit(ProcessEndedEvent(pid=a.session.pid), req.run_id, codon_id)

    async def _interrupted(self, a: Attempt) -> CodonResult:
        why = a.interrupt
        verdict = None if self.budget is None else self.budget.verdict
        if why is Interrupt.BUDGET and verdict is not None:
            if verdict.stops_run and (a.result is None or not a.result.ok):
                # The run's ceiling is a safety stop, not the codon's end: unless
                # the agent already gave its result (a stopped agent reports an
                # error result: not that), the codon stops with a
                # checkpoint and stays to do (raising the cap and running again
                # goes on from it), whatever onExceeded says.
                return await self._fail(
                    a,
                    "interrupted",
                    True,
                    f"Stopped by the run's budget: {verdict.message}",
                    budget=budget_of(verdict),
                )
            if verdict.stops_run and a.exit is not None:
                return await self._ended(a, budget=verdict)  # its work is done: it keeps it
            if verdict.on_exceeded == "fail":
                return await self._fail(
                    a, "budget", False, verdict.message, budget=budget_of(verdict)
                )
            if a.status == "running" and a.exit is not None:
                return await self._ended(a, budget=verdict)
            why = Interrupt.SKIP  # the agent never ran: nothing to complete
        if why is Interrupt.SKIP:
            sha = await self._checkpoint(a, "skipped")
            self._move(
                a, "skipped", TransitionMetadata(skipped_during=a.status, checkpoint_sha=sha)
            )
            return await self._done(a, "skipped", checkpoint=sha)
        if why is Interrupt.FORCE_STOP:
            return await self._fail(a, "force_stopped", False, "Stopped by the user")
        return await self._fail(a, "interrupted", True, "Weft was shut down while the codon ran")

    async def _fail(
        self,
        a: Attempt,
        kind: str,
        retriable: bool,
        message: str,
        *,
        retry_after_ms: int | None = None,
        budget: BudgetExceeded | None = None,
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
                exit_code=exit_code_of(a.exit),
                failure_reason=reason,
                failed_during=a.status,
                checkpoint_sha=sha,
                budget_exceeded=budget,
            ),
        )
        return await self._done(a, "failed", checkpoint=sha, failure=reason)

    async def _attempt_cost(self, a: Attempt) -> float | None:
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
        a: Attempt,
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
                cost=None if self._unpriced() and not result.cost else result.cost,
                duration=result.duration_ms,
                exit_status=process_exit_of(a.exit),
                failure_reason=None if failure is None else builtins_of(failure),
                checkpoint_sha=checkpoint,
            ),
            req.run_id,
            result.codon_id,
        )
        await self.sentinels.finish(
            req.planned, req.run_id, shutdown=a.interrupt is Interrupt.SHUTDOWN
        )
        return result

    def _unpriced(self) -> bool:
        """Whether the attempt's model has no price (its cost is unknown, not $0)."""
        return self.budget is not None and self.budget.ledger.attempt_unpriced

    async def _checkpoint(self, a: Attempt, kind: str) -> str | None:
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


def budget_of(verdict: Verdict) -> BudgetExceeded:
    """The ``budgetExceeded`` metadata of a crossed budget (``currency`` names the kind)."""
    currency = "USD" if verdict.kind == "dollars" else verdict.kind
    return BudgetExceeded(currency=currency, limit=verdict.limit, used=round(verdict.used, 9))


_STOP_REASONS = {Interrupt.SHUTDOWN: StopReason.SHUTDOWN}
"""Why the agent is stopped, as its session records it (the rest, a budget
included, are stops Weft asked for on purpose: ``operator``)."""

__all__ = ["DEFAULT_IDLE_TIMEOUT", "CodonRunner", "budget_of"]
