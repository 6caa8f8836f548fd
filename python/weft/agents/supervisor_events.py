"""What the session supervisor (:mod:`weft.agents.supervisor`) is asked and
what it reports: the prompt request its builder gets, the events it emits
beside the agent's own, and how its run ended.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import msgspec

from weft.agents.events import AgentEvent, SessionExited


class PromptReason(enum.StrEnum):
    """Why a prompt is being built."""

    INITIAL = "initial"
    """The first session."""
    RETRY = "retry"
    """After a retriable error and its cool-down."""
    INTERRUPT = "interrupt"
    """After an urgent message interrupted a session."""
    FOLLOW_UP = "follow_up"
    """After a successful session, for urgent messages that came too late
    for it."""


@dataclass(frozen=True, slots=True)
class PromptRequest:
    """What a prompt builder is told."""

    session: int
    """The number of the session the prompt is for (1-based)."""
    reason: PromptReason
    urgent_messages: tuple[str, ...]
    """Urgent messages not yet delivered, oldest first; the prompt should
    carry them."""
    resume_session_id: str | None
    """The session the new one resumes (``None``: a fresh session)."""
    last_exit: SessionExited | None
    """The verdict of the previous session, if any."""


PromptBuilder: TypeAlias = Callable[[PromptRequest], str | Awaitable[str]]
"""Builds the prompt of the next session; may be a plain or an async function."""


# -- supervisor events -------------------------------------------------------------


class _SupervisorEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of the supervisor's own events."""


class PromptStored(_SupervisorEvent, frozen=True, tag="supervisor.prompt_stored"):
    """``StorePrompt``: the prompt session ``session`` is spawned with."""

    session: int
    reason: PromptReason
    prompt: str


class SessionSpawned(_SupervisorEvent, frozen=True, tag="supervisor.session_spawned"):
    """Session ``session`` was started; the agent's events follow."""

    session: int
    pid: int
    resume_session_id: str | None


class CooldownStarted(_SupervisorEvent, frozen=True, tag="supervisor.cooldown_started"):
    """A retriable failure of ``session``; the next spawn waits ``duration_ms``."""

    session: int
    duration_ms: int
    backoff_ms: int
    """The seed's backoff for ``consecutive_errors``."""
    retry_after_ms: int | None
    """The verdict's Retry-After hint, when one was used."""
    outcome: Literal["Error", "Timeout"]
    message: str | None
    consecutive_errors: int
    total_errors: int


class CooldownEnded(_SupervisorEvent, frozen=True, tag="supervisor.cooldown_ended"):
    """The cool-down after ``session`` is over."""

    session: int
    duration_ms: int


class WindowParked(_SupervisorEvent, frozen=True, tag="supervisor.window_parked"):
    """Session ``session`` was refused by a closed usage window: the next one
    waits ``wait_ms``, until ``resume_at_ms`` (epoch ms), counting no error."""

    session: int
    resets_at_ms: int
    resume_at_ms: int
    wait_ms: int
    window: str | None


class WindowOpened(_SupervisorEvent, frozen=True, tag="supervisor.window_opened"):
    """The usage window the supervisor parked for is open."""

    session: int


class InterruptRequested(_SupervisorEvent, frozen=True, tag="supervisor.interrupt"):
    """Urgent messages arrived: session ``session`` is being stopped."""

    session: int
    messages: tuple[str, ...]
    grace_s: float


class InterruptForced(_SupervisorEvent, frozen=True, tag="supervisor.interrupt_forced"):
    """Session ``session`` outlived its grace period and was killed."""

    session: int
    grace_s: float


class SupervisorFatal(_SupervisorEvent, frozen=True, tag="supervisor.fatal"):
    """``LogFatal``: the supervisor stopped for good."""

    message: str


class SupervisorStopped(_SupervisorEvent, frozen=True, tag="supervisor.stopped"):
    """The operator stopped the supervisor."""

    state: str
    """The machine's state when the stop arrived."""


SupervisorEvent: TypeAlias = (
    PromptStored
    | SessionSpawned
    | CooldownStarted
    | CooldownEnded
    | WindowParked
    | WindowOpened
    | InterruptRequested
    | InterruptForced
    | SupervisorFatal
    | SupervisorStopped
)
"""Every supervisor event."""

EventSink: TypeAlias = Callable[[AgentEvent | SupervisorEvent], None]
"""Receives every agent event and supervisor event, in order. It runs on the
event loop and must not block; an exception it raises ends :meth:`run`."""


@dataclass(frozen=True, slots=True)
class SupervisorResult:
    """How a supervisor's run ended."""

    state: str
    """The machine's final state: ``SessionComplete`` or ``Stopped``."""
    sessions: int
    """Sessions spawned."""
    errors: int
    """Failures counted by the machine (``total_errors``)."""
    consecutive_errors: int
    interrupts: int
    last_exit: SessionExited | None
    """The verdict of the last session that ended."""
    session_ids: tuple[str, ...]
    """Every session id the agent reported, in order of first appearance."""
    fatal: str | None
    """The ``LogFatal`` message, when the run stopped on an error."""
    stopped_by_operator: bool

    @property
    def ok(self) -> bool:
        """Whether the last session completed successfully."""
        return self.state == "SessionComplete"
