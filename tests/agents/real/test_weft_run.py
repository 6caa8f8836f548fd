"""``weft run`` end to end on the real CLIs: ``continue-previous`` chains, a
retry policy, an auth failure, a stop then continue, an urgent message, the
provider's circuit breaker, with every codon's cost checked against what the
mock model server billed that codon's calls."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.agents.real.conftest import Homes, claude_env, codex_env
from tests.agents.real.drive import billed_usd
from tests.agents.real.mock_anthropic import AnthropicMock, Window
from tests.agents.real.mock_openai import OpenAIMock

SESSION_HEADER = "x-claude-code-session-id"


def _codon(
    cid: str, prompt: str, model: str = "sonnet", mode: str = "fresh", **kw: Any
) -> dict[str, Any]:
    return {
        "id": cid,
        "name": cid,
        "model": model,
        "continuationMode": mode,
        "promptText": prompt,
        "checkpointedFiles": ["**/*"],
        **kw,
    }


def _weft_env(homes: Homes, agent_env: dict[str, str], **bins: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("WEFT_REQUIRE_REAL_CLIS", None)
    for key, value in agent_env.items():
        env[f"WEFT_{key}"] = value  # WEFT_<X> passes to the agent as X
    env["HOME"] = str(homes.root)
    for name, path in bins.items():
        env[f"WEFT_{name.upper()}_BIN"] = str(path)
    return env


def _run(
    homes: Homes,
    codons: list[dict[str, Any]],
    env: dict[str, str],
    *,
    interrupt_when: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``weft run`` the hank of ``codons``; with ``interrupt_when``, Ctrl-C it
    (SIGINT) once that holds (polled; a slow machine only makes it later)."""
    hank = homes.root / "hank"
    hank.mkdir(exist_ok=True)
    (hank / "hank.json").write_text(json.dumps({"hank": codons}))
    argv = [
        sys.executable,
        "-m",
        "weft",
        "run",
        str(hank),
        "--execution",
        str(homes.root / "exec"),
        "--headless",
    ]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if interrupt_when is not None:
        deadline = time.monotonic() + 60
        while not interrupt_when() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(0.5)  # some of the slow answer has streamed
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _codons(homes: Homes) -> dict[str, dict[str, Any]]:
    state = json.loads((homes.root / "exec" / ".weft" / "state.json").read_text())
    return {c["codonId"]: c for run in state["runs"] for c in run["codons"]}


def _journaled(homes: Homes, kind: str, codon_id: str) -> list[dict[str, Any]]:
    """The ``data`` of every journaled ``kind`` of ``codon_id`` (the journal is
    the durable record; state.json may lag it at shutdown)."""
    db = sqlite3.connect(homes.root / "exec" / ".weft" / "weft.db")
    try:
        rows = db.execute(
            "select payload from events where type = ? and codon_id = ? order by seq",
            (kind, codon_id),
        ).fetchall()
    finally:
        db.close()
    return [json.loads(payload)["data"] for (payload,) in rows]


