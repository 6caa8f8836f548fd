"""The failure policy of a codon (hank ``onFailure`` and ``retryConfig``).

Pure decisions, no I/O: the supervisor asks what to do after a failed attempt
and gets an action and, for a retry, the delay. ``abort`` ends the run;
``retry`` runs the codon again while the failure is retriable and attempts
remain, waiting ``delayMs * 2**attempt`` for the 0-based number of the attempt
that failed (so ``delayMs`` before the first retry), capped at ``maxDelayMs``;
an agent's Retry-After hint wins when it is longer; ``ignore`` records the failure and
goes on with the next codon.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from weft.config.schema import Codon, RetryConfig

DEFAULT_RETRY = RetryConfig()


class Action(enum.StrEnum):
    """What the run does after a codon failed."""

    ABORT = "abort"
    RETRY = "retry"
    IGNORE = "ignore"


@dataclass(frozen=True, slots=True)
class Decision:
    """An action, the delay before a retry (ms), and why."""

    action: Action
    delay_ms: int = 0
    reason: str = ""


def retry_delay_ms(config: RetryConfig, failed: int, retry_after_ms: int | None = None) -> int:
    """The wait after ``failed`` attempts (1 after the first): ``delayMs *
    2**(failed - 1)`` capped at ``maxDelayMs``; a longer Retry-After wins."""
    backoff: int = min(config.delay_ms * 2 ** (failed - 1), config.max_delay_ms)
    return max(backoff, retry_after_ms or 0)


def decide(codon: Codon, *, attempt: int, retriable: bool, retry_after_ms: int | None) -> Decision:
    """What to do after attempt number ``attempt`` (1-based) of ``codon`` failed."""
    policy = codon.on_failure
    if policy == "ignore":
        return Decision(Action.IGNORE, reason="onFailure is ignore")
    if policy == "retry":
        config = codon.retry_config or DEFAULT_RETRY
        if not retriable:
            return Decision(Action.ABORT, reason="the failure is not retriable")
        if attempt >= config.max_attempts:
            return Decision(Action.ABORT, reason=f"all {config.max_attempts} attempts failed")
        return Decision(
            Action.RETRY,
            delay_ms=retry_delay_ms(config, attempt, retry_after_ms),
            reason=f"attempt {attempt} of {config.max_attempts} failed",
        )
    return Decision(Action.ABORT, reason="onFailure is abort")
