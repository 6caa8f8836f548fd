"""The session supervisor of one codon attempt in ``weft run`` (seed 002).

:class:`SessionRetries` keeps the agent-session machine of seed 002
(:class:`weft.core.SessionMachine`) for one attempt and tells the codon
runner, after each agent process ends, whether to resume the session:

* a clean exit, an operator interrupt, a full disk or a permanent error
  (auth, billing, an invalid request, a full context...) ends the
  sessions: the runner finishes the attempt as before;
* a transient failure (``retriable`` verdicts: rate limit, overload, a crash
  mid-run; and the first-output / idle ``timeout``) cools down, then the
  runner resumes the same session (or starts again when the agent never
  reported one), until the machine's thresholds (``session.*`` runtime
  settings) stop it. Only then does the codon fail and the hank's
  ``onFailure`` / ``retryConfig`` apply.

The cool-down is ``min(backoffBaseMs * 2^(n-1), backoffMaxMs)`` for the
``n``-th failure in a row (the seed's schedule with its 2 s / 60 s defaults:
2, 4, 8, 16, 32, then 60 s), or the agent's ``Retry-After`` when that is
longer. ``n`` counts the attempt's transient failures since a session last
ended well, whether or not the failed sessions had started: the machine's own
``consecutive_errors`` restarts at every session start (the seed's table, which
its thresholds keep), and a provider that fails each session right after it
starts would otherwise be retried every 2 s until the total threshold. Each cool-down, resume
and give-up is a journaled stream event (``session.cooldown``,
``session.resumed``, ``session.gave-up``). The sleep is injected
(:data:`Sleep`), so tests do not wait real seconds.

The library :class:`weft.agents.supervisor.SessionSupervisor` runs the same
machine for embedders that hand it a harness; the codon runner keeps its own
spawn, stream and cost path (the one ``exhaustWithPrompt`` extensions use,
so the attempt's cost is the sum of its sessions), and asks this module only
for the decisions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

from weft._core import SessionMachine
from weft.agents.events import ErrorClass, SessionExited
from weft.config.runtime import RuntimeSessionSettings
from weft.terminal import plural

Sleep: TypeAlias = Callable[[float], Awaitable[None]]
"""Waits the given seconds (:func:`asyncio.sleep` unless a test injects one)."""


def with_messages(prompt: str, messages: list[str]) -> str:
    """``prompt`` followed by the user's messages (the next prompt built)."""
    if not messages:
        return prompt
    return "\n\n".join([prompt, "Messages from the user:", *messages])


RETRY_PROMPT = (
    "Your previous session was cut short by an error ({what}). Continue the task "
    "from where you left off."
)
"""The prompt of a session resumed after a transient failure."""


@dataclass(frozen=True, slots=True)
class Cooldown:
    """Wait ``duration_ms``, then resume: the figures of one cool-down."""

    duration_ms: int
    backoff_ms: int
    retry_after_ms: int | None
    error_class: str
    message: str | None
    consecutive_errors: int
    total_errors: int


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A threshold was reached: the codon fails with the last verdict."""

    message: str
    consecutive_errors: int
    total_errors: int


def is_transient(exit: SessionExited) -> bool:
    """Whether waiting and resuming may help (the supervisor's verdict mapping)."""
    if exit.ok or exit.log_error is not None or exit.context_exceeded:
        return False
    return exit.error_class is ErrorClass.TIMEOUT or exit.retriable


class SessionRetries:
    """The seed 002 machine of one codon attempt, fed by the runner."""

    def __init__(self, settings: RuntimeSessionSettings) -> None:
        self.settings = settings
        self.machine = SessionMachine(
            max_consecutive_errors=settings.max_consecutive_errors,
            max_total_errors=settings.max_total_errors,
        )
        self.sessions = 0
        self.failed_in_a_row = 0
        """Transient failures since a session last ended well: the backoff's ``n``."""
        self.machine.worktree_ready()

    def spawning(self, prompt: str) -> int:
        """A session is about to start with ``prompt``: its number."""
        self.machine.prompt_ready(prompt)
        self.sessions += 1
        return self.sessions

    def exited(self, exit: SessionExited, *, started: bool) -> Cooldown | GaveUp | None:
        """The verdict of the current session (``started``: it reported its
        session id). A :class:`Cooldown` to wait before the next session,
        :class:`GaveUp` when a threshold stopped the machine, or None when the
        sessions are over for any other reason (success, permanent error)."""
        m = self.machine
        if m.state == "Spawning" and started:
            m.session_started(m.session_seq)
        if not is_transient(exit):
            if exit.ok and m.state == "Running":
                m.session_exited("Success")
                self.failed_in_a_row = 0
            else:
                m.fatal_error(exit.message or "not retriable")
            return None
        self.failed_in_a_row += 1
        if exit.error_class is ErrorClass.TIMEOUT:
            m.session_exited("Timeout")
        else:
            m.session_exited("Error", exit.message or str(exit.error_class or "error"))
        if m.state != "CoolingDown":
            return GaveUp(
                message=(
                    f"the session supervisor gave up after {plural(m.total_errors, 'failure')} "
                    f"({m.consecutive_errors} in a row): {exit.message or exit.error_class}"
                ),
                consecutive_errors=m.consecutive_errors,
                total_errors=m.total_errors,
            )
        n = max(1, self.failed_in_a_row)
        schedule = self.settings
        backoff = min(schedule.backoff_base_ms * 2 ** min(n - 1, 40), schedule.backoff_max_ms)
        hint = exit.retry_after_ms
        if hint is not None and not 0 < hint <= self.settings.max_retry_after_ms:
            hint = None
        return Cooldown(
            duration_ms=max(backoff, hint or 0),
            backoff_ms=backoff,
            retry_after_ms=hint,
            error_class=str(exit.error_class or "error"),
            message=exit.message,
            consecutive_errors=n,
            total_errors=m.total_errors,
        )

    def interrupted(self, *, started: bool) -> None:
        """An urgent message stopped the current session (seed 002:
        ``UrgentMessage``, then its exit, which counts no error)."""
        m = self.machine
        if m.state == "Spawning":
            # It ran as a process even if it never reported its session.
            m.session_started(m.session_seq)
        if m.state == "Running":
            m.urgent_message()
            m.session_exited("Success")
        elif m.state == "SessionComplete":
            m.worktree_ready()  # a follow-up session (seed: IncrementSession)

    def elapsed(self) -> None:
        """The cool-down is over: the machine builds the next prompt."""
        self.machine.backoff_elapsed()


async def cool_down(seconds: float, sleep: Sleep, woken: asyncio.Event) -> bool:
    """Sleeps ``seconds`` unless ``woken`` is set first (an operator
    interrupt); True when the whole cool-down passed."""
    if woken.is_set():
        return False
    sleeper = asyncio.ensure_future(sleep(seconds))
    waiter = asyncio.ensure_future(woken.wait())
    try:
        await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, waiter):
            task.cancel()
    return not woken.is_set()


__all__ = [
    "RETRY_PROMPT",
    "Cooldown",
    "GaveUp",
    "SessionRetries",
    "Sleep",
    "cool_down",
    "is_transient",
    "with_messages",
]
