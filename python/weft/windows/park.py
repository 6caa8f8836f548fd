"""Whether and until when to park on a closed usage window: a pure decision.

No clock is read here: the caller passes ``now_ms`` (wall-clock epoch
milliseconds, because ``resetsAt`` is wall-clock epoch seconds).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

__all__ = ["DEFAULT_MARGIN_MS", "DEFAULT_MAX_WAIT_MS", "Park", "TooLong", "decide", "until_words"]

DEFAULT_MARGIN_MS = 10_000
"""Waited past ``resetsAt``: the provider's clock and ours differ by a little,
and a session that arrives a second early burns a whole retry."""
DEFAULT_MAX_WAIT_MS = 7 * 24 * 3_600_000
"""The longest a codon waits for a window by default: the longest window
(``seven_day``) a provider reports."""


@dataclass(frozen=True, slots=True)
class Park:
    """Wait until ``resume_at_ms`` (epoch ms), then resume the session."""

    resume_at_ms: int
    wait_ms: int


@dataclass(frozen=True, slots=True)
class TooLong:
    """The window opens later than the settings allow waiting: the codon fails."""

    resume_at_ms: int
    wait_ms: int
    max_wait_ms: int


def decide(resets_at_ms: int, now_ms: int, *, margin_ms: int, max_wait_ms: int) -> Park | TooLong:
    """Park until ``resets_at_ms + margin_ms``, unless that is more than
    ``max_wait_ms`` away. A reset already past still waits the margin: the
    provider said no a moment ago."""
    resume_at = max(resets_at_ms, now_ms) + margin_ms
    wait = resume_at - now_ms
    if wait > max_wait_ms:
        return TooLong(resume_at_ms=resume_at, wait_ms=wait, max_wait_ms=max_wait_ms)
    return Park(resume_at_ms=resume_at, wait_ms=wait)


def until_words(resume_at_ms: int, provider: str, window: str | None) -> str:
    """``15:05 UTC (anthropic five_hour window)``: when a parked codon resumes.
    A clock time, not a countdown: views redraw at events, not every second,
    and a codon parks for hours."""
    at = dt.datetime.fromtimestamp(resume_at_ms / 1000, dt.UTC)
    when = at.strftime("%H:%M UTC") if at.second == 0 else at.strftime("%H:%M:%S UTC")
    return f"{when} ({provider}{f' {window}' if window else ''} window)"
