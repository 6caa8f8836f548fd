"""exhaustWithPrompt / maxExtensions (reference §6.7) end to end on the fake agent."""

from __future__ import annotations

import asyncio
import json
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
    wait_for,
    write_hank,
)

from weft.runtime.run.runtime import RunOutcome, RuntimeOptions
from weft.server.protocol import MessageData


@pytest.fixture(autouse=True)
def _fake_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_environment(monkeypatch, tmp_path)


async def run(hank: Path, execution: Path) -> tuple[RunOutcome, Seen]:
    return await run_hank(hank, execution, RuntimeOptions(serve=False))


def exhausting(tmp_path: Path, *, scenario: str, **fields: object) -> Path:
    return write_hank(
        tmp_path / "hank",
        codon(
            "grind",
            "Start the work.",
            record=tmp_path / "last-argv.json",
            env={"FAKE_AGENT_SCENARIO": scenario},
            exhaustWithPrompt="Keep going <%PROJECT_DIR%>",
            **fields,
        ),
        codon("after", "Then this."),
    )


@pytest.mark.parametrize(("shape", "auto_compact"), [("prompt_too_long", False), ("compact", True)])
async def test_the_session_is_resumed_with_the_exhaust_prompt_until_the_context_is_full(
    tmp_path: Path, shape: str, auto_compact: bool
) -> None:
    hank = exhausting(
        tmp_path, scenario=f"context_full,after=4,shape={shape}", autoCompact=auto_compact
    )
    outcome, seen = await run(hank, tmp_path / "x")
    # Context exhaustion ends an exhaustWithPrompt codon as a success.
    assert outcome.codons == {"grind": "completed", "after": "completed"}, outcome.message
    extended = seen.of("codon.extended")
    assert [e["extensionNumber"] for e in extended] == [1, 2, 3]
    assert all(e["exhaustWithPrompt"] == f"Keep going {tmp_path}/x/agentRoot" for e in extended)
    costs = [e["cumulativeCost"] for e in extended]
    assert costs == sorted(costs)
    assert costs[0] > 0
    assert [d["extensionCount"] for d in seen.of("ExtensionCountUpdated")] == [1, 2, 3]
    record = codon_records(read_state(tmp_path / "x"))["grind"]
    assert record["extensionCount"] == 3
    assert record["contextExceeded"] is True
    # One session throughout: each extension resumed it with the exhaust prompt.
    started = seen.of("codon.started")
    argv = json.loads((tmp_path / "last-argv.json").read_text())
    assert f"--resume={started[0]['sessionId']}" in argv["argv"] or (
        started[0]["sessionId"] in argv["argv"]
    )
    assert argv["prompt"] == f"Keep going {tmp_path}/x/agentRoot"
    settings = json.loads(argv["argv"][argv["argv"].index("--settings") + 1])
    assert settings == {"autoCompactEnabled": auto_compact}
    # The codon's cost is every session's, not the last one's.
    finals = [
        d["totalCost"] for d in seen.of("token.usage") if d.get("final") and d["codonId"] == "grind"
    ]
    assert record["finalCost"] == pytest.approx(finals[-1], abs=1e-6)
    assert finals[-1] > costs[-1] - 1e-9 >= costs[0]


async def test_max_extensions_caps_the_resumes_and_the_codon_completes(tmp_path: Path) -> None:
    hank = exhausting(tmp_path, scenario="context_full,after=50", maxExtensions=2)
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.codons == {"grind": "completed", "after": "completed"}
    assert [e["extensionNumber"] for e in seen.of("codon.extended")] == [1, 2]
    record = codon_records(read_state(tmp_path / "x"))["grind"]
    assert record["extensionCount"] == 2
    assert not record.get("contextExceeded")


async def test_a_failed_session_is_not_extended(tmp_path: Path) -> None:
    hank = exhausting(tmp_path, scenario="auth_error")
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.codons == {"grind": "failed"}
    assert seen.of("codon.extended") == []


async def test_auto_compact_off_makes_a_full_context_a_prompt_too_long(tmp_path: Path) -> None:
    # The fake compacts by itself only when Claude Code's auto-compaction is
    # on; autoCompact defaults to off, so the full context is an error that
    # ends the exhaustWithPrompt codon as a success.
    hank = exhausting(tmp_path, scenario="context_full,after=2,shape=compact")
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.codons == {"grind": "completed", "after": "completed"}
    assert len(seen.of("codon.extended")) == 1
    logs = list((tmp_path / "x/.weft/runs").rglob("grind-claude.log"))
    text = logs[0].read_text()
    assert "prompt_too_long" in text
    assert "compact_boundary" not in text


async def test_a_codex_thread_is_extended_until_codex_runs_out_of_room(tmp_path: Path) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "grind",
            "Start the work.",
            model="fake/gpt-5",
            env={"FAKE_AGENT_SCENARIO": "context_full,after=3"},
            exhaustWithPrompt="Keep going.",
        ),
    )
    outcome, seen = await run(hank, tmp_path / "x")
    assert outcome.codons == {"grind": "completed"}, outcome.message
    assert [e["extensionNumber"] for e in seen.of("codon.extended")] == [1, 2]
    record = codon_records(read_state(tmp_path / "x"))["grind"]
    assert (record["extensionCount"], record["contextExceeded"]) == (2, True)


async def test_a_transient_failure_of_an_extension_session_cools_down_and_resumes_it(
    tmp_path: Path,
) -> None:
    """The extension's 429 (its session's second prompt) is supervised like the
    first session's: one cool-down, the same session resumed, the codon done."""
    hank = exhausting(
        tmp_path, scenario="api_error,status=429,count=0,after=1,fails=1", maxExtensions=1
    )
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    outcome, seen = await run_hank(
        hank, tmp_path / "x", RuntimeOptions(serve=False, session_sleep=sleep)
    )
    assert outcome.codons == {"grind": "completed", "after": "completed"}, outcome.message
    assert [e["extensionNumber"] for e in seen.of("codon.extended")] == [1]
    (cooldown,) = seen.of("session.cooldown")
    assert cooldown["errorClass"] == "rate_limit"
    assert sleeps == [2.0]
    session_id = seen.of("codon.started")[0]["sessionId"]
    (resumed,) = seen.of("session.resumed")
    assert (resumed["reason"], resumed["resumeSessionId"]) == ("retry", session_id)


async def test_an_urgent_message_reaches_an_extension_session(tmp_path: Path) -> None:
    long = "@@fake:scenario=sigterm,lines=200,interval_ms=50@@"  # the extension runs long
    hank = write_hank(
        tmp_path / "hank",
        codon(
            "grind",
            "Start the work.",
            record=tmp_path / "argv.json",
            exhaustWithPrompt=f"{long} Keep going.",
            maxExtensions=1,
        ),
    )
    runtime, seen = await runtime_for(hank, tmp_path / "x", RuntimeOptions(serve=False))
    running = asyncio.ensure_future(runtime.run())
    await asyncio.to_thread(
        wait_for, lambda: seen.of("codon.extended"), timeout=30, what="the extension"
    )
    await runtime.command("codon.message", MessageData(message="Wrap up now.", urgent=True))
    outcome = await running
    assert outcome.codons == {"grind": "completed"}, outcome.message
    session_id = seen.of("codon.started")[0]["sessionId"]
    assert seen.of("session.resumed") == [
        {"codonId": "grind", "session": 2, "reason": "urgent", "resumeSessionId": session_id}
    ]
    assert recorded(tmp_path / "argv.json")["prompt"] == "Wrap up now."
