"""The seed-004 machines through ``weft.core``: texts, guards, restore, breaker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft import core
from weft.errors import InvalidTransitionError

WS = core.WORKSTREAM_STATES
STEPS = core.STEP_STATES


def test_state_codes_are_the_seeds() -> None:
    assert WS == ("S_PENDING", "S_RUNNING", "S_SUCCESS", "S_FAILED", "S_RETRYING", "S_ABANDONED")
    assert STEPS == ("S_PENDING", "S_RUNNING", "S_SUCCESS", "S_FAILED", "S_RETRYING")
    assert core.CIRCUIT_STATES == ("CLOSED", "OPEN", "HALF_OPEN")


def test_terminal_workstream_refuses_with_the_seed_text() -> None:
    ws = core.Workstream.restore("S_SUCCESS")
    with pytest.raises(InvalidTransitionError) as info:
        ws.transition("S_RUNNING")
    assert str(info.value) == "Cannot transition from S_SUCCESS to S_RUNNING"
    assert (info.value.from_status, info.value.to_status) == ("S_SUCCESS", "S_RUNNING")
    assert info.value.code == "invalid_transition"
    assert ws.state == "S_SUCCESS"


def test_guard_failure_names_the_condition_and_changes_nothing() -> None:
    ws = core.Workstream(0)
    ws.transition("S_RUNNING")
    with pytest.raises(InvalidTransitionError) as info:
        ws.transition("S_SUCCESS", ["S_SUCCESS", "S_FAILED"])
    assert str(info.value) == (
        "Cannot transition from S_RUNNING to S_SUCCESS: not all steps are in S_SUCCESS"
    )
    assert info.value.code == "guard_failed"
    assert ws.state == "S_RUNNING"


def test_workstream_retry_cycle_and_abandon() -> None:
    ws = core.Workstream(1, base_delay_ms=100)
    ws.transition("S_RUNNING")
    ws.transition("S_FAILED", ["S_FAILED"])
    assert ws.retry_eligible
    ws.transition("S_RETRYING", now_ms=1_000)
    assert ws.retry_ready_at_ms == 1_100
    with pytest.raises(InvalidTransitionError, match="retry backoff has 1 ms left"):
        ws.transition("S_RUNNING", now_ms=1_099)
    ws.transition("S_RUNNING", now_ms=1_100)
    assert ws.retry_count == 1
    ws.transition("S_FAILED", ["S_FAILED"])
    with pytest.raises(InvalidTransitionError, match="retries exhausted"):
        ws.transition("S_RETRYING")
    ws.transition("S_ABANDONED")
    assert ws.is_terminal


def test_step_exit_codes_and_dependencies() -> None:
    step = core.Step(expected_exit_codes=[0, 3])
    with pytest.raises(InvalidTransitionError, match="dependencies"):
        step.transition("S_RUNNING", dependency_states=["S_SUCCESS", "S_RETRYING"])
    step.transition("S_RUNNING", dependency_states=["S_SUCCESS"])
    assert step.exit_target(3) == "S_SUCCESS"
    assert step.exit_target(None) == "S_FAILED"
    assert step.finish(3) == "S_SUCCESS"
    assert not step.blocks_dependents


def test_unknown_state_is_a_value_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="S_PENDING, S_RUNNING"):
        core.Step().transition("RUNNING")


def test_retry_delay_doubles_and_caps() -> None:
    delays = [core.retry_delay_ms(n) for n in range(8)]
    assert delays == [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
    assert core.retry_delay_ms(10**30 // 10**20, base_delay_ms=5, max_delay_ms=7) == 7


@given(
    state=st.sampled_from(WS),
    max_retries=st.integers(0, 4),
    retry_count=st.integers(0, 4),
    ready=st.integers(0, 10**12),
)
def test_workstream_restore_lands_exactly_or_refuses(
    state: str, max_retries: int, retry_count: int, ready: int
) -> None:
    ready_at = ready if state == "S_RETRYING" else None
    reachable = retry_count + (state == "S_RETRYING") <= max_retries and not (
        state == "S_PENDING" and retry_count > 0
    )
    if not reachable:
        with pytest.raises(ValueError, match="cannot restore"):
            core.Workstream.restore(
                state, max_retries=max_retries, retry_count=retry_count, retry_ready_at_ms=ready_at
            )
        return
    ws = core.Workstream.restore(
        state, max_retries=max_retries, retry_count=retry_count, retry_ready_at_ms=ready_at
    )
    assert (ws.state, ws.retry_count, ws.retry_ready_at_ms) == (state, retry_count, ready_at)
    assert ws.max_retries == max_retries


@given(state=st.sampled_from(STEPS), retry_count=st.integers(0, 3))
def test_step_restore_lands_exactly(state: str, retry_count: int) -> None:
    ready_at = 77 if state == "S_RETRYING" else None
    if state == "S_PENDING" and retry_count:
        with pytest.raises(ValueError, match="cannot restore"):
            core.Step.restore(state, max_retries=5, retry_count=retry_count)
        return
    step = core.Step.restore(
        state, max_retries=5, retry_count=retry_count, retry_ready_at_ms=ready_at, base_delay_ms=9
    )
    assert (step.state, step.retry_count, step.retry_ready_at_ms) == (state, retry_count, ready_at)
    assert step.base_delay_ms == 9


def test_breaker_opens_rejects_probes_and_closes() -> None:
    cb = core.CircuitBreaker(failure_threshold=2, cooldown_ms=60_000)
    cb.record_failure(0)
    assert cb.allow_request(0) is None
    cb.record_failure(1_000)
    assert (cb.state, cb.opened_at_ms) == ("OPEN", 1_000)
    wait = cb.allow_request(3_000)
    assert wait == 58_000
    assert core.circuit_open_message(wait) == "circuit is open, retry in 58 seconds"
    assert cb.allow_request(61_000) is None
    assert (cb.state, cb.probe_in_flight) == ("HALF_OPEN", True)
    assert cb.allow_request(61_000) == 60_000
    cb.record_success(61_500)
    assert (cb.state, cb.consecutive_failures) == ("CLOSED", 0)


def test_breaker_reset_is_recovery_3() -> None:
    cb = core.CircuitBreaker(failure_threshold=1)
    cb.record_failure(0)
    cb.reset()
    assert cb.state == "CLOSED"
    assert cb.allow_request(1) is None


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"state": "CLOSED", "consecutive_failures": 2}, ("CLOSED", 2, False)),
        ({"state": "OPEN", "consecutive_failures": 3, "opened_at_ms": 5}, ("OPEN", 3, False)),
        (
            {
                "state": "HALF_OPEN",
                "consecutive_failures": 3,
                "opened_at_ms": 5,
                "probe_started_at_ms": 70,
            },
            ("HALF_OPEN", 3, True),
        ),
    ],
)
def test_breaker_restore(kwargs: dict[str, object], expected: tuple[str, int, bool]) -> None:
    cb = core.CircuitBreaker.restore(failure_threshold=3, cooldown_ms=50, **kwargs)  # type: ignore[arg-type]
    assert (cb.state, cb.consecutive_failures, cb.probe_in_flight) == expected


def test_breaker_restore_refuses_what_cannot_happen() -> None:
    with pytest.raises(ValueError, match="counters do not fit"):
        core.CircuitBreaker.restore("CLOSED", consecutive_failures=5, failure_threshold=5)
    with pytest.raises(ValueError, match="opened_at_ms is required"):
        core.CircuitBreaker.restore("OPEN")
    with pytest.raises(ValueError, match="before the cool-down"):
        core.CircuitBreaker.restore(
            "HALF_OPEN", consecutive_failures=5, opened_at_ms=0, probe_started_at_ms=1
        )
