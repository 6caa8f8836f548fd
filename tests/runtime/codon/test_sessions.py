"""The session supervisor in ``weft run`` (seed 002): cool-downs, resumes,
thresholds, permanent errors, Retry-After, and session provenance, end to end
on the fake agent through :class:`Runtime` (sleeps injected, never waited)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from tests.runtime.hanks import (
    Seen,
    codon,
    codon_records,
    fake_environment,
    read_state,
    recorded,
    run_hank,
    runtime_for,
    scenario,
    subprocess_environment,
    wait_for,
    weft_run_argv,
    write_hank,
)

from weft.agents.events import ErrorClass, SessionExited, UsageWindow
from weft.cli.status import render, report
from weft.config import load_hank
from weft.config.runtime import RuntimeSessionSettings
from weft.errors import CommandRejectedError
from weft.runtime.codon.sessions import (
    MAX_PARKS_IN_A_ROW,
    RETRY_PROMPT,
    Cooldown,
    GaveUp,
    Parking,
    SessionRetries,
    WindowTooFar,
)
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import RunOutcome, Runtime, RuntimeOptions
from weft.server.protocol import MessageData
from weft.store import ExecutionStore


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


class Sleeps:
    """An injected clock: records each cool-down and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await asyncio.sleep(0)


async def run(
    hank: Path, execution: Path, sessions: RuntimeSessionSettings | None = None
) -> tuple[RunOutcome, Seen, Sleeps]:
    sleeps = Sleeps()
    options = RuntimeOptions(
        serve=False, sessions=sessions or RuntimeSessionSettings(), session_sleep=sleeps
    )
    outcome, seen = await run_hank(hank, execution, options)
    return outcome, seen, sleeps


def flaky(tmp_path: Path, scenario: str) -> Path:
    return write_hank(
        tmp_path / "hank",
        codon(
            "build",
            "Build it.",
            record=tmp_path / "argv.json",
            env={"FAKE_AGENT_SCENARIO": scenario},
        ),
        codon("after", "Then this."),
    )


async def test_a_429_mid_codon_cools_down_and_resumes_the_same_session(tmp_path: Path) -> None:
    # Default settings (onFailure abort): one transient 429 no longer fails the run.
    hank = flaky(tmp_path, "api_error,status=429,count=1,fails=1")
    outcome, seen, sleeps = await run(hank, tmp_path / "x")
    assert outcome.codons == {"build": "completed", "after": "completed"}, outcome.message
    assert sleeps.seconds == [2.0]  # the seed's first backoff
    (cooldown,) = seen.of("session.cooldown")
    assert cooldown["durationMs"] == cooldown["backoffMs"] == 2000
    assert cooldown["errorClass"] == "rate_limit"
    assert (cooldown["consecutiveErrors"], cooldown["totalErrors"]) == (1, 1)
    session_id = seen.of("codon.started")[0]["sessionId"]
    (resumed,) = seen.of("session.resumed")
    assert resumed == {"codonId": "build", "session": 2, "reason": "retry",
                       "resumeSessionId": session_id}  # fmt: skip
    argv = recorded(tmp_path / "argv.json")
    assert session_id in " ".join(argv["argv"])
    assert "--resume" in " ".join(argv["argv"])
    assert argv["prompt"].startswith(RETRY_PROMPT.split("(")[0])
    assert seen.of("session.gave-up") == []
    # The codon's cost is its sessions' (the rate-limited one was not billed).
    record = codon_records(read_state(tmp_path / "x"))["build"]
    finals = [
        d["totalCost"] for d in seen.of("token.usage") if d.get("final") and d["codonId"] == "build"
    ]
    assert len(finals) == 2
    assert record["finalCost"] == pytest.approx(finals[-1], abs=1e-6)
    assert finals[-1] >= finals[0]
    assert finals[-1] > 0


