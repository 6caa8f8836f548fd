"""The failure policy: every decision after a failed attempt, as a table.

Codons are built from the JSON a hank file holds (``onFailure``, ``retryConfig``), so
the schema's defaults and names are part of what is tested. The expected delays
are written out by hand, not computed with the policy's formula.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.config.schema import Codon, RetryConfig
from weft.runtime.run.policy import Action, Decision, decide, retry_delay_ms


def codon(on_failure: str | None = None, **retry: int) -> Codon:
    """A codon as a hank file writes it; ``retry`` becomes its ``retryConfig``."""
    raw: dict[str, Any] = {
        "id": "c1",
        "name": "c1",
        "model": "fake/sonnet",
        "continuationMode": "fresh",
        "promptText": "go",
    }
    if on_failure is not None:
        raw["onFailure"] = on_failure
    if retry:
        raw["retryConfig"] = retry
    return msgspec.convert(raw, Codon)


# The failures a runner reports, by class, with the ``retriable`` flag each carries
# (agents/events.py ErrorClass; runtime/runner.py for stop, shutdown, internal and crash).
RETRIABLE = ("rate_limit", "overloaded", "crash_mid_run", "timeout", "shutdown")
FINAL = ("auth", "billing", "max_turns", "context_exceeded", "input_error", "stopped", "internal")
CLASSES = [(c, True) for c in RETRIABLE] + [(c, False) for c in FINAL]

ABORT_NOT_RETRIABLE = Decision(Action.ABORT, reason="the failure is not retriable")


# (onFailure, retryConfig, attempt that failed, retriable, Retry-After ms) -> decision
TABLE: list[tuple[str | None, dict[str, int], int, bool, int | None, Decision]] = [
    # abort (also the default): the run ends, whatever failed and however often.
    (None, {}, 1, True, None, Decision(Action.ABORT, reason="onFailure is abort")),
    (None, {}, 1, False, None, Decision(Action.ABORT, reason="onFailure is abort")),
    ("abort", {}, 1, True, 30_000, Decision(Action.ABORT, reason="onFailure is abort")),
    (
        "abort",
        {"maxAttempts": 5},
        2,
        True,
        None,
        Decision(Action.ABORT, reason="onFailure is abort"),
    ),
    # ignore: recorded, the run goes on; never a retry, never a delay.
    ("ignore", {}, 1, True, None, Decision(Action.IGNORE, reason="onFailure is ignore")),
    ("ignore", {}, 1, False, 30_000, Decision(Action.IGNORE, reason="onFailure is ignore")),
    (
        "ignore",
        {"maxAttempts": 5},
        4,
        True,
        None,
        Decision(Action.IGNORE, reason="onFailure is ignore"),
    ),
    # retry with the defaults (3 attempts, 1000 ms doubling, capped at 60 s).
    ("retry", {}, 1, True, None, Decision(Action.RETRY, 1000, "attempt 1 of 3 failed")),
    ("retry", {}, 2, True, None, Decision(Action.RETRY, 2000, "attempt 2 of 3 failed")),
    ("retry", {}, 3, True, None, Decision(Action.ABORT, reason="all 3 attempts failed")),
    ("retry", {}, 1, False, None, ABORT_NOT_RETRIABLE),
    ("retry", {}, 2, False, 5_000, ABORT_NOT_RETRIABLE),
    # Retry-After: a longer hint wins, a shorter one does not shorten the backoff.
    ("retry", {}, 1, True, 30_000, Decision(Action.RETRY, 30_000, "attempt 1 of 3 failed")),
    ("retry", {}, 2, True, 1_500, Decision(Action.RETRY, 2000, "attempt 2 of 3 failed")),
    ("retry", {}, 1, True, 0, Decision(Action.RETRY, 1000, "attempt 1 of 3 failed")),
    # ... and may exceed maxDelayMs: the agent's wait is a floor, the cap only bounds backoff.
    (
        "retry",
        {"delayMs": 100, "maxDelayMs": 150},
        1,
        True,
        90_000,
        Decision(Action.RETRY, 90_000, "attempt 1 of 3 failed"),
    ),
    # a single attempt: nothing to retry even when retriable.
    (
        "retry",
        {"maxAttempts": 1},
        1,
        True,
        None,
        Decision(Action.ABORT, reason="all 1 attempts failed"),
    ),
    # doubling up to the cap, then flat at the cap.
    *[
        (
            "retry",
            {"maxAttempts": 10, "delayMs": 250, "maxDelayMs": 3000},
            attempt,
            True,
            None,
            Decision(Action.RETRY, delay, f"attempt {attempt} of 10 failed"),
        )
        for attempt, delay in [(1, 250), (2, 500), (3, 1000), (4, 2000), (5, 3000), (9, 3000)]
    ],
    (
        "retry",
        {"maxAttempts": 10, "delayMs": 250, "maxDelayMs": 3000},
        10,
        True,
        None,
        Decision(Action.ABORT, reason="all 10 attempts failed"),
    ),
    # an attempt count past the cap (a resumed run that already used them) still aborts.
    (
        "retry",
        {"maxAttempts": 2},
        7,
        True,
        None,
        Decision(Action.ABORT, reason="all 2 attempts failed"),
    ),
    # delayMs 0: immediate retries, unless the agent asks to wait.
    ("retry", {"delayMs": 0}, 1, True, None, Decision(Action.RETRY, 0, "attempt 1 of 3 failed")),
    ("retry", {"delayMs": 0}, 2, True, 700, Decision(Action.RETRY, 700, "attempt 2 of 3 failed")),
    # maxDelayMs below delayMs: the cap wins from the first retry.
    (
        "retry",
        {"delayMs": 5000, "maxDelayMs": 1200},
        1,
        True,
        None,
        Decision(Action.RETRY, 1200, "attempt 1 of 3 failed"),
    ),
    # the largest schema values: 60 s doubling is capped at 600 s.
    (
        "retry",
        {"maxAttempts": 10, "delayMs": 60_000, "maxDelayMs": 600_000},
        4,
        True,
        None,
        Decision(Action.RETRY, 480_000, "attempt 4 of 10 failed"),
    ),
    (
        "retry",
        {"maxAttempts": 10, "delayMs": 60_000, "maxDelayMs": 600_000},
        5,
        True,
        None,
        Decision(Action.RETRY, 600_000, "attempt 5 of 10 failed"),
    ),
]


@pytest.mark.parametrize(
    ("on_failure", "retry", "attempt", "retriable", "retry_after_ms", "expected"), TABLE
)
def test_the_decision_table(
    on_failure: str | None,
    retry: dict[str, int],
    attempt: int,
    retriable: bool,
    retry_after_ms: int | None,
    expected: Decision,
) -> None:
    got = decide(
        codon(on_failure, **retry),
        attempt=attempt,
        retriable=retriable,
        retry_after_ms=retry_after_ms,
    )
    assert got == expected


@pytest.mark.parametrize(("error_class", "retriable"), CLASSES)
@pytest.mark.parametrize("on_failure", [None, "abort", "retry", "ignore"])
def test_each_error_class_under_each_policy(
    error_class: str, retriable: bool, on_failure: str | None
) -> None:
    """Only a retriable failure under ``retry`` runs the codon again; ``ignore`` goes
    on and ``abort`` stops for every class."""
    got = decide(codon(on_failure), attempt=1, retriable=retriable, retry_after_ms=None)
    if on_failure == "ignore":
        assert got.action is Action.IGNORE
    elif on_failure == "retry" and retriable:
        assert got == Decision(Action.RETRY, 1000, "attempt 1 of 3 failed")
    elif on_failure == "retry":
        assert got == ABORT_NOT_RETRIABLE
    else:
        assert got.action is Action.ABORT
    if got.action is not Action.RETRY:
        assert got.delay_ms == 0, f"{error_class}: only a retry waits"


def test_a_retry_config_without_retry_is_inert() -> None:
    """``retryConfig`` beside ``abort`` or ``ignore`` changes nothing."""
    for on_failure, action in (("abort", Action.ABORT), ("ignore", Action.IGNORE)):
        got = decide(
            codon(on_failure, maxAttempts=10, delayMs=5),
            attempt=1,
            retriable=True,
            retry_after_ms=None,
        )
        assert got.action is action
        assert got.delay_ms == 0


@pytest.mark.parametrize(
    ("failed", "retry_after_ms", "expected"),
    [
        (1, None, 1000),
        (2, None, 2000),
        (3, None, 4000),
        (6, None, 32_000),
        (7, None, 60_000),
        (30, None, 60_000),
        (1, 59_999, 59_999),
        (7, 61_000, 61_000),
        (7, 59_000, 60_000),
    ],
)
def test_retry_delay_with_the_default_config(
    failed: int, retry_after_ms: int | None, expected: int
) -> None:
    assert retry_delay_ms(RetryConfig(), failed, retry_after_ms) == expected


configs = st.builds(
    RetryConfig,
    max_attempts=st.integers(1, 10),
    delay_ms=st.integers(0, 60_000),
    max_delay_ms=st.integers(0, 600_000),
)


@given(
    config=configs,
    attempt=st.integers(1, 12),
    retriable=st.booleans(),
    retry_after_ms=st.none() | st.integers(0, 3_600_000),
)
def test_retry_decisions_keep_their_promises(
    config: RetryConfig, attempt: int, retriable: bool, retry_after_ms: int | None
) -> None:
    """Over every schema-valid ``retryConfig``: a retry happens exactly while the
    failure is retriable and attempts remain; it waits at least the Retry-After and
    at most the larger of the cap and the Retry-After; waits never shrink."""
    c = msgspec.structs.replace(codon("retry"), retry_config=config)
    got = decide(c, attempt=attempt, retriable=retriable, retry_after_ms=retry_after_ms)
    assert (got.action is Action.RETRY) == (retriable and attempt < config.max_attempts)
    if got.action is not Action.RETRY:
        assert got.action is Action.ABORT
        assert got.delay_ms == 0
        return
    floor = retry_after_ms or 0
    assert floor <= got.delay_ms <= max(config.max_delay_ms, floor)
    assert got.delay_ms >= min(config.delay_ms, config.max_delay_ms)
    later = retry_delay_ms(config, attempt + 1, retry_after_ms)
    assert later >= got.delay_ms
    assert later <= 2 * got.delay_ms or got.delay_ms == floor
