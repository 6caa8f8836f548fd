"""The session supervisor: one agent session at a time, decided by seed 002.

(Over 600 lines on purpose: :class:`SessionSupervisor` is one event loop
whose handlers share its live session, timers and generation counters;
split across modules they would reach into each other's state. Its requests,
events and result are in :mod:`weft.agents.supervisor_events`.)

:class:`SessionSupervisor` runs an agent for one codon through the
agent-session machine of seed 002 (:class:`weft.core.SessionMachine`). The
machine decides; the supervisor only performs what it is told and feeds back
what happened::

    WorktreeReady -> build the prompt -> PromptReady [StorePrompt]
      -> spawn through the Harness -> SessionStarted (the agent's init)
      -> SessionExited(Success)            -> SessionComplete: done
      -> SessionExited(Error | Timeout)    -> CoolingDown: sleep, BackoffElapsed,
                                              rebuild, resume the last session
      -> closed usage window (usage_limit) -> Parked: sleep until the reset,
                                              WindowOpened, rebuild, resume
      -> non-retriable verdict             -> FatalError: Stopped [LogFatal]
      -> urgent message                    -> UrgentMessage [CancelSession]:
             exit within the grace period  -> rebuild with the message, resume
             no exit within it             -> GraceExceeded [ForceStopSession]
      -> operator stop                     -> OperatorStop [CancelSession]

Performing the effects: ``StorePrompt`` is reported as a
:class:`PromptStored` event (the codon runner persists it);
``CancelSession`` runs the session's graceful stop (SIGTERM to its process
group, SIGKILL after ``stop_grace``); ``ForceStopSession`` SIGKILLs the group;
``LogFatal`` logs, reports :class:`SupervisorFatal` and ends the run;
``IncrementSession`` needs nothing, as the supervisor numbers every spawn
itself (``session`` in its events, and the ``seq`` it feeds back).

Decisions the seed leaves to the supervisor:

* **Verdicts.** An adapter's :class:`~weft.agents.events.SessionExited` maps
  to ``Success`` (``ok``), ``Timeout`` (``error_class`` ``timeout``: a first
  output or idle deadline of the session's :class:`Timeouts`), ``Error``
  (``retriable``), and anything else is a ``FatalError`` at once: waiting
  does not fix a bad key, an exhausted budget or a refused argument.
* **Usage windows.** A ``usage_limit`` verdict that names its reset parks the
  machine (``WindowClosed``, Weft's addition: no error counted) until the
  reset plus ``window_margin_ms``, then resumes; one further off than
  ``max_window_wait_ms`` is a ``FatalError``. Wall-clock time comes from
  ``wall_ms`` (injectable, as the :class:`Clock` is).
* **Retry-After.** A cool-down lasts ``max(backoff, retry_after_ms)``: the
  API's own hint wins when it is longer than the seed's backoff. Hints over
  ``max_retry_after_ms`` (1 h) are ignored as implausible.
* **Resume.** Every session after the first resumes the last session id the
  agent reported (``SessionSpec.resume_session_id``), so a retry, an
  interrupt or a follow-up continues the conversation.
* **Urgent messages** wait in a list until a prompt built with them is
  spawned. One that arrives while a session runs interrupts it; while it is
  starting, as soon as it reports its session; during a cool-down it waits
  for the cool-down; after a successful session it starts a follow-up
  session (``WorktreeReady`` -> ``IncrementSession``) instead of being lost.
* **Stopping** always stops a live process, also while ``Spawning`` (where
  the seed lists no effect): no process outlives :meth:`run`, and the next
  session is spawned only after the previous process has been reaped.
* A prompt builder or :meth:`Harness.start` that raises is fatal.

The clock is injectable (:class:`Clock`), so the backoff schedule and the
thresholds are tested without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from weft._core import SessionEffect, SessionMachine
from weft.agents.events import AgentEvent, ErrorClass, SessionExited, SessionStarted
from weft.agents.harness import AgentSession, Harness, SessionSpec, StopReason
from weft.agents.supervisor_events import (
    CooldownEnded,
    CooldownStarted,
    EventSink,
    InterruptForced,
    InterruptRequested,
    PromptBuilder,
    PromptReason,
    PromptRequest,
    PromptStored,
    SessionSpawned,
    SupervisorEvent,
    SupervisorFatal,
    SupervisorResult,
    SupervisorStopped,
    WindowOpened,
    WindowParked,
)
from weft.windows.park import DEFAULT_MARGIN_MS, DEFAULT_MAX_WAIT_MS, Park, decide

log = logging.getLogger(__name__)

DEFAULT_INTERRUPT_GRACE = 5.0
"""Seconds an interrupted session gets to exit before it is killed."""
DEFAULT_MAX_RETRY_AFTER_MS = 3_600_000
"""Retry-After hints longer than this (1 h) are ignored."""
SHUTDOWN_BACKSTOP = 5.0
"""Seconds past a session's own stop sequence (``flush_grace`` +
``stop_grace``) after which shutdown kills it regardless."""
_FINAL = ("Stopped", "SessionComplete")


class Clock(Protocol):
    """Monotonic time and sleeping; injected so tests need not wait."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds``."""
        ...


