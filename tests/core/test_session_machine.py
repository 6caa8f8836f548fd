"""The compiled session machine (``weft._core.SessionMachine``, seed 002)
against the pure-Python model in ``tests/oracle/session.py``.

Hypothesis draws sequences of events; each step is one drawn seed from which
a seeded ``random.Random`` picks the event (mostly one the model's current
state accepts, so sequences get deep: thresholds, the backoff cap, interrupts,
follow-up sessions; sometimes any event at all, so every refusal is exercised
too). After every step both sides must agree on the effects or the refusal,
the state, both counters, the session number and the cool-down.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.oracle.session import OracleRejectedError, OracleSession
from tests.oracle.session import backoff_ms as oracle_backoff

from weft import _core, core
from weft.errors import SessionTransitionError, WeftError

PROMPTS = ["p", "", "fix the bug\n@@fake:scenario=success@@", "ünïcödé 🧵", "x" * 300]
MESSAGES = ["boom", "", "rate limited: retry after 3s", "ошибка"]
SEQS = [0, 1, 2, 7, 2**32, 2**64 - 1]
OUTCOMES = ["Success", "Error", "Timeout"]
ALL_EVENTS = [
    "WorktreeReady",
    "PromptReady",
    "SessionStarted",
    "SessionExited",
    "UrgentMessage",
    "GraceExceeded",
    "BackoffElapsed",
    "WindowClosed",
    "WindowOpened",
    "OperatorStop",
    "FatalError",
]
# What each state accepts, from the seed's table (globals apart).
ACCEPTS = {
    "Initializing": ["WorktreeReady"],
    "BuildingPrompt": ["PromptReady"],
    "Spawning": ["SessionStarted", "SessionExited", "WindowClosed"],
    "Running": ["SessionExited", "UrgentMessage", "WindowClosed"],
    "Interrupting": ["SessionExited", "GraceExceeded"],
    "SessionComplete": ["WorktreeReady"],
    "CoolingDown": ["BackoffElapsed"],
    "Parked": ["WindowOpened"],
    "Stopped": [],
}

Step = tuple[str, object, object]


def pick(rng: random.Random, state: str, spawn_failure: float) -> Step:
    """One event for a machine in ``state``: usually an accepted one. A spawn
    fails with probability ``spawn_failure``, so that some sequences have runs
    of failures long enough to reach the backoff cap and the thresholds."""
    roll = rng.random()
    if state == "Spawning" and rng.random() < spawn_failure:
        outcome = rng.choice(["Error", "Timeout"])
        return ("SessionExited", outcome, rng.choice(MESSAGES) if outcome == "Error" else None)
    if roll < 0.015:
        event = rng.choice(["OperatorStop", "FatalError"])
    elif roll < 0.85 and ACCEPTS[state]:
        event = rng.choice(ACCEPTS[state])
    else:
        event = rng.choice(ALL_EVENTS)
    if event == "PromptReady":
        return (event, rng.choice(PROMPTS), None)
    if event == "SessionStarted":
        return (event, rng.choice(SEQS), None)
    if event == "WindowClosed":
        return (event, rng.choice([0, 1, 60_000, 2**63]), None)
    if event == "FatalError":
        return (event, rng.choice(MESSAGES), None)
    if event == "SessionExited":
        outcome = rng.choice(OUTCOMES)
        return (event, outcome, rng.choice(MESSAGES) if outcome == "Error" else None)
    return (event, None, None)


def apply_core(m: _core.SessionMachine, step: Step) -> list[_core.SessionEffect]:
    event, a, b = step
    if event == "WorktreeReady":
        return m.worktree_ready()
    if event == "PromptReady":
        assert isinstance(a, str)
        return m.prompt_ready(a)
    if event == "SessionStarted":
        assert isinstance(a, int)
        return m.session_started(a)
    if event == "SessionExited":
        assert a in ("Success", "Error", "Timeout")
        assert b is None or isinstance(b, str)
        return m.session_exited(a, b)
    if event == "UrgentMessage":
        return m.urgent_message()
    if event == "GraceExceeded":
        return m.grace_exceeded()
    if event == "BackoffElapsed":
        return m.backoff_elapsed()
    if event == "WindowClosed":
        assert isinstance(a, int)
        return m.window_closed(a)
    if event == "WindowOpened":
        return m.window_opened()
    if event == "OperatorStop":
        return m.operator_stop()
    assert isinstance(a, str)
    return m.fatal_error(a)


def apply_oracle(o: OracleSession, step: Step) -> list[tuple[str, object]]:
    event, a, b = step
    if event == "SessionExited":
        assert isinstance(a, str)
        return list(o.exited(a, b if isinstance(b, str) else ""))
    assert a is None or isinstance(a, str | int)
    return list(o.handle(event, a))


def as_tuple(effect: _core.SessionEffect) -> tuple[str, object]:
    """The oracle's ``(kind, payload)`` shape; checks unused fields are None."""
    payloads = {
        "StorePrompt": effect.prompt,
        "LogFatal": effect.message,
        "IncrementSession": effect.session_seq,
    }
    fields = [effect.prompt, effect.message, effect.session_seq]
    payload = payloads.get(effect.kind)
    assert sum(f is not None for f in fields) == (payload is not None)
    return (effect.kind, payload)


