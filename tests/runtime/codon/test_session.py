"""A codon whose provider's usage window is closed parks until it opens and
finishes in the same session, counting no error (``weft.runtime.codon.session``
and the provider gate of ``weft.runtime.codon.base``), end to end on the fake
Claude agent's ``usage_window`` scenario, which prints what Claude Code 2.1.330
prints (``tests/agents/fake/test_claude.py`` checks it against the real CLI)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, fake_environment, recorded, run_hank, write_hank

from weft.config.runtime import RuntimeUsageWindowSettings
from weft.runtime.codon.sessions import WINDOW_PROMPT
from weft.runtime.run.runtime import RuntimeOptions
from weft.windows.registry import WindowRegistry, default_path


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


def options(margin_ms: int = 300, max_wait_ms: int = 60_000) -> RuntimeOptions:
    return RuntimeOptions(
        serve=False,
        usage_window=RuntimeUsageWindowSettings(margin_ms=margin_ms, max_wait_ms=max_wait_ms),
    )


def window_hank(tmp_path: Path, until: float) -> Path:
    return write_hank(
        tmp_path / "hank",
        codon(
            "build",
            "Build it.",
            record=tmp_path / "argv.json",
            env={"FAKE_AGENT_SCENARIO": f"usage_window,until={until}"},
        ),
        codon("after", "Then this."),
    )


async def test_a_rejected_window_parks_the_codon_and_resumes_the_same_session(
    tmp_path: Path,
) -> None:
    until = int(time.time()) + 3
    outcome, seen = await run_hank(window_hank(tmp_path, until), tmp_path / "x", options())
    assert outcome.codons == {"build": "completed", "after": "completed"}, outcome.message
    (parked,) = seen.of("codon.parked")
    assert parked["provider"] == "anthropic"
    assert parked["window"] == "five_hour"
    assert parked["resetsAt"] == until * 1000
    assert parked["resumeAt"] == until * 1000 + 300
    assert parked["session"] == 1
    (resumed,) = seen.of("session.resumed")
    session_id = seen.of("codon.started")[0]["sessionId"]
    assert resumed["reason"] == "window"
    assert resumed["resumeSessionId"] == session_id
    # Resumed only once the window opened, and never counted as a failure.
    resumed_at = next(t for _, k, _, t in seen.items if k == "session.resumed")
    assert resumed_at / 1e9 >= until + 0.3
    assert seen.of("session.cooldown") == []
    assert seen.of("session.gave-up") == []
    argv = recorded(tmp_path / "argv.json")
    assert "--resume" in " ".join(argv["argv"]), argv["argv"]
    assert session_id in " ".join(argv["argv"])
    assert argv["prompt"].startswith(WINDOW_PROMPT)
    statuses = [(w["provider"], w["status"]) for w in seen.of("usage.window")]
    assert statuses == [("anthropic", "rejected"), ("anthropic", "allowed")]
    # The window was recorded for every other Weft process of the user.
    stored = json.loads(default_path().read_text())["windows"]["anthropic"]
    assert stored["resetsAtMs"] == until * 1000
    assert stored["window"] == "five_hour"
    assert stored["source"].endswith("/build")


async def test_a_window_further_off_than_the_setting_fails_the_codon_at_once(
    tmp_path: Path,
) -> None:
    until = int(time.time()) + 3 * 3600
    started = time.monotonic()
    outcome, seen = await run_hank(
        window_hank(tmp_path, until), tmp_path / "x", options(max_wait_ms=3_600_000)
    )
    assert time.monotonic() - started < 30
    assert outcome.codons["build"] == "failed"
    assert seen.of("codon.parked") == []
    (failure,) = [
        d for d in seen.of("codon.completed") if d["codonId"] == "build" and not d["success"]
    ]
    reason = json.dumps(failure["failureReason"])
    assert "usageWindow.maxWaitMs" in reason, reason
    assert "3.0 h" in reason
    assert "usage_limit" in reason


async def test_a_window_another_run_saw_closed_holds_the_agent_back(tmp_path: Path) -> None:
    until_ms = int(time.time() * 1000) + 2000
    WindowRegistry.default().close(
        "anthropic", until_ms, window="seven_day", source="other/run", now_ms=until_ms - 2000
    )
    hank = write_hank(tmp_path / "hank", codon("build", "Build it.", record=tmp_path / "a.json"))
    outcome, seen = await run_hank(hank, tmp_path / "x", options(margin_ms=100))
    assert outcome.codons == {"build": "completed"}, outcome.message
    (parked,) = seen.of("codon.parked")
    assert (parked["session"], parked["window"], parked["resetsAt"]) == (0, "seven_day", until_ms)
    assert "other/run" in parked["message"]
    spawned = next(t for _, k, d, t in seen.items if k == "process.started")
    assert spawned / 1e6 >= until_ms + 100
