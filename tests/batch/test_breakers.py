"""Breakers keyed by tool or provider, on a clock the test moves."""

from __future__ import annotations

from weft.batch.breakers import Breakers
from weft.batch.file import BreakerSpec


def test_each_key_has_its_own_breaker_and_tuning() -> None:
    now = [0]
    breakers = Breakers(
        {
            "aider": BreakerSpec(failure_threshold=2, cooldown_seconds=60),
            "*": BreakerSpec(failure_threshold=3),
        },
        clock=lambda: now[0],
    )
    for _ in range(2):
        assert breakers.allow("aider").allowed
        breakers.record("aider", success=False)
        assert breakers.allow("other").allowed
        breakers.record("other", success=False)
    now[0] = 2_000
    decision = breakers.allow("aider")
    assert not decision.allowed
    assert decision.message == "aider circuit is open, retry in 58 seconds"
    assert breakers.allow("other").allowed, "'*' opens after 3"
    assert [(s.key, s.state, s.consecutive_failures) for s in breakers.states()] == [
        ("aider", "OPEN", 2),
        ("other", "CLOSED", 2),
    ]
    assert (breakers.code("aider"), breakers.code("other")) == ("OPEN", "CLOSED")
    now[0] = 60_000
    assert breakers.allow("aider").allowed
    assert breakers.state("aider").probe_in_flight
    assert not breakers.allow("aider").allowed, "one test request at a time"
    assert breakers.code("aider") == breakers.state("aider").state == "HALF_OPEN"
    breakers.record("aider", success=True)
    assert breakers.state("aider").state == "CLOSED"


def test_reset_closes_an_open_breaker() -> None:
    breakers = Breakers({"*": BreakerSpec(failure_threshold=1)}, clock=lambda: 0)
    breakers.record("svc", success=False)
    assert not breakers.allow("svc").allowed
    breakers.reset("svc")
    assert breakers.allow("svc").allowed