def test_claude_chain_bills_each_codon_its_own_calls(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    marker = os.urandom(6).hex()
    codons = [
        _codon("one", f"Remember PAPAYA {marker} MOCK[tools=1]"),
        _codon("two", f"What was the word? {marker} MOCK[tools=2]", mode="continue-previous"),
        _codon("three", f"Summarise {marker} MOCK[]", mode="continue-previous"),
    ]
    done = _run(homes, codons, _weft_env(homes, claude_env(anthropic, homes), claude=claude_bin))
    assert done.returncode == 0, done.stdout + done.stderr
    state = _codons(homes)
    sid = state["one"]["claudeSessionId"]
    assert {c["claudeSessionId"] for c in state.values()} == {sid}
    calls = anthropic.session_calls(SESSION_HEADER, sid)
    by_prompt = {
        cid: [r.billed for r in calls if r.prompt == c["promptText"] and r.billed]
        for cid, c in zip(("one", "two", "three"), codons, strict=True)
    }
    for cid, billed in by_prompt.items():
        assert state[cid]["finalCost"] == pytest.approx(
            billed_usd("claude-sonnet-5-5", billed), abs=1e-8
        ), cid
        assert state[cid]["finalTokens"]["inputTokens"] == sum(b.input for b in billed), cid
    total = billed_usd("claude-sonnet-5-5", [r.billed for r in calls if r.billed])
    assert f"${total:.4f}" in done.stdout  # the run summary is the sum, not cumulative figures


def test_claude_retry_policy_and_auth_failure(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    marker = os.urandom(6).hex()
    retry = {"maxAttempts": 2, "delayMs": 100, "maxDelayMs": 200}
    codons = [
        _codon(
            "limited", f"Hello {marker} MOCK[err=429,times=1]", onFailure="retry", retryConfig=retry
        ),
        _codon("denied", f"Hello {marker} MOCK[err=401]", onFailure="retry", retryConfig=retry),
    ]
    done = _run(homes, codons, _weft_env(homes, claude_env(anthropic, homes), claude=claude_bin))
    assert done.returncode == 1, done.stdout + done.stderr
    state = _codons(homes)
    assert state["limited"]["status"] == "completed"
    # The 429 came once; the session supervisor cooled down and resumed the same
    # session with its retry prompt (the hank's retry policy was not needed).
    assert len(anthropic.posts(f"{marker} MOCK[err=429")) == 1
    assert anthropic.posts("previous session was cut short")
    assert len(anthropic.posts(f"{marker} MOCK[err=401")) == 1  # auth: never retried
    assert "auth" in done.stdout


def test_claude_interrupt_then_continue(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    marker = os.urandom(6).hex()
    codons = [
        _codon("slow", f"Slowly {marker} MOCK[long=2000,slow=4]"),
        _codon("after", f"And then {marker} MOCK[]", mode="continue-previous"),
    ]
    env = _weft_env(homes, claude_env(anthropic, homes), claude=claude_bin)
    streaming = f"Slowly {marker}"
    stopped = _run(homes, codons, env, interrupt_when=lambda: bool(anthropic.posts(streaming)))
    assert stopped.returncode == 130, stopped.stdout + stopped.stderr
    assert not anthropic.billed(f"And then {marker}")
    interrupted = _codons(homes)["slow"]
    assert interrupted["status"] == "failed"
    # Weft stopped the CLI with SIGINT, so its log ends with the aborted result,
    # and the journal bills the codon that partial spend (with SIGTERM: $0).
    log = homes.root / "exec" / ".weft" / interrupted["claudeLogPath"]
    assert '"terminal_reason":"aborted_streaming"' in log.read_text()
    (final,) = _journaled(homes, "CodonFinalCostSet", "slow")
    assert final["finalCost"] > 0
    again = _run(homes, codons, env)  # the same command continues the execution
    assert again.returncode == 0, again.stdout + again.stderr
    state = _codons(homes)
    assert state["after"]["status"] == "completed"


def test_codex_chain_counts_each_codon_its_own_tokens(
    codex_bin: Path, openai: OpenAIMock, homes: Homes
) -> None:
    marker = os.urandom(6).hex()
    codons = [
        _codon("one", f"Add a file {marker} MOCK[patch=hello.txt]", model="gpt-5.5"),
        _codon(
            "two",
            f"Run two commands {marker} MOCK[cmd=2]",
            model="gpt-5.5",
            mode="continue-previous",
        ),
    ]
    done = _run(homes, codons, _weft_env(homes, codex_env(openai, homes), codex=codex_bin))
    assert done.returncode == 0, done.stdout + done.stderr
    state = _codons(homes)
    assert state["one"]["claudeSessionId"] == state["two"]["claudeSessionId"]
    for codon in codons:
        billed = [r.billed for r in openai.posts(codon["promptText"]) if r.billed]
        tokens = state[codon["id"]]["finalTokens"]
        assert tokens["inputTokens"] + tokens["cacheReadTokens"] == sum(b.input for b in billed)
    assert (homes.root / "exec" / "agentRoot" / "hello.txt").is_file()


def test_claude_urgent_message_interrupts_and_the_resumed_session_carries_it(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """``weft message --urgent`` while the real CLI streams a slow answer: Weft
    interrupts it (SIGINT), resumes the same session at once with the message
    as its prompt, and the model call of the resumed session carries the
    message after the interrupted conversation."""
    marker = os.urandom(6).hex()
    codons = [_codon("slow", f"Slowly {marker} MOCK[long=2000,slow=20]")]
    env = _weft_env(homes, claude_env(anthropic, homes), claude=claude_bin)
    hank = homes.root / "hank"
    hank.mkdir()
    (hank / "hank.json").write_text(json.dumps({"hank": codons}))
    execution = homes.root / "exec"
    argv = [sys.executable, "-m", "weft", "run", str(hank), "--execution", str(execution)]
    proc = subprocess.Popen(
        [*argv, "--headless"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not anthropic.posts(f"Slowly {marker}") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)  # some of the slow answer has streamed
        message = f"Stop and say hi {marker} MOCK[]"
        sent = subprocess.run(
            [sys.executable, "-m", "weft", "message", str(execution), message, "--urgent"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    state = _codons(homes)
    sid = state["slow"]["claudeSessionId"]
    assert state["slow"]["status"] == "completed"
    (resumed,) = _journaled(homes, "session.resumed", "slow")
    assert resumed == {"codonId": "slow", "session": 2, "reason": "urgent", "resumeSessionId": sid}
    assert _journaled(homes, "session.cooldown", "slow") == []  # an interrupt is not an error
    # The resumed session's model call: the same session, the message as the
    # turn's prompt, the interrupted prompt earlier in its conversation.
    (call,) = anthropic.posts(message)
    assert call.prompt == message
    assert call.headers.get(SESSION_HEADER) == sid
    assert f"Slowly {marker}" in json.dumps(call.body["messages"])
    assert call.billed is not None


def test_claude_429s_across_codons_open_the_breaker_and_a_probe_closes_it(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """The provider's breaker on the real CLI: two codons each rate-limited
    (their supervisors give up at once, ``onFailure: ignore``) open it; the
    third codon waits out the cool-down instead of failing, and its session is
    the probe that closes it."""
    marker = os.urandom(6).hex()
    codons = [
        _codon("a", f"First {marker} MOCK[err=429]", onFailure="ignore"),
        _codon("b", f"Second {marker} MOCK[err=429]", onFailure="ignore"),
        _codon("c", f"Third {marker} MOCK[]"),
    ]
    env = _weft_env(homes, claude_env(anthropic, homes), claude=claude_bin)
    env.update(
        WEFT_RUNTIME_SESSION_MAX_TOTAL_ERRORS="1",
        WEFT_RUNTIME_BREAKER_FAILURE_THRESHOLD="2",
        WEFT_RUNTIME_BREAKER_COOLDOWN_MS="1500",
    )
    done = _run(homes, codons, env)
    assert done.returncode == 0, done.stdout + done.stderr
    state = _codons(homes)
    assert {c: state[c]["status"] for c in "abc"} == {
        "a": "failed",
        "b": "failed",
        "c": "completed",
    }
    changed = [
        (d["previous"], d["state"], d["reason"], d.get("codonId"))
        for cid in "abc"
        for d in _journaled(homes, "breaker.changed", cid)
    ]
    assert changed == [
        ("closed", "open", "failure", "b"),
        ("open", "half_open", "probe", "c"),
        ("half_open", "closed", "success", "c"),
    ]
    (waiting,) = _journaled(homes, "breaker.waiting", "c")
    assert waiting["provider"] == "anthropic"
    assert 0 < waiting["retryInMs"] <= 1500
    # One model call each: a and b gave up at their first failure, and c's
    # probe session succeeded.
    assert len(anthropic.posts(f"First {marker}")) == 1
    assert len(anthropic.posts(f"Second {marker}")) == 1
    assert len(anthropic.billed(f"Third {marker}")) == 1


def test_claude_parks_on_a_closed_usage_window_and_finishes_in_the_same_session(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """Claude Code with a subscription token against a server whose usage
    window is closed for a few seconds: the codon parks until the reset the CLI
    reported, resumes the same session, and is billed only for the answer that
    went through (the refused call cost nothing)."""
    marker = os.urandom(6).hex()
    until = int(time.time()) + 6
    anthropic.window = Window(closed_until=until)
    try:
        env = claude_env(anthropic, homes)
        del env["ANTHROPIC_API_KEY"]
        env["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-" + "t" * 60  # a subscriber's token
        weft_env = _weft_env(homes, env, claude=claude_bin)
        weft_env["WEFT_RUNTIME_USAGE_WINDOW_MARGIN_MS"] = "500"
        done = _run(homes, [_codon("work", f"Do it {marker} MOCK[tools=1]")], weft_env)
    finally:
        anthropic.window = None
    assert done.returncode == 0, done.stdout + done.stderr
    (parked,) = _journaled(homes, "codon.parked", "work")
    assert parked["resetsAt"] == until * 1000
    assert parked["window"] == "five_hour"
    assert parked["session"] == 1
    (resumed,) = _journaled(homes, "session.resumed", "work")
    assert resumed["reason"] == "window"
    assert _journaled(homes, "session.cooldown", "work") == []
    state = _codons(homes)["work"]
    sid = state["claudeSessionId"]
    assert resumed["resumeSessionId"] == sid
    # The resumed turn's prompt joins the refused one in one user message, so
    # the session's calls are found by its header, not by the marker.
    calls = anthropic.session_calls(SESSION_HEADER, sid)
    refused = [r for r in calls if r.outcome == "error 429"]
    answered = [r for r in calls if r.billed is not None]
    assert len(refused) == 1
    assert marker in refused[0].prompt
    assert answered
    assert all(r.at >= until for r in answered)
    assert state["finalCost"] == pytest.approx(
        billed_usd("claude-sonnet-5-5", [r.billed for r in answered])
    )


def test_a_fork_of_a_claude_chain_resumes_the_source_s_session_in_its_own_work_tree(
    claude_bin: Path, anthropic: AnthropicMock, homes: Homes
) -> None:
    """``weft fork --from two``: the real Claude Code resumes codon one's session
    from the transcript the fork filed under its own work tree, and the model sees
    the source's history; the source is not run again."""
    marker = os.urandom(6).hex()
    codons = [
        _codon("one", f"Remember PAPAYA {marker} MOCK[]"),
        _codon("two", f"What was the word? {marker} MOCK[]", mode="continue-previous"),
    ]
    env = _weft_env(homes, claude_env(anthropic, homes), claude=claude_bin)
    assert _run(homes, codons, env).returncode == 0
    sid = _codons(homes)["one"]["claudeSessionId"]
    before = len(anthropic.posts(marker))
    fork = homes.root / "fork"
    made = subprocess.run(
        [sys.executable, "-m", "weft", "fork", str(homes.root / "exec"), "--from", "two",
         "--to", str(fork), "--headless"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    state = json.loads((fork / ".weft" / "state.json").read_text())
    latest = max(state["runs"], key=lambda r: str(r["startTime"]))
    (two,) = [c for c in latest["codons"] if c["codonId"] == "two"]
    assert two["status"] == "completed"
    assert two["claudeSessionId"] == sid
    fork_calls = anthropic.posts(marker)[before:]
    assert fork_calls  # only the fork's codon two called the model again
    assert all("What was the word?" in r.prompt for r in fork_calls)
    assert any("Remember PAPAYA" in json.dumps(r.body) for r in fork_calls)
