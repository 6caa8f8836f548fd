"""Circuit breakers per agent provider in ``weft run`` (seed 004): provider
failures across codons open the breaker, codons wait out its cool-down, one
probe session closes or re-opens it, ``breaker.reset`` closes it; end to end
on the fake agent through :class:`Runtime` (clock and sleeps injected)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.runtime.hanks import Seen, codon, fake_environment, runtime_for, write_hank

from weft.agents.events import ErrorClass, SessionExited
from weft.cli import main
from weft.cli.status import render, report
from weft.cli.view.format import describe_last
from weft.cli.view.notes import see
from weft.config.runtime import RuntimeBreakerSettings, RuntimeConfig, RuntimeSessionSettings
from weft.errors import CommandRejectedError
from weft.events.stream import BreakerChangedEvent, BreakerWaitingEvent
from weft.progress import RunProgress
from weft.runtime.codon.breakers import ProviderBreakers, is_provider_failure, provider_of
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions
from weft.server.protocol import COMMANDS, BreakerResetData
from weft.state import Processed
from weft.store import ExecutionStore

FAIL_ALWAYS = "api_error,status=529,count=1"

processed: list[Processed] = []
"""The last run's journaled items, for the views' fold."""


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


class Clock:
    """A millisecond clock that only the injected sleep moves."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self.slept: list[float] = []
        self.on_sleep: Callable[[float], Awaitable[None]] | None = None

    def __call__(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.on_sleep is not None:
            await self.on_sleep(seconds)
        self.now += round(seconds * 1000)
        await asyncio.sleep(0)


def agent(ident: str, scenario: str, **fields: Any) -> dict[str, Any]:
    return codon(ident, f"Work on {ident}.", env={"FAKE_AGENT_SCENARIO": scenario}, **fields)


async def run(
    tmp_path: Path,
    *codons: dict[str, Any],
    breaker: RuntimeBreakerSettings,
    sessions: RuntimeSessionSettings | None = None,
    clock: Clock | None = None,
    started: Callable[[Runtime], None] | None = None,
    serve: bool = False,
) -> tuple[RunOutcome, Seen, Clock]:
    hank = write_hank(tmp_path / "hank", *codons)
    execution = tmp_path / "x"
    clock = clock or Clock()
    processed.clear()
    options = RuntimeOptions(
        serve=serve,
        sessions=sessions or RuntimeSessionSettings(),
        session_sleep=clock.sleep,
        breakers=breaker,
        breaker_clock=clock,
    )
    runtime, seen = await runtime_for(hank, execution, options, listeners=(processed.append,))
    if started is not None:
        started(runtime)
    return await runtime.run(), seen, clock


def changes(seen: Seen) -> list[tuple[str, str, str, str | None]]:
    return [
        (d["previous"], d["state"], d["reason"], d.get("codonId"))
        for d in seen.of("breaker.changed")
    ]


async def test_failures_across_codons_open_the_breaker_and_a_probe_closes_it(
    tmp_path: Path,
) -> None:
    # Codon a fails twice (its supervisor gives up, onFailure ignore); codon b's
    # first failure is the provider's third in a row: the breaker opens, b waits
    # the rest of the cool-down instead of burning its retries, then its probe
    # session succeeds and closes the breaker; c never waits.
    outcome, seen, clock = await run(
        tmp_path,
        agent("a", FAIL_ALWAYS, onFailure="ignore"),
        agent("b", FAIL_ALWAYS + ",fails=1"),
        agent("c", "success"),
        breaker=RuntimeBreakerSettings(failure_threshold=3, cooldown_ms=10_000),
        sessions=RuntimeSessionSettings(max_total_errors=2),
    )
    assert outcome.codons == {"a": "failed", "b": "completed", "c": "completed"}, outcome.message
    assert changes(seen) == [
        ("closed", "open", "failure", "b"),
        ("open", "half_open", "probe", "b"),
        ("half_open", "closed", "success", "b"),
    ]
    opened = seen.of("breaker.changed")[0]
    assert opened["provider"] == "anthropic"
    assert (opened["consecutiveFailures"], opened["failureThreshold"]) == (3, 3)
    (waiting,) = seen.of("breaker.waiting")
    # b's own cool-down (2 s) passed first: 8 s of the breaker's 10 s are left.
    assert waiting == {
        "provider": "anthropic",
        "codonId": "b",
        "retryInMs": 8000,
        "message": "anthropic circuit is open, retry in 8 seconds",
    }
    assert clock.slept == [2.0, 2.0, 8.0]  # a's cool-down, b's, then the breaker's
    # The views' notes and b's last action say it.
    progress, texts, actions = RunProgress(), [], []
    for item in processed:
        note = see(progress, item)
        if note is not None:
            texts.append(note.text)
        b = progress.codon("b")
        if b is not None and b"breaker.waiting" in item.payload:
            actions.append(describe_last(b))
    assert actions == ["waiting 8s: anthropic circuit open"]
    assert any(t.startswith("anthropic circuit breaker opened after 3 failures") for t in texts)
    assert "b: waits 8s for anthropic: anthropic circuit is open, retry in 8 seconds" in texts
    assert "anthropic circuit breaker half-open: one probe session" in texts
    assert "anthropic circuit breaker closed (the probe session succeeded)" in texts
    # The wait comes before b's second session, which is the probe.
    types = seen.types()
    assert types.index("breaker.waiting") < types.index(
        "breaker.changed", types.index("breaker.waiting")
    )


async def test_a_failed_probe_reopens_the_breaker(tmp_path: Path) -> None:
    outcome, seen, clock = await run(
        tmp_path,
        agent("a", FAIL_ALWAYS + ",fails=2"),
        breaker=RuntimeBreakerSettings(failure_threshold=1, cooldown_ms=10_000),
    )
    assert outcome.codons == {"a": "completed"}, outcome.message
    assert changes(seen) == [
        ("closed", "open", "failure", "a"),
        ("open", "half_open", "probe", "a"),
        ("half_open", "open", "failure", "a"),
        ("open", "half_open", "probe", "a"),
        ("half_open", "closed", "success", "a"),
    ]
    # The session's cool-down grows with the failures in a row (2 s, then 4 s,
    # though each failed session started), then the breaker's rest of its 10 s.
    assert clock.slept == [2.0, 8.0, 4.0, 6.0]
    assert [d["retryInMs"] for d in seen.of("breaker.waiting")] == [8000, 6000]
    # Journaled, so `weft status` shows the breaker and the codon's last wait.
    store = ExecutionStore.open(tmp_path / "x", readonly=True)
    try:
        status = report(store)
    finally:
        await store.close()
    assert status["breakers"]["anthropic"].pop("timestamp")
    assert status["breakers"] == {
        "anthropic": {
            "state": "closed",
            "reason": "success",
            "consecutiveFailures": 0,
            "failureThreshold": 1,
            "cooldownMs": 10_000,
            "codonId": "a",
        }
    }
    assert "breaker anthropic: closed" in render(status)


async def test_breaker_reset_lets_a_waiting_codon_go_at_once(tmp_path: Path) -> None:
    runtime: list[Runtime] = []
    clock = Clock()

    async def reset_while_waiting(seconds: float) -> None:
        if seconds == 8.0:  # the breaker's wait, not the session's cool-down
            with pytest.raises(CommandRejectedError, match="no agent provider 'nope'"):
                await runtime[0].command("breaker.reset", BreakerResetData(provider="nope"))
            await runtime[0].command("breaker.reset", BreakerResetData(provider="anthropic"))
            await asyncio.Event().wait()  # only the reset can end this wait

    clock.on_sleep = reset_while_waiting
    outcome, seen, clock = await asyncio.wait_for(
        run(
            tmp_path,
            agent("a", FAIL_ALWAYS + ",fails=1"),
            breaker=RuntimeBreakerSettings(failure_threshold=1, cooldown_ms=10_000),
            clock=clock,
            started=runtime.append,
        ),
        30,
    )
    assert outcome.codons == {"a": "completed"}, outcome.message
    assert changes(seen) == [
        ("closed", "open", "failure", "a"),
        ("open", "closed", "reset", None),
    ]
    assert len(seen.of("breaker.waiting")) == 1
    assert clock.slept == [2.0, 8.0]


async def test_weft_breaker_reset_goes_through_the_execution_s_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI verb, a real WebSocket client, the run's real server."""
    clock, calls = Clock(), ThreadPoolExecutor(1)
    sent: list[Future[int]] = []

    async def reset_while_waiting(seconds: float) -> None:
        if seconds == 8.0:
            # In a thread (the CLI runs its own loop); the reset ends this wait.
            sent.append(calls.submit(main, ["breaker", "reset", str(tmp_path / "x"), "anthropic"]))
            await asyncio.Event().wait()

    clock.on_sleep = reset_while_waiting
    outcome, seen, _ = await asyncio.wait_for(
        run(
            tmp_path,
            agent("a", FAIL_ALWAYS + ",fails=1"),
            breaker=RuntimeBreakerSettings(failure_threshold=1, cooldown_ms=10_000),
            clock=clock,
            serve=True,
        ),
        30,
    )
    calls.shutdown()
    assert [f.result() for f in sent] == [0]
    assert "anthropic circuit breaker closed" in capsys.readouterr().out
    assert outcome.codons == {"a": "completed"}, outcome.message
    assert changes(seen)[-1] == ("open", "closed", "reset", None)


def test_weft_breaker_reset_without_a_run_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["breaker", "reset", str(tmp_path), "anthropic"]) == 2
    assert "not an execution (no .weft/ inside)" in capsys.readouterr().err