class SystemClock:
    """The real clock: :func:`time.monotonic` and :func:`asyncio.sleep`."""

    def monotonic(self) -> float:
        """:func:`time.monotonic`."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """:func:`asyncio.sleep`."""
        await asyncio.sleep(seconds)


# -- internals -----------------------------------------------------------------------


@dataclass(slots=True)
class _Live:
    """The one session whose process may be alive."""

    number: int
    session: AgentSession
    reader: asyncio.Task[None] | None = None
    grace: asyncio.Task[None] | None = None
    verdict_seen: bool = False
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class _Built:
    generation: int
    prompt: str
    urgent_included: int


@dataclass(frozen=True, slots=True)
class _Failed:
    """The prompt builder or the harness raised."""

    what: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class _Spawned:
    number: int
    session: AgentSession


@dataclass(frozen=True, slots=True)
class _Agent:
    number: int
    event: AgentEvent


@dataclass(frozen=True, slots=True)
class _Ended:
    number: int
    exited: SessionExited


@dataclass(frozen=True, slots=True)
class _Timer:
    kind: Literal["backoff", "grace", "window"]
    generation: int


@dataclass(frozen=True, slots=True)
class _Command:
    kind: Literal["urgent", "stop"]


_Item: TypeAlias = _Built | _Failed | _Spawned | _Agent | _Ended | _Timer | _Command


def _default_prompt(template: SessionSpec) -> PromptBuilder:
    def build(request: PromptRequest) -> str:
        if not request.urgent_messages:
            return template.prompt
        return "\n\n".join((template.prompt, *request.urgent_messages))

    return build


class SessionSupervisor:
    """Runs agent sessions for one codon, one at a time, through seed 002.

    ``harness`` starts the sessions; ``spec`` is the template of every
    session (its ``prompt`` is replaced by ``build_prompt``'s result and its
    ``resume_session_id`` by the last session id once one is known);
    ``build_prompt`` defaults to the template's prompt followed by any urgent
    messages. ``on_event`` receives the agent's events and the supervisor's
    (:data:`SupervisorEvent`). Call :meth:`run` once.
    """

    def __init__(
        self,
        harness: Harness,
        spec: SessionSpec,
        build_prompt: PromptBuilder | None = None,
        *,
        max_consecutive_errors: int = 5,
        max_total_errors: int = 20,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        max_retry_after_ms: int = DEFAULT_MAX_RETRY_AFTER_MS,
        clock: Clock | None = None,
        on_event: EventSink | None = None,
        wall_ms: Callable[[], int] | None = None,
        window_margin_ms: int = DEFAULT_MARGIN_MS,
        max_window_wait_ms: int = DEFAULT_MAX_WAIT_MS,
    ) -> None:
        if interrupt_grace < 0:
            raise ValueError(f"interrupt_grace must be >= 0 seconds, not {interrupt_grace}")
        for name, value in (
            ("max_consecutive_errors", max_consecutive_errors),
            ("max_total_errors", max_total_errors),
        ):
            if not 0 <= value < 2**32:
                raise ValueError(f"{name} must be between 0 and 2**32 - 1, not {value}")
        self._harness = harness
        self._spec = spec
        self._build_prompt = build_prompt or _default_prompt(spec)
        self._machine = SessionMachine(
            max_consecutive_errors=max_consecutive_errors, max_total_errors=max_total_errors
        )
        self._grace_s = interrupt_grace
        self._max_retry_after_ms = max_retry_after_ms
        self._clock: Clock = clock or SystemClock()
        self._on_event = on_event
        self._started = False
        self._closing = False
        self._finished: asyncio.Event | None = None
        self._cleaned_up: asyncio.Event | None = None
        self._done = False
        self._failure: BaseException | None = None
        self._operator_stop = False
        self._stopped_by_operator = False
        self._number = 0
        self._reason = PromptReason.INITIAL
        self._pending: list[str] = []
        self._resume_id = spec.resume_session_id
        self._session_ids: list[str] = []
        self._last_exit: SessionExited | None = None
        self._fatal: str | None = None
        self._interrupts = 0
        self._live: _Live | None = None
        self._build: asyncio.Task[None] | None = None
        self._build_generation = 0
        self._spawn: asyncio.Task[None] | None = None
        self._cooldown: asyncio.Task[None] | None = None
        self._cooldown_generation = 0
        self._cooldown_ms = 0
        self._wall_ms = wall_ms or (lambda: time.time_ns() // 1_000_000)
        self._window_margin_ms = window_margin_ms
        self._max_window_wait_ms = max_window_wait_ms
        self._chores: set[asyncio.Task[None]] = set()

    # -- public API ------------------------------------------------------------

    @property
    def state(self) -> str:
        """The machine's current state (``Initializing`` ... ``Stopped``)."""
        return self._machine.state

    async def run(self) -> SupervisorResult:
        """Run sessions until one succeeds (with no urgent message left), the
        machine stops on an error, or :meth:`stop`. Every process has been
        reaped when it returns, also when it raises or is cancelled."""
        if self._started:
            raise RuntimeError("a SessionSupervisor runs only once")
        self._started = True
        self._finished = asyncio.Event()
        self._cleaned_up = asyncio.Event()
        try:
            if self._operator_stop:
                self._handle(_Command("stop"))
            else:
                self._handle_start()
            # An urgent message can still turn SessionComplete into a
            # follow-up session before this task wakes, so look again.
            while self._failure is None and self._machine.state not in _FINAL:
                self._finished.clear()
                await self._finished.wait()
        finally:
            await self._shutdown()
            self._done = True
            self._cleaned_up.set()
        if self._failure is not None:
            raise self._failure
        return self._result()

    async def urgent(self, message: str) -> bool:
        """Deliver ``message`` as soon as the machine allows (see the module
        docs). Returns ``False`` when the supervisor has already finished."""
        if self._done or self._closing or self._operator_stop or self._machine.is_stopped:
            return False
        self._pending.append(message)
        if self._started:
            self._handle(_Command("urgent"))
        return True

    async def stop(self) -> None:
        """Operator stop: stop any live session and end :meth:`run`. Returns
        once :meth:`run` has cleaned up (at once if it never started)."""
        self._operator_stop = True
        if not self._started or self._done:
            return
        self._handle(_Command("stop"))
        assert self._cleaned_up is not None
        await self._cleaned_up.wait()

    # -- dispatch --------------------------------------------------------------

    def _handle_start(self) -> None:
        try:
            self._perform(self._machine.worktree_ready())
            self._advance()
        except Exception as e:
            self._crash(e)

    def _handle(self, item: _Item) -> None:
        """Apply one happening. Runs synchronously in whichever task saw it,
        so the machine is never touched by two things at once."""
        try:
            if self._closing:
                self._dispatch_closing(item)
                return
            self._dispatch(item)
            self._advance()
        except Exception as e:
            self._crash(e)
            return
        if self._machine.state in _FINAL and self._finished is not None:
            self._finished.set()

    def _crash(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        if self._finished is not None:
            self._finished.set()

    def _dispatch(self, item: _Item) -> None:
        m = self._machine
        live = self._live
        if isinstance(item, _Agent):
            self._emit(item.event)
            if live is None or live.number != item.number:
                return
            event = item.event
            if isinstance(event, SessionStarted):
                self._note_session_id(event.session_id)
                if m.state == "Spawning":
                    self._perform(m.session_started(live.number))
            elif isinstance(event, SessionExited):
                self._on_verdict(live, event)
        elif isinstance(item, _Ended):
            if live is None or live.number != item.number:
                return
            if not live.verdict_seen:
                # The stream ended without its verdict; wait() still has it.
                self._emit(item.exited)
                self._on_verdict(live, item.exited)
            if live.grace is not None:
                live.grace.cancel()
            self._live = None
        elif isinstance(item, _Built):
            if item.generation != self._build_generation or m.state != "BuildingPrompt":
                return
            self._build = None
            if len(self._pending) > item.urgent_included:
                self._start_build()  # a message came in while it was built
                return
            del self._pending[: item.urgent_included]
            self._perform(m.prompt_ready(item.prompt))
            self._start_spawn(item.prompt)
        elif isinstance(item, _Spawned):
            self._spawn = None
            self._adopt(item)
        elif isinstance(item, _Failed):
            self._build = self._spawn = None
            if not m.is_stopped:
                self._perform(m.fatal_error(f"{item.what}: {item.error}"))
        elif isinstance(item, _Timer):
            self._on_timer(item)
        elif item.kind == "stop" and not m.is_stopped:
            state = m.state
            self._stopped_by_operator = True
            self._perform(m.operator_stop())
            self._emit(SupervisorStopped(state=state))
        # "urgent": the message is already pending; _advance delivers it.

    def _on_timer(self, item: _Timer) -> None:
        m = self._machine
        live = self._live
        if item.kind == "backoff":
            if item.generation == self._cooldown_generation and m.state == "CoolingDown":
                self._cooldown = None
                self._perform(m.backoff_elapsed())
                self._emit(CooldownEnded(session=self._number, duration_ms=self._cooldown_ms))
            return
        if item.kind == "window":
            if item.generation == self._cooldown_generation and m.state == "Parked":
                self._cooldown = None
                self._perform(m.window_opened())
                self._emit(WindowOpened(session=self._number))
            return
        if live is not None and live.number == item.generation and m.state == "Interrupting":
            self._perform(m.grace_exceeded())
            self._emit(InterruptForced(session=live.number, grace_s=self._grace_s))

    def _advance(self) -> None:
        """Start what the current state calls for and is not yet under way."""
        m = self._machine
        state = m.state
        if state == "SessionComplete" and self._pending:
            self._reason = PromptReason.FOLLOW_UP
            self._perform(m.worktree_ready())
            state = m.state
        if state == "BuildingPrompt":
            # One session at a time: the next prompt is built (and spawned)
            # only once the previous process is reaped.
            if self._live is None and self._build is None and self._spawn is None:
                self._start_build()
        elif state == "Running" and self._pending and self._live is not None:
            live = self._live
            self._interrupts += 1
            self._reason = PromptReason.INTERRUPT
            self._perform(m.urgent_message())
            self._emit(
                InterruptRequested(
                    session=live.number, messages=tuple(self._pending), grace_s=self._grace_s
                )
            )
            live.grace = self._task(self._timer("grace", live.number, self._grace_s))

    def _on_verdict(self, live: _Live, exited: SessionExited) -> None:
        """Feed the verdict of the live session to the machine."""
        if live.verdict_seen:
            return
        live.verdict_seen = True
        self._last_exit = exited
        if exited.session_id:
            self._note_session_id(exited.session_id)
        m = self._machine
        state = m.state
        if state == "Interrupting":
            if live.grace is not None:
                live.grace.cancel()
            # Any outcome: the machine does not count an exit it asked for.
            self._perform(m.session_exited("Success" if exited.ok else "Error", None))
            return
        if state not in ("Spawning", "Running"):
            return  # stopped, or killed after its grace: already accounted for
        window = exited.window
        if (
            exited.error_class is ErrorClass.USAGE_LIMIT
            and window is not None
            and window.resets_at_ms is not None
        ):
            self._park(live.number, exited, window.resets_at_ms, window.window)
            return
        if exited.ok:
            if state == "Spawning":
                # It succeeded without reporting a session first: it started.
                self._perform(m.session_started(live.number))
            self._perform(m.session_exited("Success"))
        elif exited.error_class is ErrorClass.TIMEOUT:
            self._perform(m.session_exited("Timeout"))
        elif exited.retriable:
            self._perform(m.session_exited("Error", describe(exited)))
        else:
            self._perform(
                m.fatal_error(f"session {live.number} failed, not retriable: {describe(exited)}")
            )
        if m.state == "CoolingDown":
            self._start_cooldown(live.number, exited)

    def _perform(self, effects: list[SessionEffect]) -> None:
        for effect in effects:
            kind = effect.kind
            if kind == "StorePrompt":
                assert effect.prompt is not None
                number = self._number + 1
                self._emit(PromptStored(session=number, reason=self._reason, prompt=effect.prompt))
            elif kind == "CancelSession":
                reason = StopReason.INTERRUPT
                if self._machine.is_stopped:
                    reason = StopReason.OPERATOR
                self._stop_live(reason)
            elif kind == "ForceStopSession":
                live = self._live
                if live is not None:
                    live.stopping = True
                    self._task(live.session.kill())
            elif kind == "LogFatal":
                message = effect.message or ""
                log.error("agent session supervisor stopped: %s", message)
                self._fatal = message
                self._emit(SupervisorFatal(message=message))
            # IncrementSession: every spawn is numbered already.

    # -- activities (tasks that report back through _handle) ----------------------

    def _start_build(self) -> None:
        self._build_generation += 1
        request = PromptRequest(
            session=self._number + 1,
            reason=self._reason,
            urgent_messages=tuple(self._pending),
            resume_session_id=self._resume_id,
            last_exit=self._last_exit,
        )
        self._build = self._task(self._run_build(self._build_generation, request))

    async def _run_build(self, generation: int, request: PromptRequest) -> None:
        try:
            built = self._build_prompt(request)
            prompt = await built if inspect.isawaitable(built) else built
            if not isinstance(prompt, str):
                raise TypeError(f"the prompt builder returned {type(prompt).__name__}, not str")
        except Exception as e:
            self._handle(_Failed(f"could not build the prompt of session {request.session}", e))
            return
        self._handle(_Built(generation, prompt, len(request.urgent_messages)))

    def _start_spawn(self, prompt: str) -> None:
        self._number += 1
        spec = dataclasses.replace(self._spec, prompt=prompt, resume_session_id=self._resume_id)
        self._spawn = self._task(self._run_spawn(self._number, spec))

    async def _run_spawn(self, number: int, spec: SessionSpec) -> None:
        try:
            session = await self._harness.start(spec)
        except Exception as e:
            self._handle(_Failed(f"could not start session {number} ({self._harness.name})", e))
            return
        self._handle(_Spawned(number, session))

    def _adopt(self, item: _Spawned) -> None:
        assert self._live is None, "two sessions at once"
        live = _Live(item.number, item.session)
        self._live = live
        live.reader = self._task(self._read(live))
        self._emit(
            SessionSpawned(
                session=item.number, pid=item.session.pid, resume_session_id=self._resume_id
            )
        )

    async def _read(self, live: _Live) -> None:
        session = live.session
        try:
            async for event in session.events():
                self._handle(_Agent(live.number, event))
            exited = await session.wait()
        except Exception as e:
            # A broken adapter: make sure the process is gone, then report.
            log.exception("the %s session %d failed", self._harness.name, live.number)
            with contextlib.suppress(Exception):
                await session.kill()
            exited = SessionExited(
                ok=False,
                exit_code=None,
                message=f"the {self._harness.name} adapter failed: {e!r}",
            )
        self._handle(_Ended(live.number, exited))

    def _start_cooldown(self, number: int, exited: SessionExited) -> None:
        backoff = self._machine.cooldown_ms or 0
        hint = exited.retry_after_ms
        if hint is not None and not 0 < hint <= self._max_retry_after_ms:
            hint = None
        duration = max(backoff, hint or 0)
        self._cooldown_ms = duration
        self._reason = PromptReason.RETRY
        self._emit(
            CooldownStarted(
                session=number,
                duration_ms=duration,
                backoff_ms=backoff,
                retry_after_ms=hint,
                outcome="Timeout" if exited.error_class is ErrorClass.TIMEOUT else "Error",
                message=exited.message,
                consecutive_errors=self._machine.consecutive_errors,
                total_errors=self._machine.total_errors,
            )
        )
        self._cooldown_generation += 1
        self._cooldown = self._task(
            self._timer("backoff", self._cooldown_generation, duration / 1000)
        )

    def _park(
        self, number: int, exited: SessionExited, resets_at_ms: int, window: str | None
    ) -> None:
        """A closed usage window: park until it opens, or stop when that is
        further off than ``max_window_wait_ms``."""
        m = self._machine
        wait = decide(
            resets_at_ms,
            self._wall_ms(),
            margin_ms=self._window_margin_ms,
            max_wait_ms=self._max_window_wait_ms,
        )
        if not isinstance(wait, Park):
            self._perform(
                m.fatal_error(
                    f"session {number} was refused by a usage window that opens in "
                    f"{wait.wait_ms / 3_600_000:.1f} h, longer than max_window_wait_ms allows: "
                    f"{describe(exited)}"
                )
            )
            return
        self._perform(m.window_closed(wait.wait_ms))
        self._reason = PromptReason.RETRY
        self._emit(
            WindowParked(
                session=number,
                resets_at_ms=resets_at_ms,
                resume_at_ms=wait.resume_at_ms,
                wait_ms=wait.wait_ms,
                window=window,
            )
        )
        self._cooldown_generation += 1
        self._cooldown = self._task(
            self._timer("window", self._cooldown_generation, wait.wait_ms / 1000)
        )

    async def _timer(
        self, kind: Literal["backoff", "grace", "window"], generation: int, s: float
    ) -> None:
        await self._clock.sleep(s)
        self._handle(_Timer(kind, generation))

    def _stop_live(self, reason: StopReason) -> None:
        live = self._live
        if live is None or live.stopping or live.verdict_seen:
            return
        live.stopping = True
        self._task(live.session.stop(reason))

    def _task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)
        return task

    # -- shutdown ---------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop whatever is under way and wait until no process is left."""
        self._closing = True
        for task in (self._build, self._cooldown):
            if task is not None:
                task.cancel()
        if self._live is not None and self._live.grace is not None:
            self._live.grace.cancel()
        if self._spawn is not None:
            # Not cancelled: a half-started process would be lost. Its
            # session is adopted by _dispatch_closing, and stopped below.
            await asyncio.wait({self._spawn})
        live = self._live
        if live is not None:
            self._stop_live(StopReason.OPERATOR if self._operator_stop else StopReason.SHUTDOWN)
            if live.reader is not None:
                # The session's own stop sequence ends in SIGKILL; this
                # backstop (real time) only guards against a broken adapter.
                t = self._spec.timeouts
                backstop = t.flush_grace + t.stop_grace + SHUTDOWN_BACKSTOP
                done, _ = await asyncio.wait({live.reader}, timeout=backstop)
                if not done:
                    log.warning(
                        "session %d did not end %.0f s after its stop; killing it",
                        live.number,
                        backstop,
                    )
                    with contextlib.suppress(Exception):
                        await live.session.kill()
                    await asyncio.wait({live.reader})
        while self._chores:
            await asyncio.wait(set(self._chores))

    def _dispatch_closing(self, item: _Item) -> None:
        """While shutting down: keep reporting, adopt a session that was
        still starting (to stop it), and change nothing else."""
        if isinstance(item, _Spawned):
            self._spawn = None
            self._adopt(item)
        elif isinstance(item, _Agent):
            self._emit_quietly(item.event)
            live = self._live
            if isinstance(item.event, SessionExited) and live and live.number == item.number:
                live.verdict_seen = True
                self._last_exit = item.event
        elif isinstance(item, _Ended):
            live = self._live
            if live is not None and live.number == item.number:
                if not live.verdict_seen:
                    live.verdict_seen = True
                    self._last_exit = item.exited
                    self._emit_quietly(item.exited)
                self._live = None

    # -- reporting ----------------------------------------------------------------

    def _emit(self, event: AgentEvent | SupervisorEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)

    def _emit_quietly(self, event: AgentEvent | SupervisorEvent) -> None:
        try:
            self._emit(event)
        except Exception as e:
            # Clean-up goes on; the first failure is what run() raises.
            if self._failure is None:
                self._failure = e

    def _note_session_id(self, session_id: str) -> None:
        if session_id not in self._session_ids:
            self._session_ids.append(session_id)
        self._resume_id = session_id

    def _result(self) -> SupervisorResult:
        m = self._machine
        return SupervisorResult(
            state=m.state,
            sessions=self._number,
            errors=m.total_errors,
            consecutive_errors=m.consecutive_errors,
            interrupts=self._interrupts,
            last_exit=self._last_exit,
            session_ids=tuple(self._session_ids),
            fatal=self._fatal,
            stopped_by_operator=self._stopped_by_operator,
        )


def describe(exited: SessionExited) -> str:
    """A one-line account of a failed verdict for logs and fatal messages."""
    parts = []
    if exited.error_class is not None:
        parts.append(str(exited.error_class))
    if exited.message:
        parts.append(exited.message)
    if exited.exit_code is not None:
        parts.append(f"exit code {exited.exit_code}")
    elif exited.signal is not None:
        parts.append(f"signal {exited.signal}")
    return ", ".join(parts) or "failed with no detail"


__all__ = [
    "DEFAULT_INTERRUPT_GRACE",
    "DEFAULT_MAX_RETRY_AFTER_MS",
    "SHUTDOWN_BACKSTOP",
    "Clock",
    "CooldownEnded",
    "CooldownStarted",
    "EventSink",
    "InterruptForced",
    "InterruptRequested",
    "PromptBuilder",
    "PromptReason",
    "PromptRequest",
    "PromptStored",
    "SessionSpawned",
    "SessionSupervisor",
    "SupervisorEvent",
    "SupervisorFatal",
    "SupervisorResult",
    "SupervisorStopped",
    "SystemClock",
    "WindowOpened",
    "WindowParked",
    "describe",
]