def weft_run(hank: Path, execution: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A real ``weft run`` process of ``hank`` in ``execution``, to its end."""
    env = {**env, "PYTHONPATH": os.environ.get("WEFT_PYTHONPATH", os.environ.get("PYTHONPATH", ""))}
    return subprocess.run(
        weft_run_argv(hank, execution), env=env, capture_output=True, text=True, timeout=60
    )


def test_weft_run_with_default_settings_survives_a_429_mid_codon(tmp_path: Path) -> None:
    """The issue's case through a real ``weft run`` process (one real 2 s cool-down)."""
    hank = write_hank(tmp_path / "hank", codon("build", "Build it."), codon("after", "Then."))
    env = subprocess_environment(tmp_path)
    env["FAKE_AGENT_SCENARIO"] = "api_error,status=429,count=1,fails=1"
    done = weft_run(hank, tmp_path / "x", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cooling down 2s" in done.stdout, done.stdout
    records = codon_records(read_state(tmp_path / "x"))
    assert {c: r["status"] for c, r in records.items()} == {
        "build": "completed",
        "after": "completed",
    }


RATE_LIMITED = (
    "Rate limit reached for gpt-5 in organization org-test on tokens per min. "
    "Please try again in 1.5s."
)
"""What OpenAI says on a 429 (no comma: it is a scenario parameter); its
delay is the agent's Retry-After."""


def test_weft_run_waits_out_the_agent_s_retry_after_when_it_is_longer_than_the_backoff(
    tmp_path: Path,
) -> None:
    """A real ``weft run``: the fake Codex fails its turn with a 429 naming a
    delay (1.5 s) longer than the schedule's first step (100 ms here): the
    cool-down is the Retry-After, the next session starts no sooner."""
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "build",
            "Build it.",
            model="fake/openai/gpt-5",
            env={"FAKE_AGENT_SCENARIO": f"turn_failed,message={RATE_LIMITED}"},
        ),
    )
    env = subprocess_environment(tmp_path)
    env.update(
        CODEX_HOME=str(tmp_path / "codex-home"),
        WEFT_RUNTIME_SESSION_BACKOFF_BASE_MS="100",
        WEFT_RUNTIME_SESSION_MAX_TOTAL_ERRORS="2",  # every turn fails: stop after two
    )
    done = weft_run(hank, tmp_path / "x", env)
    assert done.returncode == 1, done.stdout + done.stderr  # it gave up, as asked
    assert "(Retry-After)" in done.stdout, done.stdout
    store = ExecutionStore.open(tmp_path / "x", readonly=True)
    try:
        rows = store.journal.of_types(("session.cooldown", "session.resumed", "session.gave-up"))
    finally:
        store.journal.close()
    assert [row.type for row in rows] == ["session.cooldown", "session.resumed", "session.gave-up"]
    cooldown = json.loads(rows[0].payload)["data"]
    assert cooldown["errorClass"] == "rate_limit"
    assert (cooldown["durationMs"], cooldown["backoffMs"], cooldown["retryAfterMs"]) == (
        1500,
        100,
        1500,
    )
    waited = datetime.fromisoformat(rows[1].timestamp) - datetime.fromisoformat(rows[0].timestamp)
    # Journal timestamps are cut to the millisecond and the loop's timer may fire a
    # tick early, so 1.499 s here is a full 1.5 s wait; the backoff alone was 0.1 s.
    assert waited.total_seconds() >= 1.49