def snapshot(m: _core.SessionMachine) -> tuple[object, ...]:
    return (
        m.state,
        m.consecutive_errors,
        m.total_errors,
        m.session_seq,
        m.cooldown_ms,
        m.parked_ms,
    )


def oracle_snapshot(o: OracleSession) -> tuple[object, ...]:
    return (
        o.state,
        o.consecutive_errors,
        o.total_errors,
        o.session_seq,
        o.cooldown_ms,
        o.parked_ms,
    )


@settings(max_examples=300)
@given(
    max_consecutive=st.integers(0, 9),
    max_total=st.integers(0, 25),
    spawn_failure=st.sampled_from([0.0, 0.5, 0.9]),
    seeds=st.lists(st.integers(0, 2**32 - 1), max_size=120),
)
def test_random_event_sequences_agree_with_the_model(
    max_consecutive: int, max_total: int, spawn_failure: float, seeds: list[int]
) -> None:
    m = _core.SessionMachine(max_consecutive_errors=max_consecutive, max_total_errors=max_total)
    o = OracleSession(max_consecutive_errors=max_consecutive, max_total_errors=max_total)
    for i, seed in enumerate(seeds):
        step = pick(random.Random(seed), o.state, spawn_failure)
        before = snapshot(m)
        rejected: OracleRejectedError | None = None
        expected: list[tuple[str, object]] = []
        try:
            expected = apply_oracle(o, step)
        except OracleRejectedError as refusal:
            rejected = refusal
        if rejected is not None:
            with pytest.raises(SessionTransitionError) as caught:
                apply_core(m, step)
            assert (caught.value.state, caught.value.event) == (rejected.state, rejected.event)
            assert str(caught.value) == str(rejected)
            assert snapshot(m) == before, f"step {i}: a refused {step} changed the machine"
        else:
            got = [as_tuple(e) for e in apply_core(m, step)]
            assert got == expected, f"step {i}: {step} in {before}"
        assert snapshot(m) == oracle_snapshot(o), f"step {i}: after {step}"
        assert m.is_stopped == (o.state == "Stopped")


@given(n=st.integers(0, 2**64 - 1))
def test_backoff_matches_the_formula(n: int) -> None:
    assert _core.backoff_ms(n) == oracle_backoff(n)


def test_backoff_table_of_the_seed() -> None:
    # The seed's table, n = 1..6 and beyond the cap.
    seed_table = {1: 2000, 2: 4000, 3: 8000, 4: 16000, 5: 32000, 6: 60000, 7: 60000, 40: 60000}
    assert {n: core.backoff_ms(n) for n in seed_table} == seed_table
    assert (core.BACKOFF_BASE_MS, core.BACKOFF_CAP_MS) == (2000, 60000)


def test_defaults_are_the_seeds_thresholds() -> None:
    m = core.SessionMachine()
    assert (m.max_consecutive_errors, m.max_total_errors) == (5, 20)
    assert (core.DEFAULT_MAX_CONSECUTIVE_ERRORS, core.DEFAULT_MAX_TOTAL_ERRORS) == (5, 20)
    assert m.state == "Initializing"
    assert core.SESSION_STATES[0] == "Initializing"
    assert set(core.SESSION_STATES) == set(ACCEPTS)


def test_a_refused_event_raises_a_weft_error_naming_state_and_event() -> None:
    m = core.SessionMachine()
    with pytest.raises(
        WeftError, match="invalid session transition: BackoffElapsed in Initializing"
    ):
        m.backoff_elapsed()
    m.worktree_ready()
    with pytest.raises(SessionTransitionError) as caught:
        m.session_exited("Success")
    assert (caught.value.state, caught.value.event) == ("BuildingPrompt", "SessionExited")


@pytest.mark.parametrize(
    ("outcome", "message", "match"),
    [
        ("success", None, "unknown session exit outcome"),
        ("Crashed", "x", "unknown session exit outcome"),
        ("Success", "x", "carries no message"),
        ("Timeout", "", "carries no message"),
    ],
)
def test_bad_exit_outcomes_are_value_errors(outcome: str, message: str | None, match: str) -> None:
    m = core.SessionMachine()
    m.worktree_ready()
    m.prompt_ready("p")
    m.session_started(1)
    with pytest.raises(ValueError, match=match):
        m.session_exited(outcome, message)  # type: ignore[arg-type]
    assert m.state == "Running"


def test_effects_compare_and_hash_by_value() -> None:
    a = core.SessionMachine()
    b = core.SessionMachine()
    for m in (a, b):
        m.worktree_ready()
    (ea,) = a.prompt_ready("same")
    (eb,) = b.prompt_ready("same")
    assert ea == eb
    assert hash(ea) == hash(eb)
    assert len({ea, eb}) == 1
    assert a.session_started(3) == []
    (cancel,) = a.urgent_message()
    assert cancel != ea
    assert cancel.kind == "CancelSession"
    assert (ea.kind, ea.prompt, ea.message, ea.session_seq) == ("StorePrompt", "same", None, None)
    assert "StorePrompt" in repr(ea)
