"""The session supervisor of one codon attempt in ``weft run`` (seed 002).

:class:`SessionRetries` keeps the agent-session machine of seed 002
(:class:`weft.core.SessionMachine`) for one attempt and tells the codon
runner, after each agent process ends, whether to resume the session:

* a clean exit, an operator interrupt, a full disk or a permanent error
  (auth, billing, an invalid request, a full context...) ends the
  sessions: the runner finishes the attempt as before;
* a session refused because the provider's usage window is closed
  (``usage_limit`` with the time it opens) parks: the machine's ``Parked``
  state, no error counted, until the reset plus ``usageWindow.marginMs``
  (:class:`Parking`), unless that is further off than
  ``usageWindow.maxWaitMs`` (:class:`WindowTooFar`: the codon fails);
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
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

from weft._core import SessionMachine
from weft.agents.events import ErrorClass, SessionExited
from weft.config.runtime import RuntimeSessionSettings, RuntimeUsageWindowSettings
from weft.terminal import plural
from weft.windows.park import Park, decide

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

MAX_PARKS_IN_A_ROW = 20
"""Refusals by a closed usage window, one after another, that fail the codon."""

WINDOW_PROMPT = (
    "Your previous session was refused because the usage window was closed; it is open "
    "again. Carry on with the task."
)
"""The prompt of a session resumed when the usage window it was refused by opened."""


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


@dataclass(frozen=True, slots=True)
class Parking:
    """The provider's usage window is closed: wait, then resume (no error counted)."""

    resets_at_ms: int
    wait: Park
    window: str | None
    message: str | None


@dataclass(frozen=True, slots=True)
class WindowTooFar:
    """The window opens later than ``usageWindow.maxWaitMs`` allows waiting."""

    message: str


def is_transient(exit: SessionExited) -> bool:
    """Whether waiting and resuming may help (the supervisor's verdict mapping)."""
    if exit.ok or exit.log_error is not None or exit.context_exceeded:
        return False
    return exit.error_class is ErrorClass.TIMEOUT or exit.retriable


class SessionRetries:
    """The seed 002 machine of one codon attempt, fed by the runner."""

    def __init__(
        self,
        settings: RuntimeSessionSettings,
        usage_window: RuntimeUsageWindowSettings | None = None,
    ) -> None:
        self.settings = settings
        self.usage_window = usage_window or RuntimeUsageWindowSettings()
        self.machine = SessionMachine(
            max_consecutive_errors=settings.max_consecutive_errors,
            max_total_errors=settings.max_total_errors,
        )
        self.sessions = 0
        self.failed_in_a_row = 0
        """Transient failures since a session last ended well: the backoff's ``n``."""
        self.parked_in_a_row = 0
        """Refusals by a closed usage window since a session last ran to its end."""
        self.machine.worktree_ready()

    def spawning(self, prompt: str) -> int:
        """A session is about to start with ``prompt``: its number."""
        self.machine.prompt_ready(prompt)
        self.sessions += 1
        return self.sessions

    def exited(
        self, exit: SessionExited, *, started: bool, now_ms: int = 0
    ) -> Cooldown | GaveUp | Parking | WindowTooFar | None:
        """The verdict of the current session (``started``: it reported its
        session id; ``now_ms``: the wall clock, for a usage window's reset).
        A :class:`Cooldown` to wait before the next session, :class:`GaveUp`
        when a threshold stopped the machine, :class:`Parking` until a usage
        window opens (or :class:`WindowTooFar`), or None when the sessions
        are over for any other reason (success, permanent error)."""
        m = self.machine
        if m.state == "Spawning" and started:
            m.session_started(m.session_seq)
        window = exit.window
        if (
            exit.error_class is ErrorClass.USAGE_LIMIT
            and window is not None
            and window.resets_at_ms is not None
        ):
            return self._window_closed(exit, window.resets_at_ms, window.window, now_ms)
        if not is_transient(exit):
            if exit.ok and m.state == "Running":
                m.session_exited("Success")
                self.failed_in_a_row = self.parked_in_a_row = 0
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

    def _window_closed(
        self, exit: SessionExited, resets_at_ms: int, window: str | None, now_ms: int
    ) -> Parking | WindowTooFar:
        settings = self.usage_window
        wait = decide(
            resets_at_ms, now_ms, margin_ms=settings.margin_ms, max_wait_ms=settings.max_wait_ms
        )
        self.parked_in_a_row += 1
        if self.parked_in_a_row > MAX_PARKS_IN_A_ROW:
            # A provider that names a reset and refuses again after it (a clock
            # far off, a window that never opens) would be waited on forever.
            message = (
                f"the usage window refused {MAX_PARKS_IN_A_ROW} sessions in a row, each "
                f"after the time it said it opens: {exit.message or 'usage limit'}"
            )
            self.machine.fatal_error(message)
            return WindowTooFar(message)
        if isinstance(wait, Park):
            self.machine.window_closed(wait.wait_ms)
            return Parking(resets_at_ms, wait, window, exit.message)
        message = (
            f"the usage window{f' ({window})' if window else ''} is closed until "
            f"{_utc(resets_at_ms)}, {_hours(wait.wait_ms)} from now; usageWindow.maxWaitMs "
            f"allows waiting {_hours(wait.max_wait_ms)}"
            + (f" ({exit.message})" if exit.message else "")
        )
        self.machine.fatal_error(message)
        return WindowTooFar(message)

    def window_opened(self) -> None:
        """The usage window the machine parked for is open: the next prompt is built."""
        self.machine.window_opened()

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


def _utc(epoch_ms: int) -> str:
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _hours(ms: int) -> str:
    return f"{ms / 3_600_000:.1f} h"


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
    "MAX_PARKS_IN_A_ROW",
    "RETRY_PROMPT",
    "WINDOW_PROMPT",
    "Cooldown",
    "GaveUp",
    "Parking",
    "SessionRetries",
    "Sleep",
    "WindowTooFar",
    "cool_down",
    "is_transient",
    "with_messages",
]