async def test_a_persistent_429_stops_at_the_threshold_then_the_hank_policy_applies(
    tmp_path: Path,
) -> None:
    hank = flaky(tmp_path, "api_error,status=429,count=0")
    settings = RuntimeSessionSettings(max_total_errors=3)
    outcome, seen, sleeps = await run(hank, tmp_path / "x", settings)
    assert outcome.codons == {"build": "failed"}
    # Each session reported its id before failing: the machine's own count
    # restarts, but the attempt's failures are in a row, so the cool-down grows.
    assert sleeps.seconds == [2.0, 4.0]
    assert len(seen.of("session.resumed")) == 2
    (gave_up,) = seen.of("session.gave-up")
    assert gave_up["totalErrors"] == 3
    assert gave_up["maxTotalErrors"] == 3
    assert gave_up["sessions"] == 3
    record = codon_records(read_state(tmp_path / "x"))["build"]
    assert record["failureReason"]["type"] == "rate_limit"
    # weft status names the supervisor's last word on the codon.
    store = ExecutionStore.open(tmp_path / "x", readonly=True)
    try:
        status = report(store)
    finally:
        await store.close()
    (build,) = status["runs"][0]["codons"]
    assert build["session"]["type"] == "session.gave-up"
    assert "supervisor: the session supervisor gave up after 3 failures" in render(status)


async def test_an_agent_dying_before_its_session_starts_cools_down_until_five_in_a_row(
    tmp_path: Path,
) -> None:
    """Seed 002: an error while spawning cools down as one while running does;
    the consecutive threshold (5) ends a CLI that dies at every start."""
    outcome, seen, sleeps = await run(flaky(tmp_path, "crash_before_init"), tmp_path / "x")
    assert outcome.codons == {"build": "failed"}
    assert sleeps.seconds == [2.0, 4.0, 8.0, 16.0]
    cooldowns = seen.of("session.cooldown")
    assert [c["errorClass"] for c in cooldowns] == ["crash_before_init"] * 4
    assert [c["consecutiveErrors"] for c in cooldowns] == [1, 2, 3, 4]
    # No session was ever reported, so each one starts afresh.
    assert [r.get("resumeSessionId") for r in seen.of("session.resumed")] == [None] * 4
    (gave_up,) = seen.of("session.gave-up")
    assert (gave_up["consecutiveErrors"], gave_up["maxConsecutiveErrors"]) == (5, 5)
    record = codon_records(read_state(tmp_path / "x"))["build"]
    assert record["failureReason"]["type"] == "crash_before_init"


@pytest.mark.parametrize("scenario", ["auth_error", "api_error,status=400"])
async def test_a_permanent_error_fails_the_codon_at_once(tmp_path: Path, scenario: str) -> None:
    outcome, seen, sleeps = await run(flaky(tmp_path, scenario), tmp_path / "x")
    assert outcome.codons == {"build": "failed"}
    assert sleeps.seconds == []
    assert seen.of("session.cooldown") == []
    assert seen.of("session.resumed") == []


async def test_a_fresh_codon_names_no_previous_session(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a", "First."),
        codon("b", "Fresh."),
        codon("c", "Continue.", mode="continue-previous"),
    )
    outcome, seen, _ = await run(hank, tmp_path / "x")
    assert outcome.codons == {"a": "completed", "b": "completed", "c": "completed"}
    started = {e["codonId"]: e for e in seen.of("codon.started")}
    assert "previousSessionId" not in started["b"]
    assert started["c"]["previousSessionId"] == started["b"]["sessionId"]
    records = codon_records(read_state(tmp_path / "x"))
    assert records["b"].get("previousSessionId") is None
    assert records["c"]["previousSessionId"] == started["b"]["sessionId"]


async def started(hank: Path, execution: Path) -> tuple[Runtime, Seen]:
    runtime: Runtime
    runtime, seen = await runtime_for(hank, execution, RuntimeOptions(serve=False))
    return runtime, seen


async def until(check: object, what: str) -> None:
    await asyncio.to_thread(wait_for, check, timeout=20, what=what)  # type: ignore[arg-type]