def test_breaker_settings_are_runtime_settings_with_the_seed_defaults() -> None:
    defaults = RuntimeConfig().breaker
    assert (defaults.failure_threshold, defaults.cooldown_ms, defaults.success_threshold) == (
        5,
        60_000,
        1,
    )
    breakers = ProviderBreakers()
    machine = breakers.breakers.state("anthropic")
    assert machine.state == "CLOSED"
    assert COMMANDS["breaker.reset"].readonly is False


def test_only_transient_provider_failures_count() -> None:
    def exit(error_class: ErrorClass | None, *, ok: bool = False, retriable: bool = False) -> Any:
        return SessionExited(
            exit_code=0 if ok else 1, ok=ok, error_class=error_class, retriable=retriable
        )

    assert is_provider_failure(exit(ErrorClass.RATE_LIMIT, retriable=True))
    assert is_provider_failure(exit(ErrorClass.OVERLOADED, retriable=True))
    assert not is_provider_failure(exit(ErrorClass.AUTH))
    assert not is_provider_failure(exit(ErrorClass.TIMEOUT, retriable=True))
    assert not is_provider_failure(exit(None, ok=True))
    assert [provider_of(h) for h in ("claude", "codex", "gemini")] == [
        "anthropic",
        "openai",
        "google",
    ]


def test_the_events_round_trip() -> None:
    import msgspec

    for event in (
        BreakerWaitingEvent(provider="openai", codon_id="a", retry_in_ms=5, message="m"),
        BreakerChangedEvent(
            provider="openai",
            state="open",
            previous="closed",
            reason="failure",
            consecutive_failures=5,
            failure_threshold=5,
            cooldown_ms=60_000,
        ),
    ):
        assert msgspec.json.decode(msgspec.json.encode(event), type=type(event)) == event