async def test_an_urgent_message_interrupts_the_session_and_resumes_it_with_the_message(
    tmp_path: Path,
) -> None:
    long = scenario("sigterm,lines=200,interval_ms=50")  # the resume has no directive: it ends
    hank = write_hank(
        tmp_path / "hank",
        codon("a", "First.", record=tmp_path / "a.json"),
        codon("b", long + "Work slowly.", record=tmp_path / "b.json"),
    )
    runtime, seen = await started(hank, tmp_path / "x")
    running = asyncio.ensure_future(runtime.run())
    await until(
        lambda: [e for e in seen.of("assistant.action") if e["codonId"] == "b"], "b at work"
    )
    with pytest.raises(CommandRejectedError, match="empty"):
        await runtime.command("codon.message", MessageData(message=" ", urgent=True))
    # A queued message waits for the next prompt built; the urgent one makes it now.
    await runtime.command("codon.message", MessageData(message="Mind the tests."))
    await runtime.command("codon.message", MessageData(message="Say hi now.", urgent=True))
    outcome = await running
    assert outcome.codons == {"a": "completed", "b": "completed"}, outcome.message
    b_session = next(e for e in seen.of("codon.started") if e["codonId"] == "b")["sessionId"]
    assert seen.of("session.resumed") == [
        {"codonId": "b", "session": 2, "reason": "urgent", "resumeSessionId": b_session}
    ]
    argv = recorded(tmp_path / "b.json")
    assert argv["prompt"] == "Mind the tests.\n\nSay hi now."
    assert b_session in " ".join(argv["argv"])
    assert [(m["urgent"], m.get("codonId")) for m in seen.of("session.message")] == [
        (False, "b"),
        (True, "b"),
    ]
    assert seen.of("session.cooldown") == []  # an interrupt is not an error


async def test_an_urgent_message_with_no_session_running_is_refused(tmp_path: Path) -> None:
    runtime, _ = await started(write_hank(tmp_path / "hank", codon("a")), tmp_path / "x")
    with pytest.raises(CommandRejectedError, match=r"codon\.message refused"):
        await runtime.command("codon.message", MessageData(message="hi", urgent=True))


# -- the machine's decisions, on synthetic verdicts ------------------------------------


def failed(**fields: object) -> SessionExited:
    base: dict[str, object] = {
        "ok": False,
        "exit_code": 1,
        "retriable": True,
        "error_class": ErrorClass.OVERLOADED,
    }
    return SessionExited(**{**base, **fields})  # type: ignore[arg-type]


def test_failures_in_a_row_double_the_cool_down_until_the_threshold() -> None:
    retries = SessionRetries(RuntimeSessionSettings())
    retries.spawning("p")
    durations = []
    for _ in range(4):
        decision = retries.exited(failed(), started=False)
        assert isinstance(decision, Cooldown)
        durations.append(decision.duration_ms)
        retries.elapsed()
        retries.spawning("p")
    assert durations == [2000, 4000, 8000, 16000]
    assert isinstance(retries.exited(failed(), started=False), GaveUp)


def test_the_schedule_is_capped_and_configurable() -> None:
    retries = SessionRetries(
        RuntimeSessionSettings(backoff_base_ms=10, backoff_max_ms=25, max_consecutive_errors=9)
    )
    retries.spawning("p")
    durations = []
    for _ in range(4):
        decision = retries.exited(failed(error_class=ErrorClass.TIMEOUT), started=False)
        assert isinstance(decision, Cooldown)
        durations.append(decision.duration_ms)
        retries.elapsed()
        retries.spawning("p")
    assert durations == [10, 20, 25, 25]


def test_retry_after_lengthens_the_cool_down_but_never_shortens_it() -> None:
    retries = SessionRetries(RuntimeSessionSettings(max_retry_after_ms=60_000))
    retries.spawning("p")
    longer = retries.exited(failed(retry_after_ms=30_000), started=True)
    assert isinstance(longer, Cooldown)
    assert (longer.duration_ms, longer.backoff_ms, longer.retry_after_ms) == (30_000, 2000, 30_000)
    retries.elapsed()
    retries.spawning("p")
    shorter = retries.exited(failed(retry_after_ms=500), started=True)
    assert isinstance(shorter, Cooldown)
    assert shorter.duration_ms == 4000  # the second failure in a row: the backoff's 4 s
    retries.elapsed()
    retries.spawning("p")
    implausible = retries.exited(failed(retry_after_ms=7_200_000), started=True)
    assert isinstance(implausible, Cooldown)
    assert (implausible.duration_ms, implausible.retry_after_ms) == (8000, None)  # the 3rd


@pytest.mark.parametrize(
    "exit",
    [
        SessionExited(ok=True, exit_code=0),
        failed(retriable=False, error_class=ErrorClass.AUTH),
        failed(context_exceeded=True),
        failed(log_error="disk full"),
    ],
)
def test_success_and_permanent_verdicts_end_the_sessions(exit: SessionExited) -> None:
    retries = SessionRetries(RuntimeSessionSettings())
    retries.spawning("p")
    assert retries.exited(exit, started=True) is None


async def test_a_force_stop_during_a_cool_down_ends_it_at_once(tmp_path: Path) -> None:
    hank = flaky(tmp_path, "api_error,status=429,count=0")
    prepared = await asyncio.to_thread(
        prepare_execution,
        hank,
        None,
        execution_dir=tmp_path / "x",
        interactive=False,
        base_dir=tmp_path / "managed",
    )
    seen = Seen()
    # A real (asyncio) sleep of ten minutes: only the interrupt can end it.
    options = RuntimeOptions(serve=False, sessions=RuntimeSessionSettings(backoff_base_ms=600_000))
    runtime = Runtime(prepared, load_hank(hank), options, listeners=(seen,))
    running = asyncio.ensure_future(runtime.run())
    await until(lambda: seen.of("session.cooldown"), "a cool-down")
    await runtime.command("codon.forceStop")
    outcome = await asyncio.wait_for(running, 30)
    assert outcome.codons == {"build": "failed"}
    assert seen.of("session.resumed") == []
    record = codon_records(read_state(tmp_path / "x"))["build"]
    assert record["failureReason"]["type"] == "force_stopped"


def test_sessions_that_start_then_fail_still_back_off_longer_each_time() -> None:
    """Each session reports its start (which restarts the machine's own count),
    then fails: the cool-down still doubles, 2, 4, 8 ... 60 s, instead of
    retrying a flapping provider every 2 s until the total threshold."""
    retries = SessionRetries(RuntimeSessionSettings(max_total_errors=20))
    retries.spawning("p")
    durations = []
    counts = []
    for _ in range(8):
        decision = retries.exited(failed(), started=True)
        assert isinstance(decision, Cooldown)
        durations.append(decision.duration_ms)
        counts.append(decision.consecutive_errors)
        retries.elapsed()
        retries.spawning("p")
    assert durations == [2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]
    assert counts == [1, 2, 3, 4, 5, 6, 7, 8]
    # A session that ends well starts the schedule over.
    ok = retries.exited(
        failed(ok=True, exit_code=0, error_class=None, retriable=False), started=True
    )
    assert ok is None
    assert retries.failed_in_a_row == 0


def test_a_window_that_keeps_refusing_after_its_reset_fails_the_codon() -> None:
    retries = SessionRetries(RuntimeSessionSettings())
    now = 1_800_000_000_000
    refused = SessionExited(
        ok=False,
        exit_code=1,
        error_class=ErrorClass.USAGE_LIMIT,
        message="You've hit your 5-hour limit",
        window=UsageWindow(status="rejected", resets_at_ms=now - 1000, window="five_hour"),
    )
    for _ in range(MAX_PARKS_IN_A_ROW):
        retries.spawning("p")
        decision = retries.exited(refused, started=True, now_ms=now)
        assert isinstance(decision, Parking)
        assert decision.wait.wait_ms == 10_000  # a reset already past: the margin only
        retries.window_opened()
    retries.spawning("p")
    decision = retries.exited(refused, started=True, now_ms=now)
    assert isinstance(decision, WindowTooFar)
    assert f"refused {MAX_PARKS_IN_A_ROW} sessions in a row" in decision.message
    assert retries.machine.is_stopped
    assert retries.machine.total_errors == 0
